"""A tool-calling agent on the real ``openai`` client, traced by the official OpenTelemetry
instrumentation (opentelemetry-instrumentation-openai-v2) on the latest GenAI conventions, and
scored by otel-toolscore in process.

    pip install -e '.[examples]'
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python examples/openai_v2_agent.py

The model is the scripted server of this directory on 127.0.0.1 (started here unless
``--base-url`` names one), so this runs offline. Spans (with ``toolscore.*`` attributes and an
evaluation span per run), ``gen_ai.evaluation.result`` events and metrics go over OTLP, as the
``OTEL_EXPORTER_OTLP_*`` variables say. ``--prometheus-port`` serves the metrics on
127.0.0.1:PORT/metrics for Prometheus to scrape instead of pushing them.
"""

from __future__ import annotations

import argparse
import os
import time

# Latest GenAI conventions, message content on the spans (util-genai reads these at import).
os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
os.environ.setdefault("OTEL_SERVICE_NAME", "weather-assistant-openai-v2")

from agent_common import SCENARIOS, TOOL_SCHEMAS, openai_complete, run_agent, start_model_server
from openai import OpenAI
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

import otel_toolscore


def prometheus_meter_provider(port: int):
    """A MeterProvider whose metrics Prometheus scrapes from 127.0.0.1:port/metrics."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import start_http_server

    start_http_server(port, addr="127.0.0.1")
    return MeterProvider(metric_readers=[PrometheusMetricReader()])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", help="OpenAI-compatible endpoint (default: start the scripted server)")
    ap.add_argument("--prometheus-port", type=int, help="serve metrics on 127.0.0.1:PORT/metrics")
    ap.add_argument("--linger", type=float, default=0.0, help="seconds to stay up afterwards (to be scraped)")
    args = ap.parse_args()
    server, base_url = (None, args.base_url) if args.base_url else start_model_server()
    meter_provider = prometheus_meter_provider(args.prometheus_port) if args.prometheus_port else None

    # tracer provider + scoring + OTLP export; the instrumentation does not record the tools
    # offered to the model, so the app gives their schemas (otel_toolscore.tool_schemas(fn, ...)
    # makes them from the tool functions) for argument validation
    otel_toolscore.install(meter_provider=meter_provider, tool_schemas=TOOL_SCHEMAS)
    OpenAIInstrumentor().instrument()

    client = OpenAI(base_url=base_url, api_key="sk-local", max_retries=0)
    for scenario in SCENARIOS:
        answer = run_agent(scenario["user_question"], openai_complete(client),
                           expected_tool=scenario["expected_tool"])
        print(f"{scenario['name']:>14}: {answer}")
    if server is not None:
        server.stop()
    time.sleep(args.linger)


if __name__ == "__main__":
    main()
