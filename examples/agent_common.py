"""What the example agents share: their tools, the demo runs, and a small tool-calling loop.

The code lives in ``otel_toolscore/demo_agent/agent_common.py`` so that ``otel-toolscore demo``
runs from an installed wheel too; the examples of this directory keep importing it as
``agent_common``, which is that module itself (not a copy).
"""

import sys

from otel_toolscore.demo_agent import agent_common as _module

sys.modules[__name__] = _module
