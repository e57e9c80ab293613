"""The judge client over real HTTP (real litellm) to the scripted server: faults give bounded
retries and then an error score (value None, never 0); limits, cache, cost, structured output."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest

from otel_toolscore.scorers import get_scorer
from otel_toolscore.scorers.context_position import ContextAnswer
from otel_toolscore.scorers.judge import (
    JudgeClient,
    JudgeInvalidOutput,
    JudgeOutput,
    JudgeSettings,
    LRUCache,
    TokenBucket,
    YesNo,
    parse_output,
    run_sync,
)
from otel_toolscore.scorers.redaction import ContentBudget
from tests.support import timing
from tests.support.clock import Waits
from tests.support.judge_server import (
    JudgeServer,
    auto_responder,
    hang,
    ok,
    reset,
    status,
    truncated_body,
    truncated_content,
)
from tests.support.trajectory_factory import make_trajectory

MODEL = "openai/judge-test"
PRICED = "openai/gpt-4o-mini"  # litellm knows its price and that it supports JSON schema
CONTEXT = ["a", "b"]
GOOD = {"verdicts": [{"verdict": "yes", "reason": "r"}, {"verdict": "no", "reason": "r"}]}


def context_scorer(server: JudgeServer, model: str = MODEL, **settings: Any) -> Any:
    settings.setdefault("backoff_base_s", 0.01)
    settings.setdefault("backoff_max_s", 0.05)
    return get_scorer("context_position", model=model, api_base=server.url, api_key="sk-test", context=CONTEXT, **settings)


RUN = make_trajectory([], input="question", output="answer")


def run_n(i: int) -> Any:
    return make_trajectory([], input=f"question {i}", output="answer")


# --- faults: bounded retries, then an error score --------------------------------------------


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (lambda: status(500), "judge_unavailable"),
        (lambda: status(503), "judge_unavailable"),
        (lambda: status(502), "judge_unavailable"),
        (lambda: status(429), "judge_rate_limited"),
        (lambda: status(408), "judge_timeout"),
        (reset, "judge_unavailable"),
        (truncated_body, "judge_unavailable"),
    ],
)
def test_persistent_faults_retry_max_retries_times_then_error(judge_server: JudgeServer, fault: Any, error: str) -> None:
    judge_server.script(*(fault() for _ in range(3)))
    score = context_scorer(judge_server, max_retries=2).score(RUN)
    assert score.value is None and score.error == error and score.label == "error"
    assert len(judge_server.requests) == 3  # 1 + max_retries, then stop
    assert score.details["judge_calls"] == 3 and score.details["judge_model"] == MODEL


@pytest.mark.parametrize("fault", [lambda: status(500), lambda: status(429), lambda: status(503), reset, truncated_body, lambda: status(408)])
def test_transient_fault_then_success(judge_server: JudgeServer, fault: Any) -> None:
    judge_server.script(fault(), ok(GOOD))
    score = context_scorer(judge_server).score(RUN)
    assert score.error is None and score.value == 0.67
    assert len(judge_server.requests) == 2 and score.details["judge_calls"] == 2


def test_timeouts_slow_and_hanging_answers(judge_server: JudgeServer) -> None:
    judge_server.script(ok(GOOD, delay=2.0), hang())
    score = context_scorer(judge_server, timeout_s=0.3, max_retries=1).score(RUN)
    assert score.value is None and score.error == "judge_timeout"
    assert len(judge_server.requests) == 2
    # each attempt ended at its deadline: the client closed both connections before any answer
    assert timing.wait_for(lambda: judge_server.abandoned == 2 and judge_server.in_flight == 0, 10)


def test_slow_but_in_time_answer_is_fine(judge_server: JudgeServer) -> None:
    judge_server.script(ok(GOOD, delay=0.2))
    score = context_scorer(judge_server, timeout_s=5).score(RUN)
    assert score.value == 0.67 and score.details["judge_latency_s"] >= 0.2



def recorded_scorer(server: JudgeServer, waits: Waits, clock: Any = None, **settings: Any) -> Any:
    """The context scorer on a client whose waits (and clock) are injected."""
    settings.setdefault("backoff_base_s", 0.01)
    settings.setdefault("backoff_max_s", 0.05)
    judge = JudgeClient(JudgeSettings(model=MODEL, api_base=server.url, api_key="k", **settings), sleep=waits,
                        **({"clock": clock} if clock is not None else {}))
    return get_scorer("context_position", judge=judge, context=CONTEXT)


def test_retry_after_is_honoured(judge_server: JudgeServer) -> None:
    judge_server.script(status(429, retry_after=0.4), ok(GOOD))
    waits = Waits()
    score = recorded_scorer(judge_server, waits).score(RUN)
    assert score.value == 0.67
    assert waits.asked == [pytest.approx(0.4)]  # the server's wait, longer than the backoff's


def test_retry_after_beyond_the_limit_fails_at_once(judge_server: JudgeServer) -> None:
    judge_server.script(status(429, retry_after=120), ok(GOOD))
    score = context_scorer(judge_server, max_retry_after_s=5).score(RUN)
    assert score.value is None and score.error == "judge_rate_limited"
    assert len(judge_server.requests) == 1


@pytest.mark.parametrize("code", [400, 401, 404])
def test_client_errors_are_not_retried(judge_server: JudgeServer, code: int) -> None:
    judge_server.script(status(code), ok(GOOD))
    score = context_scorer(judge_server).score(RUN)
    assert score.value is None and score.error == "judge_rejected"
    assert len(judge_server.requests) == 1


def test_nothing_listening_is_judge_unavailable() -> None:
    server = JudgeServer().start()
    url = server.url
    server.stop()
    s = get_scorer("context_position", model=MODEL, api_base=url, api_key="k", context=CONTEXT,
                   max_retries=1, backoff_base_s=0.01)
    score = s.score(RUN)
    assert score.value is None and score.error == "judge_unavailable"


# --- invalid output: one re-ask with the error, then an error ---------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        lambda: truncated_content(GOOD),
        lambda: ok("Sure! The first item is relevant and the second is not."),
        lambda: ok({"verdicts": [{"verdict": "yes", "reason": "r"}]}),  # wrong count
        lambda: ok({"verdicts": [{"verdict": "maybe", "reason": "r"}, {"verdict": "no", "reason": "r"}]}),
        lambda: ok({"verdicts": [{"verdict": "yes"}, {"verdict": "no"}]}),  # missing field
        lambda: ok(""),
    ],
)
def test_invalid_output_reasks_once_then_errors(judge_server: JudgeServer, bad: Any) -> None:
    judge_server.script(bad(), bad(), ok(GOOD))
    score = context_scorer(judge_server).score(RUN)
    assert score.value is None and score.error == "judge_invalid_output"
    assert len(judge_server.requests) == 2 and judge_server.pending == 1
    reask = judge_server.requests[1]["messages"]
    assert reask[:2] == judge_server.requests[0]["messages"]
    assert reask[-1]["content"].startswith("Your answer was invalid: ")


def test_fields_nobody_asked_for_are_ignored_and_required_ones_stay_required(judge_server: JudgeServer) -> None:
    chatty = {"verdicts": [{"verdict": "yes", "reason": "r", "confidence": 0.9},
                           {"verdict": "no", "reason": "r", "notes": "weak match"}],
              "confidence": "high", "notes": "two items"}
    judge_server.script(ok(chatty))
    score = context_scorer(judge_server).score(RUN)
    assert score.error is None and score.value == 0.67
    assert len(judge_server.requests) == 1  # accepted as it came: no re-ask
    # what the judge is asked for is still exact: no extra keys, every key required
    rf_less = judge_server.requests[0]["messages"][0]["content"]
    assert '"additionalProperties":false' in rf_less

    judge_server.script(ok({"verdicts": [{"verdict": "yes", "confidence": 1}, {"verdict": "no", "reason": "r"}],
                            "notes": "x"}), ok({"verdicts": [{"verdict": "yes"}], "confidence": 1}))
    missing = context_scorer(judge_server).score(RUN)
    assert missing.value is None and missing.error == "judge_invalid_output"
    assert "reason" in missing.explanation or "reason" in json.dumps(missing.details)


def test_invalid_then_valid_output_scores(judge_server: JudgeServer) -> None:
    judge_server.script(truncated_content(GOOD), ok(GOOD))
    score = context_scorer(judge_server).score(RUN)
    assert score.value == 0.67 and score.details["judge_calls"] == 2
    assert score.details["judge_tokens"]["total"] == 240


def test_verdict_words_are_trimmed_and_lowercased() -> None:
    class Out(JudgeOutput):
        verdict: YesNo

    assert parse_output('{"verdict": "  YES\\n"}', Out).verdict == "yes"
    assert parse_output('```json\n{"verdict": "No"}\n```', Out).verdict == "no"
    for bad in ['{"verdict": "yes."}', '{"verdict": true}', '{"verdict": "y"}', "yes", '["yes"]']:
        with pytest.raises(JudgeInvalidOutput):
            parse_output(bad, Out)


# --- structured output, request shape, usage details ------------------------------------------


def test_json_mode_with_schema_in_prompt_for_models_without_schema_support(judge_server: JudgeServer) -> None:
    judge_server.script(ok(GOOD))
    score = context_scorer(judge_server).score(RUN)
    body = judge_server.requests[0]
    assert body["response_format"] == {"type": "json_object"}
    assert body["temperature"] == 0
    assert "JSON Schema" in body["messages"][0]["content"] and '"verdicts"' in body["messages"][0]["content"]
    assert score.details["judge_cost_usd"] is None  # litellm does not know this model's price


def test_prompt_only_for_providers_that_take_no_response_format(judge_server: JudgeServer) -> None:
    judge_server.script(ok(GOOD))
    score = context_scorer(judge_server, structured_output="prompt").score(RUN)
    body = judge_server.requests[0]
    assert "response_format" not in body
    assert "JSON Schema" in body["messages"][0]["content"] and score.value == 0.67


@pytest.mark.parametrize(("model", "mode"), [
    ("openai/gpt-4o-mini", "json_schema"),  # litellm: supports_response_schema
    ("openai/judge-test", "json_object"),  # an OpenAI-compatible model litellm does not know
    ("cohere/command-r", "prompt"),  # get_supported_openai_params: no response_format
])
def test_auto_asks_litellm_what_the_model_takes(model: str, mode: str) -> None:
    client = JudgeClient(JudgeSettings(model=model))
    assert client._supported_mode() == mode
    response_format, in_prompt = client._response_format(ContextAnswer, "context")
    assert (response_format or {}).get("type", "prompt") == mode
    assert in_prompt is (mode != "json_schema")


def test_json_schema_response_format_and_cost_for_known_models(judge_server: JudgeServer) -> None:
    judge_server.script(ok(GOOD, model="gpt-4o-mini", usage=(1000, 100)))
    score = context_scorer(judge_server, model=PRICED).score(RUN)
    rf = judge_server.requests[0]["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
    assert rf["json_schema"]["schema"]["properties"]["verdicts"]["type"] == "array"
    # strict mode needs every object closed; the answer may still carry extra keys (ignored)
    objects = [rf["json_schema"]["schema"], *rf["json_schema"]["schema"].get("$defs", {}).values()]
    assert len(objects) >= 2 and all(o["additionalProperties"] is False for o in objects)
    assert "JSON Schema" not in judge_server.requests[0]["messages"][0]["content"]
    d = score.details
    assert d["judge_model"] == PRICED and d["cached"] is False
    assert d["judge_tokens"] == {"prompt": 1000, "completion": 100, "total": 1100}
    assert d["judge_cost_usd"] == pytest.approx(1000 * 0.15e-6 + 100 * 0.6e-6)
    assert d["judge_latency_s"] > 0


def test_api_key_option_and_provider_env_var(judge_server: JudgeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    judge_server.script(ok(GOOD), ok(GOOD))
    context_scorer(judge_server).score(RUN)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    get_scorer("context_position", model=MODEL, api_base=judge_server.url, context=["x", "y"]).score(RUN)
    assert judge_server.headers[0]["authorization"] == "Bearer sk-test"
    assert judge_server.headers[1]["authorization"] == "Bearer sk-from-env"


def test_on_judge_called_per_http_attempt(judge_server: JudgeServer) -> None:
    seen: list[tuple[float, Any, str]] = []
    judge_server.script(status(500), ok(GOOD, model="gpt-4o-mini"))
    s = context_scorer(judge_server, model=PRICED, on_judge=lambda d, c, m: seen.append((d, c, m)))
    assert s.score(RUN).value == 0.67
    assert [(c is None, m) for _, c, m in seen] == [(True, PRICED), (False, PRICED)]
    assert all(d >= 0 for d, _, _ in seen)
    # a failing callback never breaks the judgement
    s.on_judge = lambda *a: 1 / 0
    judge_server.script(ok({"verdicts": [{"verdict": "no", "reason": "r"}, {"verdict": "no", "reason": "r"}]}))
    assert s.score(run_n(1)).value == 0.0


# --- cache ------------------------------------------------------------------------------------


def test_cache_hit_makes_no_call_and_says_so(judge_server: JudgeServer) -> None:
    judge_server.script(ok(GOOD))
    s = context_scorer(judge_server)
    first, second = s.score(RUN), s.score(RUN)
    assert first.value == second.value == 0.67
    assert len(judge_server.requests) == 1
    assert first.details["cached"] is False and second.details["cached"] is True
    assert second.details["judge_calls"] == 0 and second.details["judge_cost_usd"] == 0.0
    judge_server.script(ok(GOOD))
    assert s.score(run_n(2)).details["cached"] is False  # a different request is a different key
    assert len(judge_server.requests) == 2


def test_cache_shared_between_scorers_through_one_client(judge_server: JudgeServer) -> None:
    judge = JudgeClient(JudgeSettings(model=MODEL, api_base=judge_server.url, api_key="k"))
    a = get_scorer("context_position", judge=judge, context=CONTEXT)
    b = get_scorer("context_position", judge=judge, context=CONTEXT)
    judge_server.script(ok(GOOD))
    assert a.score(RUN).value == b.score(RUN).value == 0.67
    assert len(judge_server.requests) == 1


def test_invalid_answers_are_not_cached(judge_server: JudgeServer) -> None:
    judge_server.script(ok("prose"), ok("prose"), ok(GOOD))
    s = context_scorer(judge_server)
    assert s.score(RUN).error == "judge_invalid_output"
    assert s.score(RUN).value == 0.67


def test_lru_cache_evicts_least_recently_used() -> None:
    cache = LRUCache(2)
    cache.put("a", "1")
    cache.put("b", "2")
    assert cache.get("a") == "1"
    cache.put("c", "3")
    assert cache.get("b") is None and cache.get("a") == "1" and cache.get("c") == "3"
    off = LRUCache(0)
    off.put("a", "1")
    assert off.get("a") is None


# --- limits -----------------------------------------------------------------------------------


def test_concurrency_is_bounded(judge_server: JudgeServer) -> None:
    judge_server.responder = auto_responder(delay=0.2)
    s = context_scorer(judge_server, max_concurrency=3)

    async def many() -> list[Any]:
        return await asyncio.gather(*(s.ascore(run_n(i)) for i in range(12)))

    scores = run_sync(many())
    assert all(sc.value == 1.0 for sc in scores)
    assert len(judge_server.requests) == 12
    assert 2 <= judge_server.max_in_flight <= 3


def test_cost_cap_stops_calls(judge_server: JudgeServer) -> None:
    judge_server.script(ok(GOOD, model="gpt-4o-mini"), ok(GOOD, model="gpt-4o-mini"))
    s = context_scorer(judge_server, model=PRICED, cost_cap_usd_per_hour=1e-9)
    assert s.score(run_n(1)).value == 0.67  # nothing spent yet: the call is made
    capped = s.score(run_n(2))
    assert capped.value is None and capped.error == "judge_cost_cap"
    assert len(judge_server.requests) == 1
    assert s.score(run_n(1)).value == 0.67  # the cache still answers: it costs nothing


def test_token_bucket_spaces_requests() -> None:
    bucket = TokenBucket(rate=4)
    waits = [bucket.reserve() for _ in range(6)]
    assert waits[:4] == [0.0, 0.0, 0.0, 0.0]
    assert waits[4] == pytest.approx(0.25, abs=0.02) and waits[5] == pytest.approx(0.5, abs=0.02)


def test_requests_per_second_setting_slows_calls(judge_server: JudgeServer) -> None:
    judge_server.responder = auto_responder()
    waits = Waits()
    s = recorded_scorer(judge_server, waits, clock=lambda: 50.0, requests_per_second=10)  # the clock stands still

    async def many() -> list[Any]:
        return await asyncio.gather(*(s.ascore(run_n(i)) for i in range(15)))

    assert all(sc.value == 1.0 for sc in run_sync(many()))
    # 10 at once (the burst), then 5 more at 10/s: each asked to wait its turn
    assert sorted(waits.asked) == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])


def test_settings_are_validated() -> None:
    from otel_toolscore.scorers import ScorerConfigError

    with pytest.raises(ScorerConfigError, match="bad judge settings"):
        get_scorer("context_position", model=MODEL, max_concurrency=0)
    with pytest.raises(ScorerConfigError, match="bad judge settings"):
        get_scorer("context_position", model=MODEL, no_such_setting=1)


# --- sync and async entry points --------------------------------------------------------------


def test_sync_score_inside_a_running_loop(judge_server: JudgeServer) -> None:
    judge_server.script(ok(GOOD))
    s = context_scorer(judge_server)

    async def inside() -> Any:
        return s.score(RUN)  # blocking call from a coroutine: must not deadlock or fail

    assert asyncio.run(inside()).value == 0.67


def test_ascore_on_the_callers_own_loop(judge_server: JudgeServer) -> None:
    judge_server.script(ok(GOOD), status(500), status(500))
    s = context_scorer(judge_server, max_retries=1)

    async def engine_like() -> list[Any]:
        return [await s.ascore(RUN), await s.ascore(run_n(9))]

    good, bad = asyncio.run(engine_like())
    assert good.value == 0.67
    assert bad.value is None and bad.error == "judge_unavailable"


def test_cancelling_the_caller_cancels_the_judge_call(judge_server: JudgeServer) -> None:
    judge_server.script(hang(), ok(GOOD))
    s = context_scorer(judge_server, max_concurrency=1, timeout_s=30)

    async def cancel_midway() -> None:
        task = asyncio.ensure_future(s.ascore(RUN))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    # the cancelled attempt's connection was closed, and the one concurrency slot given back:
    # the next evaluation gets it (a leaked slot would leave it waiting: the guard turns that
    # hang into a failure)
    assert timing.wait_for(lambda: judge_server.abandoned == 1 and judge_server.in_flight == 0, 10)

    async def next_one() -> Any:
        return await asyncio.wait_for(s.ascore(RUN), 60)

    assert asyncio.run(next_one()).value == 0.67
    assert len(judge_server.requests) == 2


def test_ascore_never_raises_on_scorer_bugs(judge_server: JudgeServer) -> None:
    s = context_scorer(judge_server)

    async def broken(*args: Any) -> Any:
        raise RuntimeError("bug")

    s._ascore = broken  # type: ignore[method-assign]
    score = run_sync(s.ascore(RUN))
    assert score.value is None and score.error == "RuntimeError" and "judge_model" in score.details


def test_budget_option_is_applied(judge_server: JudgeServer) -> None:
    judge_server.script(ok(GOOD))
    s = context_scorer(judge_server, budget=ContentBudget(max_block_chars=100, max_total_chars=1000))
    s.context = ["x" * 500, "y"]
    assert s.score(RUN).value == 0.67
    assert "…[shortened 400 chars]…" in judge_server.requests[0]["messages"][1]["content"]


def test_import_and_llm_scorer_construction_do_not_import_litellm() -> None:
    code = (
        "import sys, json\n"
        "import otel_toolscore\n"
        "from otel_toolscore.scorers import get_scorer\n"
        "for n in ('tool_call_appropriateness', 'prompt_alignment', 'context_position'):\n"
        "    get_scorer(n, model='openai/x', api_base='http://127.0.0.1:9/v1')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('litellm', 'openai'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
