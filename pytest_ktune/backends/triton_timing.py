"""The triton backend's timers: a CUDA graph of the replays on torch's stream (CUDA events around it, as the
cuda backend times CuPy's), and the host's clock for the interpreter, whose timings are no GPU's."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from pytest_ktune.backends.base import Launch, copy_buffer_bytes, replay_sets, wait_timed


class TorchGraphTimer:
    """``repeats`` passes over the launch sets captured in one ``torch.cuda.CUDAGraph`` and timed with CUDA
    events on a stream of its own; the launches one by one between the events where capture fails."""

    def __init__(self, backend: Any, launch_sets: Sequence[Sequence[Launch]], repeats: int) -> None:
        torch = backend.torch
        self.backend = backend
        self.torch = torch
        self.repeats = repeats
        self.sets = launch_sets
        self.stream = torch.cuda.Stream(device=backend.device_obj)
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.graph: Any = None
        self.mode = "graph"
        torch.cuda.synchronize(backend.device_obj)
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=self.stream):
                replay_sets(self.sets, repeats)
            self.graph = graph
        except Exception:  # a launch that cannot be captured: time them one by one
            self.graph = None
            self.mode = "events"
            torch.cuda.synchronize(backend.device_obj)

    def sample(self, flush: bool) -> float:
        torch = self.torch
        with torch.cuda.stream(self.stream):
            if flush:
                self.backend.flush_cache()
            self.start.record(self.stream)
            if self.graph is not None:
                self.graph.replay()
            else:
                replay_sets(self.sets, self.repeats)
            self.end.record(self.stream)
        wait_timed(self.end)
        return float(self.start.elapsed_time(self.end)) * 1e-3 / self.repeats

    def close(self) -> None:
        self.graph = None
        self.sets = ()


class HostTimer:
    """The interpreter's passes timed by the host's clock: what the interpreter costs, not what a GPU would."""

    mode = "interpreter"

    def __init__(self, backend: Any, launch_sets: Sequence[Sequence[Launch]], repeats: int) -> None:
        self.backend = backend
        self.sets = launch_sets
        self.repeats = repeats

    def sample(self, flush: bool) -> float:
        t0 = time.perf_counter()
        replay_sets(self.sets, self.repeats)
        return (time.perf_counter() - t0) / self.repeats

    def close(self) -> None:
        self.sets = ()


def copy_bandwidth(backend: Any) -> float:
    """Bytes/s of a device-to-device copy (read + written), the median of ten after two warm-ups; on the CPU
    (the interpreter) a host copy, timed by the clock."""
    torch = backend.torch
    floor = 16 << 20 if backend.device.interpreted else 256 << 20
    nbytes = copy_buffer_bytes(backend.device, cache_multiple=16 if not backend.device.interpreted else 2,
                               floor=floor)
    src = torch.full((nbytes,), 3, dtype=torch.uint8, device=backend.device_obj)
    dst = torch.empty_like(src)
    times = []
    for _ in range(12):
        if backend.device.interpreted:
            t0 = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - t0)
        else:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            times.append(float(start.elapsed_time(end)) * 1e-3)
    del src, dst
    backend.release()
    return float(2 * nbytes / statistics.median(times[2:]))
