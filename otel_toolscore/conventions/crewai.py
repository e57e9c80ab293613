"""CrewAI: the task a crew's agent runs is the run's question.

CrewAI builds the model's user message from its task (``"\\nCurrent Task: <description>\\n\\nThis
is the expected criteria for your final answer: …"``), so the first user message is the task in
CrewAI's own prompt, not the question. The task's description is on the spans both CrewAI
instrumentations write; this reader states no role (the instrumentation's own convention does)
and only gives those spans their question:

* OpenLLMetry (opentelemetry-instrumentation-crewai): the ``<description>.task`` span carries
  ``crewai.task.description``, recorded as the task starts.
* OpenInference (openinference-instrumentation-crewai): the ``<role>._execute_core`` AGENT span
  (one task run by one agent) carries ``task_key`` and, when the crew shares its data,
  ``formatted_description``; its ``output.value`` is the ``TaskOutput``, which names the task it
  answered (``description``). The ``<Crew>.kickoff`` CHAIN span carries ``crew_tasks``, the
  crew's tasks as they were before the kickoff ``inputs`` were filled into them.

A crew span's task list is its question only when the crew has one task and was kicked off
without inputs (``crew_inputs`` empty): a crew of several tasks has no single question (each
task's run has its own), and with inputs the listed descriptions are templates. (OpenLLMetry's
``crewai.crew.tasks`` is written the same way, and never needed: its task span always says.)
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import semconv as sc
from otel_toolscore.conventions import parsing as p
from otel_toolscore.conventions.base import Attributes, Convention, SpanFacts, Stated

NAME = "crewai"
_KEYS = frozenset({sc.CREWAI_TASK_DESCRIPTION, sc.OI_CREWAI_CREW_KEY})


def detect(span: ReadableSpan, attrs: Attributes) -> Stated | None:
    if sc.CREWAI_TASK_DESCRIPTION in attrs:
        return ""
    if sc.OI_CREWAI_CREW_KEY in attrs and (sc.OI_CREWAI_CREW_TASKS in attrs or sc.OI_CREWAI_TASK_KEY in attrs):
        return ""
    return None


def read(span: ReadableSpan, attrs: Attributes, facts: SpanFacts, stated: Stated) -> None:
    facts.note(NAME)
    if facts.run_input is None:
        facts.run_input = _question(attrs)


def _question(attrs: Attributes) -> str | None:
    for key in (sc.CREWAI_TASK_DESCRIPTION, sc.OI_CREWAI_FORMATTED_DESCRIPTION):
        text = p.as_text(attrs.get(key))
        if text:
            return text
    if sc.OI_CREWAI_TASK_KEY in attrs and sc.OI_OUTPUT_VALUE in attrs:
        text = _description(p.loads(attrs[sc.OI_OUTPUT_VALUE]))
        if text:
            return text
    if sc.OI_CREWAI_CREW_TASKS in attrs and not attrs.get(sc.OI_CREWAI_CREW_INPUTS):
        tasks = p.loads(attrs[sc.OI_CREWAI_CREW_TASKS])
        if isinstance(tasks, list) and len(tasks) == 1:
            return _description(tasks[0])
    return None


def _description(task: Any) -> str | None:
    value = task.get(sc.CREWAI_TASK_DESCRIPTION_KEY) if isinstance(task, dict) else None
    return value if isinstance(value, str) and value.strip() else None


CONVENTION = Convention(NAME, _KEYS, detect, read)
