"""The agent as a proposer for `ktune templatize`: one model turn per proposal, outside the loop."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_ktune.agent._budget import Budget
from pytest_ktune.agent._client import (
    BudgetError,
    ModelClient,
    ModelError,
    ModelSettings,
)
from pytest_ktune.agent._loop import SYSTEM, _unusable
from pytest_ktune.agent._messages import for_model_json, one_line
from pytest_ktune.agent._proposal import Proposal, ProposalError
from pytest_ktune.agent._tools import TOOLS, _check_json, tool_result
from pytest_ktune.agent._transcript import Transcript, new_run_id
from pytest_ktune.core.redact import Redactor


class AgentProposer:
    """The model as a :class:`~pytest_ktune.agent._proposal.Proposer`: each call answers its last
    proposal's tool call with the check, and asks for the next (or None when it finishes, refuses,
    or the endpoint or a budget stops it; ``stop`` says which)."""

    def __init__(self, settings: ModelSettings, root: Path, *, max_bad_replies: int = 3) -> None:
        self.root = root
        self.transcript = Transcript(root / ".ktune" / "agent", new_run_id("templatize"))
        self.client = ModelClient(settings, self.transcript)
        self.max_bad_replies = max_bad_replies
        self.messages: list[Mapping[str, Any]] = []
        self._pending: str | None = None  # the tool call the last proposal came from
        self.stop = ""
        self.refusals: list[str] = []  # proposals refused before a check (the schema), one line each, for the console

    @property
    def redactor(self) -> Redactor:
        """What the model sends is redacted with this (the API key and the environment's secrets)."""
        return self.client.redactor

    def use_budget(self, budget: Budget) -> None:
        """Keep the model's requests within ``budget`` (templatize's run)."""
        self.client.budget = budget

    def __call__(self, previous: Any, check: Any, context: Mapping[str, Any]) -> Any:

        tools = [t for t in TOOLS if t.name in ("propose_template", "plan")]
        if not self.messages:
            self.messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": _context_text(
                context, previous, check)}]
        elif self._pending is not None:
            answer = _check_json(check) if check is not None else {"ok": False}
            self.messages.append({"role": "tool", "tool_call_id": self._pending,
                                  "content": json.dumps(for_model_json(answer, self.root))})
        self._pending = None
        bad = 0
        try:
            while bad < self.max_bad_replies:
                reply = self.client.ask(self.messages, tools)
                self.messages.append(reply.message)
                problem = _unusable(reply)
                if problem.startswith("refused"):
                    self.stop = f"the model {problem}"
                    return None
                if problem:
                    bad += 1
                    self.messages.append({"role": "user", "content": f"Your answer could not be used: {problem}. "
                                                                     "Call propose_template, or plan to finish."})
                    continue
                chosen: Proposal | None = None
                for call in reply.tool_calls:
                    if chosen is not None or call.error or call.name == "plan":
                        if call.name == "plan" and not call.error and call.arguments is not None \
                                and call.arguments.get("action") == "finish":
                            self.stop = "the model finished"
                        text = call.error or ("one proposal at a time" if chosen is not None else "noted")
                        self.messages.append(tool_result(call, {"ok": not call.error, "note": text}, self.root))
                        continue
                    assert call.arguments is not None
                    try:
                        chosen = Proposal.from_json({**call.arguments, "origin": "agent"},
                                                    backend=str(context.get("backend")))
                        self._pending = call.id
                    except ProposalError as exc:
                        self.refusals.append(f"rejected at schema: {one_line(exc.message)}")
                        self.messages.append(tool_result(call, {"ok": False, "error": exc.message,
                                                                "hint": exc.hint}, self.root))
                if chosen is not None:
                    return chosen
                if self.stop:
                    return None
                bad += 1
            self.stop = f"{bad} unusable answers in a row (the bound)"
        except (ModelError, BudgetError) as exc:
            self.stop = exc.message
        return None


def _context_text(context: Mapping[str, Any], previous: Any, check: Any) -> str:
    rules = ""
    if previous is not None:
        rules = (f"\nThe rule-based templater proposed this space: {dict(previous.space)} (default "
                 f"{dict(previous.default)}); its check: {check.summary() if check is not None else 'not run'}.")
    return (f"Template the kernel of target {context.get('target')} for {context.get('backend')} (device limits: "
            f"{context.get('device')}). Key dimensions: {context.get('key_dims')}; cases: {context.get('cases')}. "
            f"You have {context.get('max_rounds')} proposals.{rules}\nThe kernel source:\n```\n"
            f"{context.get('base_source')}```")


def make_proposer(model: str | None = None, root: Path | None = None) -> AgentProposer | None:
    """The agent proposer for ``ktune templatize``, or None when no model is configured (the agent is off)."""
    settings = ModelSettings.from_env(model)
    if settings is None:
        return None
    return AgentProposer(settings, (root or Path.cwd()).resolve())
