"""The figures of the real-conversation corpus, as the tests check them:

    .venv/bin/python -m tests.realworld.measure

reading (runs read exactly, calls read vs made), flags (how many runs are flagged, how many of
those the verdicts call right), recall on the runs the verdicts call unsupported, and the
mutation test (clean answers with one fact replaced)."""

from __future__ import annotations

from tests.realworld import corpus, mutation
from tests.realworld.test_flags import flags, verdicts


def main() -> None:
    runs = corpus.all_runs()
    exact = sum(1 for r in runs if not corpus.reading_mismatches(r))
    read = sum(len(r.trajectory.tool_calls) for r in runs)
    made = sum(len(r.truth.get("tool_calls", [])) for r in runs)
    print(f"reading: {exact}/{len(runs)} runs exactly; {read} calls read, {made} made")

    v = verdicts()
    flagged = {r.key: f for r in runs if (f := flags(r.trajectory))["issues"]}
    right = [k for k in flagged if v.get(k, {}).get("verdict") == "unsupported"]
    print(f"flags: {len(flagged)} runs flagged, {len(right)} right by the verdicts "
          f"({len(flagged) - len(right)} wrong or unread: "
          f"{sorted(set(flagged) - set(right))})")
    adjudicated = [k for k, x in v.items() if x["flagged_by"]]
    print(f"verdicts: {len(v)} runs read, {len(adjudicated)} of them flagged by some version, "
          f"{sum(1 for x in v.values() if x['verdict'] == 'unsupported')} unsupported")
    unsupported = [k for k, x in v.items() if x["verdict"] == "unsupported"]
    caught = [k for k in unsupported if k in flagged]
    print(f"recall on runs read as unsupported: {len(caught)}/{len(unsupported)}; missed: "
          f"{sorted(set(unsupported) - set(caught))}")

    by_key = {r.key: r for r in runs}
    mutated = named = 0
    for key, x in sorted(v.items()):
        if x["verdict"] != "supported":
            continue
        m = mutation.mutate(by_key[key])
        if m is None:
            continue
        mutated += 1
        found = flags(mutation.replay(m))
        if any(m.new_text in i.get("fact", "") or m.new_text in " ".join(i.get("actual") or [])
               for i in found["issues"] if i["type"] == "hallucinated_content"):
            named += 1
    clean_flagged = sum(1 for k, x in v.items() if x["verdict"] == "supported" and k in flagged)
    print(f"mutation: {named}/{mutated} mutated clean answers flagged naming the new fact; "
          f"{clean_flagged} unmutated clean answers flagged")


if __name__ == "__main__":
    main()
