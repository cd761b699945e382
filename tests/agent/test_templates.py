"""Templates: the rule-based templater on the naive kernels, check_proposal's verdicts, write_template,
and ``ktune templatize`` end to end, on PoCL."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_ktune.agent._check import check_proposal
from pytest_ktune.agent._proposal import LaunchExpr, Proposal, ProposalCheck, ProposalError
from pytest_ktune.agent._rules import rule_proposal
from pytest_ktune.agent._sandbox import write_template
from pytest_ktune.agent._templatize import AGENT_OFF, TemplatizeSettings, templatize
from pytest_ktune.core.discover import import_file
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.target import Target

REPO = Path(__file__).resolve().parents[2]
NAIVE = REPO / "benchmarks" / "naive"
PKG = "ktnaive"  # the copy's package name, so it never meets benchmarks/naive in sys.modules

# A second target over the naive SiLU kernel, with two cases, for "wrong on one case only".
TWO_CASES = '''
from typing import Any

import numpy as np

import ktune
from .silu_and_mul import silu_and_mul_reference


@ktune.target(
    sources={"opencl": "silu_and_mul.cl"},
    space=ktune.Space(NAIVE=[1]),
    default={"NAIVE": 1},
    key=lambda x: {"T": x.shape[0], "I": x.shape[1] // 2},
    cases=[ktune.Case(x=ktune.Tensor((4, 2 * 256), "float32")),
           ktune.Case(x=ktune.Tensor((6, 2 * 256), "float32"))],
    reference=silu_and_mul_reference,
    kernel="silu_and_mul_naive",
)
def silu_two(kernel: ktune.Kernel, x: Any) -> Any:
    tokens, two_i = x.shape
    out = kernel.empty((tokens, two_i // 2), x.dtype)
    n = tokens * (two_i // 2)
    kernel.launch(grid=min(ktune.cdiv(n, 128), 1024), block=128,
                  args=[out, x, np.int64(tokens), np.int32(two_i // 2)])
    return out
'''


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A project root holding a copy of the naive kernels as the package ``ktnaive``."""
    pytest.importorskip("pyopencl")
    base = tmp_path_factory.mktemp("templates")
    shutil.copytree(NAIVE, base / PKG, ignore=shutil.ignore_patterns("__pycache__", "*_tpl*"))
    (base / PKG / "two_cases.py").write_text(TWO_CASES)
    yield base
    for name in [m for m in list(sys.modules) if m == PKG or m.startswith(PKG + ".")]:
        del sys.modules[name]


def _target(root: Path, module: str, name: str) -> Target:
    t = getattr(import_file(root / PKG / f"{module}.py"), name)
    assert isinstance(t, Target)
    return t


# -- the rules -------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["cuda", "opencl"])
def test_rules_expose_the_naive_kernels_launch_constants(root: Path, backend: str) -> None:
    silu = rule_proposal(_target(root, "silu_and_mul", "silu_and_mul_naive"), backend)
    assert silu.default == {"BLOCK": 128, "GRID_CAP": 1024}
    assert silu.launch == {"block": "BLOCK", "grid": "min(cdiv(n, BLOCK), GRID_CAP)"}
    assert set(silu.space["BLOCK"]) == {32, 64, 128, 256, 512, 1024}
    assert "(128" not in silu.source.replace(" ", "")  # the launch bounds literal follows BLOCK now
    assert silu.origin == "rules" and "No structural rewrite" in silu.notes

    rms = rule_proposal(_target(root, "rmsnorm", "rmsnorm_naive"), backend)
    assert rms.default == {"THREADS": 128} and rms.launch == {"block": "THREADS"}
    assert "#ifndef THREADS\n#define THREADS 128\n#endif" in rms.source

    gelu = rule_proposal(_target(root, "gelu_tanh_and_mul", "gelu_tanh_and_mul_naive"), backend)
    assert gelu.default == {"ITEMS": 1, "BLOCK": 128, "GRID_CAP": 1024}
    assert gelu.space["ITEMS"] == (1, 2, 4, 8)
    assert "constexpr" not in gelu.source  # the CUDA constexpr became a guarded macro


