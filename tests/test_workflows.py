"""The GitHub Actions workflows and their local actions: actionlint (and shellcheck) find nothing, each job
holds no more permission than it needs, and the templates (gpu-gate.yml, cpu-gate.yml, tune.yml) can be
copied as they are: pytest-ktune pinned in a virtual environment, one run per ref, the history gathered
from earlier runs, the gate's table as a pull-request comment. The scripts of the install, comment and
history steps are run here against stand-ins for python3 and gh.

actionlint and shellcheck come with the ``dev`` extra (PyPI wheels that ship the binaries).
Under CI=true a missing one fails the test rather than skipping it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
ACTIONS = ROOT / ".github" / "actions"
TEMPLATES = ["cpu-gate.yml", "gpu-gate.yml", "tune.yml"]
GATES = {"gpu-gate.yml": ("gate", "ktune-reports"), "cpu-gate.yml": ("gate", "ktune-cpu-reports")}
SETUP = "./.github/actions/ktune-setup"
COMMENT = "./.github/actions/ktune-comment"
# What each job of the gates may do: read the checkout; the report job also reads earlier runs'
# artifacts; only the comment job writes, and only to the pull request.
GATE_PERMISSIONS = {"gate": {"contents": "read"}, "history": {"contents": "read"},
                    "report": {"contents": "read", "actions": "read"},
                    "comment": {"contents": "read", "pull-requests": "write"}}


def _tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found:
        return found
    message = f"{name} is not installed: pip install -e '.[dev]' provides it"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    # YAML 1.1 reads the key `on` as True
    if True in data:
        data["on"] = data.pop(True)
    return data


def _wf(name: str) -> dict[str, Any]:
    return _load(WORKFLOWS / name)


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = job.get("steps") or job["runs"]["steps"]
    return steps


def _run(job: dict[str, Any]) -> str:
    return " ".join(step.get("run", "") for step in _steps(job))


def _uses(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in _steps(job) if str(s.get("uses", "")).split("@")[0] == action]


def _step(job: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in _steps(job) if s.get("name") == name)


def test_actionlint_finds_nothing() -> None:
    env = dict(os.environ)
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    if shellcheck:  # actionlint checks each `run:` script with shellcheck when it finds one on PATH
        env["PATH"] = f"{Path(shellcheck).parent}{os.pathsep}{env.get('PATH', '')}"
    out = subprocess.run([_tool("actionlint"), "-no-color", "-format", "{{json .}}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=False, env=env)
    problems = json.loads(out.stdout or "[]")
    assert out.returncode == 0 and problems == [], out.stdout + out.stderr


@pytest.mark.parametrize("action", ["ktune-setup", "ktune-comment"])
def test_shellcheck_finds_nothing_in_the_local_actions(action: str, tmp_path: Path) -> None:
    # actionlint checks the workflows' scripts, not those of the composite actions they use.
    shellcheck = _tool("shellcheck")
    for i, step in enumerate(s for s in _steps(_load(ACTIONS / action / "action.yml")) if "run" in s):
        script = tmp_path / f"{action}-{i}.sh"
        script.write_text("#!/usr/bin/env bash\n" + step["run"])
        out = subprocess.run([shellcheck, "-S", "style", str(script)], capture_output=True, text=True, timeout=60,
                             check=False)
        assert out.returncode == 0, out.stdout + out.stderr


def test_the_workflows_and_their_actions_are_there() -> None:
    assert sorted(p.name for p in WORKFLOWS.glob("*.yml")) == ["ci.yml", *TEMPLATES]
    assert sorted(p.parent.name for p in ACTIONS.glob("*/action.yml")) == ["ktune-comment", "ktune-setup"]


@pytest.mark.parametrize("name", ["ci.yml", *TEMPLATES])
def test_every_job_states_its_permissions_and_none_runs_untrusted_code_with_secrets(name: str) -> None:
    wf = _wf(name)
    assert "pull_request_target" not in wf["on"]
    assert "permissions" in wf
    for job_name, job in wf["jobs"].items():
        perms = job["permissions"]
        assert isinstance(perms, dict)
        if name in GATES:
            assert perms == GATE_PERMISSIONS[job_name], job_name
        elif name == "ci.yml":
            assert perms == {"contents": "read"}


@pytest.mark.parametrize("path", [*sorted(WORKFLOWS.glob("*.yml")), *sorted(ACTIONS.glob("*/action.yml"))],
                         ids=lambda p: p.parent.name if p.name == "action.yml" else p.name)
def test_every_action_is_pinned_by_commit_sha(path: Path) -> None:
    uses = re.findall(r"uses:\s*(\S+)(.*)", path.read_text())
    assert uses or path.name == "action.yml"  # an action may be a script alone
    for ref, comment in uses:
        if ref.startswith("./"):  # a local action of this repository, copied with the workflows
            assert (ROOT / ref / "action.yml").is_file(), ref
            continue
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), ref
        assert re.search(r"#\s*v\d+\.\d+\.\d+", comment), f"{ref}: name the release in a comment"


@pytest.mark.parametrize("name", TEMPLATES)
def test_a_template_installs_the_pinned_plugin_in_a_virtual_environment_not_the_checkout(name: str) -> None:
    wf = _wf(name)
    assert wf["env"]["KTUNE_PLUGIN"] == "${{ vars.KTUNE_PLUGIN }}" and "KTUNE_PROJECT" in wf["env"]
    text = (WORKFLOWS / name).read_text()
    assert "pip install" not in text, "a template installs pytest-ktune through ktune-setup, never the checkout"
    for job_name, job in wf["jobs"].items():
        runs = [i for i, s in enumerate(_steps(job)) if re.search(r"\b(pytest|ktune) ", s.get("run", ""))]
        if not runs:
            continue
        (setup,) = _uses(job, SETUP)
        assert setup["with"]["plugin"] == "${{ env.KTUNE_PLUGIN }}", job_name
        assert _steps(job).index(setup) < runs[0], f"{job_name}: pytest-ktune is installed before it runs"


@pytest.mark.parametrize(("name", "cancel"), [("gpu-gate.yml", "${{ github.event_name == 'pull_request' }}"),
                                              ("cpu-gate.yml", True), ("tune.yml", False)])
def test_one_run_per_ref_at_a_time(name: str, cancel: object) -> None:
    group = _wf(name)["concurrency"]
    assert group["group"] == f"ktune-{name.removesuffix('.yml')}-${{{{ github.ref }}}}"
    # A gate's newer push replaces the run it supersedes; a tune or a push to main is never cut short.
    assert group["cancel-in-progress"] == cancel


@pytest.mark.parametrize("name", [*sorted(p.name for p in WORKFLOWS.glob("*.yml"))])
def test_uploads_of_the_hidden_ktune_folder_include_hidden_files(name: str) -> None:
    # upload-artifact leaves out hidden files, so `.ktune/reports/` would be uploaded empty without it.
    for job in _wf(name)["jobs"].values():
        for up in _uses(job, "actions/upload-artifact"):
            if "/." in up["with"]["path"]:
                assert up["with"].get("include-hidden-files") is True, up


def test_the_gate_runs_on_the_gpu_runner_and_keeps_the_junit_report() -> None:
    wf = _wf("gpu-gate.yml")
    assert "pull_request" in wf["on"]
    job = wf["jobs"]["gate"]
    assert job["if"] == "github.event_name == 'pull_request'"
    assert '["self-hosted", "gpu"]' in job["runs-on"]
    assert _uses(job, SETUP)[0]["with"]["extras"] == "cuda,benchmark"
    run = _run(job)
    assert "--ktune --ktune-backend=cuda " in run and "--ktune-junit=reports/ktune-junit.xml" in run
    # Changed targets are judged against the base branch in the same run; missing records fail closed.
    assert '--ktune-base="$BASE_REF"' in run and "--ktune-strict" in run
    assert _step(job, "Gate")["env"]["BASE_REF"] == "origin/${{ github.base_ref }}"


def test_the_cpu_gate_runs_the_opencl_kernels_on_a_hosted_runner_through_pocl() -> None:
    wf = _wf("cpu-gate.yml")
    assert set(wf["on"]) == {"pull_request"} and set(wf["jobs"]) == {"gate", "comment"}
    job = wf["jobs"]["gate"]
    assert job["runs-on"] == "ubuntu-latest" and "if" not in job  # a fork's code is safe there: no secrets
    assert "opencl" in _uses(job, SETUP)[0]["with"]["extras"].split(",")
    assert _uses(job, "actions/setup-python")  # the runner's venv comes from a Python of a known version
    run = _run(job)
    assert "--ktune --ktune-backend=opencl " in run and '--ktune-base="$BASE_REF"' in run and "--ktune-strict" in run
    assert _step(job, "Gate")["env"]["BASE_REF"] == "origin/${{ github.base_ref }}"
    (cache,) = _uses(job, "actions/cache")
    assert "**/*.cl" in cache["with"]["key"] and cache["with"]["path"] == "${{ env.KTUNE_PROJECT }}/.ktune/"


@pytest.mark.parametrize("name", sorted(GATES))
def test_the_gates_table_goes_to_the_runs_page_and_to_one_pull_request_comment(name: str) -> None:
    wf = _wf(name)
    gate_name, artifact = GATES[name]
    gate = wf["jobs"][gate_name]
    assert "--ktune-markdown=reports/ktune-summary.md" in _step(gate, "Gate")["run"]
    page = _step(gate, "The summary on the run's page")
    assert page["run"] == 'cat reports/ktune-summary.md >> "$GITHUB_STEP_SUMMARY"' and "cancelled()" in page["if"]
    (upload,) = _uses(gate, "actions/upload-artifact")
    assert upload["with"] == {"name": artifact, "path": "reports/", "if-no-files-found": "warn"}
    assert "cancelled()" in upload["if"]  # kept when the gate fails too
    job = wf["jobs"]["comment"]
    assert job["needs"] == gate_name and job["runs-on"] == "ubuntu-latest"
    fork = "github.event.pull_request.head.repo.full_name == github.repository"
    assert "!cancelled()" in job["if"] and fork in job["if"]  # a fork's token cannot comment
    checkout, comment = _steps(job)
    # Of the branch, only the local actions: the job that may write runs none of the pull request's code.
    assert checkout["with"] == {"sparse-checkout": ".github/actions", "persist-credentials": False}
    assert comment["uses"] == COMMENT and comment["with"] == {
        "artifact": artifact, "marker": name.removesuffix(".yml"), "result": f"${{{{ needs.{gate_name}.result }}}}"}


def test_a_forks_pull_request_fails_the_gate_instead_of_skipping_it() -> None:
    job = _wf("gpu-gate.yml")["jobs"]["gate"]
    fork = "github.event.pull_request.head.repo.full_name != github.repository"
    # A fork's code never reaches the self-hosted runner: its job runs on a GitHub-hosted one...
    assert job["runs-on"] == ("${{ fromJSON(" + fork + " && '[\"ubuntu-latest\"]' || '[\"self-hosted\", \"gpu\"]') }}")
    # ... and fails there, before any checkout, so a required gate is never skipped into a merge.
    first = _steps(job)[0]
    assert first["if"] == fork and "exit 1" in first["run"] and "::error::" in first["run"]
    assert "uses" not in first and all("if" not in s or s is first for s in _steps(job)[:2])


@pytest.mark.parametrize(("name", "job"), [("gpu-gate.yml", "gate"), ("gpu-gate.yml", "history"), ("tune.yml", "tune")])
def test_ktune_folder_is_cached_by_device_driver_and_sources(name: str, job: str) -> None:
    wf = _wf(name)
    steps = _steps(wf["jobs"][job])
    gpu = next(s for s in steps if s.get("id") == "gpu")
    assert "nvidia-smi --query-gpu=name,driver_version" in gpu["run"]
    (cache,) = [s for s in steps if str(s.get("uses", "")).startswith("actions/cache@")]
    assert cache["with"]["path"] == "${{ env.KTUNE_PROJECT }}/.ktune/"
    key = cache["with"]["key"]
    assert key.startswith("ktune-${{ steps.gpu.outputs.id }}-${{ hashFiles(") and "**/*.cu" in key and "**/*.cl" in key
    assert cache["with"]["restore-keys"] == "ktune-${{ steps.gpu.outputs.id }}-"
    # The cache is restored after the checkout (whose clean would delete it) and before the run.
    names = [str(s.get("uses", s.get("name", ""))) for s in steps]
    assert names.index(cache["uses"]) > next(i for i, n in enumerate(names) if n.startswith("actions/checkout@"))


def test_a_push_to_main_records_a_history_artifact_and_charts_it_with_the_earlier_ones() -> None:
    wf = _wf("gpu-gate.yml")
    assert wf["on"]["push"] == {"branches": ["main"]}
    job = wf["jobs"]["history"]
    assert job["if"] == "github.event_name == 'push'" and job["runs-on"] == ["self-hosted", "gpu"]
    assert '--ktune-benchmark-json="history/ktune-benchmark-$GITHUB_SHA.json"' in _run(job)
    kept = {u["with"]["name"]: u["with"] for u in _uses(job, "actions/upload-artifact")}
    assert kept["ktune-history-${{ github.sha }}"]["path"] == "history/"
    assert kept["ktune-history-${{ github.sha }}"]["retention-days"] == 90
    assert kept["ktune-studies"]["path"] == "${{ env.KTUNE_PROJECT }}/.ktune/reports/"
    report = wf["jobs"]["report"]
    assert report["needs"] == "history" and report["runs-on"] == "ubuntu-latest"
    assert "github.event_name == 'push'" in report["if"] and "!cancelled()" in report["if"]
    this_run = _step(report, "This push's timings")
    assert this_run["with"] == {"name": "ktune-history-${{ github.sha }}", "path": "history/this-run"}
    gather = _step(report, "The earlier pushes' timings")
    assert gather["env"]["GH_TOKEN"] == "${{ github.token }}" and "gh run download" in gather["run"]
    page = _step(report, "The report page")["run"]
    assert page == 'ktune report --root "$KTUNE_PROJECT" --history history --out report/ktune-report.html'
    names = [s.get("name") for s in _steps(report)]
    assert names.index("This push's timings") < names.index("The report page")
    assert names.index("The earlier pushes' timings") < names.index("The report page")
    (upload,) = _uses(report, "actions/upload-artifact")
    assert upload["with"]["name"] == "ktune-report" and upload["with"]["path"] == "report/"


def test_the_tuning_job_alone_may_write() -> None:
    wf = _wf("tune.yml")
    assert set(wf["on"]) == {"schedule", "workflow_dispatch"}
    assert wf["on"]["schedule"][0]["cron"]
    assert wf["permissions"] == {}
    assert set(wf["jobs"]) == {"tune", "baselines"}
    baselines = wf["jobs"]["baselines"]
    assert baselines["permissions"] == {"contents": "write", "pull-requests": "write"}
    assert "--ktune-update-baseline --ktune-write=pr" in _run(baselines)  # stale baselines refreshed by PR
    job = wf["jobs"]["tune"]
    assert job["runs-on"] == ["self-hosted", "gpu"]
    assert job["permissions"] == {"contents": "write", "pull-requests": "write"}
    assert "secrets.GITHUB_TOKEN" in job["env"]["GITHUB_TOKEN"]
    run = _run(job)
    assert "pytest --ktune " in run and "--ktune-autotune" in run and "--ktune-write=pr" in run
