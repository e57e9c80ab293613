"""A tool-calling agent on the real ``openai`` client, traced by OpenInference
(openinference-instrumentation-openai), and scored by otel-toolscore in process.

    pip install -e '.[examples]'
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:6006 python examples/openinference_agent.py

Arize Phoenix reads OpenInference natively: pointed at a Phoenix, each run shows up as an
AGENT span carrying ``toolscore.*`` attributes, with an EVALUATOR span ``evaluation {scorer}``
per score in the same trace. The model is the scripted server of this directory on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OTEL_SERVICE_NAME", "weather-assistant-openinference")

from agent_common import SCENARIOS, openai_complete, run_agent, start_model_server
from openai import OpenAI
from openinference.instrumentation.openai import OpenAIInstrumentor

import otel_toolscore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", help="OpenAI-compatible endpoint (default: start the scripted server)")
    args = ap.parse_args()
    server, base_url = (None, args.base_url) if args.base_url else start_model_server()

    otel_toolscore.install()  # tracer provider + scoring + OTLP export
    OpenAIInstrumentor().instrument()

    client = OpenAI(base_url=base_url, api_key="sk-local", max_retries=0)
    for scenario in SCENARIOS:
        answer = run_agent(scenario["user_question"], openai_complete(client), convention="openinference",
                           expected_tool=scenario["expected_tool"])
        print(f"{scenario['name']:>14}: {answer}")
    if server is not None:
        server.stop()


if __name__ == "__main__":
    main()