def test_rules_tie_a_vector_width_to_the_row_dimension(root: Path, tmp_path: Path) -> None:
    base = _target(root, "silu_and_mul", "silu_and_mul_naive")
    src = tmp_path / "k.cl"
    src.write_text("#define VEC 1\n" + base.source_text("opencl"))
    p = rule_proposal(dataclasses.replace(base, sources={"opencl": src}), "opencl")
    assert p.space["VEC"] == (1, 2, 4, 8) and "I % VEC == 0" in p.constraints


def test_rules_say_so_when_there_is_nothing_to_parameterise(root: Path, tmp_path: Path) -> None:
    base = _target(root, "silu_and_mul", "silu_and_mul_naive")
    src = tmp_path / "k.cl"
    src.write_text("#define WARP 32\n__kernel void f(void) {}\n")
    fixed = dataclasses.replace(base, sources={"opencl": src}, fn=lambda kernel, x: None)
    with pytest.raises(ProposalError, match=r"found no launch constant.*WARP=32"):
        rule_proposal(fixed, "opencl")


def test_a_rule_template_compiles_and_verifies_on_pocl(root: Path) -> None:
    # The SiLU template is verified by the templatize test below, RMSNorm's here (its block size is
    # also its reduction's width, so a sampled one that is not 128 tests the tie).
    base = _target(root, "rmsnorm", "rmsnorm_naive")
    rules = rule_proposal(base, "opencl")
    check = check_proposal(rules, base, root=root, backend="opencl", sample=1, seed=3)
    assert check.ok, check.message
    assert check.stage == "ok" and check.checked[0] == rules.default
    # every value of the space was checked, not a sample of it
    assert sorted(c["THREADS"] for c in check.checked) == sorted(rules.space["THREADS"])
    ids = [cid for cid, _ in check.cases]
    assert ids[0] == "T32-H1024-float32" and {f"{ids[0]}~{k}" for k in ("zeros", "tiny", "large", "sweep")} <= set(ids)
    assert f"{ids[0]}~odd(32->31,1024->1023)" in ids


# -- what check_proposal catches --------------------------------------------------------------------


def _rules(root: Path, module: str = "silu_and_mul", name: str = "silu_and_mul_naive") -> tuple[Target, Proposal]:
    base = _target(root, module, name)
    return base, rule_proposal(base, "opencl")


def test_a_template_that_does_not_compile(root: Path) -> None:
    base, p = _rules(root)
    bad = dataclasses.replace(p, source=p.source.replace("const long row", "const long long long row"))
    check = check_proposal(bad, base, root=root, backend="opencl", sample=0)
    assert not check.ok and check.stage == "compile"
    assert "the default BLOCK=128, GRID_CAP=1024 failed (compile)" in check.message
    # the compiler's complaint, at the proposal's own line, and no path of this machine
    assert "silu_and_mul_proposal.cl:12:25: error: cannot combine" in check.message
    assert "const long long long row = e / I;" in check.message and str(root) not in check.message


def test_a_template_wrong_on_one_case_only(root: Path) -> None:
    base, p = _rules(root, "two_cases", "silu_two")
    bad = dataclasses.replace(p, source=p.source.replace("* u, out, e)", "* u + (T == 6 ? 1.0f : 0.0f), out, e)"))
    check = check_proposal(bad, base, root=root, backend="opencl", sample=0)
    assert not check.ok and check.stage == "verify"
    assert "T6-I256" in check.message and "T4-I256" not in check.message


def test_a_template_that_reads_out_of_bounds(root: Path) -> None:
    base, p = _rules(root)
    bad = dataclasses.replace(p, source=p.source.replace("LOAD(x, row * 2 * I + c)",
                                                         "LOAD(x, row * 2 * I + c + (1L << 40))"))
    check = check_proposal(bad, base, root=root, backend="opencl", sample=1)
    assert not check.ok and check.stage == "crash" and "signal" in check.message


def test_a_template_that_breaks_a_device_limit(root: Path) -> None:
    base, p = _rules(root)
    big = dataclasses.replace(p, space={"BLOCK": (1 << 16,), "GRID_CAP": (1024,)},
                              default={"BLOCK": 1 << 16, "GRID_CAP": 1024})
    check = check_proposal(big, base, root=root, backend="opencl", sample=0)
    assert not check.ok and check.stage == "limits" and "threads per block" in check.message


