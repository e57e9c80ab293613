"""The parts of ``ToolScoreSpanProcessor`` (``runtime/processor.py``, the thin public class that
wires them and takes the SDK's calls), each keeping one of the processor's promises:

- ``forward``: the hand-over to the downstream processor. *Never lose a span, never forward one
  twice*: a held span leaves exactly once, scored or not.
- ``buffers``: the per-trace buffers and completion per run. *Bounded memory* (``max_pending_traces``,
  ``max_spans_per_trace``, the marks of traces too large to score) and *never score a run twice*
  (a run leaves its buffer once; its late spans only pass).
- ``timer``: the deadlines (completion grace, hold timeout, quiet wait, TTL): *no span held past
  ``hold_timeout``*, whatever the worker does.
- ``ready`` and ``scoring``: the hand-off of completed runs to the worker (and the scoring
  process): a bounded queue, every run submitted done exactly once (scored, answered, or lost and
  counted).
- ``tally``: what the app's threads count (drops, evictions), added to the metrics off them.

The split follows the SDK's ``BatchSpanProcessor`` (a thin public class over one engine) and
logfire's tail-sampling wrapper (policy, buffer and downstream apart); docs/design.md, "The
processor's parts".
"""
