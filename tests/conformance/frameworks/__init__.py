"""Per-framework agent runs for runner.py (one module per framework).

Each module imports its framework lazily, inside its functions, so that the generator (stdlib
only) can import a module for its stdlib-only hooks (e.g. ``server_script``) without the venv.
A module offers ``instrument(stack, provider)`` and ``run(stack, base_url, question, provider)``
returning ``(final_answer, executed)``, where ``executed`` lists the tool calls the framework
really ran: ``{"id", "name", "arguments", "result"}`` in order.
"""