@pytest.mark.parametrize(("data", "match"), [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ({"space": {"B": [1]}, "default": {"B": 1}}, "source: missing"),
    ({"source": "x", "space": {"B": 4}, "default": {"B": 4}}, r"space\.B: must be a non-empty list"),
    ({"source": "x", "space": {"B": [1, 2]}, "default": {"B": 3}}, r"default\.B: 3 is not one of"),
    ({"source": "x", "space": {"B": [1]}, "default": {}}, "missing"),
    ({"source": "x", "space": {"B": [None]}, "default": {"B": None}}, r"space\.B: value None"),
    ({"source": "x", "space": {"B": [1]}, "default": {"B": 1}, "launch": {"grid": "__import__('os')"}},
     "calls something other than min, max or cdiv"),
    ({"source": "x", "space": {"B": [1]}, "default": {"B": 1}, "launch": {"grid": "x.shape"}},
     "uses Attribute"),
    ({"source": "x", "space": {"B": [1]}, "default": {"B": 1}, "constraints": ["open('f')"]}, "calls something"),
    ({"source": "x", "space": {"1B": [1]}, "default": {"1B": 1}}, "not a valid C identifier"),
    ({"source": "x", "space": {"B": [1]}, "default": {"B": 1}, "backend": "cuda"}, "this proposal is for"),
    ({"source": "x", "space": {"B": [1]}, "default": {"B": 1}, "extra": 1}, "unknown field"),
])
def test_a_bad_schema_is_refused_naming_the_field(data: object, match: str) -> None:
    with pytest.raises(ProposalError, match=match):
        Proposal.from_json(data if isinstance(data, str) else json.dumps(data), backend="opencl")


def test_a_proposal_round_trips_through_json() -> None:
    p = Proposal(backend="opencl", source="k", space={"B": (1, 2)}, default={"B": 2}, constraints=("H % B == 0",),
                 launch={"grid": "cdiv(n, B)"}, origin="agent", notes="n")
    assert Proposal.from_json(json.dumps(p.to_json()), backend="opencl") == p


def test_check_proposal_reports_schema_and_space_problems_without_raising(root: Path) -> None:
    base, p = _rules(root)
    wrong_backend = check_proposal(p, base, root=root, backend="cuda", sample=0)
    assert (wrong_backend.ok, wrong_backend.stage) == (False, "schema")
    unknown = dataclasses.replace(p, constraints=("Q % BLOCK == 0",))
    check = check_proposal(unknown, base, root=root, backend="opencl", sample=0)
    assert check.stage == "space" and "Q" in check.message


def test_launch_expressions_evaluate_only_integer_arithmetic() -> None:
    e = LaunchExpr.parse("min(cdiv(n, BLOCK), CAP)")
    assert e.evaluate({"n": 1000, "BLOCK": 128, "CAP": 4}) == (4,)
    assert e.evaluate({"n": 1000, "BLOCK": 128, "CAP": 64}) == (8,)
    with pytest.raises(KtuneError, match="names n, which is not bound"):
        LaunchExpr.parse("cdiv(n, 2)").evaluate({"BLOCK": 1})
    with pytest.raises(ProposalError, match="only integers"):
        LaunchExpr.parse("n * 2.0")
    with pytest.raises(ProposalError, match="uses Div"):
        LaunchExpr.parse("n / 2")


# -- writing ----------------------------------------------------------------------------------------


def test_write_template_never_overwrites(root: Path, tmp_path: Path) -> None:
    base, p = _rules(root)
    written = write_template(p, base, dest=tmp_path)
    assert sorted(f.name for f in written) == ["naive.clh", "silu_and_mul_tpl.cl", "silu_and_mul_tpl.py"]
    py = (tmp_path / "silu_and_mul_tpl.py").read_text()
    compile(py, "silu_and_mul_tpl.py", "exec")
    assert "@ktune.target(" in py and "name='silu_and_mul_naive_tpl'" in py
    (tmp_path / "silu_and_mul_tpl.cl").write_text("// edited by hand\n")
    with pytest.raises(KtuneError, match="exists; the template was not written"):
        write_template(p, base, dest=tmp_path)
    assert (tmp_path / "silu_and_mul_tpl.cl").read_text() == "// edited by hand\n"


