"""The scripts of the workflows' own steps, run as a runner runs them, against stand-ins for the tools
they call: ktune-setup's install (python3), ktune-comment's post (gh), the report job's gathering of
earlier runs' timings (gh). Each stand-in logs how it was called, so a test sees what would have been
installed, posted or downloaded."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ACTIONS = ROOT / ".github" / "actions"
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="the workflows' scripts are bash scripts: no bash here")

# python3 -m venv DIR: a venv whose python logs its arguments (to $LOG) and whose ktune says its version.
FAKE_PYTHON3 = """#!/usr/bin/env bash
if [ "$1 $2" = "-m venv" ]; then
  [ -n "${FAIL_VENV:-}" ] && { echo "Error: ensurepip is not available" >&2; exit 1; }
  mkdir -p "$3/bin"
  printf '#!/usr/bin/env bash\\nprintf "%%s\\\\n" "$*" >> "$LOG"\\n' > "$3/bin/python"
  printf '#!/usr/bin/env bash\\necho "pytest-ktune 0.0.0"\\n' > "$3/bin/ktune"
  chmod +x "$3/bin/python" "$3/bin/ktune"
  exit 0
fi
exit 3
"""

# gh: logs each call (and the body file it was given); `api --paginate` answers $EXISTING's ids, `run list`
# answers $RUNS, `run download ID ... --dir D` leaves a benchmark file in D unless ID is in $MISSING.
FAKE_GH = """#!/usr/bin/env bash
echo "gh $*" >> "$LOG"
for a in "$@"; do
  case "$a" in body=@*) echo "--- body" >> "$LOG"; cat "${a#body=@}" >> "$LOG"; echo "--- end" >> "$LOG" ;; esac
done
if [ "$1 $2" = "api --paginate" ]; then printf '%s' "${EXISTING:-}"; exit 0; fi
if [ "$1 $2" = "run list" ]; then printf '%s' "${RUNS:-}"; exit 0; fi
if [ "$1 $2" = "run download" ]; then
  case " ${MISSING:-} " in *" $3 "*) echo "no valid artifacts found to download" >&2; exit 1 ;; esac
  dir=""; prev=""
  for a in "$@"; do [ "$prev" = "--dir" ] && dir="$a"; prev="$a"; done
  mkdir -p "$dir/ktune-history-$3" && echo '{"benchmarks": []}' > "$dir/ktune-history-$3/ktune-benchmark-$3.json"
fi
exit 0
"""


def _action_script(name: str, step: str) -> str:
    action = yaml.safe_load((ACTIONS / name / "action.yml").read_text())
    script: str = next(s for s in action["runs"]["steps"] if s.get("name") == step)["run"]
    assert "${{" not in script, "values reach the script through env:, never spliced into its text"
    return script


def _workflow_script(workflow: str, job: str, step: str) -> str:
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / workflow).read_text())
    script: str = next(s for s in wf["jobs"][job]["steps"] if s.get("name") == step)["run"]
    assert "${{" not in script, "values reach the script through env:, never spliced into its text"
    return script


def _bash(script: str, tmp_path: Path, tools: dict[str, str], env: dict[str, str],
          flags: tuple[str, ...] = ("--noprofile", "--norc", "-eo", "pipefail")) -> subprocess.CompletedProcess[str]:
    """Run ``script`` as a step runs it (composite actions' `shell: bash`; a workflow's default is `-e`)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in tools.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "script.sh").write_text(script)
    full = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path), "LOG": str(tmp_path / "log"),
            "RUNNER_TEMP": str(tmp_path / "runner-temp"), "GITHUB_PATH": str(tmp_path / "github-path"),
            "GITHUB_REPOSITORY": "acme/kernels", **env}
    (tmp_path / "runner-temp").mkdir(exist_ok=True)
    assert BASH is not None
    return subprocess.run([BASH, *flags, str(tmp_path / "script.sh")], cwd=tmp_path, env=full, capture_output=True,
                          text=True, timeout=60, check=False)


def _log(tmp_path: Path) -> str:
    log = tmp_path / "log"
    return log.read_text() if log.exists() else ""


