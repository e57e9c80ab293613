"""Framework shapes the readers recognise (issue 15): answer tools, a run's question under a
framework's own name for it, smolagents' text history and Tool.__call__ arguments, CrewAI's task.

Small synthetic spans, each shape with its counter-example (the look-alike that must stay as it was).
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, Status, StatusCode

from otel_toolscore import build_trajectories
from otel_toolscore.conventions import classify, read_span
from otel_toolscore.conventions.parsing import read_text_tool_messages, unwrap_arguments
from otel_toolscore.scorers import ToolResultVerification
from otel_toolscore.trajectory import Message, Trajectory

TRACE = 0x15


def span(sid: int, name: str, parent: int | None, attrs: dict[str, Any], start: int = 0) -> ReadableSpan:
    return ReadableSpan(
        name=name,
        context=SpanContext(TRACE, sid, False),
        parent=SpanContext(TRACE, parent, False) if parent is not None else None,
        attributes=attrs,
        status=Status(StatusCode.OK),
        start_time=start,
        end_time=start + 1,
    )


def run(*spans: ReadableSpan) -> Trajectory:
    top = [t for t in build_trajectories(spans) if not t.nested]
    assert len(top) == 1
    return top[0]


# --- GenAI spans ---------------------------------------------------------------------------------


def genai_agent(sid: int, **extra: Any) -> ReadableSpan:
    return span(sid, "invoke_agent a", None, {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a",
                                               **extra})


def genai_chat(sid: int, start: int, inputs: list[Any], outputs: list[Any], **extra: Any) -> ReadableSpan:
    return span(sid, "chat m", 1, {"gen_ai.operation.name": "chat",
                                   "gen_ai.input.messages": json.dumps(inputs),
                                   "gen_ai.output.messages": json.dumps(outputs), **extra}, start)


def genai_tool(sid: int, start: int, name: str, call_id: str, args: Any, result: Any) -> ReadableSpan:
    return span(sid, f"execute_tool {name}", 1, {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.call.arguments": json.dumps(args), "gen_ai.tool.call.result": json.dumps(result)}, start)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


def calls(*items: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {"role": "assistant", "parts": [
        {"type": "tool_call", "id": cid, "name": name, "arguments": args} for cid, name, args in items]}


def results(*items: tuple[str, Any]) -> dict[str, Any]:
    return {"role": "tool", "parts": [
        {"type": "tool_call_response", "id": cid, "response": json.dumps(resp)} for cid, resp in items]}


WEATHER = {"temperature": "72°F", "condition": "sunny"}


def answered_through(tool_name: str, args: dict[str, Any], **chat_extra: Any) -> list[ReadableSpan]:
    """A run that calls get_weather, then answers with ``tool_name(args)`` (and runs it)."""
    q = user("Weather in Madrid?")
    first = calls(("c1", "get_weather", {"location": "Madrid"}))
    return [
        genai_agent(1),
        genai_chat(2, 10, [q], [first], **chat_extra),
        genai_tool(3, 20, "get_weather", "c1", {"location": "Madrid"}, WEATHER),
        genai_chat(4, 30, [q, first, results(("c1", WEATHER))], [calls(("c2", tool_name, args))], **chat_extra),
        genai_tool(5, 40, tool_name, "c2", args, "Response set successfully."),
    ]


# --- answer tools ----------------------------------------------------------------------------------


def test_an_answer_tool_is_the_runs_answer_not_a_call() -> None:
    traj = run(*answered_through("final_answer", {"answer": "It's 55°F and raining in Madrid."}))
    assert [c.name for c in traj.tool_calls] == ["get_weather"]
    # the run span states no answer: the answer tool's one argument is it
    assert traj.output == "It's 55°F and raining in Madrid."


def test_the_run_spans_own_answer_wins_over_the_answer_tools() -> None:
    spans = answered_through("final_answer", {"answer": "from the tool"})
    spans[0] = genai_agent(1, **{"gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "parts": [{"type": "text", "content": "from the run"}]}])})
    traj = run(*spans)
    assert traj.output == "from the run"
    assert [c.name for c in traj.tool_calls] == ["get_weather"]


def test_the_answer_tools_result_grounds_nothing() -> None:
    """The answer tool "returns" the answer: were it a result, every answer would ground itself."""
    traj = run(*answered_through("final_answer", {"answer": "It's 55°F and raining in Madrid."}))
    score = ToolResultVerification().score(traj)
    found = {i["type"] for r in score.details["tool_calls"] for i in r["issues"]}
    assert "hallucinated_content" in found, score.details


def test_structured_answer_tools_give_their_arguments_as_the_answer() -> None:
    # Google ADK's set_model_response, pydantic-ai's final_result_<Type> (several output types)
    for name in ("set_model_response", "final_result", "final_result_Forecast", "final_result_Forecast_2"):
        traj = run(*answered_through(name, {"city": "Madrid", "temperature": 72}))
        assert [c.name for c in traj.tool_calls] == ["get_weather"], name
        assert json.loads(traj.output or "") == {"city": "Madrid", "temperature": 72}, name


def test_look_alike_tool_names_stay_calls() -> None:
    for name in ("get_final_answer", "final_answer_draft", "set_model", "final_results"):
        traj = run(*answered_through(name, {"answer": "x"}))
        assert [c.name for c in traj.tool_calls] == ["get_weather", name], name


def test_a_tool_the_request_names_as_an_output_tool_is_an_answer_tool() -> None:
    """pydantic-ai chat spans list the request's output tools (any name, ``ToolOutput(name=…)``)."""
    params = json.dumps({"function_tools": [{"name": "get_weather"}],
                         "output_tools": [{"name": "return_forecast", "kind": "output"}]})
    traj = run(*answered_through("return_forecast", {"city": "Madrid"}, model_request_parameters=params))
    assert [c.name for c in traj.tool_calls] == ["get_weather"]
    # without the request's word for it, the same tool is an ordinary call
    traj = run(*answered_through("return_forecast", {"city": "Madrid"}))
    assert [c.name for c in traj.tool_calls] == ["get_weather", "return_forecast"]


