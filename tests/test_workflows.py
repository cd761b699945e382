"""The GitHub Actions workflows: actionlint finds nothing, and each job holds no more permission than it needs.

actionlint comes with the ``dev`` extra (a PyPI wheel that ships the binary).
Under CI=true a missing actionlint fails the test rather than skipping it.
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


def _actionlint() -> str:
    found = shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))
    if found:
        return found
    message = "actionlint is not installed: pip install -e '.[dev]' provides it"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    assert isinstance(data, dict)
    # YAML 1.1 reads the key `on` as True
    if True in data:
        data["on"] = data.pop(True)
    return data


def test_actionlint_finds_nothing() -> None:
    out = subprocess.run([_actionlint(), "-no-color", "-format", "{{json .}}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=False)
    problems = json.loads(out.stdout or "[]")
    assert out.returncode == 0 and problems == [], out.stdout + out.stderr


def test_the_three_workflows_are_there() -> None:
    assert sorted(p.name for p in WORKFLOWS.glob("*.yml")) == ["ci.yml", "gpu-gate.yml", "tune.yml"]


@pytest.mark.parametrize("name", ["ci.yml", "gpu-gate.yml", "tune.yml"])
def test_every_job_states_its_permissions_and_none_runs_untrusted_code_with_secrets(name: str) -> None:
    wf = _load(name)
    assert "pull_request_target" not in wf["on"]
    assert "permissions" in wf
    for job in wf["jobs"].values():
        assert "permissions" in job
        perms = job["permissions"]
        assert isinstance(perms, dict)
        if name != "tune.yml":
            assert perms == {"contents": "read"}


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = job["steps"]
    return steps


def _run(job: dict[str, Any]) -> str:
    return " ".join(step.get("run", "") for step in _steps(job))


def test_the_gate_runs_on_the_gpu_runner_and_keeps_the_junit_report() -> None:
    wf = _load("gpu-gate.yml")
    assert "pull_request" in wf["on"]
    job = wf["jobs"]["gate"]
    assert job["if"] == "github.event_name == 'pull_request'"
    assert '["self-hosted", "gpu"]' in job["runs-on"]
    run = _run(job)
    assert "--ktune " in run and "--ktune-junit=reports/ktune-junit.xml" in run
    # Changed targets are judged against the base branch in the same run; missing records fail closed.
    assert '--ktune-base="$BASE_REF"' in run and "--ktune-strict" in run
    gate_step = next(s for s in _steps(job) if s.get("name") == "Gate")
    assert gate_step["env"]["BASE_REF"] == "origin/${{ github.base_ref }}"
    assert '--ktune-markdown="$GITHUB_STEP_SUMMARY"' in run  # the summary table on the run's page
    upload = [s for s in _steps(job) if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert upload and upload[0]["with"]["path"] == "reports/" and "cancelled()" in upload[0]["if"]


def test_a_forks_pull_request_fails_the_gate_instead_of_skipping_it() -> None:
    job = _load("gpu-gate.yml")["jobs"]["gate"]
    fork = "github.event.pull_request.head.repo.full_name != github.repository"
    # A fork's code never reaches the self-hosted runner: its job runs on a GitHub-hosted one...
    assert job["runs-on"] == ("${{ fromJSON(" + fork + " && '[\"ubuntu-latest\"]' || '[\"self-hosted\", \"gpu\"]') }}")
    # ... and fails there, before any checkout, so a required gate is never skipped into a merge.
    first = _steps(job)[0]
    assert first["if"] == fork and "exit 1" in first["run"] and "::error::" in first["run"]
    assert "uses" not in first and all("if" not in s or s is first for s in _steps(job)[:2])


@pytest.mark.parametrize("name", ["ci.yml", "gpu-gate.yml", "tune.yml"])
def test_every_action_is_pinned_by_commit_sha(name: str) -> None:
    text = (WORKFLOWS / name).read_text()
    uses = re.findall(r"uses:\s*(\S+)(.*)", text)
    assert uses
    for ref, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), ref
        assert re.search(r"#\s*v\d+\.\d+\.\d+", comment), f"{ref}: name the release in a comment"


@pytest.mark.parametrize(("name", "job"), [("gpu-gate.yml", "gate"), ("gpu-gate.yml", "history"), ("tune.yml", "tune")])
def test_ktune_folder_is_cached_by_device_driver_and_sources(name: str, job: str) -> None:
    wf = _load(name)
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
    assert "KTUNE_PROJECT" in wf["env"]


def test_a_push_to_main_records_a_history_artifact() -> None:
    wf = _load("gpu-gate.yml")
    assert wf["on"]["push"] == {"branches": ["main"]}
    job = wf["jobs"]["history"]
    assert job["if"] == "github.event_name == 'push'" and job["runs-on"] == ["self-hosted", "gpu"]
    run = _run(job)
    assert '--ktune-benchmark-json="history/ktune-benchmark-$GITHUB_SHA.json"' in run
    assert "ktune report " in run and "--history history" in run
    (upload,) = [s for s in _steps(job) if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert upload["with"]["name"] == "ktune-history-${{ github.sha }}" and upload["with"]["path"] == "history/"


def test_the_tuning_job_alone_may_write() -> None:
    wf = _load("tune.yml")
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
    run = " ".join(step.get("run", "") for step in job["steps"])
    assert "pytest --ktune " in run and "--ktune-autotune" in run and "--ktune-write=pr" in run
