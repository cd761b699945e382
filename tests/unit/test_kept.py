"""The decisions a tune keeps under .ktune/winners/ until they are delivered (tuner.kept): one holds for a
rerun only where it was made between the same best and the same parameters in use, on the same source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import ktune
from pytest_ktune.core.store import Record, Tuned, new_baseline, target_id
from pytest_ktune.tuner import kept
from pytest_ktune.tuner.outcome import CaseChange

CL = "__kernel void k(__global float* o) { o[get_global_id(0)] = 1.0f; }\n"


def _target(text: str = CL) -> ktune.Target:
    @ktune.target(sources={"opencl": ktune.Source(text, name="k.cl")}, space=ktune.Space(BLOCK=[64, 128]),
                  default={"BLOCK": 64}, key=lambda x: {"N": x.shape[0]},
                  cases=[ktune.Case(x=ktune.Tensor((256,)))], reference=np.ones_like)
    def k(kernel: Any, x: Any) -> Any:
        return x

    return k


def _keep(scratch: Path, target: ktune.Target, root: Path) -> Record:
    tid = target_id(target, root)
    record = Record(target=tid, device="pocl", key={"N": 256}, params={"BLOCK": 128},
                    baseline=new_baseline(root, target, "opencl", {"BLOCK": 128}, {}, machine="m"),
                    tuned=Tuned(date="2026-12-02T00:00:00Z", sampler="bo", trials=2, study="s", result="x1.5 faster"))
    kept.keep(scratch, kept.Kept(best={"BLOCK": 128}, current={"BLOCK": 64}, accepted=True, decision="x1.5 faster",
                                 record=record, changes=(CaseChange("n256", 2e-6, 1e-6, 2048),)))
    return record


def test_a_kept_decision_holds_for_the_same_best_against_the_same_parameters(tmp_path: Path) -> None:
    target = _target()
    record = _keep(tmp_path / ".ktune", target, tmp_path)
    again = kept.resume(tmp_path / ".ktune", target, "opencl", tid=record.target, device="pocl", key={"N": 256},
                        best={"BLOCK": 128}, current={"BLOCK": 64})
    assert again is not None and again.record == record and again.accepted
    assert again.changes == (CaseChange("n256", 2e-6, 1e-6, 2048),)
    # Another best, other parameters in use, another key or device: the A/B is timed again.
    for best, current, key, device in (({"BLOCK": 64}, {"BLOCK": 64}, {"N": 256}, "pocl"),
                                       ({"BLOCK": 128}, {"BLOCK": 128}, {"N": 256}, "pocl"),
                                       ({"BLOCK": 128}, {"BLOCK": 64}, {"N": 512}, "pocl"),
                                       ({"BLOCK": 128}, {"BLOCK": 64}, {"N": 256}, "other")):
        assert kept.resume(tmp_path / ".ktune", target, "opencl", tid=record.target, device=device, key=key,
                           best=best, current=current) is None
    kept.discard(tmp_path / ".ktune", [record])
    assert not list((tmp_path / ".ktune" / kept.FOLDER).iterdir())


def test_a_kept_decision_about_another_source_or_a_damaged_file_is_not_taken(tmp_path: Path) -> None:
    record = _keep(tmp_path / ".ktune", _target(), tmp_path)
    changed = _target(CL.replace("1.0f", "2.0f"))
    assert kept.resume(tmp_path / ".ktune", changed, "opencl", tid=record.target, device="pocl", key={"N": 256},
                       best={"BLOCK": 128}, current={"BLOCK": 64}) is None
    kept.path_of(tmp_path / ".ktune", record.target, "pocl", {"N": 256}).write_text("{not json")
    assert kept.resume(tmp_path / ".ktune", _target(), "opencl", tid=record.target, device="pocl", key={"N": 256},
                       best={"BLOCK": 128}, current={"BLOCK": 64}) is None
