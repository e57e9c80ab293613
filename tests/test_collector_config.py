"""The shipped Collector configs are well-formed: every pipeline uses only defined components,
every defined component is used, and the documented topologies are the ones configured."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO

CONFIG = REPO / "collector-config.yaml"
SCALE = REPO / "collector-config.scale.yaml"
SECTIONS = ("receivers", "processors", "exporters")


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("path", [CONFIG, SCALE], ids=lambda p: p.name)
def test_pipelines_reference_defined_components(path: Path) -> None:
    config = _load(path)
    pipelines = config["service"]["pipelines"]
    assert {"traces", "metrics", "logs"} <= {name.split("/")[0] for name in pipelines}
    used: dict[str, set[str]] = {section: set() for section in SECTIONS}
    for name, pipeline in pipelines.items():
        assert name.split("/")[0] in ("traces", "metrics", "logs"), name
        for section in SECTIONS:
            for component in pipeline.get(section, []):
                assert component in (config.get(section) or {}), f"{name}: {section} {component} is not defined"
                used[section].add(component)
        assert pipeline["receivers"] and pipeline["exporters"], name
    for section in SECTIONS:
        unused = set(config.get(section) or {}) - used[section]
        assert not unused, f"{path.name}: {section} defined but in no pipeline: {sorted(unused)}"


@pytest.mark.parametrize("path", [CONFIG, SCALE], ids=lambda p: p.name)
def test_binds_to_loopback_only(path: Path) -> None:
    for name, receiver in _load(path)["receivers"].items():
        for protocol in receiver["protocols"].values():
            assert protocol["endpoint"].startswith("127.0.0.1:"), name


def _exporters_of(config: dict, signal: str) -> set[str]:
    return {
        exporter
        for name, pipeline in config["service"]["pipelines"].items()
        if name.split("/")[0] == signal
        for exporter in pipeline["exporters"]
    }


def test_backends_per_signal() -> None:
    """Traces to Jaeger and Tempo, metrics to Prometheus, events (logs) to an OTLP logs backend."""
    config = _load(CONFIG)
    assert {"otlp/jaeger", "otlp/tempo"} <= _exporters_of(config, "traces")
    assert _exporters_of(config, "metrics") == {"prometheus"}
    assert all(e.split("/")[0] in ("otlp", "otlphttp") for e in _exporters_of(config, "logs"))


def test_scale_out_routes_traces_by_trace_id_to_the_replicas() -> None:
    config = _load(SCALE)
    lb = config["exporters"]["loadbalancing"]
    assert lb["routing_key"] == "traceID"
    assert "otlp" in lb["protocol"]
    replicas = lb["resolver"]["static"]["hostnames"]
    assert len(replicas) >= 2 and len(set(replicas)) == len(replicas)
    pipelines = config["service"]["pipelines"]
    # the apps' spans go to the load balancer and nowhere else: a replica must see whole traces
    route = [p for n, p in pipelines.items() if n.startswith("traces") and "loadbalancing" in p["exporters"]]
    assert len(route) == 1 and route[0]["exporters"] == ["loadbalancing"]
    # what the replicas send back reaches the trace backends, through another receiver (no loop)
    scored = [p for n, p in pipelines.items() if n.startswith("traces") and "loadbalancing" not in p["exporters"]]
    assert scored and not set(scored[0]["receivers"]) & set(route[0]["receivers"])
    assert {"otlp/jaeger", "otlp/tempo"} <= set(scored[0]["exporters"])
    # the documented replica commands listen where the resolver sends, and forward to that receiver
    text = SCALE.read_text()
    ports = {f"127.0.0.1:{p}" for p in re.findall(r"otel-toolscore serve --grpc-port (\d+)", text)}
    assert ports == set(replicas)
    scored_endpoints = {
        proto["endpoint"]
        for receiver in scored[0]["receivers"]
        for proto in config["receivers"][receiver]["protocols"].values()
    }
    upstreams = set(re.findall(r"--upstream http://(\S+)", text))
    assert upstreams and upstreams <= scored_endpoints


def test_readme_documents_both_topologies() -> None:
    readme = (REPO / "README.md").read_text()
    assert "collector-config.yaml" in readme and "collector-config.scale.yaml" in readme
