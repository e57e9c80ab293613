"""``otel-toolscore serve``: an OTLP receiver that scores agent runs and forwards everything upstream.

Agents in any language export OTLP to this sidecar: gRPC (``TraceService/Export``, default
127.0.0.1:4317) or HTTP (``POST /v1/traces``, protobuf or JSON, optionally gzip/deflate,
default 127.0.0.1:4318). Every span is decoded into the SDK's ``ReadableSpan`` and goes
through ONE ``ToolScoreSpanProcessor`` in ``completion="quiet"`` mode (spans arrive ended, with
no ``on_start``: a trace is complete when its root has arrived and no span came for
``decision_wait``). Its downstream is a ``BatchSpanProcessor`` exporting OTLP to the upstream,
so agent spans leave carrying ``toolscore.*`` attributes, followed by evaluation spans (a span
that came as protobuf leaves as the bytes it came in, its score attributes appended: the same
message the SDK's encoder would write, without encoding it again, ``ingest._wire``); the
``gen_ai.evaluation.result`` events and the metrics go to the same upstream through the
sidecar's own LoggerProvider and MeterProvider.

Logs and metrics sent to the sidecar (``LogsService``/``MetricsService``, ``/v1/logs``,
``/v1/metrics``) are passed to the upstream unchanged and synchronously: the client gets the
upstream's answer, so its own retry logic still works and nothing is buffered here. With
``forward_signals=False`` (or no upstream URL) they are not served: gRPC answers
UNIMPLEMENTED, HTTP 404. OTLP/JSON logs or metrics cannot be forwarded to a gRPC upstream
(there is no lossless OTLP/JSON → protobuf conversion here): HTTP 415.

Responses follow the OTLP specification:

* success: ``Export*ServiceResponse``, with ``partial_success`` (``rejected_spans`` and the
  first decoding problems as ``error_message``) when some spans could not be decoded;
* HTTP 400 / gRPC INVALID_ARGUMENT: nothing in the payload is an OTLP trace request;
* HTTP 413 (gRPC RESOURCE_EXHAUSTED, from gRPC itself): over ``max_request_bytes``, checked on
  Content-Length, while reading a chunked body, and on the decompressed size (gzip bombs);
* HTTP 503 + ``Retry-After`` / gRPC UNAVAILABLE + ``google.rpc.RetryInfo``: the spans waiting
  for the upstream (a failing upstream fills that buffer), the pending traces or
  the scoring queue are at their bounds (accepting would mean dropping spans or scores), too
  many concurrent requests, or shutting down;
* HTTP 408: the request (headers and body) did not arrive within ``request_timeout``;
* HTTP 401 / gRPC UNAUTHENTICATED without ``Authorization: Bearer <auth_token>`` when a token
  is set; 415 for other content types or encodings; 404 for other paths; 405 other methods.
Error bodies are a ``google.rpc.Status``, protobuf or JSON like the request.

Limits against clients that are slow or hostile: both receivers listen on loopback unless told
otherwise; ``max_request_bytes`` bounds a request before and after decompression;
``max_concurrent_requests`` bounds the requests being handled at once (gRPC: RPCs, and HTTP/2
streams per connection, so one client's extra RPCs wait in its own connection; HTTP: requests
whose body has arrived). Over HTTP a request must arrive whole, headers and body, within
``request_timeout`` of the connection starting to wait for it, however slowly its bytes trickle
in: a client that dribbles headers or never sends its declared body holds a connection for that
long and no request slot at all, and bodies being received are bounded in total bytes. A
declared Content-Length over the limit is refused before a byte of the body is read.

Shutdown (``stop()``, SIGTERM, SIGINT) stops accepting, lets requests in flight finish, then
force-flushes and shuts down the processor, so every held agent span and pending trace is
scored (or forwarded unscored at the bound) and exported before the process exits.

The receiver never forwards a span twice: a request is either refused as a whole (the client
retries it) or accepted as a whole, and admission reserves its spans against the bound of the
export queue before any of them enters the processor.

What is accepted is kept until delivered: a batch the upstream refuses is retried with backoff
(``delivery.RetryingExporter``), and while it is failing new spans are accepted as long as the
buffer (``max_queued_spans``) has room, then refused (503/UNAVAILABLE, ``Retry-After``), so
the senders hold them. Only a stop whose deadline passes with the upstream
still failing gives up: those spans are counted in ``stats["spans_undelivered"]`` and logged.
The buffer is in memory unless ``queue_dir`` is set: then every accepted request is on disk
before its 200 (``_disk_queue``) and a restart delivers what a crash left; in memory, a kill -9
loses what was accepted and not yet delivered (docs/reliability.md, "`serve` never acknowledges").
Its own outputs (evaluation records, metrics) are retried like spans; what a stop cannot deliver
is counted in ``undelivered`` by signal and reason. Health: ``_health``.
"""

