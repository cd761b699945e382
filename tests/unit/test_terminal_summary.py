"""The terminal summary fits 120 columns: the device said once above the table when every row ran on it."""

from __future__ import annotations

from pytest_ktune.gate.verdict import PerfResult
from pytest_ktune.report.terminal import summary_table

DEVICE = "Portable Computing Language pthread-AMD EPYC 7B13 64-Core Processor with a long name"  # 83 chars


def _result(target: str, case: str, device: str = DEVICE) -> PerfResult:
    return PerfResult(target=target, case=case, backend="opencl", device=device, time_us=1234.5678,
                      baseline_us=1200.0, ratio=1.0288, gbps=123.4, copy_fraction=0.5, verdict="no baseline")


def test_one_device_is_named_once_and_every_line_fits() -> None:
    results = [_result("fused_add_rmsnorm", "T16384-H4096-float16"),
               _result("per_token_group_quant_with_a_very_long_name", "T16384-H8192-G128-float16-int8-and-more")]
    lines = summary_table(results)
    assert lines[0] == f"on opencl / {DEVICE}"
    assert sum(DEVICE in line for line in lines) == 1
    assert lines[1].split() == ["target", "case", "time", "µs", "baseline", "µs", "ratio", "GB/s", "%", "copy", "BW",
                                "verdict"]
    assert all(len(line) <= 120 for line in lines), [len(line) for line in lines]
    assert "fused_add_rmsnorm" in lines[3] and "T16384-H4096-float16" in lines[3]
    assert "…" in lines[4]  # the long name is cut, not the numbers
    assert lines[4].rstrip().endswith("no baseline") and "1,235" in lines[4]


def test_rows_of_several_devices_name_theirs() -> None:
    lines = summary_table([_result("rmsnorm", "T1", "GPU A"), _result("rmsnorm", "T1", "GPU B")])
    assert lines[0].split()[:3] == ["target", "case", "backend"]
    assert "opencl / GPU A" in lines[2] and "opencl / GPU B" in lines[3]
