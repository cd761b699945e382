"""The contract every backend keeps, written as a pytest test class.

Subclass ``BackendContract`` in a test module and provide a ``backend``
fixture that returns the backend under test; pytest then runs every test
below against it. The kernels come in an OpenCL and a CUDA flavour, chosen by
``backend.name``; a backend with another kernel language overrides
``SOURCES`` (or ``source``) with its own versions of the same kernels:

``scale``
    ``ktune_scale(out, x, n)``: ``out[i] = x[i] * SCALE + OFFSET`` for ``i < n``,
    ``SCALE`` and ``OFFSET`` coming from ``-D`` defines.
``spin``
    ``ktune_spin(out, x, n, iters)``: ``iters`` dependent multiply-adds per
    element, so the work grows with ``iters``.
``broken``
    Fails to compile because of an undeclared name, ``ktune_undeclared_name``,
    on line ``BROKEN_LINE`` and nowhere else.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from pytest_ktune.backends.base import (
    Backend,
    KernelFunction,
    Launch,
    Program,
    compare_on_device,
    has_device_comparison,
    poison_value,
)
from pytest_ktune.call import target
from pytest_ktune.core.case import Case, Tensor, Tolerance, tolerance_for
from pytest_ktune.core.compare import compare_one
from pytest_ktune.core.errors import CompileError, LaunchError
from pytest_ktune.core.launch import cdiv
from pytest_ktune.core.names import C_BACKENDS
from pytest_ktune.core.space import Space
from pytest_ktune.measure.runtime import Kernel, run
from pytest_ktune.testing.memory import MemoryContract

_OPENCL: dict[str, str] = {
    "scale": """\
__kernel void ktune_scale(__global float* out, __global const float* x, int n) {
    const int i = (int)get_global_id(0);
    if (i < n) out[i] = x[i] * (float)(SCALE) + (float)(OFFSET);
}
""",
    "spin": """\
__kernel void ktune_spin(__global float* out, __global const float* x, int n, int iters) {
    const int i = (int)get_global_id(0);
    if (i < n) {
        float v = x[i];
        for (int k = 0; k < iters; ++k) v = v * 0.99993f + 0.00007f;
        out[i] = v;
    }
}
""",
    "broken": """\
// A deliberate compile error on line 4, and only there.
__kernel void ktune_broken(__global float* out) {
    float fine = 1.0f;
    out[0] = fine + ktune_undeclared_name;
}
""",
}

_CUDA: dict[str, str] = {
    "scale": """\
extern "C" __global__ void ktune_scale(float* out, const float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * (float)(SCALE) + (float)(OFFSET);
}
""",
    "spin": """\
extern "C" __global__ void ktune_spin(float* out, const float* x, int n, int iters) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        for (int k = 0; k < iters; ++k) v = v * 0.99993f + 0.00007f;
        out[i] = v;
    }
}
""",
    "broken": """\
