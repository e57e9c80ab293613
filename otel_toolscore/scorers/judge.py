"""The LLM judge: a litellm client with our own retries, limits, cache and output validation,
and ``LLMScorer``, the base of the LLM-judged scorers.

litellm is imported lazily, inside the functions that call it: ``import otel_toolscore`` and
code-scorer-only use never pay for it (seconds of import time, and a network fetch of its cost
map unless ``LITELLM_LOCAL_MODEL_COST_MAP`` is set; we set it when unset).

Every judge call runs on one dedicated event loop thread (the judge loop): ``ascore`` can be
awaited from any loop (the engine's), and sync ``score()`` blocks on that loop. The concurrency
limit, rate limit, cost cap and cache are per ``JudgeClient``; share one client between scorers
to share them.

Failure is not a score: every judge failure becomes a ``JudgeError`` with a low-cardinality
``error_type`` (judge_timeout, judge_rate_limited, judge_unavailable, judge_rejected,
judge_invalid_output, judge_cost_cap, judge_circuit_open, judge_request_budget), which
``LLMScorer.ascore`` turns into a Score with no value.

Storms are bounded per judge model (``_judge_guard``): a circuit breaker and a request budget,
shared by every client of the model; an answer larger than ``max_response_bytes`` is refused
before it is parsed (``_http_cap``).
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import functools
import hashlib
import json
import os
import random
import re
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, ValidationError

from otel_toolscore.extras import check, require
from otel_toolscore.scorers import _judge_guard
from otel_toolscore.scorers._http_cap import ResponseTooLarge, capped_client
from otel_toolscore.scorers._judge_guard import CircuitOpen, Clock, ModelGuard
from otel_toolscore.scorers._loop import on_judge_loop, run_sync
from otel_toolscore.scorers.base import Score, Scorer, ScorerConfigError, ScorerKind, ScoringError
from otel_toolscore.scorers.redaction import ContentBudget, DataBlocks, Redactor, make_redactor
from otel_toolscore.trajectory import Trajectory

OnJudge = Callable[[float, "float | None", str], None]
T = TypeVar("T", bound=BaseModel)

_MAX_ERROR_IN_REASK = 1500


# --- settings and errors ------------------------------------------------------------------------


class JudgeSettings(BaseModel):
    """How to reach the judge and how hard to push it."""

    model_config = ConfigDict(extra="forbid")

    #: a litellm model string, e.g. "openai/gpt-4o-mini", "anthropic/claude-3-5-haiku-latest"
    model: str
    api_base: str | None = None
    #: None: litellm reads the provider's usual environment variable (OPENAI_API_KEY, …)
    api_key: SecretStr | None = None
    #: per HTTP attempt, whole: connecting, sending and reading the complete answer (not per read,
    #: so an answer dribbled a byte at a time cannot hold a call open past it)
    timeout_s: float = Field(default=30.0, gt=0)
    #: retries after the first attempt (timeouts, connection errors, 408, 429, 5xx)
    max_retries: int = Field(default=3, ge=0)
    backoff_base_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=20.0, ge=0)
    #: a Retry-After longer than this is not waited for: the call fails as rate limited at once
    max_retry_after_s: float = Field(default=60.0, ge=0)
    max_concurrency: int = Field(default=16, ge=1)
    requests_per_second: float | None = Field(default=None, gt=0)
    cost_cap_usd_per_hour: float | None = Field(default=None, ge=0)
    #: HTTP attempts sent to this model (at this api_base, from every client) in any 60 s,
    #: retries included; beyond it an evaluation ends as judge_request_budget, no request made
    max_requests_per_minute: int | None = Field(default=None, ge=1)
    #: consecutive failed attempts (5xx, 408, 429, timeouts, connection errors) of this model
    #: after which its circuit breaker opens; None: no breaker
    breaker_threshold: int | None = Field(default=5, ge=1)
    #: seconds an open breaker waits before one probe request
    breaker_cooldown_s: float = Field(default=30.0, gt=0)
    #: the largest answer body read; a larger one is judge_invalid_output, never parsed
    max_response_bytes: int = Field(default=1_000_000, ge=1024)
    cache_size: int = Field(default=2048, ge=0)
    #: auto: the JSON-schema response format where litellm says the model supports it, else JSON
    #: mode where the provider takes a response_format, else none; but json_schema, the schema
    #: is also written into the prompt (the fallback every model understands)
    structured_output: Literal["auto", "json_schema", "json_object", "prompt"] = "auto"
    temperature: float = 0.0


class JudgeError(ScoringError):
    error_type = "judge_unavailable"


class JudgeUnavailable(JudgeError):
    error_type = "judge_unavailable"


class JudgeTimeout(JudgeError):
    error_type = "judge_timeout"


class JudgeRateLimited(JudgeError):
    error_type = "judge_rate_limited"


class JudgeRejected(JudgeError):
    """A 4xx other than 408/429 (bad key, unknown model, bad request): retrying cannot help."""

    error_type = "judge_rejected"


class JudgeInvalidOutput(JudgeError):
    error_type = "judge_invalid_output"


class JudgeCostCap(JudgeError):
    error_type = "judge_cost_cap"


class JudgeCircuitOpen(JudgeError):
    """The model's circuit breaker is open: no request was made."""

    error_type = "judge_circuit_open"


