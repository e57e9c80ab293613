"""Judge faults end the same way whatever the fault: bounded HTTP attempts, then an error
evaluation (value None, ``error.type`` set, never a 0), nothing raised, in bounded time, with
the concurrency, rate and cost limits held; and the app never waits for a judge that is down.

Everything goes through the real LLM scorers and real litellm over real HTTP to
``tests/support/judge_server.py`` (or to a port that is closed, or that accepts and never reads). No
test here times anything: what each proves is in counts (attempts made, requests the server saw,
connections it saw closed) or in the waits the client asked for (an injected ``sleep`` records
them); speed is measured in ``benchmarks/judge_down.py``.

Storms are bounded per judge model by a circuit breaker and a request budget (docs/reliability.md,
"Judge storms"); the breaker's clock is injected, so a cool-down passes without waiting for it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from otel_toolscore import semconv
from otel_toolscore.scorers import get_scorer
from otel_toolscore.scorers._judge_guard import CircuitBreaker, CircuitOpen, ModelGuard, RequestBudget
from otel_toolscore.scorers.base import Score
from otel_toolscore.scorers.judge import JudgeClient, JudgeSettings, LLMScorer, _import_litellm, run_sync
from otel_toolscore.trajectory import ToolDefinition, Trajectory
from tests.support import timing
from tests.support.clock import FakeClock, Waits
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
    "judge_cost_cap", "judge_circuit_open", "judge_request_budget",
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




def client(url: str, *, guard: ModelGuard | None = None, clock: Callable[[], float] | None = None,
           sleep: Waits | None = None, model: str = MODEL, **settings: Any) -> JudgeClient:
    """A judge client with its clock, waits and guard injected, for ``scorer(..., judge=...)``."""
    settings.setdefault("backoff_base_s", 0.01)
    settings.setdefault("backoff_max_s", 0.05)
    settings.setdefault("timeout_s", 10.0)
    extra: dict[str, Any] = {}
    if clock is not None:
        extra["clock"] = clock
    if sleep is not None:
        extra["sleep"] = sleep
    return JudgeClient(JudgeSettings(model=model, api_base=url, api_key="sk-test", **settings), guard=guard, **extra)


def judged(name: str, judge: JudgeClient) -> LLMScorer:
    built = get_scorer(name, judge=judge, **SCORERS[name])
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
    # a complete HTTP answer whose JSON stops mid-object: the endpoint answered, unusably (issue 30)
    ("json_body_cut_mid_object", lambda: raw('{"id": "x", "object": "chat.completion", "choices": [{"ind'),
     "judge_invalid_output", {}),
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
    score = s.score(run())
    assert_error(score, error)
    # an unusable answer is not retried (the same request would get the same answer); every
    # other fault is, 1 + max_retries attempts, then stop
    attempts = 1 if error == "judge_invalid_output" else 1 + MAX_RETRIES
    assert len(judge_server.requests) == attempts
    assert score.details["judge_calls"] == attempts
    if error == "judge_timeout":
        # the deadline closed each connection (the server saw the client leave), none leaked
        wait_for(lambda: judge_server.abandoned == attempts and judge_server.in_flight == 0, 10,
                 "the server to see every timed-out attempt's connection closed")


def test_a_judge_that_accepts_connections_but_never_reads_times_out() -> None:
    with BlackHole() as hole:
        s = scorer("tool_call_appropriateness", hole.url, max_retries=1, timeout_s=SHORT_TIMEOUT)
        score = s.score(run())
        assert_error(score, "judge_timeout")
        assert score.details["judge_calls"] == 2  # no server log to read: the client's own count


def test_a_429_storm_honours_retry_after_on_every_retry(judge_server: JudgeServer) -> None:
    judge_server.responder = always(lambda: status(429, retry_after=0.3))
    waits = Waits()
    score = judged("prompt_alignment", client(judge_server.url, sleep=waits, max_retries=2)).score(run())
    assert_error(score, "judge_rate_limited")
    assert len(judge_server.requests) == 3
    # each retry waited what the server asked for (more than the backoff's 0.05 s at most)
    assert len(waits.asked) == 2 and all(w >= 0.3 for w in waits.asked), waits.asked


def test_a_429_storm_asking_for_too_long_a_wait_fails_at_once(judge_server: JudgeServer) -> None:
    judge_server.responder = always(lambda: status(429, retry_after=3600))
    score = scorer("tool_call_appropriateness", judge_server.url, max_retries=3, max_retry_after_s=30).score(run())
    assert_error(score, "judge_rate_limited")
    assert len(judge_server.requests) == 1


def test_a_503_storm_with_retry_after_waits_too(judge_server: JudgeServer) -> None:
    judge_server.responder = always(lambda: status(503, retry_after=0.2))
    waits = Waits()
    score = judged("context_position", client(judge_server.url, sleep=waits, max_retries=1)).score(run())
    assert_error(score, "judge_unavailable")
    assert len(judge_server.requests) == 2
    assert waits.asked and waits.asked[0] >= 0.2, waits.asked


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
    # no breaker: this is about the limits under faults (the breaker has its own tests below)
    s = scorer("context_position", judge_server.url, max_retries=retries, max_concurrency=max_concurrency,
               timeout_s=0.5, breaker_threshold=None)

    async def many() -> list[Score]:
        return await asyncio.gather(*(s.ascore(run()) for _ in range(n)))

    scores = run_sync(many())
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
    # The clock stands still, so the waits asked for are exactly the rate limit's.
    judge_server.responder = always(lambda: status(429))
    waits = Waits()
    judge = client(judge_server.url, clock=FakeClock(), sleep=waits, max_retries=2, max_concurrency=4,
                   requests_per_second=4, breaker_threshold=None)
    s = judged("tool_call_appropriateness", judge)

    async def many() -> list[Score]:
        return await asyncio.gather(*(s.ascore(run()) for _ in range(4)))

    scores = run_sync(many())
    assert all(sc.error == "judge_rate_limited" and sc.value is None for sc in scores)
    assert len(judge_server.requests) == 12
    paced = sorted(w for w in waits.asked if w >= 0.2)  # the rate limit's; backoffs are 0.05 s at most
    assert paced == pytest.approx([0.25 * k for k in range(1, 9)])  # the 8 beyond the burst, 0.25 s apart
    assert judge_server.max_in_flight <= 4


# --- the app while the judge is down --------------------------------------------------------------


class App(Pipeline):
    """A real SDK TracerProvider with ToolScoreSpanProcessor (a code scorer and the three LLM
    scorers pointed at ``url``) and in-memory span, log and metric sinks."""

    def __init__(self, url: str, *, shutdown_timeout: float = 0.5, shared: JudgeClient | None = None,
                 **judge: Any) -> None:
        self.llm = ([judged(name, shared) for name in SCORERS] if shared is not None
                    else [scorer(name, url, **judge) for name in SCORERS])
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
#: (No breaker here: this is about the app not waiting; the storm tests below have the same
#: outage with the breaker, and what it saves.)
DOWN = {
    "never_answers": (lambda: hang(), {"timeout_s": 3.0, "max_retries": 0, "breaker_threshold": None}, "judge_timeout", 1),
    "closed_port": (None, {"max_retries": 1, "breaker_threshold": None}, "judge_unavailable", 2),
    "500_storm": (lambda: status(500, delay=1.0), {"max_retries": 1, "breaker_threshold": None}, "judge_unavailable", 2),
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
        app.shutdown()  # returns (bounded by shutdown_timeout), the judge calls cancelled
        assert Counter(s.name for s in app.agent_spans())["invoke_agent weather-bot"] == N_RUNS + 2
        if server is not None:
            # the judge calls were cancelled, their connections closed: nothing left open
            wait_for(lambda: server.in_flight == 0, 10, "the cancelled judge calls' connections to close")
    finally:
        app.shutdown()
        if server is not None:
            server.stop()


# --- judge storms: the circuit breaker and the request budget (issue 30) -------------------------

THRESHOLD = 5
COOLDOWN_S = 30.0


def storm_guard(clock: FakeClock) -> ModelGuard:
    return ModelGuard(CircuitBreaker(THRESHOLD, COOLDOWN_S, clock=clock), RequestBudget(clock=clock))


def test_a_500_storm_of_50_runs_makes_at_most_threshold_plus_probes_requests(judge_server: JudgeServer) -> None:
    """50 runs, three LLM scorers each, one judge model down with 500s: the breaker opens after
    THRESHOLD failed requests, and from then on every evaluation is an error score
    ``judge_circuit_open`` made without a request (counted), never a 0. Each cool-down lets one
    probe through; the model back, the probe closes the breaker and runs are judged again."""
    judge_server.responder = always(lambda: status(500))
    clock = FakeClock()
    guard = storm_guard(clock)
    # max_retries=3: without the breaker, 50 runs × 3 scorers × 4 attempts = 600 requests
    shared = client(judge_server.url, guard=guard, max_retries=3, max_concurrency=16)
    app = App(judge_server.url, shared=shared, shutdown_timeout=5.0)
    try:
        for _ in range(50):
            app.agent_run()
        wait_for(lambda: len(app.llm_events()) == 50 * len(SCORERS), 120, "every LLM evaluation")
        assert len(judge_server.requests) == THRESHOLD  # threshold + 0 probes: no cool-down passed
        errors = Counter(e.get(semconv.ERROR_TYPE) for e in app.llm_events())
        assert set(errors) <= {"judge_unavailable", "judge_circuit_open"}, errors
        assert errors["judge_circuit_open"] >= 50 * len(SCORERS) - THRESHOLD
        assert not [e for e in app.llm_events() if semconv.GEN_AI_EVALUATION_SCORE_VALUE in e]
        assert app.llm_score_points() == []
        assert guard.breaker.state == "open" and guard.breaker.stats.opened == 1
        assert guard.breaker.stats.skipped == errors["judge_circuit_open"]  # every skipped score counted

        # A cool-down later, one probe: still failing, the breaker opens again.
        clock.now += COOLDOWN_S
        for _ in range(3):
            app.agent_run()
        wait_for(lambda: len(app.llm_events()) == 53 * len(SCORERS), 60, "the next runs' evaluations")
        assert len(judge_server.requests) == THRESHOLD + 1
        assert guard.breaker.stats.probes == 1 and guard.breaker.stats.opened == 2

        # The model is back: the next probe succeeds, the breaker closes, runs are judged again.
        judge_server.responder = valid
        clock.now += COOLDOWN_S
        app.agent_run()
        wait_for(lambda: len(app.llm_events()) == 54 * len(SCORERS), 60, "the probe's run")
        assert guard.breaker.stats.probes == 2
        app.agent_run()
        wait_for(lambda: len(app.llm_events()) == 55 * len(SCORERS), 60, "a run after the probe")
        assert guard.breaker.state == "closed"
        last = app.llm_events()[-len(SCORERS):]
        assert all(semconv.GEN_AI_EVALUATION_SCORE_VALUE in e for e in last), last
    finally:
        app.shutdown()


def test_the_breaker_half_opens_for_one_probe_at_a_time() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(threshold=2, cooldown_s=10, clock=clock)

    async def scenario() -> list[str]:
        seen = []
        for _ in range(2):
            (await breaker.acquire()).release("failure")
        seen.append(breaker.state)
        try:
            await breaker.acquire()
        except CircuitOpen:
            seen.append("refused")
        clock.now += 10
        seen.append(breaker.state)
        probe = await breaker.acquire()
        try:
            await breaker.acquire()  # a second request while the probe is out
        except CircuitOpen:
            seen.append("refused during the probe")
        probe.release("success")
        seen.append(breaker.state)
        (await breaker.acquire()).release("success")
        return seen

    assert asyncio.run(scenario()) == ["open", "refused", "half_open", "refused during the probe", "closed"]
    assert breaker.stats.opened == 1 and breaker.stats.probes == 1 and breaker.stats.skipped == 2


def test_a_failing_model_is_sent_one_request_at_a_time(judge_server: JudgeServer) -> None:
    """Before a model's first answer, and while its last request failed, requests go one at a
    time: 12 concurrent evaluations against a dead model make THRESHOLD requests, not 12."""
    judge_server.responder = always(lambda: status(503, delay=0.05))
    guard = storm_guard(FakeClock())
    s = judged("context_position", client(judge_server.url, guard=guard, max_retries=0, max_concurrency=12))

    async def many() -> list[Score]:
        return await asyncio.gather(*(s.ascore(run()) for _ in range(12)))

    scores = run_sync(many())
    assert len(judge_server.requests) == THRESHOLD and judge_server.max_in_flight == 1
    assert Counter(sc.error for sc in scores) == {"judge_unavailable": THRESHOLD, "judge_circuit_open": 12 - THRESHOLD}
    assert all(sc.value is None for sc in scores)


def test_a_healthy_model_keeps_its_concurrency(judge_server: JudgeServer) -> None:
    judge_server.responder = lambda body: ok(auto_answer(body), delay=0.2)
    s = judged("context_position", client(judge_server.url, guard=storm_guard(FakeClock()), max_concurrency=4))
    assert s.score(run()).error is None  # the first answer: from now on requests go together

    async def many() -> list[Score]:
        return await asyncio.gather(*(s.ascore(run()) for _ in range(8)))

    assert all(sc.error is None for sc in run_sync(many()))
    assert judge_server.max_in_flight == 4


def test_rejected_requests_and_invalid_answers_do_not_open_the_breaker(judge_server: JudgeServer) -> None:
    """A 400 or an answer that is not valid JSON says nothing of the model's health."""
    judge_server.responder = always(lambda: status(400))
    guard = storm_guard(FakeClock())
    judge = client(judge_server.url, guard=guard)
    for _ in range(THRESHOLD + 2):
        assert_error(judged("context_position", judge).score(run()), "judge_rejected")
    judge_server.responder = always(lambda: raw('{"choices": [{"ind'))
    for _ in range(THRESHOLD + 2):
        assert_error(judged("context_position", judge).score(run()), "judge_invalid_output")
    assert guard.breaker.state == "closed" and len(judge_server.requests) == 2 * (THRESHOLD + 2)


