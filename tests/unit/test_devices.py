"""The gate's scheduling over several devices (``run.devices``) with fake devices: the spread balances
expected work, jobs run on the lanes at once, a lost device fails its job in flight and its queue moves
to the others, and the last device is never retired."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_ktune.backends.base import DeviceInfo, device_labels
from pytest_ktune.core.options import OptionError
from pytest_ktune.measure.service import ItemCrash
from pytest_ktune.run.config import ConfigFiles, resolve
from pytest_ktune.run.devices import Dispatcher, Planned, expected_times, spread
from pytest_ktune.run.options import parse_devices


def _job(key: str, expected: float = 1.0) -> Planned:
    return Planned(key, expected, lambda lane: (lane, key))


def _device(name: str) -> DeviceInfo:
    return DeviceInfo(backend="opencl", name=name, arch="", compiler="", compute_units=1, max_threads_per_block=1,
                      shared_mem_per_block=0, regs_per_block=0, l2_bytes=0, global_mem_bytes=0, warp_size=1)


def test_spread_puts_the_longest_first_onto_the_least_loaded_device() -> None:
    jobs = [_job("a", 5), _job("b", 4), _job("c", 3), _job("d", 3), _job("e", 1)]
    queues = spread(jobs, 2)
    loads = [sum(j.expected for j in q) for q in queues]
    assert [[j.key for j in q] for q in queues] == [["a", "d"], ["b", "c", "e"]]
    assert loads == [8, 8]


def test_spread_counts_what_each_device_holds_already() -> None:
    queues = spread([_job("a"), _job("b")], 2, loads=[10.0, 0.0])
    assert [[j.key for j in q] for q in queues] == [[], ["a", "b"]]


def test_cases_without_a_baseline_count_as_the_mean_of_those_with_one() -> None:
    assert expected_times([2.0, None, 4.0]) == [2.0, 3.0, 4.0]
    assert expected_times([None, None]) == [1.0, 1.0]


def test_devices_of_one_name_are_told_apart_by_index() -> None:
    assert device_labels([(0, _device("pthread")), (1, _device("pthread")), (3, _device("other"))]) == \
        ["pthread #0", "pthread #1", "other"]


def test_every_planned_job_runs_once_and_the_devices_run_at_once() -> None:
    running, peak, lock = [0], [0], threading.Lock()

    def slow(lane: str) -> str:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return lane

    d: Dispatcher[str] = Dispatcher(["gpu0", "gpu1"])
    try:
        d.plan([Planned(k, 1.0, slow) for k in "abcd"])
        d.plan([Planned("a", 1.0, slow)])  # planned twice: still one job
        lanes = [d.result(k) for k in "abcd"]
    finally:
        d.close()
    assert sorted(lanes) == ["gpu0", "gpu0", "gpu1", "gpu1"]
    assert peak[0] == 2


def test_an_urgent_job_runs_before_the_queued_ones() -> None:
    gate = threading.Event()
    order: list[str] = []
    d: Dispatcher[str] = Dispatcher(["only"])
    try:
        d.plan([Planned("first", 1.0, lambda lane: gate.wait(5)),
                Planned("queued", 1.0, lambda lane: order.append("q"))])
        threading.Timer(0.1, gate.set).start()
        d.now(lambda lane: order.append("urgent"))
        d.result("first")
        d.result("queued")
    finally:
        d.close()
    assert order == ["urgent", "q"]


def test_a_lost_device_fails_its_job_in_flight_and_its_queue_moves_to_the_others() -> None:
    def run_on(key: str) -> Any:
        def run(lane: str) -> tuple[str, str]:
            if lane == "bad":
                raise ItemCrash(f"{key}: the device fell off the bus")
            return lane, key
        return run

    d: Dispatcher[str] = Dispatcher(["bad", "good"])
    try:
        d.plan([Planned(k, 1.0, run_on(k)) for k in "abcdef"])
        outcomes: dict[str, Any] = {}
        for k in "abcdef":
            try:
                outcomes[k] = d.result(k)
            except ItemCrash as exc:
                outcomes[k] = exc.message
    finally:
        d.close()
    crashed = [k for k, v in outcomes.items() if isinstance(v, str)]
    assert len(crashed) == 1 and "fell off the bus" in outcomes[crashed[0]]
    assert all(v[0] == "good" for k, v in outcomes.items() if k not in crashed)
    assert d.retired == [(0, f"{crashed[0]}: the device fell off the bus")]
    assert d.alive() == ["good"]


def test_correctness_jobs_fill_the_gaps_on_whichever_device_frees_first() -> None:
    ran: list[tuple[str, str, float, float]] = []  # (lane, job, start, end)
    lock = threading.Lock()
    t0 = time.monotonic()

    def job(key: str, seconds: float) -> Any:
        def run(lane: str) -> str:
            start = time.monotonic() - t0
            time.sleep(seconds)
            with lock:
                ran.append((lane, key, start, time.monotonic() - t0))
            return lane
        return run

    d: Dispatcher[str] = Dispatcher(["gpu0", "gpu1"])
    try:
        # The long case alone on gpu0, the two short ones on gpu1, which then frees first.
        d.plan([Planned("long", 4.0, job("long", 0.6)), Planned("b", 1.0, job("b", 0.05)),
                Planned("c", 1.0, job("c", 0.05))],
               fill=[Planned(k, 0.0, job(k, 0.05)) for k in ("x", "y", "z")])
        lanes = {k: d.result(k) for k in ("long", "b", "c", "x", "y", "z")}
    finally:
        d.close()
    assert lanes == {"long": "gpu0", "b": "gpu1", "c": "gpu1", "x": "gpu1", "y": "gpu1", "z": "gpu1"}
    own_done = max(end for lane, key, _, end in ran if key in ("b", "c"))
    assert all(start >= own_done for _, key, start, _ in ran if key in ("x", "y", "z"))  # after its own queue


def test_both_devices_take_the_correctness_jobs_once_their_own_are_done() -> None:
    def check(lane: str) -> str:
        time.sleep(0.03)
        return lane

    d: Dispatcher[str] = Dispatcher(["gpu0", "gpu1"])
    try:
        d.plan([], fill=[Planned(k, 0.0, check) for k in "abcdefgh"])
        lanes = [d.result(k) for k in "abcdefgh"]
    finally:
        d.close()
    assert set(lanes) == {"gpu0", "gpu1"}  # not one at a time as pytest asks for them


def test_correctness_jobs_go_on_on_the_device_left_when_one_is_lost() -> None:
    def check(lane: str) -> str:
        if lane == "bad":
            raise ItemCrash("the device fell off the bus")
        time.sleep(0.01)
        return lane

    d: Dispatcher[str] = Dispatcher(["bad", "good"])
    try:
        d.plan([], fill=[Planned(k, 0.0, check) for k in "abcdef"])
        outcomes = {}
        for k in "abcdef":
            try:
                outcomes[k] = d.result(k)
            except ItemCrash:
                outcomes[k] = "crashed"
    finally:
        d.close()
    assert sorted(outcomes.values()) == ["crashed"] + ["good"] * 5
    assert d.alive() == ["good"]


def test_the_last_device_is_never_retired() -> None:
    calls = []

    def flaky(lane: str) -> str:
        calls.append(lane)
        if len(calls) == 1:
            raise ItemCrash("a kernel crashed the process")
        return lane

    d: Dispatcher[str] = Dispatcher(["only"])
    try:
        d.plan([Planned("a", 1.0, flaky), Planned("b", 1.0, flaky)])
        with pytest.raises(ItemCrash):
            d.result("a")
        assert d.result("b") == "only"  # a fresh process runs the rest, as on one device
    finally:
        d.close()
    assert d.retired == []


def test_an_items_own_failure_does_not_retire_its_device() -> None:
    def mismatch(lane: str) -> str:
        raise ValueError("wrong answer")

    d: Dispatcher[str] = Dispatcher(["a", "b"])
    try:
        d.plan([Planned("x", 1.0, mismatch)])
        with pytest.raises(ValueError, match="wrong answer"):
            d.result("x")
    finally:
        d.close()
    assert d.alive() == ["a", "b"]


@pytest.mark.parametrize(("given", "devices"), [("", None), ("all", "all"), ("ALL", "all"), ("0, 2,3", (0, 2, 3))])
def test_the_devices_option_reads_all_or_indices(given: str, devices: object, tmp_path: Path) -> None:
    files = ConfigFiles(ini_path=tmp_path / "pytest.ini", table_path=tmp_path / "pyproject.toml")
    assert parse_devices(resolve({"devices": given}, files, root=tmp_path, env={})) == devices


@pytest.mark.parametrize("given", ["0,0", "1,-2", "gpu0", "0;1"])
def test_a_devices_option_that_is_not_a_list_of_indices_is_refused(given: str, tmp_path: Path) -> None:
    files = ConfigFiles(ini_path=tmp_path / "pytest.ini", table_path=tmp_path / "pyproject.toml")
    opts = resolve({}, files, root=tmp_path, env={"KTUNE_DEVICES": given})
    with pytest.raises(OptionError, match="KTUNE_DEVICES") as err:
        parse_devices(opts)
    assert "distinct device indices" in (err.value.hint or "")
