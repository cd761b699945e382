"""Stage 1 of the method: turning a kernel into an explicitly parameterised template.

A ``Proposal`` is a template (kernel source whose tunable choices are macros, their space, and how
the launch geometry follows from them). Proposals come from the rule-based templater (``_rules``),
from an LLM agent (``_loop``), or from a user; every one is checked in the isolated worker
(``check_proposal``) before it counts, and only a verified one is written (``write_template``).
``ktune templatize`` (``_templatize``) ties these together.

The names below are the agent's interface to the rest of the package; its modules are private.
They load on first use, so naming the package costs nothing.

May import: core, backends, measure, gate, tuner (not report, nor its siblings lab and writeback).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "AGENT_OFF": "_loop", "AgentResult": "_loop", "AgentSettings": "_loop", "run_stage": "_loop",
    "ModelSettings": "_client", "Bench": "_tools",
    "add_templatize_parser": "_templatize:add_parser", "run_templatize": "_templatize:run_cli",
    # Named by the template modules the agent writes, and by the scratch modules its worker imports.
    "relaunch": "_sandbox", "scratch_target": "_sandbox",
}

__all__ = ["AGENT_OFF", "AgentResult", "AgentSettings", "Bench", "ModelSettings", "add_templatize_parser",
           "relaunch", "run_stage", "run_templatize", "scratch_target"]

if TYPE_CHECKING:
    from pytest_ktune.agent._client import ModelSettings
    from pytest_ktune.agent._loop import AGENT_OFF, AgentResult, AgentSettings, run_stage
    from pytest_ktune.agent._sandbox import relaunch, scratch_target
    from pytest_ktune.agent._templatize import add_parser as add_templatize_parser
    from pytest_ktune.agent._templatize import run_cli as run_templatize
    from pytest_ktune.agent._tools import Bench


def __getattr__(name: str) -> Any:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'pytest_ktune.agent' has no attribute {name!r}")
    module, _, attr = where.partition(":")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attr or name)
    globals()[name] = value
    return value
