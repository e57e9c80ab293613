"""``serve --queue-dir`` (issue 29): every accepted request is on disk before its 200, so a
kill -9 of a real ``otel-toolscore serve`` mid-stream, then a restart, loses no acknowledged
span and sends none twice, and no run is scored twice; a full queue pushes back, and what a
smaller bound drops at restart is counted. Loopback only; the upstream refuses until told."""

from __future__ import annotations

import http.client
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_toolscore.runtime.serve import ToolScoreServer
from otel_toolscore.runtime.serve._disk_queue import DiskQueue
from tests.support.env import without_otel
from tests.support.otlp_sink import PB, OtlpSink, Received
from tests.support.spans import TOOLSCORE_SCOPE, pb_body, plain_spans, weather_run
from tests.support.timing import wait_for

pytestmark = pytest.mark.usefixtures("clean_otel_env")


class Switch:
    """The upstream's answers: 503 until ``recover()``."""

    def __init__(self) -> None:
        self.recovered = threading.Event()

    def __call__(self, request: Received) -> int:
        return 200 if self.recovered.is_set() else 503

    def recover(self) -> None:
        self.recovered.set()


def post(netloc: str, body: bytes) -> int:
    conn = http.client.HTTPConnection(netloc, timeout=10)
    try:
        conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": PB})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except OSError:
        return 0  # not listening (killed): not acknowledged
    finally:
        conn.close()


def runs(n: int) -> list[Any]:
    """The spans of n weather-bot runs, one trace each, as the app's SDK ended them."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for _ in range(n):
        weather_run(provider.get_tracer("weather"))
    return list(memory.get_finished_spans())


def keys(spans: list[Any]) -> list[tuple[int, int]]:
    return [(s.context.trace_id, s.context.span_id) for s in spans]


def start_serve(upstream: OtlpSink, queue: Path, **env_extra: str) -> tuple[subprocess.Popen[str], str]:
    env = without_otel(OTEL_BSP_SCHEDULE_DELAY="100", OTEL_BLRP_SCHEDULE_DELAY="100", OTEL_EXPORTER_OTLP_TIMEOUT="1",
                       **env_extra)
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_toolscore.cli", "serve", "--no-grpc", "--http-port", "0", "--upstream",
         upstream.url, "--decision-wait", "0.3", "--queue-dir", str(queue), "--stop-timeout", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "OTLP/HTTP on http://" in line, proc.stderr.read() if proc.stderr else line
    return proc, urlsplit(line.strip().rsplit(" ", 1)[-1]).netloc


@pytest.mark.parametrize("evaluation_spans", ["true", "unattached"])
def test_kill_9_mid_stream_then_restart_loses_no_acknowledged_span_and_scores_no_run_twice(
        tmp_path: Path, evaluation_spans: str) -> None:
    # "unattached" (the default): a run is marked scored on disk by its scored agent span's
    # delivery; "true": by its evaluation spans', which also count the scores given
    outputs = {"OTEL_TOOLSCORE_EVALUATION_SPANS": evaluation_spans}
    switch = Switch()
    upstream = OtlpSink(answer=switch)
    agent_spans = runs(4)
    # 40 requests: 10 plain spans each, and every tenth the spans of one agent run
    requests = [pb_body(plain_spans(10)) for _ in range(36)]
    run_traces = sorted({s.context.trace_id for s in agent_spans})
    for i, trace in enumerate(run_traces):
        requests.insert(10 * i + 5, pb_body([s for s in agent_spans if s.context.trace_id == trace]))
    acknowledged: list[bytes] = []
    first, netloc = start_serve(upstream, tmp_path, **outputs)
    try:
        for body in requests[:20]:
            assert post(netloc, body) == 200
            acknowledged.append(body)
        assert wait_for(lambda: upstream.refused >= 2, timeout=30)  # the runs were scored, exports failing
        first.kill()  # kill -9, mid-stream
        first.wait(30)
        assert post(netloc, requests[20]) == 0  # gone: nothing more is acknowledged by it
        second, netloc = start_serve(upstream, tmp_path, **outputs)
        switch.recover()
        for body in requests[20:]:
            assert post(netloc, body) == 200
            acknowledged.append(body)
        from otel_toolscore.ingest import load_otlp

        sent = [k for body in acknowledged for k in keys(load_otlp(body).spans)]
        assert wait_for(lambda: set(sent) <= set(upstream.span_ids()), timeout=60)
        second.send_signal(signal.SIGTERM)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 0, err
    finally:
        for proc in (first, locals().get("second")):
            if proc is not None and proc.poll() is None:
                proc.kill()
        upstream.stop()
    delivered = Counter(upstream.span_ids())
    assert len(sent) == 360 + len(agent_spans)
    assert {k: delivered[k] for k in sent} == {k: 1 for k in sent}  # 0 lost, 0 twice
    # every run scored, its agent span out once with its scores
    agents = [s for s in upstream.spans() if s.name.startswith("invoke_agent")]
    assert sorted(s.context.trace_id for s in agents) == run_traces
    assert all(s.attributes.get("toolscore.scored") is True for s in agents)
    evaluations = Counter((s.context.trace_id, s.name) for s in upstream.spans()
                          if s.instrumentation_scope is not None and s.instrumentation_scope.name == TOOLSCORE_SCOPE)
    # each run scored once: no run's evaluation event twice (events are kept in memory only: a
    # kill -9 may lose some, never repeat them unless the run is scored again)
    agent_ids = {s.context.span_id for s in agents}
    events = Counter((r.trace_id, next(kv.value.string_value for kv in r.attributes if kv.key == "gen_ai.evaluation.name"))
                     for r in upstream.log_records()
                     if r.event_name == "gen_ai.evaluation.result" and int.from_bytes(r.span_id, "big") in agent_ids)
    assert max(events.values(), default=1) == 1
    if evaluation_spans == "true":  # one evaluation span per (run, scorer), every run scored
        assert {trace for trace, _ in evaluations} == set(run_traces)
        assert set(evaluations.values()) == {1}
    else:
        assert not evaluations


def test_a_run_scored_before_a_crash_is_forwarded_from_the_queue_but_not_scored_again(tmp_path: Path) -> None:
    spans = runs(2)
    scored_trace, other_trace = sorted({s.context.trace_id for s in spans})
    queue = DiskQueue(tmp_path, 1 << 20)  # what a crashed serve left: both runs, one of them scored
    for trace in (scored_trace, other_trace):
        mine = [s for s in spans if s.context.trace_id == trace]
        assert queue.append(pb_body(mine), False, len(mine)) is not None
    queue.mark_scored([scored_trace])
    queue.close()
    upstream = OtlpSink()
    server = ToolScoreServer(upstream.url, http_port=0, grpc_port=None, decision_wait=0.2, metrics=False,
                             events=False, queue_dir=tmp_path, evaluation_spans=True)  # (they say which runs it scored)
    try:
        server.start()
        assert wait_for(lambda: server.stats["spans_replayed"] == len(spans))
        assert server.stop(30)
    finally:
        server.stop(5)
        upstream.stop()
    delivered = Counter(upstream.span_ids())
    assert {k: delivered[k] for k in keys(spans)} == {k: 1 for k in keys(spans)}
    evaluated = {s.context.trace_id for s in upstream.spans()
                 if s.instrumentation_scope is not None and s.instrumentation_scope.name == TOOLSCORE_SCOPE}
    assert evaluated == {other_trace}
    assert not list(DiskQueue(tmp_path, 1 << 20).stored())  # everything delivered: nothing left


def test_a_delivered_scored_agent_span_marks_its_run_scored_on_disk(tmp_path: Path) -> None:
    """With the default outputs (no evaluation span for the scores the agent span carries), the
    scored agent span's delivery is what marks its run scored: a restart does not score it again."""
    spans, plain = runs(1), plain_spans(3)
    (trace,) = {s.context.trace_id for s in spans}
    upstream = OtlpSink()
    server = ToolScoreServer(upstream.url, http_port=0, grpc_port=None, decision_wait=0.2, metrics=False,
                             events=False, queue_dir=tmp_path)
    try:
        netloc = urlsplit(server.start().http_endpoint or "").netloc
        assert post(netloc, pb_body(spans)) == 200 and post(netloc, pb_body(plain)) == 200
        assert wait_for(lambda: any(s.attributes.get("toolscore.scored") is True for s in upstream.spans()))
        assert server.stop(30)
    finally:
        server.stop(5)
        upstream.stop()
    assert not any(s.name.startswith("evaluation ") for s in upstream.spans())
    queue = DiskQueue(tmp_path, 1 << 20)
    assert queue.scored(trace)
    assert not any(queue.scored(s.context.trace_id) for s in plain)
    queue.close()


