"""The floor: a minimal, honest pure-Python pass over a synthetic GenAI run that does what the
worker's job must do at the least, so that the job's cost can be stated as a ratio to it.

It reads the same ended spans (the GenAI attributes the synthetic workload writes: one parse of
each JSON attribute it needs, the tool definitions parsed once per distinct text), computes the
same three code scores in their simplest form (the expected tool among the calls; each call's
arguments against its tool's JSON Schema, with validators compiled once per schema; every number
of the answer found among the numbers of the tool results) and produces the telemetry a scored
run needs at the least: a copy of the agent span with the three scores as attributes, one
``gen_ai.evaluation.result`` event per score and one histogram point per score, through the same
SDK providers as the real job.

It knows one convention and one workload, and gives no explanations, per-call results, evidence
or evaluation spans: a lower bound, not a competitor. Issue 17's target is the job within 1.5x of it.

    .venv/bin/python -m benchmarks.throughput --floor     # ratio job / floor per workload
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Any

from jsonschema import Draft202012Validator
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.sdk.trace import ReadableSpan

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class Floor:
    """The minimal job, with its caches (compiled validators, parsed definitions) across runs,
    as the real job keeps its own."""

    def __init__(self, meter_provider: Any, logger_provider: Any) -> None:
        self._logger = logger_provider.get_logger("floor")
        self._histogram = meter_provider.get_meter("floor").create_histogram("floor.score")
        self._validators: dict[str, dict[str, Draft202012Validator]] = {}
        self.exported: list[ReadableSpan] = []

    def _tools(self, definitions: str) -> dict[str, Draft202012Validator]:
        tools = self._validators.get(definitions)
        if tools is None:
            tools = self._validators[definitions] = {
                d["name"]: Draft202012Validator(d.get("parameters") or {}) for d in json.loads(definitions)
            }
        return tools

    def score(self, spans: Sequence[ReadableSpan]) -> dict[str, float]:
        agent: ReadableSpan | None = None
        validators: dict[str, Draft202012Validator] = {}
        calls: list[tuple[str, Any]] = []
        result_numbers: set[str] = set()
        answer = ""
        for span in spans:
            attrs = span.attributes or {}
            op = attrs.get("gen_ai.operation.name")
            if op == "invoke_agent":
                agent = span
            elif op == "chat":
                definitions = attrs.get("gen_ai.tool.definitions")
                if definitions:
                    validators = self._tools(definitions)
                for message in json.loads(attrs.get("gen_ai.output.messages") or "[]"):
                    for part in message.get("parts", ()):
                        if part.get("type") == "text":
                            answer = part.get("content") or ""
            elif op == "execute_tool":
                arguments = json.loads(attrs.get("gen_ai.tool.call.arguments") or "null")
                calls.append((str(attrs.get("gen_ai.tool.name")), arguments))
                result_numbers.update(_NUMBER.findall(str(attrs.get("gen_ai.tool.call.result") or "")))
        assert agent is not None
        expected = (agent.attributes or {}).get("toolscore.expected_tool")
        valid = sum(1 for name, args in calls if name in validators and validators[name].is_valid(args))
        numbers = _NUMBER.findall(answer)
        scores = {
            "tool_call_accuracy": 1.0 if any(name == expected for name, _ in calls) else 0.0,
            "tool_call_validation": valid / len(calls) if calls else 1.0,
            "tool_result_verification": (sum(n in result_numbers for n in numbers) / len(numbers)) if numbers else 1.0,
        }
        self._emit(agent, scores)
        return scores

    def _emit(self, agent: ReadableSpan, scores: dict[str, float]) -> None:
        attributes = dict(agent.attributes or {})
        for name, value in scores.items():
            attributes[f"gen_ai.evaluation.{name}.score"] = value
            self._logger.emit(LogRecord(timestamp=time.time_ns(), severity_number=SeverityNumber.INFO,
                                        event_name="gen_ai.evaluation.result",
                                        attributes={"gen_ai.evaluation.name": name,
                                                    "gen_ai.evaluation.score.value": value}))
            self._histogram.record(value, {"gen_ai.evaluation.name": name})
        self.exported.append(ReadableSpan(name=agent.name, context=agent.context, parent=agent.parent,
                                          resource=agent.resource, attributes=attributes, events=agent.events,
                                          links=agent.links, kind=agent.kind, status=agent.status,
                                          start_time=agent.start_time, end_time=agent.end_time,
                                          instrumentation_scope=agent.instrumentation_scope))
        if len(self.exported) > 1000:
            self.exported.clear()
