"""A proposal's covering design run in the isolated worker, batch by batch, within the stage's budget.

The batches are the default alone on every case, the rest of the design on the declared cases and the odd
shapes, and the configurations that hold every value on the edge-value cases (``_check`` makes them). Each
answer of the worker is one configuration's compile and check, and gets the trial timeout, cut to what is
left of the budget. The diagnosis says what really happened:

- a configuration that gives no answer within the trial timeout while the budget still holds is run
  again alone (the worker compiles the next ones while it checks one, and a compiler may hold the
  device's runtime meanwhile), and named only when it takes the time alone (it hangs, or is far too slow);
- a budget that runs out stops the check, and the result says so: how many configurations were checked
  and which remained, with none of them blamed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_ktune.agent._budget import MIN_SLICE_S, Budget
from pytest_ktune.agent._proposal import _kv
from pytest_ktune.core.space import Value, config_key
from pytest_ktune.measure.worker import Outcome, WorkerPool

Batch = tuple[Sequence[int], Sequence[int] | None]  # configurations (indices in the design), cases (None: all)
Explain = Callable[[Outcome, str], str]


@dataclass
class Progress:
    """What running a design found so far."""

    checked: list[Mapping[str, Value]] = field(default_factory=list)
    failures: list[tuple[Mapping[str, Value], str]] = field(default_factory=list)
    infeasible: list[tuple[Mapping[str, Value], str]] = field(default_factory=list)
    first: str = ""  # the first failure, in words
    stage: str = "ok"  # its stage
    out_of_time: str = ""  # the budget that ran out, when one did
    done: set[int] = field(default_factory=set)  # design indices answered in the batch running or before
    phase: str = ""  # the batch the check stopped in


def stage_of(status: str, reason: str) -> str:
    """The stage a worker's outcome fails at."""
    if status == "infeasible":
        return "limits"
    if reason.startswith("compile error"):
        return "compile"
    if reason.startswith("no answer within"):
        return "timeout"
    low = reason.lower()
    if reason.startswith("the worker process") or "illegal" in low or "out of bounds" in low \
            or "misaligned" in low:
        return "crash"
    return "verify"


_PHASES = ("the default", "the declared cases and the odd shapes", "the edge-value cases")


def run_design(pool: WorkerPool, configs: Sequence[Mapping[str, Value]], batches: Sequence[Batch], *, seed: int,
               trial_timeout_s: float, budget: Budget | None, explain: Explain) -> Progress:
    """Run the batches (see the module docstring); stops at the first failure that costs a worker
    (a crash, a timeout), and once the budget is spent."""
    got = Progress()
    over_limits: set[int] = set()
    for phase, (batch, only) in zip(_PHASES, batches, strict=False):
        todo = [n for n in batch if n not in over_limits]
        if got.failures or not todo or (only is not None and not only):
            continue
        got.phase, got.done = phase, set()
        if budget is not None and budget.spent():
            got.out_of_time = budget.spent()
            return got
        for n, answer in zip(todo, pool.evaluate([dict(configs[n]) for n in todo], seed, only=only), strict=False):
            out, cfg = answer, dict(answer.params)
            stage = "ok" if out.status == "ok" else stage_of(out.status, out.reason)
            if stage == "timeout" and not _ran_out(budget):
                # The worker compiles the next configurations while it checks one, and a compiler may hold
                # the device's runtime meanwhile: judged alone, a configuration has only itself to blame.
                out = next(iter(pool.evaluate([cfg], seed, only=only)))
                stage = "ok" if out.status == "ok" else stage_of(out.status, out.reason)
            if stage == "timeout" and _ran_out(budget):
                assert budget is not None
                got.out_of_time = budget.spent() or f"the wall-time budget of {budget.wall_s:g} s is spent"
                return got  # the time ran out under this configuration: it is not to blame
            got.done.add(n)
            if stage == "ok":
                if cfg not in got.checked:
                    got.checked.append(cfg)
            elif stage == "limits" and n > 0:
                got.infeasible.append((cfg, out.reason))
                over_limits.add(n)
            else:
                got.failures.append((cfg, out.reason))
                if not got.first:
                    which = "the default" if n == 0 else "the configuration"
                    got.first = f"{which} {_kv(cfg)} failed ({stage}): " + explain(out, stage)
                    got.stage = stage
                if stage in ("crash", "timeout"):
                    break  # each costs a restarted worker; one is enough to send back
            if budget is not None:
                if budget.spent():
                    got.out_of_time = budget.spent()
                    return got
                pool.trial_timeout_s = budget.cap(trial_timeout_s)
    return got


def _ran_out(budget: Budget | None) -> bool:
    return budget is not None and budget.left_s() < MIN_SLICE_S * 2


def out_of_time(got: Progress, configs: Sequence[Mapping[str, Value]], batches: Sequence[Batch]) -> str:
    """The message of a check the budget stopped: what was checked, what remained."""
    total = len(configs)
    answered = {config_key(c) for c in got.checked} | {config_key(c) for c, _ in got.infeasible}
    if got.phase == _PHASES[2]:
        remained = [n for n in batches[2][0] if n not in got.done]
        where = (f"all {total} configurations were checked on the declared cases and the odd shapes; on the "
                 f"edge-value cases, {len(batches[2][0]) - len(remained)} of {len(batches[2][0])}")
    else:
        remained = [n for n in range(total) if config_key(configs[n]) not in answered]
        where = f"{total - len(remained)} of {total} configurations were checked"
    shown = "; ".join(_kv(configs[n]) for n in remained[:4]) + ("; ..." if len(remained) > 4 else "")
    return (f"the check ran out of time ({got.out_of_time}) before it was done: {where}; {len(remained)} "
            f"remained, not checked ({shown}). No configuration failed; this is not a hang. Give the stage more "
            "time, or a smaller space")