from __future__ import annotations

import hmac
import inspect
import logging
import os
import signal
import sqlite3
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from otel_toolscore.config import ConfigError, ToolScoreSettings, load_settings
from otel_toolscore.runtime._wrap import LogRecordHook
from otel_toolscore.runtime.processor import ToolScoreSpanProcessor
from otel_toolscore.runtime.serve import admission, delivery
from otel_toolscore.runtime.serve._app_service import AppServiceLogProcessor, AppServices
from otel_toolscore.runtime.serve._disk_queue import DiskQueue
from otel_toolscore.runtime.serve._forward import Forwarder, check_request
from otel_toolscore.runtime.serve._grpc import start_grpc
from otel_toolscore.runtime.serve._health import Readiness, readiness
from otel_toolscore.runtime.serve._http import HttpServer, start_http
from otel_toolscore.runtime.serve._protocol import RETRY_AFTER_S, Rejection, Reply, decode_traces, traces_reply
from otel_toolscore.runtime.serve.delivery import (
    Retrier,
    RetryingExporter,
    RetryingLogExporter,
    RetryingMetricExporter,
)
from otel_toolscore.runtime.serve.upstream import Upstream
from otel_toolscore.semconv import INSTRUMENTATION_SCOPE, TOOLSCORE_SCORED

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_GRPC_PORT = 4317
DEFAULT_HTTP_PORT = 4318
DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_CONCURRENT_REQUESTS = 64
DEFAULT_MAX_QUEUED_SPANS = 20_000
DEFAULT_REQUEST_TIMEOUT_S = 30.0
#: added to decision_wait when hold_timeout is not set (the hold must outlast the quiet wait)
HOLD_MARGIN_S = 5.0


@dataclass(frozen=True)
class ServerAddresses:
    """Where the server listens; a port is None when that receiver is off."""

    host: str
    grpc_port: int | None
    http_port: int | None

    def _host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    @property
    def grpc_endpoint(self) -> str | None:
        """``host:port`` for an OTLP gRPC exporter (with ``insecure=True``)."""
        return None if self.grpc_port is None else f"{self._host()}:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str | None:
        """The base URL for an OTLP/HTTP exporter (``/v1/traces`` is appended by the exporter)."""
        return None if self.http_port is None else f"http://{self._host()}:{self.http_port}"


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


