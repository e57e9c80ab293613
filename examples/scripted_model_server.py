"""The scripted OpenAI-compatible model server the examples and the tests use on 127.0.0.1.

The code lives in ``otel_toolscore/demo_agent/scripted_model_server.py`` so that
``otel-toolscore demo`` runs from an installed wheel too; ``import scripted_model_server`` from
this directory gives that module itself, and ``python examples/scripted_model_server.py
[scenario.json]`` runs it.
"""

import sys

from otel_toolscore.demo_agent import scripted_model_server as _module

if __name__ == "__main__":
    raise SystemExit(_module.main(sys.argv[1:]))
sys.modules[__name__] = _module