class JudgeRequestBudget(JudgeError):
    """The model's request budget for the last minute is spent: no request was made."""

    error_type = "judge_request_budget"


class AttemptDeadline(TimeoutError):
    """One HTTP attempt outlived ``timeout_s`` as a whole (a slow-loris answer resets every
    per-read timeout below us, so the attempt's total time is bounded here)."""


# --- output validation --------------------------------------------------------------------------


def _word(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _flag(value: Any) -> Any:
    # Booleans as JSON booleans, or the words true/false/yes/no; anything else stays invalid.
    if isinstance(value, str):
        word = value.strip().lower()
        return {"true": True, "yes": True, "false": False, "no": False}.get(word, value)
    return value


#: verdict words are trimmed and lower-cased before validation; anything else is invalid
YesNo = Annotated[Literal["yes", "no"], BeforeValidator(_word)]
YesNoNA = Annotated[Literal["yes", "no", "n/a"], BeforeValidator(_word)]
Flag = Annotated[bool, BeforeValidator(_flag), Field(strict=True)]


class JudgeOutput(BaseModel):
    """Base of every judge answer model.

    Strict in what it asks, lenient in what it accepts: the schema the judge is sent says
    ``additionalProperties: false`` (OpenAI's strict JSON-schema mode requires it), but a key
    nobody asked for (real models add ``confidence``, ``notes``) is ignored rather than failing
    the evaluation; a missing or malformed required key is still invalid.
    """

    model_config = ConfigDict(extra="ignore", json_schema_extra={"additionalProperties": False})


def expect_count(items: list[Any], expected: int, what: str) -> None:
    if len(items) != expected:
        raise ValueError(f"expected exactly {expected} {what}, one per item in order; got {len(items)}")


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_output(text: str | None, output: type[T], check: Callable[[T], None] | None = None) -> T:
    """The judge's text as a validated ``output``; ``JudgeInvalidOutput`` says why not."""
    if not text or not text.strip():
        raise JudgeInvalidOutput("the answer was empty")
    fenced = _FENCE.match(text)  # a ```json fence around the object is tolerated, prose is not
    try:
        data = json.loads(fenced.group(1) if fenced else text)
    except ValueError as exc:
        raise JudgeInvalidOutput(f"the answer is not a JSON object: {exc}") from None
    try:
        result = output.model_validate(data)
        if check is not None:
            check(result)
    except ValidationError as exc:
        raise JudgeInvalidOutput(_validation_message(exc)) from None
    except ValueError as exc:
        raise JudgeInvalidOutput(str(exc)) from None
    return result


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        parts.append(f"{loc}: {err['msg']} (got {err.get('input')!r:.80})")
    return "; ".join(parts)


# --- limits: rate, cost, cache ------------------------------------------------------------------


class TokenBucket:
    """requests_per_second with a burst of one second's worth. Reservations may go into debt,
    so waiters are served in order and the lock is never held across a sleep."""

    def __init__(self, rate: float, *, clock: Clock = time.monotonic) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate)
        self.clock = clock
        self._tokens = self.capacity
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take one token; the seconds to wait before using it."""
        with self._lock:
            now = self.clock()
            self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


class CostWindow:
    """Known judge spending over the last hour (a cap can only count costs litellm knows)."""

    def __init__(self) -> None:
        self._spent: collections.deque[tuple[float, float]] = collections.deque()
        self._lock = threading.Lock()

    def add(self, cost: float) -> None:
        with self._lock:
            self._spent.append((time.monotonic(), cost))

    def last_hour(self) -> float:
        with self._lock:
            horizon = time.monotonic() - 3600.0
            while self._spent and self._spent[0][0] < horizon:
                self._spent.popleft()
            return sum(cost for _, cost in self._spent)


class LRUCache:
    """Validated answers by exact request; thread-safe (scorers may run on several loops)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: str, value: str) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