# --- smolagents through OpenInference ------------------------------------------------------------


def oi_messages(direction: str, messages: list[tuple[str, str]]) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for i, (role, text) in enumerate(messages):
        attrs[f"llm.{direction}_messages.{i}.message.role"] = role
        attrs[f"llm.{direction}_messages.{i}.message.contents.0.message_content.type"] = "text"
        attrs[f"llm.{direction}_messages.{i}.message.contents.0.message_content.text"] = text
    return attrs


def oi_output_calls(*items: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    attrs: dict[str, Any] = {"llm.output_messages.0.message.role": "assistant"}
    for j, (cid, name, args) in enumerate(items):
        prefix = f"llm.output_messages.0.message.tool_calls.{j}.tool_call."
        attrs[prefix + "id"] = cid
        attrs[prefix + "function.name"] = name
        attrs[prefix + "function.arguments"] = json.dumps(args)
    return attrs


def oi_llm(sid: int, start: int, history: list[tuple[str, str]], *out: tuple[str, str, dict[str, Any]]) -> ReadableSpan:
    return span(sid, "OpenAIModel.generate", 1, {"openinference.span.kind": "LLM",
                                                 **oi_messages("input", history), **oi_output_calls(*out)}, start)


def smol_tool(sid: int, start: int, name: str, kwargs: dict[str, Any], result: Any) -> ReadableSpan:
    return span(sid, "SimpleTool", 1, {
        "openinference.span.kind": "TOOL", "tool.name": name,
        "input.value": json.dumps({"args": [], "sanitize_inputs_outputs": True, "kwargs": kwargs}),
        "output.value": result if isinstance(result, str) else json.dumps(result)}, start)


def smol_run(question: str, answer: str | None = None) -> ReadableSpan:
    attrs = {"openinference.span.kind": "AGENT",
             "input.value": json.dumps({"task": question, "stream": False, "reset": True, "images": None})}
    if answer is not None:
        attrs["output.value"] = answer
    return span(1, "tool_assistant.run", None, attrs)


CITIES = {"Paris": {"t": "61°F"}, "Tokyo": {"t": "75°F"}, "Lima": {"t": "66°F"}}


def test_smolagents_run_question_answer_and_parallel_calls() -> None:
    question = "Weather in Paris, Tokyo and Lima?"
    history = [("system", "You are an expert assistant."), ("user", f"New task:\n{question}")]
    requested = [(f"c{i}", "get_weather", {"location": city}) for i, city in enumerate(CITIES, 1)]
    echo = "Calling tools:\n" + str([{"id": cid, "type": "function", "function": {"name": n, "arguments": a}}
                                     for cid, n, a in requested])
    observation = "Observation:\n" + "\n".join(str(r) for r in CITIES.values())
    traj = run(
        smol_run(question, "Paris 61°F, Tokyo 75°F, Lima 66°F."),
        oi_llm(2, 10, history, *requested),
        # the tools ran in a thread pool: their spans start in another order than the calls
        smol_tool(3, 21, "get_weather", {"location": "Tokyo"}, CITIES["Tokyo"]),
        smol_tool(4, 22, "get_weather", {"location": "Paris"}, CITIES["Paris"]),
        smol_tool(5, 23, "get_weather", {"location": "Lima"}, CITIES["Lima"]),
        oi_llm(6, 30, [*history, ("tool-call", echo), ("tool-response", observation)],
               ("c4", "final_answer", {"answer": "Paris 61°F, Tokyo 75°F, Lima 66°F."})),
        smol_tool(7, 40, "final_answer", {"answer": "Paris 61°F, Tokyo 75°F, Lima 66°F."},
                  "Paris 61°F, Tokyo 75°F, Lima 66°F."),
    )
    assert traj.input == question  # the run's own input, not "New task:\n…"
    assert traj.output == "Paris 61°F, Tokyo 75°F, Lima 66°F."
    assert [(c.id, c.arguments, c.result) for c in traj.tool_calls] == [
        (cid, args, CITIES[args["location"]]) for cid, _, args in requested]
    assert all(c.span_id is not None for c in traj.tool_calls)


def test_tool_call_wrapper_arguments_are_unwrapped_only_in_their_shape() -> None:
    assert unwrap_arguments({"args": [], "sanitize_inputs_outputs": True, "kwargs": {"a": 1}}) == {"a": 1}
    assert unwrap_arguments({"args": [], "kwargs": {"a": 1}}) == {"a": 1}
    for kept in (
        {"args": ["x"], "sanitize_inputs_outputs": True, "kwargs": {}},  # called positionally
        {"args": [], "kwargs": {"a": 1}, "verbose": True},  # a parameter of no known wrapper
        {"args": [], "sanitize_inputs_outputs": True},  # no kwargs
    ):
        assert unwrap_arguments(kept) == kept


def _messages(*items: tuple[str, str]) -> list[Message]:
    return [Message(role=role, content=text) for role, text in items]


def test_smolagents_text_history_one_call_gets_its_result() -> None:
    echo = "Calling tools:\n[{'id': 'c1', 'type': 'function', 'function': {'name': 'get_weather', " \
           "'arguments': {'location': 'Madrid'}}}]"
    msgs = read_text_tool_messages(_messages(
        ("user", "New task:\nq"), ("tool-call", echo), ("tool-response", "Observation:\n" + str(WEATHER))))
    assert [m.role for m in msgs] == ["user", "assistant", "tool"]
    assert [(c.id, c.name, c.arguments) for c in msgs[1].tool_calls] == [("c1", "get_weather", {"location": "Madrid"})]
    assert msgs[1].content is None
    [part] = msgs[2].tool_results
    assert (part.tool_call_id, part.name, part.content, part.is_error) == ("c1", "get_weather", WEATHER, False)


def test_smolagents_text_history_what_cannot_be_tied_to_one_call_stays_text() -> None:
    two = "Calling tools:\n[{'id': 'c1', 'type': 'function', 'function': {'name': 'f', 'arguments': {}}}, " \
          "{'id': 'c2', 'type': 'function', 'function': {'name': 'f', 'arguments': {'x': 1}}}]"
    one = "Calling tools:\n[{'id': 'c3', 'type': 'function', 'function': {'name': 'f', 'arguments': {}}}]"
    code = "Calling tools:\n[{'id': 'call_2', 'type': 'function', 'function': {'name': 'python_interpreter', " \
           "'arguments': 'print(f())'}}]"
    errors = [
        "Call id: c3\nError:\nYou returned multiple final answers.\nNow let's retry",  # the step's, not c3's
        "Error:\nError executing tool 'f' with arguments {}: ValueError: boom",  # no id
    ]
    msgs = read_text_tool_messages(_messages(
        ("tool-call", two), ("tool-response", "Observation:\n{'a': 1}\n{'b': 2}"),
        ("tool-call", one), ("tool-response", errors[0]),
        ("tool-response", errors[1]),
        ("tool-call", code), ("tool-response", "Observation:\nExecution logs:\n3"),
        ("tool-call", "not an echo"),
    ))
    assert [len(m.tool_calls) for m in msgs] == [2, 0, 1, 0, 0, 0, 0, 0]
    assert all(not m.tool_results for m in msgs)
    # the results of several calls, the errors, CodeAgent's code step: kept as the history's text
    assert msgs[1].role == "tool" and msgs[1].content == "Observation:\n{'a': 1}\n{'b': 2}"
    assert [m.content for m in msgs[3:5]] == errors
    assert msgs[5].role == "assistant" and msgs[5].content == code and (msgs[6].content or "").endswith("3")
    assert msgs[7].role == "assistant" and msgs[7].content == "not an echo"


def test_the_task_field_is_a_question_not_an_answer() -> None:
    facts = read_span(smol_run("the question"))
    assert facts.run_input == "the question"
    out = span(1, "r", None, {"openinference.span.kind": "AGENT", "output.value": json.dumps({"task": "t"})})
    assert read_span(out).run_output != "t"


# --- CrewAI ----------------------------------------------------------------------------------------

CREW_PROMPT = "\nCurrent Task: {q}\n\nThis is the expected criteria for your final answer: A direct answer."


def crew_llm(sid: int, parent: int, question: str) -> ReadableSpan:
    return span(sid, "ChatCompletion", parent, {
        "openinference.span.kind": "LLM",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": CREW_PROMPT.format(q=question),
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "Paris."}, 10)


def oi_crew(question: str, inputs: str = "", tasks: int = 1) -> ReadableSpan:
    return span(1, "Crew_1.kickoff", None, {
        "openinference.span.kind": "CHAIN", "crew_key": "k", "crew_inputs": inputs,
        "crew_tasks": json.dumps([{"id": str(i), "description": question} for i in range(tasks)]),
        "output.value": json.dumps({"raw": "Paris."})})


def oi_task_run(output: dict[str, Any] | None, **extra: Any) -> ReadableSpan:
    attrs = {"openinference.span.kind": "AGENT", "graph.node.id": "assistant", "crew_key": "k",
             "task_key": "t", "task_id": "0", "input.value": json.dumps({"agent": {}, "context": "", "tools": []}),
             **extra}
    if output is not None:
        attrs["output.value"] = json.dumps(output)
    return span(2, "assistant._execute_core", 1, attrs, 5)


Q = "What is the capital of France?"


def test_crewai_openinference_question_is_the_task_the_agent_ran() -> None:
    task_output = {"description": Q, "raw": "Paris.", "agent": "assistant"}
    assert run(oi_crew("ignored"), oi_task_run(task_output), crew_llm(3, 2, Q)).input == Q
    # shared crews record the formatted description on the span itself
    assert run(oi_crew("x"), oi_task_run(None, formatted_description=Q), crew_llm(3, 2, Q)).input == Q
    # a task that did not finish has no TaskOutput: the crew's one task says it
    assert run(oi_crew(Q), oi_task_run(None), crew_llm(3, 2, Q)).input == Q


def test_crewai_openinference_crew_task_lists_that_are_no_question() -> None:
    prompt = CREW_PROMPT.format(q=Q)
    # kicked off with inputs: the listed descriptions are templates; several tasks: no one question
    assert run(oi_crew("About {topic}", inputs='{"topic": "France"}'), oi_task_run(None), crew_llm(3, 2, Q)).input \
        == prompt
    assert run(oi_crew(Q, tasks=2), oi_task_run(None), crew_llm(3, 2, Q)).input == prompt


def test_crewai_openllmetry_question_is_the_task_spans_description() -> None:
    common = {"gen_ai.provider.name": "crewai", "gen_ai.operation.name": "invoke_agent"}
    traj = run(
        span(1, "crewai.workflow", None, common),
        span(2, f"{Q}.task", 1, {**common, "traceloop.span.kind": "task", "crewai.task.description": Q}, 1),
        span(3, "assistant.agent", 2, {**common, "traceloop.span.kind": "agent", "gen_ai.agent.name": "assistant"}, 2),
        span(4, "openai.chat", 3, {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([user(CREW_PROMPT.format(q=Q))]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text",
                                                                                   "content": "Paris."}]}])}, 10),
    )
    assert traj.input == Q
    assert traj.output == "Paris."


def test_crewai_detection_needs_crewais_own_keys() -> None:
    assert "crewai" in read_span(oi_task_run({"description": Q})).conventions
    lone = span(5, "x", 1, {"crew_key": "k"})  # the key alone, without a crew's tasks or a task
    assert "crewai" not in read_span(lone).conventions
    assert classify(lone) is None
    assert classify(oi_task_run({"description": Q})) == "agent"
