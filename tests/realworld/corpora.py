"""Every real-conversation corpus of ``realworld/`` (its README): the conversations' runs with
their truth, and the mutated answers (one grounded fact of a real answer replaced by a value
nothing in the conversation supports), applied to the recorded spans and read again.

The same measures the issue tracker and docs/scorers.md quote, per corpus:
reading (runs read exactly), clean answers flagged, mutated answers caught (by kind, and by
whether the run made calls of its own). ``python -m tests.realworld.corpora`` prints them.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from otel_toolscore import build_trajectories, read_otlp_json
from otel_toolscore.scorers.tool_results import ToolResultVerification
from otel_toolscore.trajectory import Trajectory
from tests.support.paths import REALWORLD

#: (folder, truth file, mutations file)
CORPORA: dict[str, tuple[str, str]] = {
    "tau_airline": ("tau_airline_truth.json", "tau_airline_mutations.json"),
    "tau2_telecom": ("tau2_telecom_truth.json", "tau2_telecom_mutations.json"),
    "tau2_airline": ("tau2_airline_truth.json", "tau2_airline_mutations.json"),
}
#: the options a user of these agents sets: a `think` tool returns nothing by design, a transfer
#: to a human ends the conversation
OPTIONS: dict[str, Any] = {"no_output_tools": ["think"], "handoff_tools": ["transfer_to_human_agents"]}
FLAGS = ("hallucinated_content", "contradicts_response")


def _read_json(path: Path) -> Any:
    """A JSON file, or its ``.gz`` beside it."""
    if path.is_file():
        data = path.read_bytes()
    else:
        data = (path.parent / (path.name + ".gz")).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data)


def available() -> bool:
    return all((REALWORLD / truth).is_file() or (REALWORLD / (truth + ".gz")).is_file()
               for truth, _ in CORPORA.values())


@cache
def truth(corpus: str) -> dict[str, Any]:
    return _read_json(REALWORLD / CORPORA[corpus][0])  # type: ignore[no-any-return]


@cache
def mutation_file(corpus: str) -> dict[str, Any]:
    return _read_json(REALWORLD / CORPORA[corpus][1])  # type: ignore[no-any-return]


def _doc_path(corpus: str, key: str) -> Path:
    base = REALWORLD / corpus / f"{key}.json"
    return base if base.is_file() else base.parent / (base.name + ".gz")


@lru_cache(maxsize=8)
def _doc(corpus: str, key: str) -> dict[str, Any]:
    return _read_json(REALWORLD / corpus / f"{key}.json")  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Run:
    corpus: str
    conversation: str
    index: int
    trajectory: Trajectory
    truth: dict[str, Any]

    @property
    def key(self) -> str:
        return f"{self.corpus}/{self.conversation}#{self.index}"


def _top_runs(doc: dict[str, Any]) -> list[Trajectory]:
    runs = [t for t in build_trajectories(read_otlp_json(json.dumps(doc).encode())) if not t.nested]
    runs.sort(key=lambda t: t.start_time or 0)
    return runs


def conversation_runs(corpus: str, key: str) -> list[Run]:
    expected = truth(corpus)[key]["runs"]
    return [Run(corpus, key, i, t, expected[i] if i < len(expected) else {})
            for i, t in enumerate(_top_runs(_doc(corpus, key)))]


@cache
def runs(corpus: str) -> tuple[Run, ...]:
    return tuple(run for key in sorted(truth(corpus)) for run in conversation_runs(corpus, key))


def reading_mismatches(run: Run) -> list[str]:
    """How the run as read differs from its truth (empty: read exactly)."""
    t, want = run.trajectory, run.truth
    out = []
    got_calls = [(c.name, c.arguments) for c in t.tool_calls]
    want_calls = [(c["name"], c["arguments"]) for c in want.get("tool_calls", [])]
    if got_calls != want_calls:
        out.append(f"calls {got_calls} != {want_calls}")
    if t.input != want.get("user_message"):
        out.append(f"input {t.input!r:.80} != {want.get('user_message')!r:.80}")
    if (t.output or None) != want.get("final_text"):
        out.append(f"output {t.output!r:.80} != {want.get('final_text')!r:.80}")
    return out


def issues(trajectory: Trajectory, options: dict[str, Any] = OPTIONS) -> list[dict[str, Any]]:
    """The run's flags (``hallucinated_content``, ``contradicts_response``), run-level and per call."""
    score = ToolResultVerification(**options).score(trajectory)
    found = [i for i in score.details.get("issues", []) if i["type"] in FLAGS]
    found += [i for c in score.details.get("tool_calls", []) for i in c["issues"] if i["type"] in FLAGS]
    return found


# --- mutations ------------------------------------------------------------------------------------


def _replace_strings(value: Any, old: str, new: str) -> tuple[Any, int]:
    if isinstance(value, str):
        return (new, 1) if value == old else (value, 0)
    if isinstance(value, list):
        pairs = [_replace_strings(v, old, new) for v in value]
        return [v for v, _ in pairs], sum(n for _, n in pairs)
    if isinstance(value, dict):
        out, n = {}, 0
        for k, v in value.items():
            out[k], m = _replace_strings(v, old, new)
            n += m
        return out, n
    return value, 0


