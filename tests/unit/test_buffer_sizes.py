"""Scratch buffers of the timing harness, sized from the limits a device reports."""

from __future__ import annotations

import dataclasses

from pytest_ktune.backends.base import copy_buffer_bytes, flush_bytes

from ._fakes import FAKE_DEVICE

MiB = 1 << 20
GiB = 1 << 30
H200 = dataclasses.replace(FAKE_DEVICE, l2_bytes=60 * MiB, global_mem_bytes=141 * GiB,
                           max_alloc_bytes=141 * GiB, kind="gpu")
BIG_L3 = dataclasses.replace(FAKE_DEVICE, l2_bytes=480 * MiB, global_mem_bytes=4 * GiB,
                             max_alloc_bytes=2 * GiB, kind="cpu")


def test_a_gpu_keeps_its_cache_multiples() -> None:
    assert copy_buffer_bytes(H200, cache_multiple=16, floor=256 * MiB) == 16 * 60 * MiB
    assert flush_bytes(H200) == 2 * 60 * MiB
    assert flush_bytes(H200, touched=MiB) == 2 * 60 * MiB  # a GPU's flush is its cache, always


def test_a_big_cache_host_stays_within_its_memory() -> None:
    copy = copy_buffer_bytes(BIG_L3, cache_multiple=8, floor=64 * MiB)
    assert copy <= BIG_L3.max_alloc_bytes and copy <= BIG_L3.global_mem_bytes // 8
    assert copy % 16 == 0
    assert flush_bytes(BIG_L3) <= BIG_L3.global_mem_bytes // 8
    assert BIG_L3.timing_cache_bytes <= BIG_L3.global_mem_bytes // 16


def test_a_cpu_flushes_twice_what_the_sample_touches() -> None:
    assert flush_bytes(BIG_L3, touched=3 * MiB) == 6 * MiB
    assert flush_bytes(BIG_L3, touched=10 * GiB) == flush_bytes(BIG_L3)
    assert flush_bytes(BIG_L3, touched=1000) == MiB  # never below a mebibyte


def test_a_small_allocation_limit_bounds_every_buffer() -> None:
    tiny = dataclasses.replace(BIG_L3, max_alloc_bytes=8 * MiB)
    assert copy_buffer_bytes(tiny, cache_multiple=8, floor=64 * MiB) == 8 * MiB
    assert flush_bytes(tiny) == 8 * MiB
    assert flush_bytes(tiny, touched=MiB) == 2 * MiB


def test_an_unreported_allocation_limit_falls_back_to_the_memory_share() -> None:
    unknown = dataclasses.replace(BIG_L3, max_alloc_bytes=0)
    assert copy_buffer_bytes(unknown, cache_multiple=8, floor=64 * MiB) == unknown.global_mem_bytes // 8
