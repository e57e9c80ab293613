"""What several test modules and the benchmarks share; each module here has one job:

* ``paths``: where the repository, the committed corpora (fixture traces, the real conversations;
  extracted on first import) and the conformance captures are;
* ``env``: the runner's own ``OTEL_*`` settings kept out of a test;
* ``otlp_sink``: an OTLP receiver (HTTP and gRPC) that keeps what it is sent;
* ``judge_server``: a scripted OpenAI-compatible judge, faults included;
* ``spans``: spans of an agent run, built by a real SDK tracer or as ``ReadableSpan``s;
* ``pipeline``: ``ToolScoreSpanProcessor`` wired to in-memory span, log and metric sinks;
* ``trajectory_factory``: small trajectories for the scorer tests;
* ``timing``: the slack a time bound allows on a loaded machine, and polling for a condition.

Nothing is imported here, so that a benchmark importing one module loads only that one.
"""