def request_key(model: str, messages: list[dict[str, str]], response_format: dict[str, Any] | None) -> str:
    blob = json.dumps([model, messages, response_format], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


# --- usage of one evaluation --------------------------------------------------------------------


@dataclass
class JudgeUsage:
    """What the judge calls of one evaluation cost; becomes the score's judge_* details."""

    model: str
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    calls: int = 0  # HTTP attempts made
    answers: int = 0  # answers used (from the judge or the cache)
    cache_hits: int = 0

    def add_call(self, duration: float, prompt: int, completion: int, cost: float | None) -> None:
        self.calls += 1
        self.latency_s += duration
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        # One unpriced call makes the total unknown rather than silently low.
        self.cost_usd = None if cost is None or self.cost_usd is None else self.cost_usd + cost

    def add_failed_call(self, duration: float) -> None:
        self.calls += 1
        self.latency_s += duration

    def details(self) -> dict[str, Any]:
        return {
            "judge_model": self.model,
            "judge_latency_s": round(self.latency_s, 4),
            "judge_tokens": {
                "prompt": self.prompt_tokens,
                "completion": self.completion_tokens,
                "total": self.prompt_tokens + self.completion_tokens,
            },
            "judge_cost_usd": None if self.cost_usd is None else round(self.cost_usd, 8),
            "judge_calls": self.calls,
            # True only when every answer this score used came from the cache (no call made)
            "cached": self.answers > 0 and self.cache_hits == self.answers,
        }


# --- the client ---------------------------------------------------------------------------------


@dataclass
class _Failure:
    error: JudgeError
    retryable: bool
    retry_after: float | None = None

    @property
    def counts_against_the_model(self) -> bool:
        """Whether the breaker counts it: the model or its endpoint failing (5xx, 408, 429,
        timeouts, connection errors), not a request it rejected or an answer it got wrong."""
        return self.retryable


@functools.lru_cache(maxsize=1)
def _import_litellm() -> Any:
    # litellm fetches its model price map from GitHub at import unless told not to; a span
    # processor must not make surprise network calls (or wait on them offline). Users who want
    # the live map can set the variable to False themselves.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = require("litellm", "judge", "an LLM-judged scorer")

    # litellm prints "Give Feedback / Get Help" banners to stdout on errors; they would corrupt
    # the CLI's JSON output. It only silences those banners.
    litellm.suppress_debug_info = True  # type: ignore[attr-defined]
    # The first completion imports the provider SDK's resource modules lazily (over a second on
    # a busy machine), blocking the judge loop inside the first attempt, whose deadline would
    # then expire on the client's own import. Import them here, before any deadline starts.
    try:
        import openai.resources.chat  # noqa: F401
    except ImportError:  # pragma: no cover - litellm without the openai SDK
        pass
    return litellm


Sleep = Callable[[float], Coroutine[Any, Any, None]]


class JudgeClient:
    """Asks a judge model one structured question at a time (see ``ask``).

    ``guard``: the model's circuit breaker and request budget (default: the process's, shared
    by every client of the same model and api_base); ``clock`` and ``sleep``: what the rate
    limit and the retries' backoff use (tests record the waits instead of sitting them out)."""

    def __init__(self, settings: JudgeSettings, *, on_judge: OnJudge | None = None, guard: ModelGuard | None = None,
                 clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        # Configuring a judge without litellm fails here, naming the extra, rather than as an
        # error evaluation on every run later.
        check("litellm", "judge", "an LLM-judged scorer")
        self.settings = settings
        #: called after every HTTP attempt with (duration_s, cost_usd or None, model), on the
        #: judge loop's thread; the engine sets it to ``Emitter.record_judge``
        self.on_judge = on_judge
        self.cache = LRUCache(settings.cache_size)
        self._bucket = TokenBucket(settings.requests_per_second, clock=clock) if settings.requests_per_second else None
        self._sleep = sleep
        self.guard = guard if guard is not None else _judge_guard.guard_for(
            settings.model, settings.api_base, settings.breaker_threshold or 1, settings.breaker_cooldown_s)
        # the size-capped HTTP client per event loop (see _http_client)
        self._http: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        self._costs = CostWindow()
        # Calls run on the judge loop only; one semaphore per loop still, because after a fork
        # the child starts a new judge loop and a semaphore cannot move between loops.
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._mode: str | None = None  # structured output litellm says the model supports

    # -- public --
    async def ask(
        self,
        *,
        system: str,
        user: str,
        output: type[T],
        name: str,
        check: Callable[[T], None] | None = None,
        usage: JudgeUsage | None = None,
    ) -> T:
        """One structured question: cache, then the call (with retries), validation, and at most
        one re-ask that quotes the validation error. Raises ``JudgeError`` subclasses only.

        Awaitable from any event loop: the work itself runs on the judge loop (see ``on_judge_loop``).
        """
        usage = usage if usage is not None else JudgeUsage(self.settings.model)
        return await on_judge_loop(self._ask(system, user, output, name, check, usage))

    async def _ask(
        self,
        system: str,
        user: str,
        output: type[T],
        name: str,
        check: Callable[[T], None] | None,
        usage: JudgeUsage,
    ) -> T:
        response_format, schema_in_prompt = self._response_format(output, name)
        if schema_in_prompt:
            schema = json.dumps(_schema(output), separators=(",", ":"))
            system = (
                f"{system}\n\nAnswer with one JSON object and nothing else. It must validate "
                f"against this JSON Schema:\n{schema}"
            )
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        key = request_key(self.settings.model, messages, response_format)
        cached = self.cache.get(key)
        if cached is not None:
            usage.answers += 1
            usage.cache_hits += 1
            return parse_output(cached, output, check)

        text = await self._complete(messages, response_format, usage)
        try:
            result = parse_output(text, output, check)
        except JudgeInvalidOutput as first:
            reask = messages + [
                {"role": "assistant", "content": text or ""},
                {
                    "role": "user",
                    "content": (
                        "Your answer was invalid: "
                        f"{str(first)[:_MAX_ERROR_IN_REASK]}\n"
                        "Answer again with only the corrected JSON object."
                    ),
                },
            ]
            text = await self._complete(reask, response_format, usage)
            try:
                result = parse_output(text, output, check)
            except JudgeInvalidOutput as second:
                raise JudgeInvalidOutput(f"invalid after one re-ask: {second}") from None
        usage.answers += 1
        # Keyed by the original request, so the next identical question skips the re-ask too.
        self.cache.put(key, text or "")
        return result

    # -- structured output --
    def _response_format(self, output: type[BaseModel], name: str) -> tuple[dict[str, Any] | None, bool]:
        """The response_format to send (None: none), and whether the schema must also go into
        the prompt."""
        mode: str = self.settings.structured_output
        if mode == "auto":
            mode = self._supported_mode()
        if mode == "json_schema":
            return {"type": "json_schema", "json_schema": {"name": name, "schema": _schema(output), "strict": True}}, False
        if mode == "json_object":
            return {"type": "json_object"}, True
        return None, True

    def _supported_mode(self) -> str:
        """What litellm says the model takes: json_schema, json_object (the provider accepts a
        response_format) or prompt (it would reject one). Asked once per client."""
        if self._mode is None:
            litellm = _import_litellm()
            try:
                if litellm.supports_response_schema(model=self.settings.model):
                    self._mode = "json_schema"
                else:
                    _, provider, _, _ = litellm.get_llm_provider(self.settings.model)
                    params = litellm.get_supported_openai_params(model=self.settings.model, custom_llm_provider=provider)
                    self._mode = "json_object" if "response_format" in (params or []) else "prompt"
            except Exception:  # noqa: BLE001 - a model litellm does not know: JSON mode, the common case
                self._mode = "json_object"
        return self._mode

    # -- the call, with limits and retries --
    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._semaphores.get(loop)
        if sem is None:
            sem = self._semaphores[loop] = asyncio.Semaphore(self.settings.max_concurrency)
        return sem

    async def _complete(
        self, messages: list[dict[str, str]], response_format: dict[str, Any] | None, usage: JudgeUsage
    ) -> str | None:
        s = self.settings
        _import_litellm()  # a first import takes seconds: never inside an attempt's deadline
        last: _Failure | None = None
        async with self._semaphore():
            for attempt in range(s.max_retries + 1):
                if self._bucket is not None:
                    wait = self._bucket.reserve()
                    if wait > 0:
                        await self._sleep(wait)
                # After the rate-limit wait, not before: other calls may have reached the cap
                # while this one waited for its turn.
                if s.cost_cap_usd_per_hour is not None:
                    spent = self._costs.last_hour()
                    if spent >= s.cost_cap_usd_per_hour:
                        raise JudgeCostCap(
                            f"judge spending in the last hour (${spent:.4f}) reached the cap "
                            f"(${s.cost_cap_usd_per_hour:.4f}); no call made"
                        )
                ticket = await self._admit(last)
                try:
                    if s.max_requests_per_minute is not None and not self.guard.budget.take(s.max_requests_per_minute):
                        ticket.release("none")
                        raise self._cut(last, JudgeRequestBudget(
                            f"the judge's request budget ({s.max_requests_per_minute} per minute) is spent; "
                            "no request made"))
                    started = time.monotonic()
                    try:
                        response = await _within(s.timeout_s, self._acompletion(messages, response_format))
                    except Exception as exc:  # noqa: BLE001 - classified below, never escapes raw
                        duration = time.monotonic() - started
                        usage.add_failed_call(duration)
                        self._notify(duration, None)
                        failure = _classify(exc)
                        ticket.release("failure" if failure.counts_against_the_model else "none")
                        if not failure.retryable or attempt >= s.max_retries:
                            raise failure.error from None
                        delay = self._backoff(attempt)
                        if failure.retry_after is not None:
                            if failure.retry_after > s.max_retry_after_s:
                                raise failure.error from None
                            delay = max(delay, failure.retry_after)
                        last = failure
                        await self._sleep(delay)
                        continue
                    ticket.release("success")
                finally:
                    ticket.release("none")  # cancelled, or refused by the budget: no outcome
                duration = time.monotonic() - started
                prompt, completion = _tokens(response)
                cost = _cost(response)
                if cost is not None:
                    self._costs.add(cost)
                usage.add_call(duration, prompt, completion, cost)
                self._notify(duration, cost)
                return _content(response)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _admit(self, last: _Failure | None) -> _judge_guard.Ticket:
        """The breaker's permission for one attempt (a ticket that always admits without one)."""
        if self.settings.breaker_threshold is None:
            return _judge_guard.Ticket(_NO_BREAKER, turn=None, _done=True)
        try:
            return await self.guard.breaker.acquire(retry=last is not None)
        except CircuitOpen as exc:
            raise self._cut(last, JudgeCircuitOpen(str(exc))) from None

    @staticmethod
    def _cut(last: _Failure | None, refusal: JudgeError) -> JudgeError:
        """What an evaluation ends with when a retry is refused: the failure it was retrying
        (its real cause), noting why it stopped; the refusal itself when no request was made."""
        if last is None:
            return refusal
        error = last.error
        error.args = (f"{error}; not retried: {refusal}",)
        return error

    def _http_client(self) -> Any:
        """The size-capped HTTP client for this event loop (the judge loop is re-created after
        a fork, and an HTTP client cannot move between loops); None where litellm takes none."""
        loop = asyncio.get_running_loop()
        if loop not in self._http:
            self._http[loop] = capped_client(self.settings)
        return self._http[loop]

    async def _acompletion(self, messages: list[dict[str, str]], response_format: dict[str, Any] | None) -> Any:
        litellm = _import_litellm()
        s = self.settings
        kwargs: dict[str, Any] = {
            "model": s.model,
            "messages": messages,
            "temperature": s.temperature,
            "timeout": s.timeout_s,
            # litellm's and the provider SDK's own retries off: ours are bounded and testable
            "num_retries": 0,
            "max_retries": 0,
        }
        if response_format is not None:  # a provider without the parameter would reject it
            kwargs["response_format"] = response_format
        if s.api_base:
            kwargs["api_base"] = s.api_base
        if s.api_key is not None:
            kwargs["api_key"] = s.api_key.get_secret_value()
        client = self._http_client()
        if client is not None:
            kwargs["client"] = client
        # The judge's own HTTP/LLM calls must not be traced into the app's traces (they would be
        # scored in turn); instrumentations honour this context key.
        from opentelemetry import context as otel_context

        token = otel_context.attach(otel_context.set_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            return await litellm.acompletion(**kwargs)
        finally:
            otel_context.detach(token)

    def _backoff(self, attempt: int) -> float:
        """Exponential with equal jitter: half fixed (a floor), half random (spreads retries)."""
        s = self.settings
        delay = min(s.backoff_max_s, s.backoff_base_s * (2**attempt))
        return delay / 2 + random.uniform(0, delay / 2)

    def _notify(self, duration: float, cost: float | None) -> None:
        if self.on_judge is None:
            return
        try:
            self.on_judge(duration, cost, self.settings.model)
        except Exception:  # noqa: BLE001 - metrics must never break a judgement
            pass


async def _within(seconds: float, call: Coroutine[Any, Any, Any]) -> Any:
    """``call``, cancelled (which closes its connection) if it has not finished in ``seconds``.

    httpx applies litellm's ``timeout`` to each read, write and connect separately: a server
    that sends one byte every few seconds never trips it, and the attempt would last as long as
    the server likes. The whole attempt gets the deadline here instead."""
    try:
        return await asyncio.wait_for(call, seconds)
    except asyncio.TimeoutError:
        raise AttemptDeadline(f"no complete answer within the {seconds:g} s attempt timeout") from None


def _classify(exc: BaseException) -> _Failure:
    litellm = _import_litellm()
    status = getattr(exc, "status_code", None)
    message = " ".join(str(exc).split())[:300] or type(exc).__name__
    # An answer the provider's client could not read as JSON (a body cut mid-object) or that was
    # too large to read: the endpoint answered, its answer is unusable. Whatever litellm wrapped
    # it in (InternalServerError, APIConnectionError), the cause is in the chain.
    cause = _cause(exc, (json.JSONDecodeError, ResponseTooLarge))
    if isinstance(cause, ResponseTooLarge):
        return _Failure(JudgeInvalidOutput(str(cause)), retryable=False)
    if cause is not None:
        return _Failure(JudgeInvalidOutput(f"the answer's body is not complete JSON: {cause}"), retryable=False)
    if isinstance(exc, (litellm.Timeout, asyncio.TimeoutError, TimeoutError)) or status == 408:
        return _Failure(JudgeTimeout(message), retryable=True)
    if isinstance(exc, litellm.RateLimitError) or status == 429:
        return _Failure(JudgeRateLimited(message), retryable=True, retry_after=_retry_after(exc))
    if isinstance(exc, (litellm.APIConnectionError, ConnectionError)):
        return _Failure(JudgeUnavailable(message), retryable=True)
    if isinstance(status, int) and status >= 500:
        return _Failure(JudgeUnavailable(message), retryable=True, retry_after=_retry_after(exc))
    if isinstance(status, int) and 400 <= status < 500:
        return _Failure(JudgeRejected(message), retryable=False)
    return _Failure(JudgeUnavailable(f"{type(exc).__name__}: {message}"), retryable=False)


def _cause(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> BaseException | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kinds):
            return current
        if isinstance(current, JudgeError):  # ours: what it was raised while handling is not this call's
            return None
        seen.add(id(current))
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return None


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from Retry-After (seconds or an HTTP date) or retry-after-ms, if sent."""
    headers = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, AttributeError):
        return None


@functools.lru_cache(maxsize=64)
def _schema(output: type[BaseModel]) -> dict[str, Any]:
    # pydantic rebuilds the schema on every call (about 2 ms); output models never change
    return output.model_json_schema()


def _tokens(response: Any) -> tuple[int, int]:
    usage = getattr(response, "usage", None)
    return int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0)


_UNPRICED: set[str] = set()  # response models litellm has no price for (checked once each)
#: a bound all the same: a proxy may name a new model in every response (docs/reliability.md, "Memory")
_UNPRICED_ENTRIES = 256


def _cost(response: Any) -> float | None:
    # litellm already priced the response while logging it (with completion_cost); reuse that
    # rather than pay for the lookup twice per call.
    hidden = getattr(response, "_hidden_params", None) or {}
    known = hidden.get("response_cost")
    if isinstance(known, (int, float)):
        return float(known)
    model = str(getattr(response, "model", None))
    if model in _UNPRICED:
        return None
    litellm = _import_litellm()
    try:
        return float(litellm.completion_cost(completion_response=response))
    except Exception:  # noqa: BLE001 - unknown model or no usage: cost unknown, not 0
        if len(_UNPRICED) < _UNPRICED_ENTRIES:
            _UNPRICED.add(model)
        return None


def _content(response: Any) -> str | None:
    try:
        return response.choices[0].message.content
    except (AttributeError, IndexError):
        return None


#: the breaker of a client with ``breaker_threshold=None``: its tickets are never settled
_NO_BREAKER = _judge_guard.CircuitBreaker()


# --- the base of LLM-judged scorers -------------------------------------------------------------


class LLMScorer(Scorer):
    """An LLM-judged scorer. The engine awaits ``ascore``; sync callers use ``score``.

    Options every LLM scorer takes: ``model`` (litellm model string), ``api_base``, ``api_key``,
    any other ``JudgeSettings`` field, or ``judge`` (a ``JudgeClient`` to share limits, cache and
    cost cap between scorers); ``redact`` (a str → str hook, extends the default redaction) and
    ``replace_default_redaction``; ``budget`` (``ContentBudget``); ``on_judge``.
    """

    kind: ClassVar[ScorerKind] = "llm"

    def __init__(
        self,
        model: str | None = None,
        *,
        judge: JudgeClient | None = None,
        api_base: str | None = None,
        api_key: str | None = None,
        redact: Redactor | None = None,
        replace_default_redaction: bool = False,
        budget: ContentBudget | None = None,
        on_judge: OnJudge | None = None,
        **judge_settings: Any,
    ) -> None:
        if judge is None:
            if not model:
                raise ScorerConfigError(f"{self.name} needs a judge model (option model=…)")
            try:
                settings = JudgeSettings(
                    model=model,
                    api_base=api_base,
                    api_key=SecretStr(api_key) if api_key else None,
                    **judge_settings,
                )
            except ValidationError as exc:
                raise ScorerConfigError(f"{self.name}: bad judge settings: {exc}") from None
            judge = JudgeClient(settings, on_judge=on_judge)
        elif judge_settings or model or api_base or api_key:
            raise ScorerConfigError(f"{self.name}: give either judge=… or judge settings, not both")
        elif on_judge is not None:
            judge.on_judge = on_judge
        self.judge = judge
        self.redactor = make_redactor(redact, replace_default=replace_default_redaction)
        self.budget = budget or ContentBudget()

    @property
    def on_judge(self) -> OnJudge | None:
        return self.judge.on_judge

    @on_judge.setter
    def on_judge(self, callback: OnJudge | None) -> None:
        self.judge.on_judge = callback

    def blocks(self) -> DataBlocks:
        """A fresh collector of data blocks with this scorer's redaction and budget."""
        return DataBlocks(redactor=self.redactor, budget=self.budget)

    async def ascore(self, trajectory: Trajectory) -> Score:
        """Judge one trajectory. Never raises (cancellation aside): a failure is a Score with
        value None and ``error`` set, never a 0. Judge usage is in the details either way."""
        usage = JudgeUsage(self.judge.settings.model)
        try:
            result = await self._ascore(trajectory, usage)
        except Exception as exc:  # noqa: BLE001 - the contract is "never raise into the engine"
            result = Score.failed(self.name, exc)
        result.details.update(usage.details())
        try:
            json.dumps(result.details, allow_nan=False)
        except (TypeError, ValueError) as exc:
            result = Score.failed(self.name, exc)
            result.details.update(usage.details())
        return result

    def _score(self, trajectory: Trajectory) -> Score:
        return run_sync(self.ascore(trajectory))

    async def _ascore(self, trajectory: Trajectory, usage: JudgeUsage) -> Score:
        raise NotImplementedError


# --- small shared helpers for the LLM scorers ---------------------------------------------------


def fraction_label(value: float, scale: float) -> str:
    """The label of a fractional LLM score: ``full`` (the whole scale), ``none`` (0), else
    ``partial``."""
    if value >= scale:
        return "full"
    if value <= 0:
        return "none"
    return "partial"