// A deliberate compile error on line 4, and only there.
extern "C" __global__ void ktune_broken(float* out) {
    float fine = 1.0f;
    out[0] = fine + ktune_undeclared_name;
}
""",
}

_SUFFIX = {"opencl": ".cl", "cuda": ".cu"}


def _best_times(backend: Backend, runs: Sequence[tuple[Sequence[Sequence[Launch]], int]],
                samples: int = 5) -> list[float]:
    """The shortest sample of each ``(launch_sets, repeats)`` run, the runs' samples interleaved.

    The minimum, not the median, and interleaved: other processes on a shared
    CI machine only ever make samples longer, and a busy spell then slows all
    runs alike instead of one of them.
    """
    timers = [backend.timer(sets, repeats) for sets, repeats in runs]
    try:
        for t in timers:
            t.sample(False)
        best = [math.inf] * len(timers)
        for _ in range(samples):
            for i, t in enumerate(timers):
                best[i] = min(best[i], t.sample(False))
        return best
    finally:
        for t in timers:
            t.close()


def _within_tries(check: Callable[[], None], tries: int = 3) -> None:
    """Run a timing check up to ``tries`` times: a busy spell on a shared CPU can spoil one measurement,
    but a timer that is really wrong fails every time."""
    for attempt in range(tries):
        try:
            check()
            return
        except AssertionError:
            if attempt == tries - 1:
                raise


def _comparison_cases(dtype: str, n: int) -> list[tuple[str, np.ndarray, np.ndarray, Tolerance]]:
    """Outputs in ``dtype`` and references (float64 for floats) that pass and fail ``compare_one``
    in each of its ways: ``(label, out, ref, tol)``."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng(11)
    cases: list[tuple[str, np.ndarray, np.ndarray, Tolerance]] = []
    if dt.kind in "iu":
        ref = rng.integers(-100 if dt.kind == "i" else 0, 100, n).astype(dt)
        exact = tolerance_for(dt, None)
        off = ref.copy()
        off[n // 2] += 1
        cases += [("equal", ref.copy(), ref, exact), ("off by one", off, ref, exact),
                  ("off by one, atol 1", off, ref, Tolerance(norm=1.0, atol=1.0, rtol=0.0)),
                  ("wider reference", ref.copy(), ref.astype(np.int64), exact)]
        return cases
    tol = tolerance_for(dt, None)
    ref = rng.standard_normal(n) + 2.0
    out = ref.astype(dt)
    cases.append(("rounded", out, ref, tol))
    near = (ref + 0.5 * (tol.atol + tol.rtol * np.abs(ref))).astype(dt)
    cases.append(("within atol and rtol, not the norm", near, ref, tol))
    cases.append(("within atol, rtol and the norm", near, ref, Tolerance(norm=1.0, atol=tol.atol, rtol=tol.rtol)))
    far = out.copy()
    far[n // 3] = dt.type(ref[n // 3] + 4 * (tol.atol + tol.rtol * abs(ref[n // 3])))
    cases.append(("one element beyond", far, ref, Tolerance(norm=1.0, atol=tol.atol, rtol=tol.rtol)))
    for label, value in (("NaN", np.nan), ("inf", np.inf)):
        bad = out.copy()
        bad[n - 1] = value
        cases.append((f"{label} in the output", bad, ref, tol))
    nonfinite_ref = ref.copy()
    nonfinite_ref[1] = np.inf
    matched = out.copy()
    matched[1] = np.inf
    cases.append(("inf matched", matched, nonfinite_ref, tol))
    cases.append(("empty", out[:0], ref[:0], tol))
    return cases


def _assert_scaled(got: np.ndarray, x: np.ndarray, scale: float, offset: float) -> None:
    """``got == x * scale + offset`` up to float32 rounding (a compiler may fuse it into an FMA)."""
    assert not np.isnan(got).any(), "the kernel left elements unwritten (still NaN-poisoned)"
    np.testing.assert_allclose(got, x * np.float32(scale) + np.float32(offset), rtol=1e-6, atol=1e-6)


class BackendContract(MemoryContract):
    """Behaviour every backend must show; subclass it and provide a ``backend`` fixture. (Constant and
    dynamic shared memory and the multiply-add peak, optional, are in ``testing.memory``.)

    Sizes are small on purpose: the whole class runs in a few seconds on
    PoCL's CPU device, most of it in ``copy_bandwidth``.
    """

    SOURCES: ClassVar[Mapping[str, Mapping[str, str]]] = {"opencl": _OPENCL, "cuda": _CUDA}
    #: The line of the ``broken`` source that holds the error.
    BROKEN_LINE: ClassVar[int] = 4
    #: Elements per test array: not a multiple of the block, so the bounds check matters.
    N: ClassVar[int] = 1000
    #: Threads per block, lowered to what the function allows where that is less.
    BLOCK: ClassVar[int] = 64
    #: Elements of the ``spin`` timing kernel.
    SPIN_N: ClassVar[int] = 4096
    #: The shortest time a baseline ``spin`` launch is made to take before work is compared.
    SPIN_MIN_S: ClassVar[float] = 300e-6

    @pytest.fixture
    def backend(self) -> Backend:
        pytest.fail("a BackendContract subclass must define a `backend` fixture returning the "
                    "backend under test")

    # -- helpers ---------------------------------------------------------
    def source(self, backend: Backend, kind: str) -> str:
        """The ``kind`` kernel (scale, spin or broken) in ``backend``'s language."""
        sources = self.SOURCES.get(backend.name, {})
        if kind not in sources:
            pytest.fail(f"no {kind!r} kernel for backend {backend.name!r}: add it to SOURCES "
                        f"or override BackendContract.source")
        return sources[kind]

    def filename(self, backend: Backend, stem: str) -> str:
        return f"{stem}{_SUFFIX.get(backend.name, '.src')}"

    def compile(self, backend: Backend, kind: str, defines: Mapping[str, Any] | None = None) -> Program:
        return backend.compile(self.source(backend, kind), dict(defines or {}),
                               filename=self.filename(backend, f"contract_{kind}"))

    def scale_function(self, backend: Backend, scale: Any, offset: Any) -> KernelFunction:
        return self.compile(backend, "scale", {"SCALE": scale, "OFFSET": offset}).function("ktune_scale")

    def block_for(self, fn: KernelFunction) -> int:
        return min(self.BLOCK, fn.resources().max_threads_per_block)

    def host_input(self, n: int | None = None, seed: int = 0) -> np.ndarray:
        return np.random.default_rng(seed).standard_normal(n or self.N).astype(np.float32)

    def run_scale(self, backend: Backend, fn: KernelFunction, x: np.ndarray) -> np.ndarray:
        """Launch ``ktune_scale`` on ``x`` into a NaN-poisoned output and return the result."""
        n = int(x.size)
        out = backend.empty((n,), np.float32, poison=True)
        block = self.block_for(fn)
        fn.launch((cdiv(n, block),), (block,), (out, backend.to_device(x), np.int32(n)))
        backend.synchronize()
        return backend.to_host(out)

    def spin_launch(self, backend: Backend, fn: KernelFunction, iters: int) -> Launch:
        n = self.SPIN_N
        x = backend.to_device(np.full(n, 0.5, dtype=np.float32))
        out = backend.empty((n,), np.float32)
        block = self.block_for(fn)
        return Launch(fn, (cdiv(n, block),), (block,), (out, x, np.int32(n), np.int32(iters)))

    def calibrated_spin(self, backend: Backend) -> tuple[KernelFunction, int, float]:
        """The spin function, an ``iters`` whose launch lasts at least ``SPIN_MIN_S``, and that time."""
        fn = self.compile(backend, "spin").function("ktune_spin")
        iters = 16
        while True:
            (t,) = _best_times(backend, [([[self.spin_launch(backend, fn, iters)]], 1)], 3)
            if t >= self.SPIN_MIN_S or iters >= 1 << 22:
                return fn, iters, t
            iters *= 2 if t > self.SPIN_MIN_S / 8 else 8

    # -- compiling and launching -----------------------------------------
    def test_compile_with_defines_and_launch(self, backend: Backend) -> None:
        x = self.host_input()
        _assert_scaled(self.run_scale(backend, self.scale_function(backend, 3, 0.5), x), x, 3, 0.5)

    def test_defines_change_the_compiled_code(self, backend: Backend) -> None:
        x = self.host_input()
        doubled = self.run_scale(backend, self.scale_function(backend, 2, 0), x)
        negated = self.run_scale(backend, self.scale_function(backend, -1, 0), x)
        _assert_scaled(doubled, x, 2, 0)
        _assert_scaled(negated, x, -1, 0)

    def test_boolean_defines_become_0_and_1(self, backend: Backend) -> None:
        x = self.host_input()
        got = self.run_scale(backend, self.scale_function(backend, True, False), x)
        np.testing.assert_array_equal(got, x)

    def test_compile_error_shows_log_and_offending_line(self, backend: Backend, tmp_path: Path) -> None:
        filename = str(tmp_path / self.filename(backend, "contract_broken"))
        with pytest.raises(CompileError) as info:
            backend.compile(self.source(backend, "broken"), {"SCALE": 7}, filename=filename)
        message = str(info.value)
        line = self.BROKEN_LINE
        assert filename in message, "the error must name the source file"
        assert "-DSCALE=7" in message, "the error must show the defines it was compiled with"
        assert "ktune_undeclared_name" in message, "the compiler's log is missing"
        assert re.search(rf"\bline {line}\b", message), f"the error does not point at line {line}"
        assert re.search(rf"^>\s*{line} \|.*ktune_undeclared_name", message, re.MULTILINE), (
            f"the offending source line {line} is not shown:\n{message}")

    def test_unknown_kernel_name_is_a_compile_error(self, backend: Backend) -> None:
        program = self.compile(backend, "scale", {"SCALE": 1, "OFFSET": 0})
        with pytest.raises(CompileError, match="ktune_no_such_kernel"):
            program.function("ktune_no_such_kernel")

    def test_too_many_threads_fail_before_launching(self, backend: Backend) -> None:
        fn = self.scale_function(backend, 3, 0.5)
        too_many = fn.resources().max_threads_per_block + 1
        x = backend.to_device(self.host_input())
        out = backend.empty((self.N,), np.float32, poison=True)
        with pytest.raises(LaunchError, match=str(too_many)):
            fn.launch((1,), (too_many,), (out, x, np.int32(self.N)))
        backend.synchronize()
        assert np.isnan(backend.to_host(out)).all(), "the refused launch still ran"
        # The refusal leaves the backend usable.
        x_host = self.host_input()
        _assert_scaled(self.run_scale(backend, fn, x_host), x_host, 3, 0.5)

    # -- device facts ----------------------------------------------------
    def test_device_info_is_sane(self, backend: Backend) -> None:
        d = backend.device
        assert d.backend == backend.name
        assert d.name.strip(), "the device has no name"
        assert d.arch.strip() and d.compiler.strip()
        assert d.compute_units > 0
        assert d.l2_bytes > 0
        assert d.max_threads_per_block > 0
        assert d.shared_mem_per_block > 0
        assert d.global_mem_bytes > d.l2_bytes
        assert d.warp_size >= 1
        assert d.name in d.id and backend.name in d.id

    def test_function_resources_within_device_limit(self, backend: Backend) -> None:
        res = self.scale_function(backend, 3, 0.5).resources()
        assert 0 < res.max_threads_per_block <= backend.device.max_threads_per_block
        assert res.registers >= 0 and res.shared_bytes >= 0 and res.local_bytes >= 0

    # -- memory ----------------------------------------------------------
    @pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64", "uint8"])
    def test_poisoned_empty_is_filled_with_the_poison_value(self, backend: Backend, dtype: str) -> None:
        dt = np.dtype(dtype)
        got = backend.to_host(backend.empty((3, 17), dt, poison=True))
        assert got.shape == (3, 17) and got.dtype == dt
        if dt.kind == "f":
            assert np.isnan(got).all()
        else:
            assert (got == poison_value(dt)).all()

    def test_empty_has_the_shape_and_dtype_asked_for(self, backend: Backend) -> None:
        a = backend.empty((4, 5, 6), np.int16)
        assert backend.owns(a)
        assert tuple(a.shape) == (4, 5, 6)
        assert backend.to_host(a).dtype == np.int16

    @pytest.mark.parametrize("dtype", ["float16", "float32", "int32", "uint8"])
    def test_to_device_and_back_round_trips(self, backend: Backend, dtype: str) -> None:
        host = (np.random.default_rng(1).standard_normal((9, 40)) * 50).astype(dtype)
        view = host[:, ::3]  # not contiguous
        dev = backend.to_device(view)
        assert backend.owns(dev)
        assert not backend.owns(view)
        back = backend.to_host(dev)
        assert isinstance(back, np.ndarray)
        assert back.dtype == view.dtype and back.shape == view.shape
        np.testing.assert_array_equal(back, view)

    def test_release_keeps_the_backend_usable(self, backend: Backend) -> None:
        x = self.host_input()
        kept = backend.to_device(x)
        backend.release()
        backend.release()
        np.testing.assert_array_equal(backend.to_host(kept), x)
        got = self.run_scale(backend, self.scale_function(backend, 2, 1), x)
        _assert_scaled(got, x, 2, 1)

    # -- comparing on the device ------------------------------------------
    @pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
    def test_device_comparison_agrees_with_the_host(self, backend: Backend, dtype: str) -> None:
        """A backend that offers ``compare_on_device`` must pass and fail exactly what
        ``compare_one`` on the host does."""
        reason = "backend has no device comparison; outputs are checked on the host"
        if not has_device_comparison(backend):
            pytest.skip(reason)
        verdicts = []
        for label, out, ref, tol in _comparison_cases(dtype, self.N):
            want = compare_one(out, ref, 0, tol).ok
            got = compare_on_device(backend, backend.to_device(out), backend.to_device(ref), tol)
            if got is None:
                pytest.skip(f"{reason} ({dtype} declined)")
            assert got == want, f"{dtype}, {label}: the device says {got}, the host {want}"
            verdicts.append(want)
        assert True in verdicts and False in verdicts  # the cases test both ways

    # -- timing ----------------------------------------------------------
    def test_timer_samples_several_launch_sets(self, backend: Backend) -> None:
        fn = self.scale_function(backend, 3, 0.5)
        block = self.block_for(fn)
        sets = []
        for seed in range(3):
            x = backend.to_device(self.host_input(seed=seed))
            out = backend.empty((self.N,), np.float32)
            sets.append([Launch(fn, (cdiv(self.N, block),), (block,), (out, x, np.int32(self.N)))])
        timer = backend.timer(sets, 2)
        try:
            assert timer.repeats == 2
            times = [timer.sample(False), timer.sample(True), timer.sample(False)]
        finally:
            timer.close()
        assert all(math.isfinite(t) and t > 0 for t in times), times
        # Replays run the recorded launches for real.
        backend.synchronize()
        x0 = backend.to_host(sets[0][0].args[1])
        _assert_scaled(backend.to_host(sets[0][0].args[0]), x0, 3, 0.5)

    def test_timer_measures_four_times_the_work_as_slower(self, backend: Backend) -> None:
        fn, iters, _ = self.calibrated_spin(backend)

        def check() -> None:
            small, large = _best_times(backend, [([[self.spin_launch(backend, fn, iters)]], 1),
                                                 ([[self.spin_launch(backend, fn, 4 * iters)]], 1)])
            assert large / small > 2, f"4x the work timed {large:.3g} s against {small:.3g} s"

        _within_tries(check)

    def test_timer_sample_is_one_pass_averaged_over_repeats(self, backend: Backend) -> None:
        fn, iters, _ = self.calibrated_spin(backend)
        launch = self.spin_launch(backend, fn, iters)

        def check() -> None:
            one, repeated, two_sets = _best_times(backend, [([[launch]], 1), ([[launch]], 4),
                                                            ([[launch], [launch]], 1)])
            assert 0.5 < repeated / one < 2, f"repeats=4 gave {repeated:.3g} s per pass against {one:.3g} s"
            assert 1.3 < two_sets / one < 3, f"two launch sets took {two_sets:.3g} s against {one:.3g} s for one"

        _within_tries(check)

    def test_copy_bandwidth_is_positive_and_finite(self, backend: Backend) -> None:
        bw = backend.copy_bandwidth()
        assert math.isfinite(bw) and bw > 0
        assert bw < 1e14, f"{bw:.3g} bytes/s is beyond any device: a unit error?"

    # -- through the runtime ---------------------------------------------
    def test_runtime_run_returns_recorded_launches(self, backend: Backend, tmp_path: Path) -> None:
        if backend.name not in C_BACKENDS:
            pytest.skip(f"@ktune.target takes sources for {', '.join(C_BACKENDS)} only")
        path = tmp_path / self.filename(backend, "contract_scale")
        path.write_text(self.source(backend, "scale"))
        n = self.N

        @target(
            sources={backend.name: path},
            space=Space(SCALE=[2, 3], BLOCK=[32, 64]),
            default={"SCALE": 3, "BLOCK": 64},
            key=lambda x: {"N": x.shape[0]},
            defines=lambda x: {"OFFSET": 1},
            cases=[Case(x=Tensor((n,), "float32"))],
            reference=lambda x: x * 2 + 1,
            kernel="ktune_scale",
            name="contract_scale",
        )
        def contract_scale(kernel: Kernel, x: Any) -> Any:
            size = int(x.shape[0])
            out = kernel.empty(size, np.float32)
            block = int(kernel["BLOCK"])
            kernel.launch(grid=cdiv(size, block), block=block, args=[out, x, np.int32(size)])
            return out

        x = self.host_input()
        bound = contract_scale.bind(x=backend.to_device(x)).arguments
        for scale, block in ((2, 32), (3, 64)):
            result, launches = run(backend, contract_scale, {"SCALE": scale, "BLOCK": block}, bound,
                                   poison=True)
            backend.synchronize()
            _assert_scaled(backend.to_host(result), x, scale, 1)
            assert len(launches) == 1
            (launch,) = launches
            assert launch.function.name == "ktune_scale"
            assert launch.grid == (cdiv(n, block),) and launch.block == (block,)
            assert launch.args[0] is result
            assert backend.to_host(launch.args[1]).tobytes() == x.tobytes()
            # The recorded launches are what timing replays.
            timer = backend.timer([launches], 1)
            try:
                assert timer.sample(False) > 0
            finally:
                timer.close()
