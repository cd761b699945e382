"""The gate over several devices (``--ktune-devices``), on two PoCL CPU devices of one name: every
performance item runs on one of them, the rows, the JUnit and the JSON name which (by index, since
the names are the same), and a device that fails hands its remaining work to the other."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from tuner._tk import MODE_OUT_OF_BOUNDS, PROBE_CL, probe_target

from ._kit import Project, case, scale_target, summary_rows

TWO = "pthread pthread"  # PoCL exposes two CPU devices, both with the same name

# A conftest that makes device 0's measurement process crash on its first timing: a fake of a GPU lost
# mid-run. Its class is patched in pytest's process, where the service's parent side lives.
CRASH_DEVICE_0 = '''
from pytest_ktune.measure import service

_time = service.MeasureService.time


def _crashing(self, case, params):
    if self.spec.device_index == 0:
        raise service.ItemCrash(f"target {case.target.name}: device 0 lost (a test's fake crash)")
    return _time(self, case, params)


service.MeasureService.time = _crashing
'''


def _write(project: Project) -> None:
    cases = ", ".join(case(n, case_id=f"n{n}") for n in (1024, 2048, 4096, 8192))
    project.write(scale_target(cases=f"{cases}"))


@pytest.fixture
def two_devices(project: Project, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.setenv("POCL_DEVICES", TWO)
    monkeypatch.delenv("KTUNE_OPENCL_DEVICE", raising=False)
    _write(project)
    return project


def _devices_of(bench: dict[str, Any]) -> set[str]:
    return {b["extra_info"]["device"] for b in bench["benchmarks"]}


def test_the_gate_runs_on_every_device_and_each_row_names_its_own(two_devices: Project) -> None:
    result = two_devices.run("-v", "--ktune-devices=all", "--ktune-junit=junit.xml",
                             "--ktune-benchmark-json=bench.json")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=8)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["ktune: measuring on 2 devices: * #0, * #1"])
    assert "backend / device" in out  # rows of two devices: each names its own, its index kept when cut
    cells = {cell for row in summary_rows(result).values() for cell in row if cell.startswith("opencl / ")}
    assert {c.rsplit(" ", 1)[1] for c in cells} == {"#0", "#1"}, cells
    bench = json.loads((two_devices.path / "bench.json").read_text())
    devices = _devices_of(bench)
    assert len(devices) == 2 and all(d.endswith((" #0", " #1")) for d in devices), devices
    assert len({d.rsplit(" #", 1)[0] for d in devices}) == 1  # one name, told apart by index
    junit = ET.parse(two_devices.path / "junit.xml").getroot()
    props = {p.get("name"): p.get("value") for p in junit.iter("property")}
    per_case = {v for k, v in props.items() if k and k.startswith("perf[") and k.endswith(".device")}
    assert per_case == devices


def test_a_device_that_fails_hands_its_work_to_the_other(two_devices: Project) -> None:
    two_devices.pytester.makeconftest(CRASH_DEVICE_0)
    result = two_devices.run("-v", "--ktune-devices=0,1", "--ktune-benchmark-json=bench.json")
    out = result.stdout.str()
    # Device 0's one job in flight fails; its other jobs ran on device 1.
    result.assert_outcomes(passed=7, failed=1)
    assert "device 0 lost (a test's fake crash)" in out
    assert "failed, and its remaining items moved to the other devices" in out
    bench = json.loads((two_devices.path / "bench.json").read_text())
    assert len(bench["benchmarks"]) == 3
    assert {d.rsplit(" ", 1)[1] for d in _devices_of(bench)} == {"#1"}


def test_a_bad_device_list_is_a_usage_error(two_devices: Project) -> None:
    result = two_devices.run("--ktune-devices=0,x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--ktune-devices '0,x' is not a list of devices" in result.stderr.str()


def test_a_device_index_past_the_last_is_a_usage_error(two_devices: Project) -> None:
    result = two_devices.run("--ktune-devices=0,5")
    assert result.ret != pytest.ExitCode.OK
    assert "names OpenCL device 5, but there are 2" in result.stdout.str() + result.stderr.str()


def test_a_kernel_that_crashes_a_device_fails_its_items_and_the_rest_run_on_the_other(two_devices: Project) -> None:
    # "broken" runs first (targets run in the order of their names) and kills its device's process.
    cases = ", ".join(case(n, case_id=f"n{n}") for n in (1024, 2048, 4096))
    two_devices.write(probe_target("broken", space="BLOCK=[64], MODE=[0, 3]",
                                   default=f"{{'BLOCK': 64, 'MODE': {MODE_OUT_OF_BOUNDS}}}"),
                      scale_target("later", cases=cases), sources={"probe": PROBE_CL})
    result = two_devices.run("-v", "--ktune-devices=all", "--ktune-benchmark-json=bench.json")
    result.assert_outcomes(passed=6, failed=2)
    out = result.stdout.str()
    assert "the measurement process died from signal 11" in out
    assert "failed, and its remaining items moved to the other devices" in out
    bench = json.loads((two_devices.path / "bench.json").read_text())
    assert len(bench["benchmarks"]) == 3 and len(_devices_of(bench)) == 1  # the device left ran them all


def test_devices_of_one_identity_record_and_share_one_set_of_baselines(two_devices: Project) -> None:
    recorded = two_devices.run("--ktune-devices=all", "--ktune-update-baseline", "--ktune-benchmark-json=rec.json")
    assert recorded.ret == pytest.ExitCode.OK, recorded.stdout.str()
    assert len(_devices_of(json.loads((two_devices.path / "rec.json").read_text()))) == 2
    records = two_devices.records()  # a key per case, measured on either device
    assert len({r["device"] for r in records}) == 1  # one device name in the params file
    assert len({m for r in records for m in r["baseline"]["machines"]}) == 1  # one identity: shared baselines
    assert {case for r in records for t in r["baseline"]["machines"].values() for case in t} == \
        {"n1024", "n2048", "n4096", "n8192"}
    gated = two_devices.run("--ktune-devices=all", "--ktune-benchmark-json=bench.json")
    bench = json.loads((two_devices.path / "bench.json").read_text())
    verdicts = {b["extra_info"]["verdict"] for b in bench["benchmarks"]}
    assert "no baseline" not in verdicts, gated.stdout.str()