def test_the_request_budget_caps_requests_per_minute(judge_server: JudgeServer) -> None:
    """A model litellm cannot price escapes the cost cap; the budget counts requests instead,
    retries included, and the minute is the injected clock's."""
    judge_server.script(status(500))  # the first evaluation's first attempt fails, its retry counts
    judge_server.responder = valid
    clock = FakeClock()
    judge = client(judge_server.url, guard=storm_guard(clock), max_requests_per_minute=4, max_retries=1)
    s = judged("context_position", judge)
    scores = [s.score(run()) for _ in range(5)]
    assert [sc.error for sc in scores] == [None, None, None, "judge_request_budget", "judge_request_budget"]
    assert len(judge_server.requests) == 4
    assert all(sc.value is None and "budget" in sc.explanation for sc in scores[3:])
    clock.now += 60
    assert s.score(run()).error is None and len(judge_server.requests) == 5


def test_an_answer_over_max_response_bytes_is_invalid_output_and_never_parsed(judge_server: JudgeServer) -> None:
    """A 2 MB answer against a 1 MB cap: refused from its Content-Length, before the body is
    read, so nothing parses it; not retried (the same request would get the same answer)."""
    long_reason = {"verdicts": [{"verdict": "yes", "reason": "r" * 2_000_000}, {"verdict": "no", "reason": "r"}]}
    judge_server.responder = always(lambda: ok(long_reason))
    score = scorer("context_position", judge_server.url, max_retries=2).score(run())
    assert_error(score, "judge_invalid_output")
    assert "max_response_bytes" in score.explanation
    assert len(judge_server.requests) == 1
    # under a larger cap, the same answer is read and scored as usual
    assert scorer("context_position", judge_server.url, max_response_bytes=10_000_000).score(run()).value == 0.67