class ToolScoreServer:
    """The OTLP receiver of ``otel-toolscore serve``, usable in process (tests, embedding).

    ``start()`` binds and returns the addresses (port 0 picks a free one); ``stop(timeout)``
    shuts down gracefully; ``serve_forever()`` starts and blocks until SIGTERM/SIGINT or
    ``request_stop()``. Scoring settings are the processor's (``decision_wait``,
    ``hold_timeout``, …: keyword arguments > ``OTEL_TOOLSCORE_*`` > ``config_file``); unless
    ``hold_timeout`` is set anywhere it is ``decision_wait + 5`` s, and it must exceed
    ``decision_wait`` (an agent span must be held until its trace has gone quiet).

    ``span_exporter``/``meter_provider``/``logger_provider`` replace the OTLP exporters to the
    upstream (tests); the upstream URL is needed only for what is not replaced and for
    forwarding logs and metrics.
    """

    def __init__(
        self,
        upstream: str | None = None,
        *,
        upstream_protocol: str | None = None,
        upstream_headers: Mapping[str, str] | None = None,
        host: str = DEFAULT_HOST,
        grpc_port: int | None = DEFAULT_GRPC_PORT,
        http_port: int | None = DEFAULT_HTTP_PORT,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        max_concurrent_requests: int = DEFAULT_MAX_CONCURRENT_REQUESTS,
        max_queued_spans: int = DEFAULT_MAX_QUEUED_SPANS,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
        auth_token: str | None = None,
        forward_signals: bool = True,
        scorers: Sequence[Any] | None = None,
        config_file: str | os.PathLike[str] | None = None,
        span_exporter: SpanExporter | None = None,
        meter_provider: Any = None,
        logger_provider: Any = None,
        resource: Resource | None = None,
        queue_dir: str | os.PathLike[str] | None = None,
        queue_max_bytes: int | None = None,
        **settings: Any,
    ) -> None:
        if grpc_port is None and http_port is None:
            raise ConfigError("serve needs at least one receiver (gRPC or HTTP)")
        for name, value in (("max_request_bytes", max_request_bytes),
                            ("max_concurrent_requests", max_concurrent_requests),
                            ("max_queued_spans", max_queued_spans)):
            if value < 1:
                raise ConfigError(f"{name} must be at least 1, not {value}")
        if not request_timeout > 0:
            raise ConfigError(f"request_timeout must be more than 0 s, not {request_timeout}")
        self.settings = self._settings(config_file, settings)
        self.upstream = Upstream.resolve(upstream, upstream_protocol, upstream_headers)
        needs_upstream = span_exporter is None or (meter_provider is None and self.settings.metrics) or (
            logger_provider is None and self.settings.events)
        if needs_upstream and self.upstream is None:
            raise ConfigError("no upstream: give --upstream URL or set OTEL_EXPORTER_OTLP_ENDPOINT")
        self.host = host
        self.grpc_port = grpc_port
        self.http_port = http_port
        self.max_request_bytes = max_request_bytes
        self.max_concurrent_requests = max_concurrent_requests
        self.max_queued_spans = max_queued_spans
        self.request_timeout = float(request_timeout)
        self._token = auth_token.encode() if auth_token else None
        self.forward_signals = forward_signals and self.upstream is not None
        self._scorers = scorers
        self._span_exporter = span_exporter
        self._meter_provider = meter_provider
        self._logger_provider = logger_provider
        self._resource = resource
        self._own_providers: list[Any] = []
        self.processor: ToolScoreSpanProcessor | None = None
        self.addresses: ServerAddresses | None = None
        self.stats: Counter[str] = Counter()
        self._stats_lock = threading.Lock()
        self._backlog = admission.Backlog(max_queued_spans)
        self._delivery: RetryingExporter | None = None
        self._retriers: list[Retrier] = []
        # the arguments win over the settings (file, OTEL_TOOLSCORE_SERVE_QUEUE_*)
        self.queue_dir = queue_dir if queue_dir is not None else self.settings.serve_queue_dir
        self.queue_max_bytes = queue_max_bytes if queue_max_bytes is not None else self.settings.serve_queue_max_bytes
        if self.queue_max_bytes < 1:
            raise ConfigError(f"queue_max_bytes must be at least 1, not {self.queue_max_bytes}")
        self._queue: DiskQueue | None = None
        # which stored request each span in the pipeline came from, and how many of each are left
        self._owners: dict[tuple[int, int], deque[int]] = {}
        self._outstanding: dict[int, int] = {}
        self._owners_lock = threading.Lock()
        self._downstream: Any = None
        self._replay_thread: threading.Thread | None = None
        self._apps: AppServices | None = None
        #: what a stop could not deliver, by (signal, reason): delivery.SPANS, ..., delivery.STOP_DEADLINE, ...
        self.undelivered: Counter[tuple[str, str]] = Counter()
        self._forwarder: Forwarder | None = None
        self._grpc_server: Any = None
        self._httpd: HttpServer | None = None
        self._http_thread: threading.Thread | None = None
        self._state = threading.Condition()
        self._inflight = 0
        self._stopping = False
        self._started = False
        self._stopped = threading.Event()
        self._stop_requested = threading.Event()
        if not _is_loopback(host) and self._token is None:
            logger.warning("otel-toolscore serve listens on %s without --auth-token: anyone who can reach it "
                           "can send spans", host)

    @staticmethod
    def _settings(config_file: Any, overrides: dict[str, Any]) -> ToolScoreSettings:
        resolved = load_settings(config_file, **overrides)
        if "hold_timeout" not in resolved.model_fields_set:
            resolved = resolved.model_copy(update={"hold_timeout": resolved.decision_wait + HOLD_MARGIN_S})
        elif overrides.get("hold_timeout") is None and resolved.hold_timeout <= resolved.decision_wait:
            # From the file or the environment the app shares (docs/configuration.md: hold_timeout 2.0): there it
            # bounds the hold after the run ended; here the run ends when its trace has been quiet
            # for decision_wait, so the same bound counts from then. One file serves both.
            resolved = resolved.model_copy(update={"hold_timeout": resolved.decision_wait + resolved.hold_timeout})
        elif resolved.hold_timeout <= resolved.decision_wait:
            raise ConfigError(
                f"hold_timeout ({resolved.hold_timeout:g}s) must exceed decision_wait "
                f"({resolved.decision_wait:g}s) in the sidecar: agent spans are held until their trace "
                "has been quiet for decision_wait")
        if resolved.trace_ttl <= resolved.decision_wait:
            raise ConfigError(f"trace_ttl ({resolved.trace_ttl:g}s) must exceed decision_wait "
                              f"({resolved.decision_wait:g}s)")
        return resolved

    # --- life cycle ------------------------------------------------------------------------------

    def start(self) -> ServerAddresses:
        """Build the pipeline, bind the receivers and serve in background threads."""
        if self._started:
            raise RuntimeError("ToolScoreServer.start() called twice")
        self._started = True
        try:
            if self.queue_dir is not None:
                self._queue = DiskQueue(self.queue_dir, self.queue_max_bytes)
                dropped, spans = self._queue.trim_to_bound()
                if dropped:
                    self._undelivered(delivery.SPANS, delivery.QUEUE_FULL, spans)
                    logger.warning("otel-toolscore serve: %d requests (%d spans) dropped from the queue, oldest "
                                   "first, to fit queue_max_bytes", dropped, spans)
            self._build_pipeline()
            if self._queue is not None:
                # what a previous run accepted goes first; new requests are taken meanwhile
                self._replay_thread = threading.Thread(target=self._replay, name="otel-toolscore-replay",
                                                       daemon=True)
                self._replay_thread.start()
            grpc_port = http_port = None
            if self.grpc_port is not None:
                self._grpc_server, grpc_port = start_grpc(self, self.grpc_port)
            if self.http_port is not None:
                self._httpd, self._http_thread, http_port = start_http(self, self.http_port)
        except BaseException:
            self._teardown(deadline=time.monotonic() + 5.0)
            self._stopped.set()
            raise
        self.addresses = ServerAddresses(self.host, grpc_port, http_port)
        return self.addresses

    def _build_pipeline(self) -> None:
        # the app each run came from, on its events and score metrics (bounded: _app_service)
        self._apps = AppServices(self.settings.serve_max_app_services, 2 * self.settings.max_pending_traces)
        resource = self._resource
        if resource is None:
            named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
                "OTEL_RESOURCE_ATTRIBUTES", "")
            resource = Resource.create({} if named else {"service.name": "otel-toolscore"})
        meter_provider, logger_provider = self._meter_provider, self._logger_provider
        if meter_provider is None and self.settings.metrics:
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            assert self.upstream is not None
            # the metrics go through the same retrying delivery as the spans
            metric_exporter = RetryingMetricExporter(self.upstream.metric_exporter(),
                                                     self._retrier(delivery.METRIC_POINTS))
            meter_provider = MeterProvider(
                resource=resource, metric_readers=[PeriodicExportingMetricReader(metric_exporter)])
            self._own_providers.append(meter_provider)
        if logger_provider is None and self.settings.events:
            from opentelemetry.sdk._logs import LoggerProvider
            from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

            assert self.upstream is not None
            logger_provider = LoggerProvider(resource=resource)
            # evaluation records are retried as spans are; the queue may hold what a long outage
            # brings (the SDK's default, 2,048, would drop the oldest), and what enters it is
            # counted so that what a stop leaves in it is counted too
            log_exporter = RetryingLogExporter(self.upstream.log_exporter(), self._retrier(delivery.LOG_RECORDS),
                                               on_delivered=lambda n: self._count("log_records_delivered", n))
            logger_provider.add_log_record_processor(AppServiceLogProcessor(self._apps))
            logger_provider.add_log_record_processor(_CountingLogProcessor(self._count))
            logger_provider.add_log_record_processor(
                BatchLogRecordProcessor(log_exporter, max_queue_size=2 * self.max_queued_spans + 1024))
            self._own_providers.append(logger_provider)
        exporter = self._span_exporter
        if exporter is None:
            assert self.upstream is not None
            exporter = self.upstream.span_exporter()
        # A failed batch is retried until delivered (not dropped, as the SDK would): what was
        # answered 200 is kept; admission refuses new spans once the buffer is full.
        self._delivery = RetryingExporter(
            exporter, on_done=self._backlog.left,
            on_undelivered=lambda n: self._undelivered(
                delivery.SPANS, delivery.KEPT_ON_DISK if self._queue is not None else delivery.STOP_DEADLINE, n),
            on_delivered=self._spans_delivered if self._queue is not None else None)
        self._retriers.append(self._delivery.retrier)
        # The export queue holds twice what admission lets in: evaluation spans and held agent
        # spans enter it without admission, and must not make it drop app spans.
        batch = BatchSpanProcessor(self._delivery, max_queue_size=2 * self.max_queued_spans + 1024)
        self._downstream = admission.CountingProcessor(batch, self._backlog)
        self.processor = ToolScoreSpanProcessor(
            self._downstream, self._scorers, settings=self.settings,
            completion="quiet", meter_provider=meter_provider, logger_provider=logger_provider,
            run_metric_attributes=self._apps.metric_attributes,
        )
        if self.forward_signals:
            assert self.upstream is not None
            self._forwarder = Forwarder(self.upstream)

    def request_stop(self) -> None:
        """Ask ``serve_forever`` to return (thread- and signal-safe)."""
        self._stop_requested.set()

    def serve_forever(self, *, install_signal_handlers: bool = True,
                      on_started: Callable[[ServerAddresses], None] | None = None, stop_timeout: float = 30.0) -> None:
        """Start (if not yet), block until SIGTERM/SIGINT or ``request_stop()``, then stop gracefully."""
        previous: dict[int, Any] = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            def on_signal(signum: int, frame: Any) -> None:
                self._stop_requested.set()
                # A second signal acts as it normally would (stop now).
                signal.signal(signum, previous.get(signum) or signal.SIG_DFL)

            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, on_signal)
        try:
            addresses = self.addresses or self.start()
            if on_started is not None:
                on_started(addresses)
            while not self._stop_requested.wait(0.5):
                pass
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
            self.stop(stop_timeout)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop accepting, let requests in flight finish, then flush and shut down the pipeline.

        Everything accepted is exported (held agent spans and pending traces are scored first).
        Returns False when something did not finish within ``timeout`` seconds. Idempotent.
        """
        if self._stopped.is_set() or not self._started:
            return True
        deadline = time.monotonic() + timeout
        ok = self._teardown(deadline)
        self._stopped.set()
        self._stop_requested.set()
        logger.info("otel-toolscore serve stopped: %s", dict(self.stats))
        return ok

    def _teardown(self, deadline: float) -> bool:
        with self._state:
            self._stopping = True
        ok = True
        grpc_done = None
        give_up = self._bound_delivery(deadline)
        if self._grpc_server is not None:
            # New RPCs are refused now; those in flight get until the deadline.
            grpc_done = self._grpc_server.stop(grace=max(0.0, (deadline - time.monotonic()) / 2))
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        with self._state:
            while self._inflight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    ok = False
                    break
                self._state.wait(min(remaining, 0.1))
        if grpc_done is not None:
            ok = grpc_done.wait(max(0.0, deadline - time.monotonic())) and ok
        if self._replay_thread is not None:  # it sees _stopping and hands nothing more to the processor
            self._replay_thread.join(max(0.0, deadline - time.monotonic()))
        if self.processor is not None:
            remaining_ms = int(max(0.0, deadline - time.monotonic()) * 1000)
            ok = self.processor.force_flush(remaining_ms) and ok
            self.processor.shutdown()
        for provider in self._own_providers:
            try:
                remaining_ms = int(max(0.0, deadline - time.monotonic()) * 1000)
                if "timeout_millis" in inspect.signature(provider.shutdown).parameters:
                    provider.shutdown(timeout_millis=max(remaining_ms, 1))
                else:
                    provider.shutdown()
            except Exception:  # a failing exporter must not keep the others from flushing
                logger.warning("otel-toolscore: shutting down %s failed", type(provider).__name__, exc_info=True)
                ok = False
        if give_up is not None:
            give_up.cancel()
        with self._stats_lock:
            left = (self.stats["log_records_emitted"] - self.stats["log_records_delivered"]
                    - self.stats["log_records_undelivered"])
        if left > 0:
            self._undelivered(delivery.LOG_RECORDS, delivery.LEFT_IN_QUEUE, left)
        if self.undelivered:
            ok = False
            logger.warning("otel-toolscore serve: not delivered to the upstream before the stop deadline: %s",
                           ", ".join(f"{n} {signal_name} ({reason})"
                                     for (signal_name, reason), n in sorted(self.undelivered.items())))
        if self._forwarder is not None:
            self._forwarder.close()
        if self._queue is not None:
            self._queue.close()
        return ok

    def _bound_delivery(self, deadline: float) -> threading.Timer | None:
        """Retrying delivery must not outlast the stop deadline: at the deadline what is left is
        counted as undelivered instead of retried. A timer, because the SDK's batch processor
        exports inside force_flush and shutdown whatever timeout they are given."""
        if not self._retriers:
            return None

        def give_up() -> None:
            for retrier in self._retriers:
                retrier.give_up()

        timer = threading.Timer(max(0.0, deadline - time.monotonic()), give_up)
        timer.daemon = True
        timer.start()
        return timer

    def __enter__(self) -> ToolScoreServer:
        if not self._started:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- request handling shared by both transports ------------------------------------------------

    def _count(self, key: str, n: int = 1) -> None:
        with self._stats_lock:
            self.stats[key] += n

    def _undelivered(self, signal_name: str, reason: str, n: int) -> None:
        with self._stats_lock:
            self.undelivered[signal_name, reason] += n
            self.stats[f"{signal_name}_undelivered"] += n

    def _retrier(self, signal_name: str) -> Retrier:
        retrier = Retrier(signal_name, self._undelivered)
        self._retriers.append(retrier)
        return retrier

    @property
    def receiving(self) -> bool:
        """Started, and not stopping: requests are taken."""
        with self._state:
            return self.addresses is not None and not self._stopping

    def queued_spans(self) -> int:
        """Spans accepted and waiting for the upstream."""
        return self._backlog.queued()

    def queue_room_bytes(self) -> int | None:
        """Bytes the on-disk queue can still take; None without one."""
        queue = self._queue
        return None if queue is None else queue.max_bytes - queue.used_bytes

    def upstream_failing(self) -> bool:
        """The latest export of some signal to the upstream failed, or is stuck."""
        return any(retrier.failing for retrier in self._retriers)

    def readiness(self) -> Readiness:
        """Ready to take requests (``/readyz``, the gRPC health service): ``_health``."""
        return readiness(self)

    def undelivered_total(self) -> int:
        """Everything accepted or made here that a stop left undelivered and lost, all signals
        (what stays in the on-disk queue is not lost: a restart delivers it)."""
        with self._stats_lock:
            return sum(n for (_, reason), n in self.undelivered.items() if reason != delivery.KEPT_ON_DISK)

    # --- the on-disk queue -------------------------------------------------------------------------

    def _own(self, request_id: int, spans: Sequence[Any]) -> None:
        with self._owners_lock:
            for span in spans:
                context = span.context
                self._owners.setdefault((context.trace_id, context.span_id), deque()).append(request_id)
            self._outstanding[request_id] = self._outstanding.get(request_id, 0) + len(spans)

    def _spans_delivered(self, spans: Sequence[Any]) -> None:
        """A batch reached the upstream: record its spans on disk, remove the requests now done,
        and remember the traces whose scored agent span or evaluation span went (scored: not
        again after a restart)."""
        assert self._queue is not None
        rows: list[tuple[int, int, int]] = []
        finished: list[int] = []
        scored: set[int] = set()
        with self._owners_lock:
            for span in spans:
                context = span.context
                key = (context.trace_id, context.span_id)
                owners = self._owners.get(key)
                if owners:
                    request_id = owners.popleft()
                    if not owners:
                        del self._owners[key]
                    rows.append((request_id, *key))
                    self._outstanding[request_id] -= 1
                    if not self._outstanding[request_id]:
                        del self._outstanding[request_id]
                        finished.append(request_id)
                    # (the agent span leaves with its scores and this mark: evaluation spans
                    # repeat them only when asked to, docs/emitted.md)
                    if (span.attributes or {}).get(TOOLSCORE_SCORED) is True:
                        scored.add(context.trace_id)
                elif getattr(span.instrumentation_scope, "name", None) == INSTRUMENTATION_SCOPE:
                    scored.add(context.trace_id)
        try:
            if scored:
                self._queue.mark_scored(scored)
            if rows or finished:
                self._queue.delivered(rows, finished)
        except sqlite3.Error:  # delivered all the same; a restart may send these spans again
            logger.warning("otel-toolscore serve: could not record delivered spans in the queue", exc_info=True)

    def _replay(self) -> None:
        """Hand what is on disk to the pipeline again, skipping spans already delivered; spans of
        a trace already scored bypass scoring (forwarded as they are)."""
        queue, processor = self._queue, self.processor
        assert queue is not None and processor is not None
        for stored in queue.stored():
            if self._stopping:
                return
            try:
                decoded = decode_traces(stored.body, stored.is_json)
            except Rejection:  # stored only after it decoded; a corrupt row is dropped, counted
                self._undelivered(delivery.SPANS, "unreadable_in_queue", 1)
                queue.delivered([], [stored.id])
                continue
            spans = [s for s in decoded.spans if (s.context.trace_id, s.context.span_id) not in stored.delivered]
            if not spans:
                queue.delivered([], [stored.id])
                continue
            while self._backlog.try_reserve(len(spans)) is not None:  # wait for room, as a sender would
                if self._stop_requested.wait(0.05) or self._stopping:
                    return
            try:
                self._own(stored.id, spans)
                if self._apps is not None:
                    self._apps.note(spans)
                scored = {t for t in {s.context.trace_id for s in spans} if queue.scored(t)}
                fresh = [s for s in spans if s.context.trace_id not in scored]
                for span in spans:
                    if span.context.trace_id in scored:
                        self._downstream.on_end(span)
                if fresh:
                    processor.on_end_many(fresh)
            finally:
                self._backlog.release(len(spans))
            self._count("spans_replayed", len(spans))

    @contextmanager
    def _request(self) -> Iterator[None]:
        """Count a request in flight; refuse it once stopping has begun."""
        with self._state:
            if self._stopping:
                raise Rejection(503, "UNAVAILABLE", "the server is shutting down", RETRY_AFTER_S)
            self._inflight += 1
        try:
            yield
        finally:
            with self._state:
                self._inflight -= 1
                if not self._inflight:
                    self._state.notify_all()

    def authorized(self, header: str | None) -> bool:
        if self._token is None:
            return True
        if not header:
            return False
        scheme, _, credentials = header.strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), self._token)

    def ingest_traces(self, body: bytes, is_json: bool) -> Reply:
        """Decode, admit and hand spans to the processor; ``Rejection`` when refused as a whole."""
        decoded = decode_traces(body, is_json)
        n = len(decoded.spans)
        self._count("requests", 1)
        if n > self.max_queued_spans:
            raise Rejection(413, "INVALID_ARGUMENT",
                            f"the request holds {n} spans, more than max_queued_spans ({self.max_queued_spans})")
        if n:
            refused = admission.refusal(n, self.processor, self._backlog, self._delivery)
            if refused is not None:
                self._count("throttled", 1)
                raise refused
            assert self.processor is not None
            try:
                if self._queue is not None:
                    # on disk before the 200: a kill -9 from here on loses nothing acknowledged
                    request_id = self._queue.append(body, is_json, n)
                    if request_id is None:
                        self._count("throttled", 1)
                        self._count("queue_full", 1)
                        raise Rejection(503, "UNAVAILABLE", f"busy, retry later: the on-disk queue is full "
                                        f"(queue_max_bytes {self._queue.max_bytes})",
                                        self._delivery.retry_after_s() if self._delivery else RETRY_AFTER_S)
                    self._own(request_id, decoded.spans)
                if self._apps is not None:
                    self._apps.note(decoded.spans)
                # the request's spans in one call: one lock and one pass, not one per span
                self.processor.on_end_many(decoded.spans)
            finally:
                self._backlog.release(n)
        self._count("spans", n)
        self._count("spans_rejected", decoded.rejected)
        return traces_reply(decoded, is_json)

    def forward(self, signal_name: str, body: bytes, is_json: bool) -> Reply:
        """Check that a logs/metrics request is what it claims, then pass it upstream."""
        assert self._forwarder is not None
        check_request(signal_name, body, is_json)
        self._count(f"{signal_name}_forwarded", 1)
        return self._forwarder.forward(signal_name, body, is_json)


class _CountingLogProcessor(LogRecordHook):
    """Counts the log records ``serve`` emits (``log_records_emitted``): with those delivered and
    those given up, what a stop left in the export queue is known."""

    def __init__(self, count: Callable[[str, int], None]) -> None:
        self._count = count

    def on_emit(self, log_record: Any) -> None:
        self._count("log_records_emitted", 1)
