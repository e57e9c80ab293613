"""Every attribute, span and event name this package reads or writes, in one place.

Grouped by the convention that defines it. Patterns for flattened (indexed) attributes are
regular expressions; readers never spell attribute names as string literals elsewhere.
"""

from __future__ import annotations

import re

# --- OTel GenAI semantic conventions (current) -------------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_AGENT_ID = "gen_ai.agent.id"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_INPUT_MESSAGES_REF = "gen_ai.input.messages_ref"
GEN_AI_OUTPUT_MESSAGES_REF = "gen_ai.output.messages_ref"
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
GEN_AI_TOOL_DEFINITIONS = "gen_ai.tool.definitions"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_TOOL_DESCRIPTION = "gen_ai.tool.description"
GEN_AI_RETRIEVAL_QUERY_TEXT = "gen_ai.retrieval.query.text"
GEN_AI_RETRIEVAL_DOCUMENTS = "gen_ai.retrieval.documents"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_SYSTEM = "gen_ai.system"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
ERROR_TYPE = "error.type"
#: what a tool span's result is in, when not in GEN_AI_TOOL_CALL_RESULT: the Anthropic SDK's own
#: tracing (``anthropic.custom_tool_use <tool>`` spans) writes the ``tool_result`` content blocks
ANTHROPIC_TOOL_RESULT_CONTENT = "anthropic.tool_result.content"
TOOL_RESULT_KEYS = (GEN_AI_TOOL_CALL_RESULT, ANTHROPIC_TOOL_RESULT_CONTENT)
#: Strands Agents' tool span status, "success" or "error" (its ToolResult ``status``)
STRANDS_TOOL_STATUS = "gen_ai.tool.status"
#: Strands Agents' tool span: the tool's input JSON Schema, as JSON text (its ``inputSchema["json"]``)
STRANDS_TOOL_JSON_SCHEMA = "gen_ai.tool.json_schema"

OP_INVOKE_AGENT = "invoke_agent"
OP_INVOKE_WORKFLOW = "invoke_workflow"
OP_CREATE_AGENT = "create_agent"
OP_CHAT = "chat"
OP_TEXT_COMPLETION = "text_completion"
OP_GENERATE_CONTENT = "generate_content"
OP_EXECUTE_TOOL = "execute_tool"
OP_RETRIEVAL = "retrieval"
OP_EMBEDDINGS = "embeddings"
#: the GenAI semconv proposal's operation of an evaluation span (semantic-conventions-genai #185)
OP_EVALUATION = "evaluation"
AGENT_OPERATIONS = frozenset({OP_INVOKE_AGENT, OP_INVOKE_WORKFLOW})
LLM_OPERATIONS = frozenset({OP_CHAT, OP_TEXT_COMPLETION, OP_GENERATE_CONTENT})

# Deprecated GenAI events (span events, or log records parented to the span).
EVENT_SYSTEM_MESSAGE = "gen_ai.system.message"
EVENT_USER_MESSAGE = "gen_ai.user.message"
EVENT_ASSISTANT_MESSAGE = "gen_ai.assistant.message"
EVENT_TOOL_MESSAGE = "gen_ai.tool.message"
EVENT_CHOICE = "gen_ai.choice"
EVENT_BODY = "body"  # where the OTLP reader puts a log record's body when it becomes a span event
# fields of a deprecated event's body (or its attributes, where the emitter flattens it)
EVENT_FIELD_CONTENT = "content"
EVENT_FIELD_MESSAGE = "message"
EVENT_FIELD_ID = "id"
# Events that carry a span's content as event attributes: the current inference-details event
# holds the inference span's own attributes (gen_ai.input.messages, …); the early content
# events hold the prompt and the completion as JSON.
EVENT_INFERENCE_DETAILS = "gen_ai.client.inference.operation.details"
EVENT_CONTENT_PROMPT = "gen_ai.content.prompt"
EVENT_CONTENT_COMPLETION = "gen_ai.content.completion"
GEN_AI_PROMPT = "gen_ai.prompt"  # attribute of EVENT_CONTENT_PROMPT
GEN_AI_COMPLETION = "gen_ai.completion"  # attribute of EVENT_CONTENT_COMPLETION
EVENT_NAME_ATTR = "event.name"
EXCEPTION_EVENT = "exception"
EXCEPTION_TYPE = "exception.type"
EXCEPTION_MESSAGE = "exception.message"

