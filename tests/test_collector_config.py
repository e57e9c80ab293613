"""The shipped Collector config is well-formed: every pipeline uses only defined components."""

from __future__ import annotations

from pathlib import Path

import yaml

CONFIG = Path(__file__).resolve().parents[1] / "collector-config.yaml"


def test_pipelines_reference_defined_components() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    pipelines = config["service"]["pipelines"]
    assert {"traces", "metrics", "logs"} <= {name.split("/")[0] for name in pipelines}
    for name, pipeline in pipelines.items():
        for section in ("receivers", "processors", "exporters"):
            for component in pipeline.get(section, []):
                assert component in (config.get(section) or {}), f"{name}: {section} {component} is not defined"
        assert pipeline["receivers"] and pipeline["exporters"], name


def test_binds_to_loopback_only() -> None:
    protocols = yaml.safe_load(CONFIG.read_text())["receivers"]["otlp"]["protocols"]
    assert all(p["endpoint"].startswith("127.0.0.1:") for p in protocols.values())
