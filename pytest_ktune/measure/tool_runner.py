"""The process a checking tool watches: verifies configurations of a target on its cases, one by one.

Each configuration runs on every case whose key its constraints allow (with ``groups``, lists of positions
in the cases: on the first of each group that they allow).

Started by ``measure.tools`` as ``python -m pytest_ktune.measure.tool_runner SPEC.json`` (under
compute-sanitizer, or with Oclgrind as the OpenCL device). Before and after each configuration it
prints a marker line, on stdout and on stderr, after the device has finished its work, so that what the
tool reports in between belongs to that configuration; the end marker carries the outcome as JSON.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

START = "@@ktune-tool config {index} start"
END = "@@ktune-tool config {index} end "


def _say(line: str) -> None:
    for stream in (sys.stdout, sys.stderr):
        stream.write(line + "\n")
        stream.flush()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec: dict[str, Any] = json.loads(Path(args[0]).read_text())
    from pytest_ktune import backends
    from pytest_ktune.core.errors import KtuneError, LaunchError
    from pytest_ktune.measure.evaluate import Job, verify_once
    from pytest_ktune.measure.worker import TargetRef, import_target

    if spec["backend"] == "cuda":
        import cupy

        # Every buffer its own allocation, so the sanitizer knows each one's bounds.
        cupy.cuda.set_allocator(None)
    target = import_target(TargetRef(**{**spec["target"], "sys_path": tuple(spec["target"]["sys_path"])}))
    backend = backends.create(spec["backend"])
    jobs = [Job.of(backend, target, target.cases[i]) for i in spec["cases"]]
    groups: list[list[int]] = spec.get("groups") or [[j] for j in range(len(jobs))]
    for index, cfg in enumerate(spec["configs"]):
        _say(START.format(index=index))
        outcome: dict[str, Any] = {"params": cfg, "status": "ok", "reason": ""}
        try:
            for group in groups:
                j = next((j for j in group if target.space.valid(cfg, jobs[j].key)), None)
                if j is None:
                    continue
                outcome.setdefault("cases", []).append(jobs[j].case_id)
                verify_once(jobs[j], cfg, int(spec["seed"]) + 7919 * j)
                backend.synchronize()
        except LaunchError as exc:  # the device context may be unusable for the rest
            outcome.update(status="failed", reason=" ".join(exc.message.split())[:400], fatal=True)
        except KtuneError as exc:
            outcome.update(status="failed", reason=" ".join(exc.message.split())[:400])
        except Exception as exc:  # reported, not raised: the tool's own report matters more
            outcome.update(status="failed", reason=f"{type(exc).__name__}: {exc}"[:400],
                           trace=traceback.format_exc(limit=3)[-1000:])
        _say(END.format(index=index) + json.dumps(outcome, default=str))
        if outcome.get("fatal"):
            break
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