# --- OpenInference -----------------------------------------------------------------------------
OI_SPAN_KIND = "openinference.span.kind"
OI_AGENT_NAME = "agent.name"
OI_INPUT_VALUE = "input.value"
OI_INPUT_MIME = "input.mime_type"
OI_OUTPUT_VALUE = "output.value"
OI_OUTPUT_MIME = "output.mime_type"
OI_LLM_MODEL_NAME = "llm.model_name"
OI_TOOL_NAME = "tool.name"
OI_TOOL_ID = "tool.id"
OI_TOOL_DESCRIPTION = "tool.description"
OI_TOOL_PARAMETERS = "tool.parameters"
OI_TOOL_CALL_ID = "tool_call.id"
OI_INVOCATION_PARAMETERS = "llm.invocation_parameters"
OI_GRAPH_NODE_ID = "graph.node.id"
OI_METADATA = "metadata"
LANGGRAPH_NODE = "langgraph_node"  # key inside OI_METADATA
OI_KIND_AGENT = "AGENT"
OI_KIND_CHAIN = "CHAIN"
OI_KIND_LLM = "LLM"
OI_KIND_TOOL = "TOOL"
OI_KIND_RETRIEVER = "RETRIEVER"
OI_KIND_EVALUATOR = "EVALUATOR"
# llm.input_messages.{i}.message.{role,content,tool_call_id,name,tool_calls.{j}.tool_call.*}
OI_LLM_PREFIX = "llm."
OI_TOOL_CALL_FUNCTION_NAME = "function.name"  # inside OI_TOOL_CALL_RE's field group
OI_TOOL_CALL_FUNCTION_ARGUMENTS = "function.arguments"
OI_MESSAGES_RE = re.compile(r"^llm\.(input|output)_messages\.(\d+)\.message\.(.+)$")
OI_TOOL_CALL_RE = re.compile(r"^tool_calls\.(\d+)\.tool_call\.(.+)$")
OI_CONTENTS_RE = re.compile(r"^contents\.(\d+)\.message_content\.(.+)$")
OI_TOOLS_RE = re.compile(r"^llm\.tools\.(\d+)\.tool\.json_schema$")
OI_DOCUMENTS_RE = re.compile(r"^retrieval\.documents\.(\d+)\.document\.(.+)$")

# --- OpenLLMetry (Traceloop) -------------------------------------------------------------------
TL_SPAN_KIND = "traceloop.span.kind"
TL_ENTITY_NAME = "traceloop.entity.name"
TL_ENTITY_INPUT = "traceloop.entity.input"
TL_ENTITY_OUTPUT = "traceloop.entity.output"
TL_WORKFLOW_NAME = "traceloop.workflow.name"
LLM_REQUEST_TYPE = "llm.request.type"
GEN_AI_TASK_OUTPUT = "gen_ai.task.output"
# gen_ai.prompt.{i}.{role,content,tool_call_id,tool_calls.{j}.{id,name,arguments}}
TL_PROMPT_PREFIX = "gen_ai.prompt."
TL_COMPLETION_PREFIX = "gen_ai.completion."
TL_FUNCTIONS_PREFIX = "llm.request.functions."
TL_TOOL_SPAN_SUFFIX = ".tool"
TL_PROMPT_RE = re.compile(r"^gen_ai\.prompt\.(\d+)\.(.+)$")
# gen_ai.completion.{i}.{role,content,finish_reason,tool_calls.{j}.*,function_call.*}
TL_COMPLETION_RE = re.compile(r"^gen_ai\.completion\.(\d+)\.(.+)$")
TL_TOOL_CALLS_RE = re.compile(r"^tool_calls\.(\d+)\.(.+)$")
TL_FUNCTIONS_RE = re.compile(r"^llm\.request\.functions\.(\d+)\.(.+)$")

# --- Vercel AI SDK (ai.*) ----------------------------------------------------------------------
AI_OPERATION_ID = "ai.operationId"
AI_FUNCTION_ID = "ai.telemetry.functionId"
AI_RESOURCE_NAME = "resource.name"
AI_PROMPT = "ai.prompt"
AI_PROMPT_MESSAGES = "ai.prompt.messages"
AI_PROMPT_TOOLS = "ai.prompt.tools"
AI_RESPONSE_TEXT = "ai.response.text"
AI_RESPONSE_TOOL_CALLS = "ai.response.toolCalls"
AI_RESPONSE_FINISH_REASON = "ai.response.finishReason"
AI_MODEL_ID = "ai.model.id"
AI_TOOL_CALL_NAME = "ai.toolCall.name"
AI_TOOL_CALL_ID = "ai.toolCall.id"
AI_TOOL_CALL_ARGS = "ai.toolCall.args"
AI_TOOL_CALL_RESULT = "ai.toolCall.result"
AI_RUN_SPANS = frozenset({"ai.generateText", "ai.streamText", "ai.generateObject", "ai.streamObject"})
AI_LLM_SPANS = frozenset(
    {
        "ai.generateText.doGenerate",
        "ai.streamText.doStream",
        "ai.generateObject.doGenerate",
        "ai.streamObject.doStream",
    }
)
AI_TOOL_SPAN = "ai.toolCall"

