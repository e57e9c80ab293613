"""Sidecar ingest: spans per second through ``otel-toolscore serve`` (``ToolScoreServer``), received
over OTLP gRPC or HTTP (protobuf), scored and forwarded, on one core.

The server runs in its own process pinned to one CPU (``sched_setaffinity``), with its span
exporter replaced by a counting exporter that builds the upstream request body as the real
exporter does (``--forward-encoding``: ``wire``, ``ingest._wire.encode_request``, what ``serve``
sends; ``sdk``, the SDK's ``encode_spans``, what it sent before; ``auto``, wire where this
checkout has it; ``none``, nothing) but sends nothing, and events/metrics into the providers
chosen by ``--telemetry``. The client, pinned to the other CPU, sends pre-encoded
``ExportTraceServiceRequest``s (10-span GenAI agent runs, ``workload.genai_run``, every trace id
distinct) from ``--clients`` threads, and retries a request the server refuses as busy (HTTP 503
/ gRPC UNAVAILABLE) after a short pause. Figures: accepted spans per second while sending; and
spans per second until every span (plus the evaluation spans) has been exported upstream, which
includes the last traces' ``decision_wait``; and spans per CPU second of the server process
(spans/s/core, the issue's measure). The agent spans that came out carrying
``toolscore.*`` attributes are counted to show the runs were scored. While it waits the client
polls the server's progress only (counts); the server's CPU by thread, which costs it ~1 ms to
read, is read once before and once after (it was read at every poll, which the server's CPU
figures then included: up to ~8 µs per span in the main thread). The server's garbage
collector is tuned as the ``serve`` command tunes it (``--server-gc own``) or left at Python's
settings (``--server-gc default``, as in an app that embeds ``ToolScoreServer``).

    .venv/bin/python -m benchmarks sidecar [--quick] [--protocols grpc,http] [--server-gc own|default] [--queue]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from benchmarks.common import child_env, emit_json, machine, telemetry_providers
from benchmarks.workload import genai_run, readable_run


def _body_encoder(choice: str) -> Any:
    """What turns an exported batch into the request body, as the upstream exporter would."""
    if choice in ("auto", "wire"):
        try:
            from otel_toolscore.ingest._wire import encode_request

            return encode_request
        except ImportError:  # an older checkout: its exporter encoded with the SDK
            if choice == "wire":
                raise
    if choice == "none":
        return None
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return lambda spans: encode_spans(spans).SerializePartialToString()


class _Counting(SpanExporter):
    def __init__(self, encode: Any = None) -> None:
        self._encode = encode
        self.spans = 0  # the app's spans (evaluation spans are counted apart)
        self.evaluations = 0
        self.scored = 0  # agent spans that came out carrying toolscore.* attributes
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._encode is not None:
            self._encode(spans)
        evaluations = sum(1 for s in spans if s.instrumentation_scope is not None
                          and s.instrumentation_scope.name == "otel_toolscore")
        scored = sum(1 for s in spans if s.parent is None and "toolscore.tool_call_validation.label" in (s.attributes or {}))
        with self._lock:
            self.spans += len(spans) - evaluations
            self.evaluations += evaluations
            self.scored += scored
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _thread_cpu() -> dict[str, float]:
    """CPU seconds per thread of this process, grouped by the Python thread's name without its
    number (gRPC's own C threads: ``(native)``), where the system tells (Linux ``/proc``)."""
    names = {t.native_id: re.sub(r"[-_]?\d+(?:_\d+)?$", "", t.name) for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out: dict[str, float] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = names.get(int(tid), "(native)")
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def serve(cpu: int, telemetry: str, decision_wait: float, forward_encoding: str, sample_rate: float,
          own_gc: bool = True, queue: bool = False) -> None:
    """The server process: start, print the ports, answer ``stats`` lines on stdin."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    from otel_toolscore.runtime.serve import ToolScoreServer

    exporter = _Counting(_body_encoder(forward_encoding))
    mp, lp, _ = telemetry_providers(telemetry)
    extra: dict[str, Any] = {}
    if queue:  # --queue: the on-disk queue in a fresh directory (issue 29)
        import tempfile

        extra["queue_dir"] = tempfile.mkdtemp(prefix="toolscore-bench-queue-")
    server = ToolScoreServer(span_exporter=exporter, meter_provider=mp, logger_provider=lp, grpc_port=0,
                             http_port=0, decision_wait=decision_wait, default_sample_rate=sample_rate, **extra)
    if own_gc:  # as the `serve` command does (older checkouts: nothing to do)
        try:
            from otel_toolscore.runtime._own_process import tune_gc
        except ImportError:
            pass
        else:
            tune_gc()
    addresses = server.start()
    print(json.dumps({"grpc": addresses.grpc_port, "http": addresses.http_port}), flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command in ("stats", "progress"):
            proc = server.processor
            # items submitted and not yet scored (older checkouts: a busy flag)
            busy = proc is not None and getattr(proc, "_outstanding", getattr(proc, "_busy", 0))
            idle = proc is None or (not proc._pending and proc._queue.empty() and not busy)
            answer: dict[str, Any] = {"exported": exporter.spans, "scored": exporter.scored, "idle": idle}
            if command == "stats":  # reading every thread's CPU costs ~1 ms: only before and after
                answer.update({"server": dict(server.stats), "processor": dict(proc.stats) if proc else {},
                               "cpu_s": time.process_time(), "threads": _thread_cpu()})
            print(json.dumps(answer), flush=True)
        elif command == "stop":
            break
    server.stop(30.0)


def encode(n_requests: int, runs_per_request: int, seed0: int) -> list[bytes]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    pool = [genai_run(10, seed=i) for i in range(200)]
    out = []
    k = seed0
    for _ in range(n_requests):
        spans: list[ReadableSpan] = []
        for _ in range(runs_per_request):
            k += 1
            spans.extend(readable_run(pool[k % len(pool)], trace_id=(k << 32) | 0x1234))
        out.append(encode_spans(spans).SerializeToString())
    return out


class _Client:
    def __init__(self, protocol: str, port: int) -> None:
        self.protocol = protocol
        self.port = port
        self.retries = 0
        if protocol == "grpc":
            import grpc

            self._channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[
                ("grpc.max_send_message_length", 64 * 1024 * 1024)])
            self._call = self._channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")

    def send(self, body: bytes) -> None:
        while True:
            if self.protocol == "grpc":
                import grpc

                try:
                    self._call(body, timeout=60)
                    return
                except grpc.RpcError as exc:
                    if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED):
                        raise
            else:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                try:
                    conn.request("POST", "/v1/traces", body=body,
                                 headers={"Content-Type": "application/x-protobuf"})
                    resp = conn.getresponse()
                    resp.read()
                    if resp.status == 200:
                        return
                    if resp.status != 503:
                        raise RuntimeError(f"HTTP {resp.status}")
                finally:
                    conn.close()
            self.retries += 1
            time.sleep(0.02)


def measure(protocol: str, n_requests: int, runs_per_request: int, clients: int, telemetry: str,
            decision_wait: float, server_cpu: int, client_cpu: int, rate: float | None,
            forward_encoding: str = "auto", sample_rate: float = 1.0, server_gc: str = "own",
            queue: bool = False) -> dict[str, Any]:
    """Send every request once (``rate``: offered spans/s, paced; None: as fast as accepted)."""
    server = subprocess.Popen([sys.executable, "-m", "benchmarks.sidecar", "--_serve", str(server_cpu),
                               "--telemetry", telemetry, "--decision-wait", str(decision_wait),
                               "--forward-encoding", forward_encoding, "--sample-rate", str(sample_rate),
                               "--server-gc", server_gc, *(["--queue"] if queue else [])],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env())
    assert server.stdin is not None and server.stdout is not None
    try:
        ports = json.loads(server.stdout.readline())

        def stats(command: str = "stats") -> dict[str, Any]:
            server.stdin.write(f"{command}\n")  # type: ignore[union-attr]
            server.stdin.flush()  # type: ignore[union-attr]
            return json.loads(server.stdout.readline())  # type: ignore[union-attr]

        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {client_cpu})
        bodies = encode(n_requests, runs_per_request, seed0=1_000_000 if protocol == "grpc" else 2_000_000)
        total_spans = n_requests * runs_per_request * 10
        warm = _Client(protocol, ports[protocol])
        for body in encode(2, runs_per_request, seed0=3_000_000 + (protocol == "grpc")):
            warm.send(body)
        deadline = time.perf_counter() + decision_wait + 60
        while True:  # the warm-up's runs scored and exported before the clock starts
            ready = stats("progress")
            warm_scored = ready["scored"] >= 2 * runs_per_request or not sample_rate
            if (ready["exported"] >= 2 * runs_per_request * 10 and warm_scored) or time.perf_counter() > deadline:
                break
            time.sleep(0.05)
        base = stats()
        work = list(range(len(bodies)))
        lock = threading.Lock()
        workers = [_Client(protocol, ports[protocol]) for _ in range(clients)]
        spans_per_request = runs_per_request * 10
        interval = spans_per_request / rate if rate else 0.0

        def loop(client: _Client) -> None:
            while True:
                with lock:
                    if not work:
                        return
                    i = work.pop()
                    k = len(bodies) - 1 - len(work)  # requests handed out so far, this one included
                if interval:
                    wait = t0 + k * interval - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                client.send(bodies[i])

        t0 = time.perf_counter()
        threads = [threading.Thread(target=loop, args=(c,)) for c in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        sent_s = time.perf_counter() - t0
        expected = base["exported"] + total_spans
        while True:  # until every span is out and the processor has nothing left to score
            s = stats("progress")
            if s["exported"] >= expected and s["idle"]:
                break
            if time.perf_counter() - t0 > sent_s + 120:
                break
            time.sleep(0.05)
        done_s = time.perf_counter() - t0
        s = stats()
        server.stdin.write("stop\n")
        server.stdin.flush()
        server.wait(60)
    finally:
        if server.poll() is None:
            server.kill()
    return {
        "protocol": protocol, "offered_spans_per_s": rate, "spans": total_spans, "requests": n_requests, "spans_per_request": runs_per_request * 10,
        "clients": clients, "accept_s": sent_s, "accepted_spans_per_s": total_spans / sent_s,
        "forwarded_s": done_s, "forwarded_spans_per_s": total_spans / done_s,
        "exported": s["exported"] - base["exported"], "runs": n_requests * runs_per_request,
        "runs_scored": s["scored"] - base["scored"],
        "runs_scored_share": (s["scored"] - base["scored"]) / (n_requests * runs_per_request),
        "busy_retries": sum(c.retries for c in workers),
        "server_cpu_s": s["cpu_s"] - base["cpu_s"],
        "spans_per_server_cpu_s": total_spans / max(1e-9, s["cpu_s"] - base["cpu_s"]),
        # server CPU per span by thread (the receiver's threads decode and admit, the worker scores,
        # the batch processor's thread encodes and exports): what the sidecar spends where
        "server_us_per_span_by_thread": {
            name: round((cpu - base["threads"].get(name, 0.0)) / total_spans * 1e6, 1)
            for name, cpu in sorted(s["threads"].items())},
        "server_stats": s["server"], "processor_stats": s["processor"],
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--protocols", default="grpc,http")
    ap.add_argument("--rates", default="2000,5000,20000,max",
                    help="offered spans/s, paced by the client; max: as fast as the server accepts")
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--runs-per-request", type=int, default=50, help="10-span runs per request (500 spans)")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--telemetry", choices=("sdk", "noop"), default="sdk")
    ap.add_argument("--decision-wait", type=float, default=0.5)
    ap.add_argument("--forward-encoding", choices=("auto", "wire", "sdk", "none"), default="auto")
    ap.add_argument("--sample-rate", type=float, default=1.0,
                    help="default_sample_rate; 0: nothing scored, the cost of receiving and forwarding alone")
    ap.add_argument("--server-gc", choices=("own", "default"), default="own",
                    help="own: the collector tuned as the `serve` command tunes it; default: Python's settings")
    ap.add_argument("--queue", action="store_true", help="the server keeps accepted requests on disk (--queue-dir)")
    ap.add_argument("--_serve", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._serve is not None:
        serve(args._serve, args.telemetry, args.decision_wait, args.forward_encoding, args.sample_rate,
              own_gc=args.server_gc == "own", queue=args.queue)
        return {}
    n_requests = args.requests or (40 if args.quick else 200)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0, 1]
    server_cpu, client_cpu = cpus[0], cpus[-1]
    out: dict[str, Any] = {"benchmark": "sidecar", "machine": machine(), "forward_encoding": args.forward_encoding,
                           "server_gc": args.server_gc, "queue": args.queue,
                           "sample_rate": args.sample_rate, "telemetry": telemetry_providers(args.telemetry)[2],
                           "server_cpu": server_cpu, "client_cpu": client_cpu, "results": []}
    for protocol in args.protocols.split(","):
        for rate_text in args.rates.split(","):
            rate = None if rate_text == "max" else float(rate_text)
            # a paced run lasts about as long whatever the rate: requests ∝ rate, 2–10 s of sending
            n = n_requests if rate is None else max(4, min(n_requests, int(rate * (2 if args.quick else 6)
                                                                               / (args.runs_per_request * 10))))
            r = measure(protocol, n, args.runs_per_request, args.clients, args.telemetry, args.decision_wait,
                        server_cpu, client_cpu, rate, args.forward_encoding, args.sample_rate, args.server_gc,
                        args.queue)
            out["results"].append(r)
            print(f"{protocol:4s} offered {rate_text:>6s} spans/s: {r['spans']} spans, accepted "
                  f"{r['accepted_spans_per_s']:.0f} spans/s, all forwarded after {r['forwarded_s']:.1f} s "
                  f"({r['forwarded_spans_per_s']:.0f} spans/s); runs scored {r['runs_scored']}/{r['runs']} "
                  f"({r['runs_scored_share']:.0%}); busy retries {r['busy_retries']}; server CPU "
                  f"{r['server_cpu_s']:.1f} s ({r['spans_per_server_cpu_s']:.0f} spans/s/core); us/span by thread {r['server_us_per_span_by_thread']}; {r['processor_stats']}", file=sys.stderr)
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
