"""The ``ktune tune`` command on a throwaway project: tunes, prints one summary line per key, writes
the params file (or leaves it byte for byte alone with --no-write), and refuses unknown targets."""

from __future__ import annotations

import ast
from pathlib import Path

from plugin._kit import Project, add_target, case

from ._tk import OTHER_RECORD_FILE, Cli, repeat_target, summaries


def test_tune_prints_the_summary_and_writes(project: Project, cli: Cli) -> None:
    project.write(repeat_target(), add_target())
    done = cli.run("tune", "--write", "file", "scale", "--trials", "4", "--seed", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = summaries(done.stdout)
    assert line["target"] == "scale" and line["key"] == "N=4096"
    assert line["timed"] == "4" and line["infeasible"] == "0" and line["failed"] == "0"
    assert line["decision"].endswith("faster than the current parameters in same-run A/B")
    assert line["written"] == "to be delivered (--write file)"
    # The write-back's file mode delivered it at the end, and forgot the decision it kept until then.
    assert f"ktune: wrote 1 tuned record(s) to {project.params_path}" in done.stdout
    assert not list((project.path / ".ktune" / "winners").iterdir())
    best = ast.literal_eval(line["params"])
    assert best["REPEAT"] == 1
    report = Path(line["report"])
    assert report.is_file() and report.parent == project.path / ".ktune" / "reports"

    # Only the target named was tuned; its record holds the best, with the tune's details.
    (record,) = project.records()
    assert record["target"] == "kernels.py::scale" and record["key"] == {"N": 4096}
    assert record["params"] == best == record["baseline"]["params"]
    assert record["tuned"]["trials"] == 4 and record["tuned"]["sampler"] == "bo"
    assert float(line["us"]) > 0


def test_no_write_leaves_the_params_file_byte_identical(project: Project, cli: Cli) -> None:
    project.write(repeat_target())
    project.params_path.write_text(OTHER_RECORD_FILE)
    before = project.params_path.read_bytes()
    done = cli.run("tune", "--write", "file", "--trials", "3", "--seed", "3", "--no-write")
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = summaries(done.stdout)
    assert line["written"] == "not written (--no-write)"
    assert project.params_path.read_bytes() == before
    assert Path(line["report"]).is_file()  # the study and its report are still kept


def test_an_unknown_target_is_refused_with_the_known_ones(project: Project, cli: Cli) -> None:
    project.write()  # the scale and add targets of _kit
    project.params_path.write_text(OTHER_RECORD_FILE)
    before = project.params_path.read_bytes()
    done = cli.run("tune", "--write", "file", "sacle")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == ["ktune: project . (--root, ini file tox.ini); params ktune-params.json",
                                        f"error: no target named 'sacle' under {project.path.resolve()}",
                                        "next step: known targets: add, scale"]
    assert project.params_path.read_bytes() == before
    assert not (project.path / ".ktune").exists()


def test_version_prints_the_package_version() -> None:
    import subprocess
    import sys

    from pytest_ktune.core.version import __version__

    done = subprocess.run([sys.executable, "-m", "pytest_ktune.cli", "--version"], capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"pytest-ktune {__version__}"


def test_the_same_error_for_every_key_is_printed_once(project: Project, cli: Cli) -> None:
    import importlib.util
    import subprocess

    import pytest

    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("needs a machine without CuPy, where the CUDA backend cannot start")
    project.write(repeat_target(cases=f"{case(4096, case_id='a')}, {case(8192, case_id='b')}, "
                                      f"{case(16384, case_id='c')}"))
    kernels = project.path / "kernels.py"
    kernels.write_text(kernels.read_text().replace("""sources={"opencl": 'scale.cl'}""",
                                                   """sources={"opencl": 'scale.cl', "cuda": 'scale.cu'}"""))
    (project.path / "scale.cu").write_text('extern "C" __global__ void scale() {}\n')
    argv = [*cli.argv("tune", "--trials", "1", "--junit", "out/tune.xml")[:-2], "--backend", "cuda"]
    done = subprocess.run(argv, cwd=project.path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert done.stderr.count("needs CuPy") == 2, done.stderr  # the error, then one line for the other two keys
    assert "the same error as above for 2 more key(s)" in done.stderr
    # The JUnit report says the same, one testcase per key.
    xml = (project.path / "out" / "tune.xml").read_text()
    assert xml.count("<testcase ") == 3 and xml.count('<failure type="error"') == 3


def test_dashboard_serves_the_projects_studies(project: Project, cli: Cli) -> None:
    import json
    import socket
    import subprocess
    import time
    import urllib.request

    project.write(repeat_target())
    assert cli.run("tune", "--trials", "2", "--seed", "3").returncode == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [*cli.argv("dashboard", "--port", str(port))[:-2]]  # no --backend for this command
    proc = subprocess.Popen(argv, cwd=project.path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        studies = None
        end = time.monotonic() + 60
        while studies is None and time.monotonic() < end and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as r:
                    studies = json.loads(r.read())["study_summaries"]
            except OSError:
                time.sleep(0.3)
        assert studies is not None, proc.communicate(timeout=5) if proc.poll() is not None else "no answer"
        (study,) = studies
        assert study["study_name"].startswith("scale-N4096-")
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_dashboard_without_studies_says_what_to_do(project: Project, cli: Cli) -> None:
    import subprocess

    project.write(repeat_target())
    done = subprocess.run(cli.argv("dashboard")[:-2], cwd=project.path, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2 and "no studies under" in done.stderr and "tune first" in done.stderr
