"""Judge faults end the same way whatever the fault: bounded HTTP attempts, then an error
evaluation (value None, ``error.type`` set, never a 0), nothing raised, in bounded time, with
the concurrency, rate and cost limits held; and the app never waits for a judge that is down.

Everything goes through the real LLM scorers and real litellm over real HTTP to
``tests/support/judge_server.py`` (or to a port that is closed, or that accepts and never reads). Time
bounds here are hang detection only (generous multiples of the configured timeouts); speed is
measured in ``benchmarks/judge_down.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from otel_toolscore import semconv
from otel_toolscore.scorers import get_scorer
from otel_toolscore.scorers.base import Score
from otel_toolscore.scorers.judge import LLMScorer, _import_litellm, run_sync
from otel_toolscore.trajectory import ToolDefinition, Trajectory
from tests.support import timing
from tests.support.judge_server import (
    BlackHole,
    JudgeServer,
    Reply,
    always,
    auto_answer,
    closed_port_url,
    fault_storm,
    hang,
    html_page,
    ok,
    raw,
    reset,
    reset_body,
    reset_request,
    slow_body,
    slow_headers,
    status,
    truncated_body,
)
from tests.support.paths import REPO
from tests.support.pipeline import Pipeline
from tests.support.spans import weather_run
from tests.support.trajectory_factory import make_trajectory

MODEL = "openai/judge-test"
PRICED = "openai/gpt-4o-mini"  # litellm knows its price
JUDGE_ERRORS = {
    "judge_timeout", "judge_rate_limited", "judge_unavailable", "judge_rejected", "judge_invalid_output",
    "judge_cost_cap",
}
INSTRUCTIONS = ["Be brief.", "Answer in English."]
TOOLS = [ToolDefinition(name="get_weather", description="Current weather for a city")]
#: every LLM scorer, with the options that make it ask exactly one question per evaluation
SCORERS: dict[str, dict[str, Any]] = {
    "tool_call_appropriateness": {},
    "prompt_alignment": {"instructions": INSTRUCTIONS},
    "context_position": {"context": ["Paris is sunny.", "Berlin has 3 million people."]},
}
_serial = itertools.count()


@pytest.fixture(scope="module", autouse=True)
def _litellm_imported() -> None:
    """litellm's first import takes seconds (more on a busy machine): done once, up front, so
    that the hang-detection bounds below time the judge calls, not the import."""
    _import_litellm()


def run(i: int | None = None) -> Trajectory:
    """A distinct run each time (no evaluation is a cache hit of another)."""
    i = next(_serial) if i is None else i
    return make_trajectory(
        [("get_weather", {"city": "Paris"}, {"temp_c": 20})],
        input=f"What's the weather in Paris? (#{i})",
        output="It is 20°C in Paris.",
        tool_definitions=TOOLS,
    )


def scorer(name: str, url: str, **settings: Any) -> LLMScorer:
    settings.setdefault("backoff_base_s", 0.01)
    settings.setdefault("backoff_max_s", 0.05)
    settings.setdefault("timeout_s", 10.0)  # generous: only the timeout faults use a short one
    built = get_scorer(name, model=settings.pop("model", MODEL), api_base=url, api_key="sk-test",
                       **SCORERS[name], **settings)
    assert isinstance(built, LLMScorer)
    return built


def valid(body: dict[str, Any]) -> Reply:
    return ok(auto_answer(body))


def assert_error(score: Score, error: str) -> None:
    """An error evaluation: no value (never 0), the error type, the error label."""
    assert score.value is None, f"a failure must not be a score: {score.value!r}"
    assert score.error == error, score.explanation
    assert score.label == "error"


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    if not timing.wait_for(condition, timeout):
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")


# --- every fault, every LLM scorer: bounded attempts, then the right error type ------------------

MAX_RETRIES = 2
SHORT_TIMEOUT = 0.4
GOOD_CONTEXT = {"verdicts": [{"verdict": "yes", "reason": "r"}, {"verdict": "no", "reason": "r"}]}

#: (fault id, a fresh reply, error type, settings). Each is a storm: every attempt gets it.
TRANSPORT_FAULTS: list[tuple[str, Callable[[], Reply], str, dict[str, Any]]] = [
    ("reset_before_answer", reset, "judge_unavailable", {}),
    ("reset_before_request_read", reset_request, "judge_unavailable", {}),
    ("reset_mid_body", lambda: reset_body(GOOD_CONTEXT), "judge_unavailable", {}),
    ("content_length_longer_than_body", truncated_body, "judge_unavailable", {}),
    ("html_502_page", lambda: html_page(502), "judge_unavailable", {}),
    ("html_page_with_200", lambda: html_page(200), "judge_unavailable", {}),
    ("json_body_cut_mid_object", lambda: raw('{"id": "x", "object": "chat.completion", "choices": [{"ind'),
     "judge_unavailable", {}),
    ("json_body_not_a_completion", lambda: raw('{"status": "ok"}'), "judge_unavailable", {}),
    ("slow_loris_body", lambda: slow_body(GOOD_CONTEXT, interval=0.05), "judge_timeout",
     {"timeout_s": SHORT_TIMEOUT}),
    ("slow_loris_headers", lambda: slow_headers(GOOD_CONTEXT, interval=0.05), "judge_timeout",
     {"timeout_s": SHORT_TIMEOUT}),
    ("never_answers", hang, "judge_timeout", {"timeout_s": SHORT_TIMEOUT}),
]
#: status storms; tests/test_judge.py already covers them for context_position
STATUS_STORMS: list[tuple[str, Callable[[], Reply], str, dict[str, Any]]] = [
    ("500_storm", lambda: status(500), "judge_unavailable", {}),
    ("503_storm", lambda: status(503), "judge_unavailable", {}),
    ("429_storm", lambda: status(429), "judge_rate_limited", {}),
]
CASES = [
    pytest.param(scorer_name, make, error, settings, id=f"{scorer_name}-{fault}")
    for scorer_name in SCORERS
    for fault, make, error, settings in TRANSPORT_FAULTS + (STATUS_STORMS if scorer_name != "context_position" else [])
]


@pytest.mark.parametrize(("scorer_name", "make", "error", "settings"), CASES)
def test_a_fault_storm_is_bounded_retries_then_an_error_evaluation(
    judge_server: JudgeServer, scorer_name: str, make: Callable[[], Reply], error: str, settings: dict[str, Any]
) -> None:
    judge_server.responder = always(make)
    s = scorer(scorer_name, judge_server.url, max_retries=MAX_RETRIES, **settings)
    started = time.monotonic()
    score = s.score(run())
    elapsed = time.monotonic() - started
    assert_error(score, error)
    attempts = 1 + MAX_RETRIES
    assert len(judge_server.requests) == attempts, "1 + max_retries HTTP attempts, then stop"
    assert score.details["judge_calls"] == attempts
    timeout = settings.get("timeout_s", 0)
    # hang detection: the attempts' deadlines plus backoff, with a wide margin for a busy machine
    assert elapsed < attempts * timeout + 10
    if error == "judge_timeout":
        # the deadline closed each connection (the server saw the client leave), none leaked
        wait_for(lambda: judge_server.abandoned == attempts and judge_server.in_flight == 0, 10,
                 "the server to see every timed-out attempt's connection closed")


def test_a_judge_that_accepts_connections_but_never_reads_times_out() -> None:
    with BlackHole() as hole:
        s = scorer("tool_call_appropriateness", hole.url, max_retries=1, timeout_s=SHORT_TIMEOUT)
        started = time.monotonic()
        score = s.score(run())
        assert_error(score, "judge_timeout")
        assert score.details["judge_calls"] == 2  # no server log to read: the client's own count
        assert time.monotonic() - started < 2 * SHORT_TIMEOUT + 10


def test_a_429_storm_honours_retry_after_on_every_retry(judge_server: JudgeServer) -> None:
    judge_server.responder = always(lambda: status(429, retry_after=0.3))
    s = scorer("prompt_alignment", judge_server.url, max_retries=2)
    started = time.monotonic()
    score = s.score(run())
    elapsed = time.monotonic() - started
    assert_error(score, "judge_rate_limited")
    assert len(judge_server.requests) == 3
    gaps = [b - a for a, b in itertools.pairwise(judge_server.arrivals)]
    assert all(g >= 0.3 for g in gaps), gaps  # each retry waited what the server asked for
    assert 0.6 <= elapsed < 0.6 + 10


def test_a_429_storm_asking_for_too_long_a_wait_fails_at_once(judge_server: JudgeServer) -> None:
    judge_server.responder = always(lambda: status(429, retry_after=3600))
    score = scorer("tool_call_appropriateness", judge_server.url, max_retries=3, max_retry_after_s=30).score(run())
    assert_error(score, "judge_rate_limited")
    assert len(judge_server.requests) == 1


def test_a_503_storm_with_retry_after_waits_too(judge_server: JudgeServer) -> None:
    judge_server.responder = always(lambda: status(503, retry_after=0.2))
    score = scorer("context_position", judge_server.url, max_retries=1).score(run())
    assert_error(score, "judge_unavailable")
    assert len(judge_server.requests) == 2
    assert judge_server.arrivals[1] - judge_server.arrivals[0] >= 0.2


def test_the_first_judge_call_does_no_slow_imports_inside_its_deadline(judge_server: JudgeServer) -> None:
    # The attempt deadline runs on the judge loop; a module import inside the first attempt
    # blocks that loop (openai's resource modules: over a second on a busy machine), and the
    # deadline would expire on the client's own import. A fresh process shows what is imported.
    judge_server.responder = valid
    code = (
        "import json, sys\n"
        "from otel_toolscore.scorers import get_scorer\n"
        "from otel_toolscore.scorers.judge import run_sync\n"
        "from tests.support.trajectory_factory import make_trajectory\n"
        f"s = get_scorer('context_position', model={MODEL!r}, api_base={judge_server.url!r}, api_key='k',\n"
        "               context=['a', 'b'], timeout_s=30, structured_output='json_object')\n"
        "seen = {}\n"
        "real = s.judge._acompletion\n"
        "async def first(*a, **k):\n"
        "    seen.setdefault('before', set(sys.modules))\n"
        "    return await real(*a, **k)\n"
        "s.judge._acompletion = first\n"
        "score = s.score(make_trajectory([], input='q', output='a'))\n"
        "late = sorted(m for m in set(sys.modules) - seen['before'] if m.startswith('openai.resources'))\n"
        "print(json.dumps({'value': score.value, 'error': score.error, 'late': late}))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["error"] is None and result["value"] == 1.0
    assert result["late"] == [], "imported inside the first attempt's deadline"


def test_a_slow_loris_within_the_timeout_still_scores(judge_server: JudgeServer) -> None:
    # The whole-attempt deadline must not cut an answer that does arrive in time.
    judge_server.responder = lambda body: slow_body(auto_answer(body), interval=0.001)
    score = scorer("context_position", judge_server.url, timeout_s=10).score(run())
    assert score.error is None and score.value == 1.0


# --- invalid output: one re-ask, then an error; the re-ask has its own bounded retries ----------


def _cut(body: dict[str, Any]) -> Reply:
    text = json.dumps(auto_answer(body))
    return ok(text[: len(text) // 2])  # a valid completion whose JSON content stops mid-object


def _one_short(body: dict[str, Any]) -> Reply:
    answer = auto_answer(body)
    key = "evaluations" if "evaluations" in answer else "verdicts"
    answer[key] = answer[key][:-1] if len(answer[key]) > 1 else answer[key] * 2
    return ok(answer)


def _null_content(body: dict[str, Any]) -> Reply:
    return raw(json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "judge-test",
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": None},
                                        "finish_reason": "stop"}]}))


@pytest.mark.parametrize("scorer_name", list(SCORERS))
@pytest.mark.parametrize("bad", [_cut, _one_short, _null_content], ids=["content_cut_mid_object", "count_mismatch", "null_content"])
def test_invalid_output_is_reasked_once_then_an_error(
    judge_server: JudgeServer, scorer_name: str, bad: Callable[[dict[str, Any]], Reply]
) -> None:
    judge_server.responder = bad
    score = scorer(scorer_name, judge_server.url, max_retries=MAX_RETRIES).score(run())
    assert_error(score, "judge_invalid_output")
    assert len(judge_server.requests) == 2  # the question and one re-ask, never more
    assert judge_server.requests[1]["messages"][-1]["content"].startswith("Your answer was invalid: ")


def test_a_reask_that_meets_a_500_storm_is_bounded_by_its_own_retries(judge_server: JudgeServer) -> None:
    judge_server.script(ok('{"verdicts": [{"verdict": "yes", "rea'))  # invalid: re-asked
    judge_server.responder = always(lambda: status(500))
    score = scorer("context_position", judge_server.url, max_retries=MAX_RETRIES).score(run())
    assert_error(score, "judge_unavailable")
    assert len(judge_server.requests) == 1 + (1 + MAX_RETRIES)


def test_prompt_alignment_from_system_instructions_stops_at_the_first_failed_question(judge_server: JudgeServer) -> None:
    # Two questions per evaluation (split, then verdicts): a fault in the first ends it there.
    judge_server.responder = always(lambda: status(503))
    s = get_scorer("prompt_alignment", model=MODEL, api_base=judge_server.url, api_key="k",
                   max_retries=1, backoff_base_s=0.01, backoff_max_s=0.05)
    traj = make_trajectory([], input="Hi", output="Hello!", system_instructions="Be brief. Answer in English.")
    assert_error(s.score(traj), "judge_unavailable")
    assert len(judge_server.requests) == 2
    assert all("system_instructions" in p for p in judge_server.prompts())


# --- limits under faults: concurrency, rate, cost -------------------------------------------------

STORM_FAULTS: list[Callable[[], Reply]] = [
    reset, reset_request, truncated_body, hang, lambda: html_page(502), lambda: status(500),
    lambda: status(503), lambda: status(429), lambda: status(429, retry_after=0.05),
    lambda: slow_body(GOOD_CONTEXT, interval=0.05), lambda: ok("<html>not json</html>"),
    lambda: status(500, delay=0.2),
]


@pytest.mark.parametrize("seed", [7, 2024])
def test_a_mixed_fault_storm_across_many_concurrent_evaluations(judge_server: JudgeServer, seed: int) -> None:
    # Valid answers are in the mix too: some evaluations score, the rest are error evaluations.
    judge_server.responder = fault_storm(seed, STORM_FAULTS, answer=valid, answer_weight=4)
    max_concurrency, n, retries = 4, 24, 1
    s = scorer("context_position", judge_server.url, max_retries=retries, max_concurrency=max_concurrency,
               timeout_s=0.5)

    async def many() -> list[Score]:
        return await asyncio.gather(*(s.ascore(run()) for _ in range(n)))

    started = time.monotonic()
    scores = run_sync(many())
    elapsed = time.monotonic() - started
    assert len(scores) == n
    for sc in scores:
        if sc.error is None:
            assert sc.value is not None and 0.0 <= sc.value <= 1.0
        else:
            assert sc.value is None and sc.label == "error" and sc.error in JUDGE_ERRORS
        assert sc.details["judge_calls"] <= 2 * (1 + retries)  # a question and its re-ask, each retried
    assert any(sc.error is not None for sc in scores) and any(sc.error is None for sc in scores)
    calls = sum(sc.details["judge_calls"] for sc in scores)
    assert len(judge_server.requests) <= calls <= n * 2 * (1 + retries)
    assert judge_server.max_in_flight <= max_concurrency, "more requests open at once than max_concurrency"
    # hang detection: every evaluation is bounded; they run max_concurrency at a time
    assert elapsed < n / max_concurrency * 2 * (1 + retries) * (0.5 + 0.1) + 20


def test_the_cost_cap_holds_during_a_429_storm(judge_server: JudgeServer) -> None:
    # The first request is answered (priced) after a moment; every other one is a 429 asking
    # for a retry later. Once the answer's cost has reached the cap, no request is made: the
    # evaluations retrying after their 429s and those still queued all end as judge_cost_cap.
    first = threading.Lock()
    answered: list[bool] = []

    def respond(body: dict[str, Any]) -> Reply:
        with first:
            if not answered:
                answered.append(True)
                return ok(auto_answer(body), model="gpt-4o-mini", usage=(1000, 100), delay=0.2)
        return status(429, retry_after=1.5)

    judge_server.responder = respond
    s = scorer("context_position", judge_server.url, model=PRICED, max_retries=3, max_concurrency=3,
               cost_cap_usd_per_hour=1e-9)

    async def many() -> list[Score]:
        return await asyncio.gather(*(s.ascore(run()) for _ in range(6)))

    scores = run_sync(many())
    outcomes = Counter("scored" if sc.error is None else sc.error for sc in scores)
    assert outcomes == {"scored": 1, "judge_cost_cap": 5}
    assert len(judge_server.requests) == 3  # the three sent before the cost was known; none after
    for sc in scores:
        if sc.error:
            assert sc.value is None and "cap" in sc.explanation
    assert sum(sc.details["judge_calls"] for sc in scores) == 3


def test_the_cost_cap_is_checked_after_waiting_for_the_rate_limit(judge_server: JudgeServer) -> None:
    # One request per second: the second evaluation waits about a second for its turn, and the
    # first one's (priced) answer reaches the cap meanwhile. The cap is current when the call
    # would be made, not when the evaluation started waiting.
    judge_server.responder = lambda body: ok(auto_answer(body), model="gpt-4o-mini", usage=(1000, 100), delay=0.1)
    s = scorer("context_position", judge_server.url, model=PRICED, max_concurrency=2, requests_per_second=1,
               cost_cap_usd_per_hour=1e-9)

    async def two() -> list[Score]:
        return await asyncio.gather(s.ascore(run()), s.ascore(run()))

    scores = run_sync(two())
    assert sorted(str(sc.error) for sc in scores) == ["None", "judge_cost_cap"]
    assert len(judge_server.requests) == 1


def test_the_rate_limit_paces_retries_during_a_429_storm(judge_server: JudgeServer) -> None:
    # requests_per_second counts every attempt, retries included: 4 evaluations × 3 attempts at
    # 4/s with a burst of 4 cannot take less than (12 - 4) / 4 = 2 s, however fast the 429s come.
    judge_server.responder = always(lambda: status(429))
    s = scorer("tool_call_appropriateness", judge_server.url, max_retries=2, max_concurrency=4, requests_per_second=4)

    async def many() -> list[Score]:
        return await asyncio.gather(*(s.ascore(run()) for _ in range(4)))

    started = time.monotonic()
    scores = run_sync(many())
    elapsed = time.monotonic() - started
    assert all(sc.error == "judge_rate_limited" and sc.value is None for sc in scores)
    assert len(judge_server.requests) == 12
    assert elapsed >= 1.9
    assert judge_server.max_in_flight <= 4


# --- the app while the judge is down --------------------------------------------------------------


class App(Pipeline):
    """A real SDK TracerProvider with ToolScoreSpanProcessor (a code scorer and the three LLM
    scorers pointed at ``url``) and in-memory span, log and metric sinks."""

    def __init__(self, url: str, *, shutdown_timeout: float = 0.5, **judge: Any) -> None:
        self.llm = [scorer(name, url, **judge) for name in SCORERS]
        super().__init__(["tool_call_validation", *self.llm], shutdown_timeout=shutdown_timeout)
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("app")
        self._runs = itertools.count()
        self._shut = False

    def shutdown(self) -> None:
        if not self._shut:
            self._shut = True
            self.provider.shutdown()

    def agent_run(self) -> None:
        weather_run(self.tracer, question=f"Weather in Oslo? (#{next(self._runs)})")

    def agent_spans(self) -> list[ReadableSpan]:
        return [s for s in self.exported() if s.name == "invoke_agent weather-bot"]

    def code_scored(self) -> int:
        return sum(1 for s in self.agent_spans() if "toolscore.tool_call_validation.label" in (s.attributes or {}))

    def llm_events(self) -> list[dict[str, Any]]:
        names = set(SCORERS)
        return [dict(r.log_record.attributes or {}) for r in self.logs.get_finished_logs()
                if (r.log_record.attributes or {}).get(semconv.GEN_AI_EVALUATION_NAME) in names]

    def llm_score_points(self) -> list[Any]:
        return [p for p in self.metric_points(semconv.METRIC_EVALUATION_SCORE)
                if p.attributes.get(semconv.GEN_AI_EVALUATION_NAME) in SCORERS]


N_RUNS = 5

#: judge down three ways: (judge server responder or None for a closed port, judge settings,
#: the error every LLM evaluation must end with, HTTP attempts per evaluation)
DOWN = {
    "never_answers": (lambda: hang(), {"timeout_s": 3.0, "max_retries": 0}, "judge_timeout", 1),
    "closed_port": (None, {"max_retries": 1}, "judge_unavailable", 2),
    "500_storm": (lambda: status(500, delay=1.0), {"max_retries": 1}, "judge_unavailable", 2),
}


@pytest.mark.parametrize("down", list(DOWN))
def test_the_app_never_waits_for_a_judge_that_is_down(down: str) -> None:
    make, settings, error, attempts = DOWN[down]
    server = JudgeServer(always(make)).start() if make is not None else None
    url = server.url if server is not None else closed_port_url()
    app = App(url, **settings)
    try:
        for _ in range(N_RUNS):
            app.agent_run()
        # Every run's agent span reaches the exporter with the code scorer's attributes, while
        # the judge has not answered a single evaluation (it cannot: it hangs for 3 s, or each
        # of its 500s takes 1 s and is retried once).
        wait_for(lambda: app.code_scored() == N_RUNS, 30, "the agent spans to be exported")
        if server is not None:
            assert app.llm_events() == [], "an agent span waited for the judge"
            # ... and the judge's requests are open at the server at the same time
            wait_for(lambda: server.in_flight >= 1, 30, "the judge requests to reach the server")
        for span in app.agent_spans():
            assert not any(k.startswith(f"toolscore.{name}.") for k in span.attributes for name in SCORERS)

        # Later, every LLM evaluation arrives as an error evaluation: error.type, no value, no
        # score metric point; never a 0.
        expected = N_RUNS * len(SCORERS)
        wait_for(lambda: len(app.llm_events()) == expected, 60, "the LLM error evaluations")
        for event in app.llm_events():
            assert event.get(semconv.ERROR_TYPE) == error, event
            assert semconv.GEN_AI_EVALUATION_SCORE_VALUE not in event
        assert app.llm_score_points() == []
        if server is not None:
            assert len(server.requests) == expected * attempts
        assert Counter(s.name for s in app.agent_spans())["invoke_agent weather-bot"] == N_RUNS

        # Shutdown while judge calls are in flight again is bounded by shutdown_timeout.
        for _ in range(2):
            app.agent_run()
        if server is not None:
            wait_for(lambda: server.in_flight >= 1, 30, "new judge requests in flight")
        started = time.monotonic()
        app.shutdown()
        assert time.monotonic() - started < app.processor.settings.shutdown_timeout + 10
        assert Counter(s.name for s in app.agent_spans())["invoke_agent weather-bot"] == N_RUNS + 2
        if server is not None:
            # the judge calls were cancelled, their connections closed: nothing left open
            wait_for(lambda: server.in_flight == 0, 10, "the cancelled judge calls' connections to close")
    finally:
        app.shutdown()
        if server is not None:
            server.stop()