# -- the command ------------------------------------------------------------------------------------


def _ktune(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    # Oclgrind, where installed, runs its race and uninitialised-value checks on the accepted template: minutes
    # on a busy two-core machine
    return subprocess.run([sys.executable, "-m", "pytest_ktune.cli", *args, "--root", str(root)], cwd=root,
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def test_templatize_writes_a_verified_template_beside_the_kernel(root: Path) -> None:
    res = _ktune(root, "templatize", f"{PKG}/silu_and_mul.cl", "--target", "silu_and_mul_naive", "--sample", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines()[0] == AGENT_OFF
    assert "rules proposal (BLOCK=[32, 64, 128, 256, 512, 1024], GRID_CAP=[128," in res.stdout
    # every pair of the 6 BLOCK and 14 GRID_CAP values, on the declared case and the added ones
    assert "verified: 84 configurations on 1 declared case(s) and 1 odd shape(s), 14 of them on 3 edge-value" \
           in res.stdout
    assert "every pair of values of two parameters" in res.stdout
    assert "outside the project root" not in res.stdout
    made = root / PKG / "silu_and_mul_tpl.py"
    assert made.is_file() and (root / PKG / "silu_and_mul_tpl.cl").is_file()
    tpl = vars(import_file(made))["silu_and_mul_naive_tpl"]
    assert isinstance(tpl, Target) and dict(tpl.default) == {"BLOCK": 128, "GRID_CAP": 1024}
    assert tpl.space.names == ("BLOCK", "GRID_CAP") and tpl.cases == _target(root, "silu_and_mul",
                                                                              "silu_and_mul_naive").cases
    again = _ktune(root, "templatize", f"{PKG}/silu_and_mul.cl", "--target", "silu_and_mul_naive",
                   "--sample", "0")
    assert again.returncode == 2 and "exists; the template was not written" in again.stderr


def test_templatize_without_a_target_shows_the_one_to_write(root: Path) -> None:
    before = sorted(root.rglob("*_tpl*"))
    res = _ktune(root, "templatize", f"{PKG}/gelu_tanh_and_mul.cl", "--target", "nope")
    assert res.returncode == 2
    assert "no @ktune.target named 'nope'" in res.stderr and "gelu_tanh_and_mul_naive" in res.stderr
    assert "@ktune.target(" in res.stderr and sorted(root.rglob("*_tpl*")) == before


def test_a_proposer_gets_its_failed_check_back_and_its_verified_revision_is_kept(root: Path, tmp_path: Path) -> None:
    base = _target(root, "silu_and_mul", "silu_and_mul_naive")
    rules = rule_proposal(base, "opencl")
    broken = dataclasses.replace(rules, source=rules.source.replace("const long row", "long long long row"),
                                 origin="agent")
    good = dataclasses.replace(rules, space={"BLOCK": (64, 128), "GRID_CAP": (1024,)}, origin="agent", notes="mine")
    seen: list[tuple[Proposal | None, ProposalCheck | None, int]] = []

    def proposer(previous: Proposal | None, check: ProposalCheck | None, context: Mapping[str, Any]) -> Proposal | None:
        seen.append((previous, check, int(context["round"])))
        return [broken, good, None][len(seen) - 1]

    out = io.StringIO()
    result = templatize(root / PKG / "silu_and_mul.cl", "silu_and_mul_naive", root=root, proposer=proposer,
                        settings=TemplatizeSettings(backend="opencl", sample=0, out=tmp_path), stream=out)
    assert [r for _, _, r in seen] == [0, 1, 2]
    assert seen[0][0] == rules and seen[0][1] is not None and seen[0][1].ok
    assert seen[1][0] is broken and seen[1][1] is not None and seen[1][1].stage == "compile"
    assert result.chosen is good and [c.ok for _, c in result.attempts] == [True, False, True]
    assert "mine" in (tmp_path / "silu_and_mul_tpl.py").read_text()
    assert AGENT_OFF not in out.getvalue() and "the agent stopped proposing" in out.getvalue()
    assert f"the template imports its base from {PKG}.silu_and_mul" in out.getvalue()  # written outside the root
