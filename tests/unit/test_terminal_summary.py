"""The terminal summary: the device said once above the table when every row ran on it; long target and case
names cut at fixed widths, the same on every host, the numbers never."""

from __future__ import annotations

from pytest_ktune.gate.verdict import PerfResult
from pytest_ktune.report.terminal import CASE_WIDTH, TARGET_WIDTH, summary_table

DEVICE = "Portable Computing Language pthread-AMD EPYC 7B13 64-Core Processor with a long name"  # 83 chars


def _result(target: str, case: str, device: str = DEVICE) -> PerfResult:
    return PerfResult(target=target, case=case, backend="opencl", device=device, time_us=1234.5678,
                      baseline_us=1200.0, ratio=1.0288, gbps=123.4, copy_fraction=0.5, verdict="no baseline")


def test_one_device_is_named_once_and_long_names_are_cut() -> None:
    results = [_result("fused_add_rmsnorm", "T16384-H4096-float16"),
               _result("per_token_group_quant_with_a_very_long_name", "T16384-H8192-G128-float16-int8-and-some-more")]
    lines = summary_table(results)
    assert lines[0] == f"on opencl / {DEVICE}"
    assert sum(DEVICE in line for line in lines) == 1
    assert lines[1].split() == ["target", "case", "time", "µs", "baseline", "ratio", "GB/s", "%", "copy", "BW",
                                "verdict"]
    assert "fused_add_rmsnorm" in lines[3] and "T16384-H4096-float16" in lines[3]
    # The long names are cut at their caps, not the numbers; without GFLOP/s columns the lines fit 120.
    assert f"{results[1].target[:TARGET_WIDTH - 1]}… " in lines[4]
    assert f"{results[1].case[:CASE_WIDTH - 1]}… " in lines[4]
    assert lines[4].rstrip().endswith("no baseline") and "1,235" in lines[4]
    assert all(len(line) <= 120 for line in lines), [len(line) for line in lines]


def test_names_the_caps_allow_are_whole_however_wide_the_other_columns() -> None:
    # The example's longest names, beside wide numbers and a long verdict; still within 120 columns.
    long = PerfResult(target="fused_add_rmsnorm", case="T128-Hq32-Hk8-D128-float16-int32", backend="opencl",
                      device="d", time_us=123456.789, baseline_us=99999.5, ratio=1.2346, gbps=0.01,
                      copy_fraction=0.001, verdict="slower: 23% over the baseline, confirmed A/B")
    lines = summary_table([long])
    assert lines[3].startswith("fused_add_rmsnorm  T128-Hq32-Hk8-D128-float16-int32  "), lines[3]
    long = PerfResult(target="reshape_and_cache_flash", case="T4096-NH64-D128-bfloat16-empty", backend="opencl",
                      device="d", time_us=123456.789, baseline_us=99999.5, ratio=1.2346, gbps=1234.5,
                      copy_fraction=1.05, verdict="no baseline")
    lines = summary_table([long])
    assert "…" not in lines[3] and all(len(line) <= 120 for line in lines), lines


def test_rows_of_several_devices_name_theirs() -> None:
    lines = summary_table([_result("rmsnorm", "T1", "GPU A"), _result("rmsnorm", "T1", "GPU B")])
    assert lines[0].split()[:3] == ["target", "case", "backend"]
    assert "opencl / GPU A" in lines[2] and "opencl / GPU B" in lines[3]