def replay(corpus: str, mutation: dict[str, Any]) -> Trajectory:
    """The mutated run: in its trace's last ``chat`` span, the answer replaced (as the corpus README
    says), the trace read again on its own."""
    doc = _doc(corpus, mutation["key"])
    trace = mutation["trace_id"]
    spans = [(rs, ss, span) for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]
             if span["traceId"] == trace]
    chats = [s for s in spans if s[2]["name"].startswith("chat")]
    rs, ss, last = max(chats, key=lambda s: int(s[2]["startTimeUnixNano"]))
    edited = copy.deepcopy(last)
    replaced = 0
    for attr in edited["attributes"]:
        text = attr["value"].get("stringValue")
        if attr["key"] == "gen_ai.output.messages" and text:
            value, replaced = _replace_strings(json.loads(text), mutation["original_text"], mutation["mutated_text"])
            attr["value"] = {"stringValue": json.dumps(value)}
    assert replaced, f"the answer of {mutation['key']} {trace} was not found in its last chat span"
    out = {"resourceSpans": [{"resource": rs.get("resource", {}), "scopeSpans": [
        {"scope": ss.get("scope", {}), "spans": [edited if s is last else s for _, _, s in spans]}]}]}
    (top,) = _top_runs(out)
    return top


def _norm(text: str) -> str:
    return re.sub(r"[\s*_`]+", " ", text.casefold()).strip(" .,;:!?()[]'\"")


def names(found: list[dict[str, Any]], value: str) -> bool:
    """A ``hallucinated_content`` flag names the value (its fact, or a fact listed in ``actual``)."""
    want = _norm(value)
    for issue in found:
        if issue["type"] != "hallucinated_content":
            continue
        facts = [issue.get("fact") or (issue.get("evidence") or {}).get("fact") or ""]
        actual = issue.get("actual")
        facts += actual if isinstance(actual, list) else [actual] if isinstance(actual, str) else []
        for fact in facts:
            got = _norm(str(fact or ""))
            if got and (got in want or want in got):
                return True
    return False


@dataclass
class Figures:
    corpus: str
    runs: int = 0
    exact: int = 0
    answered: int = 0
    clean_flagged: list[tuple[str, list[dict[str, Any]]]] | None = None
    mutated: int = 0
    caught: int = 0
    by_kind: dict[str, list[int]] | None = None  # kind -> [caught, total]
    by_calls: dict[bool, list[int]] | None = None
    missed: list[dict[str, Any]] | None = None


def measure(corpus: str, options: dict[str, Any] = OPTIONS) -> Figures:
    f = Figures(corpus, clean_flagged=[], by_kind=defaultdict(lambda: [0, 0]),
                by_calls=defaultdict(lambda: [0, 0]), missed=[])
    for run in runs(corpus):
        f.runs += 1
        f.exact += not reading_mismatches(run)
        if run.trajectory.output:
            f.answered += 1
            found = issues(run.trajectory, options)
            if found:
                f.clean_flagged.append((run.key, found))  # type: ignore[union-attr]
    for m in mutation_file(corpus)["mutations"]:
        found = issues(replay(corpus, m), options)
        ok = names(found, m["replacement"])
        f.mutated += 1
        f.caught += ok
        for table, key in ((f.by_kind, m["kind"]), (f.by_calls, m["run_tool_calls"])):
            table[key][0] += ok  # type: ignore[index]
            table[key][1] += 1  # type: ignore[index]
        if not ok:
            f.missed.append(m)  # type: ignore[union-attr]
    return f


def main() -> None:
    import sys

    verbose = "-v" in sys.argv
    total = Counter()  # type: ignore[var-annotated]
    for corpus in CORPORA:
        f = measure(corpus)
        kinds = ", ".join(f"{k} {c}/{n}" for k, (c, n) in sorted(f.by_kind.items()))  # type: ignore[union-attr]
        calls = ", ".join(f"{'own calls' if k else 'no calls'} {c}/{n}"
                          for k, (c, n) in sorted(f.by_calls.items()))  # type: ignore[union-attr]
        print(f"{corpus}: read exactly {f.exact}/{f.runs}; clean flagged {len(f.clean_flagged)}/{f.answered}; "  # type: ignore[arg-type]
              f"mutations caught {f.caught}/{f.mutated} ({kinds}; {calls})")
        total.update(runs=f.runs, exact=f.exact, answered=f.answered, flagged=len(f.clean_flagged or []),
                     mutated=f.mutated, caught=f.caught)
        if verbose:
            for key, found in f.clean_flagged or []:
                print("  FLAG", key, [(i["type"], i.get("reason"), i.get("fact") or (i.get("evidence") or {}).get("fact"),
                                       (i.get("evidence") or {}).get("sentence", i.get("sentence", ""))[:100])
                                      for i in found])
            for m in f.missed or []:
                print("  MISS", m["key"], m["run_index"], m["kind"], m.get("subkind"), m["original_value"], "->",
                      m["replacement"], "|", m["sentence"][:120].replace("\n", " "))
    print(f"all: read exactly {total['exact']}/{total['runs']}; clean flagged {total['flagged']}/{total['answered']}; "
          f"mutations caught {total['caught']}/{total['mutated']}")


if __name__ == "__main__":
    main()
