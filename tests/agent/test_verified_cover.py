"""A written template's configurations outside the cover its check verified are never timed unverified: the
tuner's worker verifies each before it times it (a wrong one fails its trial), and the record names how its
parameters were verified."""

from __future__ import annotations

import sys
from pathlib import Path

from pytest_ktune.agent._check import check_proposal
from pytest_ktune.agent._proposal import Proposal, ProposalCheck
from pytest_ktune.agent._sandbox import write_template
from pytest_ktune.core.discover import import_file
from pytest_ktune.core.keys import cases_by_key
from pytest_ktune.core.space import Value, config_key
from pytest_ktune.core.target import Target
from pytest_ktune.measure.tools import ToolPlan
from pytest_ktune.tuner.settings import TuneContext, TuneSettings
from pytest_ktune.tuner.tune import tune_key

from ._hostile import SCALE_ADD_CL, Project

SPACE = {"A": [0, 1], "B": [0, 1], "C": [0, 1]}


def _source(wrong: dict[str, int] | None) -> str:
    test = " && ".join(f"{k} == {v}" for k, v in (wrong or {}).items()) or "0"
    return SCALE_ADD_CL.replace("if (i < n) out[i] = 2.0f * x[i] + y[i];",
                                f"if (i < n) out[i] = ({test}) ? 0.0f : 2.0f * x[i] + y[i] + 0.0f * (A + B + C);")


def _proposal(wrong: dict[str, int] | None) -> Proposal:
    return Proposal.from_json({"source": _source(wrong), "space": SPACE, "default": {"A": 0, "B": 0, "C": 0},
                               "origin": "agent"}, backend="opencl")


def test_a_wrong_configuration_outside_the_verified_cover_fails_its_trial_and_records_say_how_verified(
        hostile: Project) -> None:
    base = vars(import_file(hostile.kernels / "hostile_targets.py"))["scale_one"]

    def check(p: Proposal) -> ProposalCheck:
        return check_proposal(p, base, root=hostile.root, backend="opencl", sample=0, tools=ToolPlan(mode="off"))

    honest = check(_proposal(None))
    cover = {config_key(c) for c in honest.checked}  # every pair, not every triple
    every = [{"A": a, "B": b, "C": c} for a in (0, 1) for b in (0, 1) for c in (0, 1)]
    outside = next(cfg for cfg in every if config_key(cfg) not in cover)
    wrong = _proposal(outside)
    verified = check(wrong)
    assert verified.ok, verified.message
    assert {config_key(c) for c in verified.checked} == cover

    written = write_template(wrong, base, dest=hostile.kernels, verified=verified)
    (written_py,) = (p for p in written if p.suffix == ".py")
    try:
        template = next(v for v in vars(import_file(written_py)).values()
                        if isinstance(v, Target) and v.file == written_py.resolve())
        assert {config_key(c) for c in template_module_configs(template)} == cover
        params = hostile.root / "ktune-params.json"
        before = params.read_bytes() if params.exists() else None
        ctx = TuneContext(root=hostile.root, params_path=params, backend="opencl", progress=None, reports=False,
                          settings=TuneSettings(trials=8, sampler="grid", seed=1, priors=False))
        ((key, indices),) = cases_by_key(template, "opencl").values()
        out = tune_key(ctx, template, key, indices)
        assert out.failed >= 1 and out.best_params != outside
        record = out.record  # what the write-back would deliver (the tuner writes no params file)
        assert record is not None and (params.read_bytes() if params.exists() else None) == before
        assert record.tuned is not None and record.tuned.verified is not None
        inside = config_key(record.params) in cover
        assert record.tuned.verified.startswith("in the verified cover" if inside else "outside the verified cover")
        assert "verified on n4096 (inputs drawn from the seed, inside guards) before it was timed" in \
            record.tuned.verified
        assert record.to_json()["tuned"]["verified"] == record.tuned.verified
    finally:
        sys.modules.pop(template_module_name(written_py), None)


def template_module_configs(target: Target) -> list[dict[str, Value]]:
    configs: list[dict[str, Value]] = sys.modules[target.module].VERIFIED["configurations"]
    return configs


def template_module_name(py: Path) -> str:
    return py.stem
