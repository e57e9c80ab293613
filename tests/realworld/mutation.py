"""Mutations of real answers: one grounded fact of a recorded answer replaced by a plausible value
that nothing in the conversation supports, written back into the recorded OTLP span, and the
trace read again.

What counts as "nothing supports" here is decided on the raw text, independently of the
scorer: the new number appears in no source text and is not the sum, difference or a small
multiple of two numbers written there; a new date appears nowhere as that day; a new identifier
appears nowhere. The scorer must then flag the run, naming the new value.
"""

from __future__ import annotations

import copy
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_toolscore import build_trajectories, read_otlp_json
from otel_toolscore.scorers._facts import Fact, facts_of
from otel_toolscore.trajectory import Trajectory
from tests.realworld import corpus

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_MONTH_NAMES = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
                "October", "November", "December"]


@dataclass(frozen=True)
class Mutation:
    run: corpus.Run
    fact: Fact  # the fact of the answer that was replaced
    new_text: str  # what replaced it, as written in the answer
    answer: str  # the mutated answer


def source_texts(t: Trajectory) -> list[str]:
    """Every source as raw text: tool results of the conversation, user messages, the system."""
    texts = [t.input or "", t.system_instructions or ""]
    for call in t.tool_calls:
        texts.append(call.result_raw or json.dumps(call.result, default=str))
        texts.append(json.dumps(call.arguments, default=str))  # the query a result answers
    for llm in t.llm_calls:
        for m in llm.input_messages:
            if m.role in ("user", "system", "tool") and m.content:
                texts.append(m.content)
            texts.extend(json.dumps(c.arguments, default=str) for c in m.tool_calls)
            for part in m.tool_results:
                texts.append(part.content_raw or json.dumps(part.content, default=str))
    return texts


def _source_numbers(texts: list[str]) -> set[float]:
    return {abs(float(n)) for text in texts for n in _NUMBER.findall(text.replace(",", ""))}


def _unsupported_number(value: float, numbers: set[float], blob: str) -> bool:
    if value in numbers or str(int(value)) in blob:
        return False
    small = {n for n in numbers if n > 10}
    if any(value - a in small or value + a in small or value / k in small for a in small for k in (2, 3, 4)):
        return False
    return True


def _new_number(fact: Fact, numbers: set[float], blob: str) -> str | None:
    value = abs(fact.value)
    for step in (0.37, 0.29, 0.61, 0.23, 0.83, 0.47):
        new = float(round(value * (1 + step))) if value >= 20 else value + 13
        if new != value and _unsupported_number(new, numbers, blob):
            digits = f"{int(new):,}" if "," in fact.text else str(int(new))
            return re.sub(r"\d[\d,]*(?:\.\d+)?", digits, fact.text, count=1)
    return None


_MONTH_DAY = re.compile(r"^(?P<month>[A-Z][a-z]+\.?\s+)(?P<day>\d{1,2})(?:st|nd|rd|th)?(?P<rest>(?:,?\s+\d{4})?)$")


def _ordinal(day: int, written: str) -> str:
    if not re.search(r"(?:st|nd|rd|th)$", written.split(",")[0]):
        return str(day)
    return f"{day}{'th' if 10 <= day % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(day % 10, 'th')}"


def _new_date(fact: Fact, blob: str) -> str | None:
    year, month, day = fact.value
    name = _MONTH_NAMES[month - 1]
    for shift in (5, 8, 11, 3):
        new_day = (day + shift - 1) % 28 + 1
        if f"-{month:02d}-{new_day:02d}" in blob or re.search(rf"{name[:3]}\w*\.? {new_day}\b", blob):
            continue
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", fact.text):
            return f"{year}-{month:02d}-{new_day:02d}"
        m = _MONTH_DAY.match(fact.text)
        if m:
            return f"{m['month']}{_ordinal(new_day, fact.text)}{m['rest']}"
    return None


def _new_identifier(fact: Fact, blob_folded: str) -> str | None:
    text = fact.text
    digits = re.findall(r"\d", text)
    if not digits or len(text) < 4:
        return None
    for rotate in (3, 7, 5):
        new = re.sub(r"\d", lambda m, rotate=rotate: str((int(m.group(0)) + rotate) % 10), text)
        if new.casefold() not in blob_folded:
            return new
    return None


def mutate(run: corpus.Run, index: int = 0) -> Mutation | None:
    """The ``index``-th possible mutation of the run's answer (facts in answer order)."""
    t = run.trajectory
    answer = t.output or ""
    texts = source_texts(t)
    blob = "\n".join(texts)
    folded = blob.casefold()
    numbers = _source_numbers(texts)
    candidates = sorted(
        (f for f in facts_of(answer) if f.kind in ("money", "number", "date", "identifier") and not f.minor),
        key=lambda f: answer.find(f.text),
    )
    options = []
    for fact in candidates:
        if fact.kind in ("money", "number"):
            if (fact.kind == "number" and fact.unit is not None) or str(int(abs(fact.value))) not in blob.replace(",", ""):
                continue  # only facts written in the sources are "grounded" for this purpose
            new = _new_number(fact, numbers, blob.replace(",", ""))
        elif fact.kind == "date":
            new = _new_date(fact, blob)
        else:
            if fact.value not in folded:
                continue
            new = _new_identifier(fact, folded)
        if new and new != fact.text:
            options.append((fact, new))
    if index >= len(options):
        return None
    fact, new = options[index]
    return Mutation(run, fact, new, answer.replace(fact.text, new, 1))


def replay(mutation: Mutation) -> Trajectory:
    """The run's trace read again after its recorded answer was edited in the OTLP file."""
    run = mutation.run
    doc = json.loads((corpus.TRACES / f"{run.conversation}.json").read_text())
    old, new = run.trajectory.output, mutation.answer
    edited = 0
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                if span["traceId"] != run.trajectory.trace_id:
                    continue
                for attr in span["attributes"]:
                    text = attr["value"].get("stringValue")
                    if text and json.dumps(old)[1:-1] in text:
                        value = _replace_strings(json.loads(text), old, new)
                        attr["value"] = {"stringValue": json.dumps(value)}
                        edited += 1
    assert edited, f"the answer of {run.key} was not found in its trace"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mutated.json"
        path.write_text(json.dumps(doc))
        runs = [t for t in build_trajectories(read_otlp_json(path)) if t.trace_id == run.trajectory.trace_id]
    (top,) = [t for t in runs if not t.nested]
    return top


def _replace_strings(value: Any, old: str | None, new: str) -> Any:
    if isinstance(value, str):
        return new if value == old else value
    if isinstance(value, list):
        return [_replace_strings(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _replace_strings(v, old, new) for k, v in value.items()}
    return copy.copy(value)
