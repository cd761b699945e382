"""The compiler's messages (warnings) of the programs built in this process, each line once per target.

With ``KTUNE_COMPILER_OUTPUT=1`` they are shown: printed as they come where ``echo`` is set (a
production call, the tuner's workers), and in the gate's summary (its measurement process keeps them
for the session to ask for). Without it they are kept, and a failed check of the target carries
them in its message: a warning is often what explains a wrong result.
"""

from __future__ import annotations

import sys
from typing import TextIO

from pytest_ktune.backends.compile_log import compiler_output_wanted


class CompilerOutput:
    """Distinct compiler message lines, by the target (``Target.where``) whose build printed them."""

    def __init__(self, echo: TextIO | None = None) -> None:
        self.echo = echo
        self._lines: dict[str, dict[str, None]] = {}

    def add(self, where: str, log: str) -> list[str]:
        """Keep the lines of ``log`` not seen before for ``where``; returns them (printed to ``echo``)."""
        if not log:
            return []
        kept = self._lines.setdefault(where, {})
        new = [line for line in log.splitlines() if line.strip() and line not in kept]
        kept.update(dict.fromkeys(new))
        if new and self.echo is not None:
            body = "\n".join(f"  {line}" for line in new)
            print(f"ktune: compiler output for {where}:\n{body}", file=self.echo, flush=True)
        return new

    def lines(self, where: str) -> list[str]:
        """The lines kept for ``where``, in the order first seen."""
        return list(self._lines.get(where, {}))

    def all(self) -> dict[str, list[str]]:
        """Every target's lines."""
        return {w: list(lines) for w, lines in self._lines.items() if lines}


#: This process's compiler output; it echoes to stderr when KTUNE_COMPILER_OUTPUT asks for it.
OUTPUT = CompilerOutput(echo=sys.stderr if compiler_output_wanted() else None)


def with_warnings(message: str, where: str, *, limit: int = 20) -> str:
    """``message`` followed by the compiler's messages for ``where`` (at most ``limit`` lines), if any."""
    lines = OUTPUT.lines(where)
    if not lines:
        return message
    shown = "\n".join(f"  {line}" for line in lines[:limit])
    more = f"\n  ... and {len(lines) - limit} more" if len(lines) > limit else ""
    return f"{message}\nthe compiler said, building this target:\n{shown}{more}"