# --- Pydantic AI -------------------------------------------------------------------------------
PYDANTIC_AI_FINAL_RESULT = "final_result"
PYDANTIC_AI_ALL_MESSAGES = "pydantic_ai.all_messages"
PYDANTIC_AI_AGENT_NAME = "agent_name"
#: chat spans: the request's tools by kind, JSON ``{"function_tools": [...], "output_tools": [...]}``
PYDANTIC_AI_MODEL_REQUEST_PARAMETERS = "model_request_parameters"
PYDANTIC_AI_OUTPUT_TOOLS = "output_tools"  # key inside PYDANTIC_AI_MODEL_REQUEST_PARAMETERS

# --- Framework answer tools --------------------------------------------------------------------
# Tools a framework adds so that the model returns the run's answer through a tool call: calling
# one ends the run (or hands over its structured output); it is how the run answers, not a tool
# use. Their arguments are the answer; their "result" is the answer again or a receipt.
#   final_answer        smolagents ``FinalAnswerTool`` (default_tools.py, every agent has it);
#                       BeeAI ``RequirementAgent``'s ``FinalAnswerTool``
#   final_result        Pydantic AI's output tool (``_output.DEFAULT_OUTPUT_TOOL_NAME``);
#   final_result_<Type>   the same with several output types (``final_result_<Type>_2`` on a clash)
#   set_model_response  Google ADK ``SetModelResponseTool`` (``output_schema`` alongside tools)
ANSWER_TOOLS = frozenset({"final_answer", "final_result", "set_model_response"})
ANSWER_TOOL_PREFIXES = ("final_result_",)

# --- smolagents (through OpenInference) --------------------------------------------------------
# ``MessageRole.TOOL_CALL`` / ``TOOL_RESPONSE``: smolagents writes a step's calls and results into
# the chat history as text under these roles (memory.py ``ActionStep.to_messages``):
# "Calling tools:\n" + str([{"id", "type", "function": {"name", "arguments"}}, ...]),
# "Observation:\n" + the results (one per call, newline-joined, in call-id order),
# ["Call id: <id>\n"] + "Error:\n" + the step's error.
SMOLAGENTS_ROLE_TOOL_CALL = "tool-call"
SMOLAGENTS_ROLE_TOOL_RESPONSE = "tool-response"
SMOLAGENTS_CALLING_TOOLS = "Calling tools:\n"
SMOLAGENTS_OBSERVATION = "Observation:\n"
#: keyword parameters of smolagents' ``Tool.__call__(*args, sanitize_inputs_outputs, **kwargs)``
#: that OpenInference records beside the call's own ``args``/``kwargs`` in a TOOL span's input
SMOLAGENTS_TOOL_CALL_PARAMETERS = frozenset({"sanitize_inputs_outputs"})

# --- CrewAI ------------------------------------------------------------------------------------
# Through OpenLLMetry (opentelemetry-instrumentation-crewai): the "<description>.task" span.
CREWAI_TASK_DESCRIPTION = "crewai.task.description"
# Through OpenInference (openinference-instrumentation-crewai): "<Crew>.kickoff" (CHAIN) carries
# crew_key, crew_inputs and crew_tasks; "<role>._execute_core" (AGENT, one task run by one agent) carries
# crew_key, task_key, task_id, its TaskOutput as output.value, and formatted_description when the
# crew shares its data (share_crew).
OI_CREWAI_CREW_KEY = "crew_key"
OI_CREWAI_CREW_TASKS = "crew_tasks"  # JSON list of {"id", "description", ...}
OI_CREWAI_CREW_INPUTS = "crew_inputs"  # JSON of the kickoff inputs, "" when none
OI_CREWAI_TASK_KEY = "task_key"
OI_CREWAI_FORMATTED_DESCRIPTION = "formatted_description"
CREWAI_TASK_DESCRIPTION_KEY = "description"  # key of a task in the task lists and in a TaskOutput