def _setup(tmp_path: Path, plugin: str, extras: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    return _bash(_action_script("ktune-setup", "pytest-ktune in a virtual environment"), tmp_path,
                 {"python3": FAKE_PYTHON3}, {"PLUGIN": plugin, "EXTRAS": extras, **env})


@pytest.mark.parametrize(("plugin", "extras", "requirement"), [
    ("git+https://github.com/acme/pytest-ktune@3f2a9c1", "cuda,benchmark",
     "pytest-ktune[cuda,benchmark] @ git+https://github.com/acme/pytest-ktune@3f2a9c1"),
    ("git+https://github.com/acme/pytest-ktune@v0.1.0#egg=pytest-ktune", "",
     "pytest-ktune @ git+https://github.com/acme/pytest-ktune@v0.1.0#egg=pytest-ktune"),
    ("https://example.org/wheels/pytest_ktune-0.1.0-py3-none-any.whl", "opencl",
     "pytest-ktune[opencl] @ https://example.org/wheels/pytest_ktune-0.1.0-py3-none-any.whl"),
    ("/opt/wheels/pytest_ktune-0.1.0-py3-none-any.whl", "cuda",
     "/opt/wheels/pytest_ktune-0.1.0-py3-none-any.whl[cuda]"),
    ("pytest-ktune==0.1.0", "opencl,benchmark", "pytest-ktune[opencl,benchmark]==0.1.0"),
    (".", "cuda,benchmark", ".[cuda,benchmark]"),  # pytest-ktune's own repository: the plugin is the checkout
])
def test_setup_installs_the_pinned_plugin_into_a_venv_on_path(tmp_path: Path, plugin: str, extras: str,
                                                              requirement: str) -> None:
    out = _setup(tmp_path, plugin, extras)
    assert out.returncode == 0, out.stdout + out.stderr
    venv = tmp_path / "runner-temp" / "ktune-venv"
    calls = _log(tmp_path).splitlines()
    assert calls == ["-m pip install --quiet --upgrade pip", f"-m pip install {requirement}"]
    assert (tmp_path / "github-path").read_text() == f"{venv}/bin\n"  # the later steps' python is the venv's
    assert "pytest-ktune 0.0.0" in out.stdout


@pytest.mark.parametrize(("plugin", "says"), [
    ("", "KTUNE_PLUGIN is not set"),
    ("git+https://github.com/acme/pytest-ktune", "names no fixed version"),
    ("git+ssh://git@github.com/acme/pytest-ktune.git", "names no fixed version"),
    ("pytest-ktune", "write pytest-ktune==VERSION"),
    ("pytest-ktune>=0.1", "write pytest-ktune==VERSION"),
])
def test_setup_refuses_a_missing_or_unpinned_plugin_before_installing_anything(tmp_path: Path, plugin: str,
                                                                              says: str) -> None:
    out = _setup(tmp_path, plugin, "cuda")
    assert out.returncode == 1 and "::error::" in out.stdout and says in out.stdout, out.stdout + out.stderr
    assert _log(tmp_path) == "" and not (tmp_path / "runner-temp" / "ktune-venv").exists()


def test_setup_says_what_to_install_when_the_runner_cannot_make_a_venv(tmp_path: Path) -> None:
    out = _setup(tmp_path, "pytest-ktune==0.1.0", FAIL_VENV="1")
    assert out.returncode == 1 and "apt-get install python3-venv" in out.stdout and "actions/setup-python" in out.stdout
    assert _log(tmp_path) == ""


def _comment(tmp_path: Path, summary: str | None, **env: str) -> subprocess.CompletedProcess[str]:
    folder = tmp_path / "runner-temp" / "ktune-comment"
    folder.mkdir(parents=True)
    if summary is not None:
        (folder / "ktune-summary.md").write_text(summary)
    given: dict[str, Any] = {"GH_TOKEN": "t", "PR": "7", "SUMMARY": str(folder / "ktune-summary.md"),
                             "MARKER": "gpu-gate", "RESULT": "failure", "ARTIFACT": "ktune-reports",
                             "RUN_URL": "https://github.com/acme/kernels/actions/runs/99", **env}
    return _bash(_action_script("ktune-comment", "Post or update the comment"), tmp_path, {"gh": FAKE_GH}, given)


TABLE = ("### pytest-ktune: cuda on NVIDIA H200\n\n| target | case | verdict |\n| --- | --- | --- |\n"
         "| rmsnorm | T64 | **REGRESSION** |\n")


def test_comment_posts_the_gates_table_once(tmp_path: Path) -> None:
    out = _comment(tmp_path, TABLE)
    assert out.returncode == 0, out.stdout + out.stderr
    log = _log(tmp_path)
    calls = [ln for ln in log.splitlines() if ln.startswith("gh ")]
    assert calls[0].startswith("gh api --paginate repos/acme/kernels/issues/7/comments --jq ")
    assert 'startswith("<!-- pytest-ktune: gpu-gate -->")' in calls[0] and "github-actions[bot]" in calls[0]
    assert calls[1].startswith("gh api repos/acme/kernels/issues/7/comments -F body=@") and len(calls) == 2
    body = log.split("--- body\n", 1)[1].split("--- end", 1)[0]
    assert body.startswith("<!-- pytest-ktune: gpu-gate -->\n" + TABLE)
    assert "Gate: **failure**. [The run](https://github.com/acme/kernels/actions/runs/99)" in body


def test_comment_updates_the_comment_it_made_before(tmp_path: Path) -> None:
    out = _comment(tmp_path, TABLE, EXISTING="4242\n5151\n")
    assert out.returncode == 0, out.stdout + out.stderr
    calls = [ln for ln in _log(tmp_path).splitlines() if ln.startswith("gh ")]
    assert calls[1].startswith("gh api -X PATCH repos/acme/kernels/issues/comments/4242 -F body=@") and len(calls) == 2
    assert "updated the pull request's comment 4242" in out.stdout


def test_comment_says_when_the_gate_wrote_no_summary_and_cuts_a_long_one(tmp_path: Path) -> None:
    out = _comment(tmp_path / "none", None)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "The gate wrote no summary" in _log(tmp_path / "none")
    out = _comment(tmp_path / "long", TABLE + "| x | y | ok |\n" * 5000)
    assert out.returncode == 0, out.stdout + out.stderr
    body = _log(tmp_path / "long").split("--- body\n", 1)[1].split("--- end", 1)[0]
    assert len(body) < 61000 and "(cut here: the whole table is on the run's page)" in body


def test_comment_refuses_a_marker_that_would_not_stay_one_comment(tmp_path: Path) -> None:
    out = _comment(tmp_path, TABLE, MARKER='gate") | .id, ("')
    assert out.returncode == 1 and "letters, digits and dashes" in out.stdout
    assert _log(tmp_path) == ""


def test_history_gathers_the_earlier_pushes_timings_and_passes_over_the_missing(tmp_path: Path) -> None:
    script = _workflow_script("gpu-gate.yml", "report", "The earlier pushes' timings")
    out = _bash(script, tmp_path, {"gh": FAKE_GH},
                {"GH_TOKEN": "t", "WORKFLOW": "gpu-gate", "BRANCH": "main", "KTUNE_HISTORY_RUNS": "60",
                 "RUNS": "11\n12\n13\n", "MISSING": "12"}, flags=("--noprofile", "--norc", "-e"))
    assert out.returncode == 0, out.stdout + out.stderr
    calls = [ln for ln in _log(tmp_path).splitlines() if ln.startswith("gh ")]
    assert calls[0] == ("gh run list -R acme/kernels --workflow gpu-gate --branch main --event push --status completed "
                        "--limit 60 --json databaseId --jq .[].databaseId")
    assert calls[1:] == [f"gh run download {r} -R acme/kernels --pattern ktune-history-* --dir history/run-{r}"
                         for r in (11, 12, 13)]
    found = sorted(p.relative_to(tmp_path / "history").as_posix() for p in (tmp_path / "history").rglob("*.json"))
    assert found == [f"run-{r}/ktune-history-{r}/ktune-benchmark-{r}.json" for r in (11, 13)]
    assert "run 12: no timings kept" in out.stdout and "timings of 2 earlier push(es) of 3 gathered" in out.stdout
