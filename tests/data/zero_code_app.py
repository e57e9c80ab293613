"""An instrumented agent app that knows nothing of otel-toolscore: run under
``opentelemetry-instrument python zero_code_app.py``, the OpenAI client is traced by the stock
openai-v2 instrumentation (loaded by opentelemetry-instrument), the agent span comes from the
OpenTelemetry API, and the model is the scripted server on 127.0.0.1. No force_flush, no
shutdown: the app just ends, as such apps do."""

from openai import OpenAI

from otel_toolscore.demo_agent.agent_common import SCENARIOS, openai_complete, run_agent, start_model_server

server, base_url = start_model_server()
client = OpenAI(base_url=base_url, api_key="sk-local", max_retries=0)
for scenario in SCENARIOS[:2]:  # good, wrong_tool
    print(scenario["name"], run_agent(scenario["user_question"], openai_complete(client),
                                      expected_tool=scenario["expected_tool"]))
server.shutdown()