def test_a_full_queue_pushes_back_and_a_smaller_bound_at_restart_drops_the_oldest_counted(tmp_path: Path) -> None:
    switch = Switch()
    upstream = OtlpSink(answer=switch)
    body = pb_body(plain_spans(5))
    server = ToolScoreServer(upstream.url, http_port=0, grpc_port=None, decision_wait=0.2, metrics=False,
                             events=False, queue_dir=tmp_path, queue_max_bytes=4 * len(body) + 100)
    statuses = []
    try:
        netloc = urlsplit(server.start().http_endpoint or "").netloc
        statuses = [post(netloc, pb_body(plain_spans(5))) for _ in range(6)]
        assert server.stop(2) is False  # the upstream never took them: they stay on disk
    finally:
        server.stop(5)
    assert statuses == [200] * 4 + [503] * 2  # room for four, then pushback
    assert server.stats["queue_full"] == 2
    assert server.undelivered_total() == 0  # not lost: on disk, counted as kept
    assert server.undelivered[("spans", "kept_on_disk")] == 20
    switch.recover()
    again = ToolScoreServer(upstream.url, http_port=0, grpc_port=None, decision_wait=0.2, metrics=False,
                            events=False, queue_dir=tmp_path, queue_max_bytes=2 * len(body) + 100)
    try:
        again.start()
        assert wait_for(lambda: again.stats["spans_replayed"] == 10)
        assert wait_for(lambda: len(upstream.span_ids()) == 10)
        assert again.stop(30) is False  # it had dropped accepted spans: the stop says so
    finally:
        again.stop(5)
        upstream.stop()
    assert again.undelivered[("spans", "queue_full")] == 10  # the two oldest requests, counted
    assert len(upstream.span_ids()) == 10