# --- Mastra OTel exporter ----------------------------------------------------------------------
MASTRA_SPAN_TYPE = "mastra.span.type"
MASTRA_AGENT_RUN_INPUT = "mastra.agent_run.input"
MASTRA_AGENT_RUN_OUTPUT = "mastra.agent_run.output"
MASTRA_MODEL_STEP_OUTPUT = "mastra.model_step.output"
MASTRA_MODEL_STEP_INPUT = "mastra.model_step.input"

# --- Google ADK's own attributes (gcp.vertex.agent.*; its legacy telemetry schema) --------------
ADK_LLM_REQUEST = "gcp.vertex.agent.llm_request"
ADK_LLM_RESPONSE = "gcp.vertex.agent.llm_response"
ADK_TOOL_CALL_ARGS = "gcp.vertex.agent.tool_call_args"
ADK_TOOL_RESPONSE = "gcp.vertex.agent.tool_response"
#: gen_ai.tool.name of the span ADK adds after a turn's parallel calls, for its dev UI's event
#: view (``trace_merged_tool_calls``): the merged response event, not a call
ADK_MERGED_TOOLS = "(merged tools)"

# --- litellm OTel callback ---------------------------------------------------------------------
LITELLM_REQUEST_SPAN = "litellm_request"
LITELLM_RAW_REQUEST_SPAN = "raw_gen_ai_request"

# --- What otel-toolscore reads from the app (expectations) and writes -------------------------
TOOLSCORE_PREFIX = "toolscore."
TOOLSCORE_EXPECTED_TOOL = "toolscore.expected_tool"
TOOLSCORE_EXPECTED_TOOL_ORDER = "toolscore.expected_tool_order"
TOOLSCORE_STRICT = "toolscore.strict"
#: on an agent span that a scorer path (processor, serve) has scored: every path skips such a run
#: (outcome ``already_scored``) so that a run exported twice (install() and serve) is scored once
TOOLSCORE_SCORED = "toolscore.scored"
#: on the sidecar's score metrics and events: the app a run came from (its resource's service.name
#: and service.namespace), bounded (``serve_max_app_services``, then "_other")
TOOLSCORE_APP_SERVICE_NAME = "toolscore.app.service.name"
TOOLSCORE_APP_SERVICE_NAMESPACE = "toolscore.app.service.namespace"

GEN_AI_EVALUATION_RESULT = "gen_ai.evaluation.result"
GEN_AI_EVALUATION_NAME = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION = "gen_ai.evaluation.explanation"


def toolscore_attr(scorer: str, field: str) -> str:
    """``toolscore.<scorer>.<field>`` for the attributes set on the evaluated agent span."""
    return f"{TOOLSCORE_PREFIX}{scorer}.{field}"


# --- What otel-toolscore emits (outputs/otel.py) ------------------------------------------------------
#: instrumentation scope of every log record, metric and evaluation span this package emits
INSTRUMENTATION_SCOPE = "otel_toolscore"

# toolscore.<scorer>.<field> on the evaluated agent span (see toolscore_attr)
TOOLSCORE_FIELD_SCORE = "score"
TOOLSCORE_FIELD_LABEL = "label"
TOOLSCORE_FIELD_EXPLANATION = "explanation"
TOOLSCORE_FIELD_ERROR = "error"

# Evaluation spans: one per score, "evaluation {scorer}" (docs/emitted.md, "Evaluation spans").
EVALUATION_SPAN_PREFIX = "evaluation"
# OpenInference carrier form: evaluations.{i}.evaluation.{name,score,label,explanation}
OI_EVALUATION_NAME = "name"
OI_EVALUATION_SCORE = "score"
OI_EVALUATION_LABEL = "label"
OI_EVALUATION_EXPLANATION = "explanation"

# Metrics and their attributes
METRIC_EVALUATION_SCORE = "gen_ai.evaluation.score"
METRIC_TOOL_CALL_ISSUES = "toolscore.tool_call.issues"
METRIC_EVALUATIONS = "toolscore.evaluations"
METRIC_TRACES_PENDING = "toolscore.traces.pending"
METRIC_TRACES_EVICTED = "toolscore.traces.evicted"
METRIC_JUDGE_DURATION = "toolscore.judge.duration"
METRIC_JUDGE_COST = "toolscore.judge.cost"
METRIC_EMIT_ERRORS = "toolscore.emit.errors"
ISSUE_TYPE = "issue.type"
ISSUE_SEVERITY = "issue.severity"
OUTCOME = "outcome"
EVICTION_REASON = "reason"
EMIT_OUTPUT = "output"


def oi_evaluation_attr(index: int, field: str) -> str:
    """``evaluations.{index}.evaluation.{field}``: one evaluation in OpenInference's flat form."""
    return f"evaluations.{index}.evaluation.{field}"
