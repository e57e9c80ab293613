"""A Pydantic AI agent (its own OpenTelemetry instrumentation, GenAI conventions), scored by
otel-toolscore in process.

    pip install -e '.[examples]'
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python examples/pydantic_ai_agent.py

The framework makes the agent span itself, so the expected tool of each run comes from a rule
(agent name and input pattern → expected tool) instead of an attribute the app sets. The model
is the scripted server of this directory on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import functools
import os

os.environ.setdefault("OTEL_SERVICE_NAME", "weather-assistant-pydantic-ai")

from agent_common import (
    AGENT_NAME,
    MODEL,
    SCENARIOS,
    SYSTEM_PROMPT,
    TOOLS,
    start_model_server,
)
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import otel_toolscore

RULES = [{"agent": AGENT_NAME, "input_pattern": "(?i)weather", "expected_tool": "get_weather"},
         {"agent": AGENT_NAME, "input_pattern": "(?i)email", "expected_tool": "send_email"},
         {"agent": AGENT_NAME, "input_pattern": "(?i)report", "expected_tool": "fetch_data"}]


def reported(tool):
    """A tool whose failure goes back to the model as an error result, like the other loops."""
    @functools.wraps(tool)
    def wrapper(*args, **kwargs):
        try:
            return tool(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            return {"error": f"{type(exc).__name__}: {exc}"}
    return wrapper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", help="OpenAI-compatible endpoint (default: start the scripted server)")
    args = ap.parse_args()
    server, base_url = (None, args.base_url) if args.base_url else start_model_server()

    otel_toolscore.install(rules=RULES)  # tracer provider + scoring + OTLP export
    Agent.instrument_all()

    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=base_url, api_key="sk-local"))
    agent = Agent(model, name=AGENT_NAME, system_prompt=SYSTEM_PROMPT,
                  tools=[reported(tool) for tool in TOOLS.values()])
    for scenario in SCENARIOS:
        print(f"{scenario['name']:>14}: {agent.run_sync(scenario['user_question']).output}")
    if server is not None:
        server.stop()


if __name__ == "__main__":
    main()
