"""``serve``'s health (issue 29): ``GET /healthz`` (live), ``GET /readyz`` (ready: receiving, the
buffer below its bound), and grpc.health.v1 ``Check``. Real HTTP and gRPC on loopback; the gRPC
messages are built and read by protobuf itself, from the health protocol's own definition, not
by the hand encoding the server uses."""

from __future__ import annotations

import http.client
import json
import threading
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from otel_toolscore.runtime.serve import ToolScoreServer
from tests.support.otlp_sink import PB, OtlpSink
from tests.support.spans import pb_body, plain_spans
from tests.support.timing import wait_for

pytestmark = pytest.mark.usefixtures("clean_otel_env")

CHECK = "/grpc.health.v1.Health/Check"
TRACES = "opentelemetry.proto.collector.trace.v1.TraceService"


def _health_messages() -> tuple[Any, Any]:
    """HealthCheckRequest and HealthCheckResponse as grpc/health/v1/health.proto defines them."""
    proto = descriptor_pb2.FileDescriptorProto(name="toolscore_test_health.proto", package="grpc.health.v1",
                                               syntax="proto3")
    request = proto.message_type.add(name="HealthCheckRequest")
    request.field.add(name="service", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    response = proto.message_type.add(name="HealthCheckResponse")
    status = response.enum_type.add(name="ServingStatus")
    for number, name in enumerate(("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")):
        status.value.add(name=name, number=number)
    response.field.add(name="status", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_ENUM,
                       type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
                       label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")))


Request, Response = _health_messages()


def grpc_check(endpoint: str, service: str = "") -> str:
    """The status name ``Check`` answers, or the gRPC code's name when it fails."""
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(CHECK, request_serializer=Request.SerializeToString,
                                   response_deserializer=Response.FromString)
        try:
            answer = call(Request(service=service), timeout=10)
        except grpc.RpcError as exc:
            return str(exc.code().name)
    return str(Response.DESCRIPTOR.enum_types_by_name["ServingStatus"].values_by_number[answer.status].name)


def get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def post_spans(port: int, n: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/v1/traces", body=pb_body(plain_spans(n)), headers={"Content-Type": PB})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def test_a_healthy_server_is_live_and_ready_on_both_transports_without_a_token() -> None:
    upstream = OtlpSink()
    server = ToolScoreServer(upstream.url, http_port=0, grpc_port=0, auth_token="s3cret", decision_wait=0.2,
                             metrics=False, events=False)
    try:
        addresses = server.start()
        assert addresses.http_port is not None and addresses.grpc_endpoint is not None
        assert get(addresses.http_port, "/healthz") == (200, b"ok\n")
        status, body = get(addresses.http_port, "/readyz")
        assert status == 200
        state = json.loads(body)
        assert state["ready"] is True and state["reasons"] == [] and state["max_queued_spans"] == 20_000
        assert grpc_check(addresses.grpc_endpoint) == "SERVING"
        assert grpc_check(addresses.grpc_endpoint, TRACES) == "SERVING"
        assert grpc_check(addresses.grpc_endpoint, "no.such.Service") == "NOT_FOUND"
        assert get(addresses.http_port, "/metrics")[0] == 404  # no other GET path
        assert server.stop(10)
    finally:
        server.stop(5)
        upstream.stop()
    assert not server.readiness().ready  # stopped: not receiving
    assert server.readiness().reasons == ["not receiving (starting or stopping)"]


def test_ready_while_the_buffer_has_room_and_not_ready_once_a_failing_upstream_has_filled_it() -> None:
    recovered = threading.Event()
    upstream = OtlpSink(answer=lambda request: 200 if recovered.is_set() else 503)
    server = ToolScoreServer(upstream.url, http_port=0, grpc_port=0, max_queued_spans=40, decision_wait=0.2,
                             metrics=False, events=False)
    try:
        addresses = server.start()
        assert addresses.http_port is not None and addresses.grpc_endpoint is not None
        assert post_spans(addresses.http_port, 20) == 200
        assert wait_for(lambda: upstream.refused >= 1)
        assert wait_for(server.upstream_failing)
        # failing, but there is room: still ready (the buffer takes what comes)
        status, body = get(addresses.http_port, "/readyz")
        assert status == 200 and json.loads(body)["upstream_failing"] is True
        assert grpc_check(addresses.grpc_endpoint) == "SERVING"
        assert post_spans(addresses.http_port, 20) == 200  # now full: 40 of 40
        status, body = get(addresses.http_port, "/readyz")
        state = json.loads(body)
        assert status == 503 and state["ready"] is False and state["queued_spans"] == 40
        assert state["reasons"] == ["40 spans wait for the upstream (max_queued_spans 40)"]
        assert grpc_check(addresses.grpc_endpoint) == "NOT_SERVING"
        assert grpc_check(addresses.grpc_endpoint, TRACES) == "NOT_SERVING"
        assert get(addresses.http_port, "/healthz")[0] == 200  # still live
        recovered.set()
        assert wait_for(lambda: get(addresses.http_port, "/readyz")[0] == 200, timeout=30)
        assert grpc_check(addresses.grpc_endpoint) == "SERVING"
        assert server.stop(30)
    finally:
        recovered.set()
        server.stop(5)
        upstream.stop()


def test_a_malformed_health_request_is_invalid_argument() -> None:
    server = ToolScoreServer("http://127.0.0.1:9", http_port=None, grpc_port=0, metrics=False, events=False)
    try:
        endpoint = server.start().grpc_endpoint
        assert endpoint is not None
        with grpc.insecure_channel(endpoint) as channel:
            with pytest.raises(grpc.RpcError) as err:
                channel.unary_unary(CHECK)(b"\x12\x05", timeout=10)  # field 2, and truncated
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    finally:
        server.stop(5)


def test_not_ready_when_the_on_disk_queue_has_no_room_for_another_request(tmp_path: Any) -> None:
    upstream = OtlpSink(answer=lambda request: 503)  # nothing leaves the queue
    body = pb_body(plain_spans(5))
    server = ToolScoreServer(upstream.url, http_port=0, grpc_port=None, decision_wait=0.2, metrics=False,
                             events=False, queue_dir=tmp_path, max_request_bytes=len(body) + 10,
                             queue_max_bytes=2 * len(body) + 5)
    try:
        port = server.start().http_port
        assert port is not None
        assert get(port, "/readyz")[0] == 200
        assert post_spans(port, 5) == 200  # one request stored: room for less than another
        status, answer = get(port, "/readyz")
        assert status == 503
        assert json.loads(answer)["reasons"][0].startswith("the on-disk queue has ")
        server.stop(1)
    finally:
        server.stop(5)
        upstream.stop()
