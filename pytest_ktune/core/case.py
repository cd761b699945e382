"""What a target promises to handle: cases of tensors and values, and how close its outputs must be."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_ktune.core.dtypes import as_dtype, is_bfloat16
from pytest_ktune.core.errors import KtuneError


def bucket(n: int) -> int:
    """The power of two at or above ``n``: a tuning key for token counts, so
    that 100 and 120 tokens share one tuned entry."""
    if n <= 1:
        return 1
    return int(1 << (int(n) - 1).bit_length())


class Shaped:
    """``ndim``, ``size``, ``itemsize`` and ``nbytes`` of anything with a ``shape`` and a numpy ``dtype``
    (a case's ``Tensor``, a torch tensor as a production call's function sees it)."""

    __slots__ = ()
    shape: Any
    dtype: Any

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return int(self.dtype.itemsize)

    @property
    def nbytes(self) -> int:
        return self.size * int(self.dtype.itemsize)


@dataclass(frozen=True)
class Tensor(Shaped):
    """An input array of a case: shape, dtype and how to fill it.

    ``init`` is ``"normal"`` (the default), ``"uniform"`` (in [-1, 1)),
    ``"positive"`` (in [0.5, 1.5)), ``"int"`` (integers in [low, high)), or
    a callable ``(rng, shape, dtype) -> ndarray``. Inputs are drawn fresh for
    every check, from a seed printed on failure.

    Edge values, for checks that must reach what random inputs never do (``EDGE_INITS``; the agent
    checks templates with them): ``"zeros"``; ``"tiny"`` (magnitudes from the dtype's smallest
    subnormal to 16 times its smallest normal, either sign); ``"large"`` (magnitudes from the 8th to
    the 4th root of the dtype's largest value, either sign: large, yet a sum of squares of a row stays
    finite); ``"sweep"`` (zero, and every decade from tiny to large with the values where common
    branches differ, 0.5 to 88, either sign, in shuffled places). ``scale`` does not apply to them.

    ``dtype="bfloat16"`` gives ``ml_dtypes.bfloat16`` arrays (CUDA backend only): values are drawn
    in float32 (a callable ``init`` is given float32 too) and rounded to bfloat16, to nearest even.
    """

    shape: tuple[int, ...]
    dtype: Any = "float32"
    init: str | Callable[[np.random.Generator, tuple[int, ...], np.dtype[Any]], np.ndarray] = "normal"
    scale: float = 1.0
    low: int = 0
    high: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", as_dtype(self.dtype))

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        dt = np.dtype(self.dtype)
        if is_bfloat16(dt):
            # numpy's generators and most of its functions know no bfloat16: draw in float32, then
            # round once (ml_dtypes' cast rounds to nearest even).
            return self._draw(rng, np.dtype(np.float32)).astype(dt)
        return self._draw(rng, dt)

    def _draw(self, rng: np.random.Generator, dt: np.dtype[Any]) -> np.ndarray:
        if callable(self.init):
            out = np.asarray(self.init(rng, self.shape, dt))
            if out.shape != self.shape:
                raise KtuneError(f"Tensor init returned shape {out.shape}, expected {self.shape}")
            return out.astype(dt, copy=False)
        if self.init == "normal":
            return (rng.standard_normal(self.shape, dtype=np.float32) * self.scale).astype(dt)
        if self.init == "uniform":
            return (rng.uniform(-1.0, 1.0, self.shape) * self.scale).astype(dt)
        if self.init == "positive":
            return (rng.uniform(0.5, 1.5, self.shape) * self.scale).astype(dt)
        if self.init == "int":
            return rng.integers(self.low, self.high, self.shape).astype(dt)
        if self.init in EDGE_INITS:
            return edge_values(self.init, rng, self.shape, dt)
        raise KtuneError(f"unknown Tensor init {self.init!r}",
                         hint=f"use normal, uniform, positive, int, {', '.join(EDGE_INITS)} or a callable")


#: The ``init`` kinds of edge values (see ``Tensor``).
EDGE_INITS = ("zeros", "tiny", "large", "sweep")

# Values where common branches of kernels differ: rounding and sign (0.5, 1, 2), a gate or clamp
# threshold (8, 8.5, 16), softplus's and exp's cut-offs in float32 (20, 30, 88).
_BRANCH_POINTS = (0.5, 1.0, 2.0, 4.0, 8.0, 8.5, 16.0, 20.0, 30.0, 88.0)


def edge_values(kind: str, rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype[Any]) -> np.ndarray:
    """An array of ``shape`` and ``dt`` filled with the edge values ``kind`` names (``EDGE_INITS``)."""
    if kind == "zeros":
        return np.zeros(shape, dtype=dt)
    if dt.kind not in "f":
        raise KtuneError(f"Tensor init {kind!r} is for float tensors, not {dt}",
                         hint="use zeros, or int with low and high, for integer tensors")
    info = np.finfo(dt)
    n = math.prod(shape)
    large = float(info.max) ** 0.25
    if kind == "tiny":
        lo, hi = math.log(float(info.smallest_subnormal)), math.log(float(info.tiny) * 16)
        mags = np.exp(rng.uniform(lo, hi, n))
    elif kind == "large":
        mags = np.exp(rng.uniform(math.log(float(info.max) ** 0.125), math.log(large), n))
    else:
        decades = np.arange(math.floor(math.log10(float(info.tiny))), math.floor(math.log10(large)) + 1)
        points = [0.0, *(10.0 ** decades), *(b for b in _BRANCH_POINTS if b <= large)]
        mags = np.resize(np.array(points, dtype=np.float64), n)
    signs = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    values = (mags * signs).astype(dt)
    rng.shuffle(values)
    return values.reshape(shape)


@dataclass(frozen=True)
class Tolerance:
    """How close a kernel's output must be to the reference.

    Both tests apply: the relative norm ``|out - ref| / |ref| <= norm``, and
    elementwise ``|out - ref| <= atol + rtol * |ref|``.
    """

    norm: float
    atol: float
    rtol: float

    def scaled(self, terms: int) -> Tolerance:
        """This tolerance for outputs that each sum ``terms`` products (a dot product, a convolution's
        window, a GEMM's inner dimension): every limit times sqrt(terms). The rounding errors of a sum
        of terms of either sign grow like the square root of its length (the usual model; the worst
        case grows linearly), and at the default fp32 limits one output of 289 products in 65,536 fails
        on rounding alone."""
        if terms < 1:
            raise KtuneError(f"Tolerance.scaled({terms}): a reduction has at least one term",
                             hint="pass the number of products each output sums")
        k = math.sqrt(terms)
        return Tolerance(norm=self.norm * k, atol=self.atol * k, rtol=self.rtol * k)

    @classmethod
    def for_sum(cls, terms: int, dtype: Any = "float32") -> Tolerance:
        """The default tolerance of ``dtype`` scaled for outputs that each sum ``terms`` products:
        ``tolerance=lambda f: ktune.Tolerance.for_sum(f.size)`` for a convolution with filter ``f``."""
        name = as_dtype(dtype).name
        if name not in DEFAULT_TOLERANCES:
            raise KtuneError(f"no default tolerance for {name} to scale",
                             hint=f"scale one of your own: ktune.Tolerance(norm, atol, rtol).scaled({terms})")
        return DEFAULT_TOLERANCES[name].scaled(terms)


#: What ``tolerance=`` may be, for a target (also a function of the case's arguments returning one
#: of the others) or a case: one Tolerance, or one per dtype name.
ToleranceSpec = Tolerance | Mapping[str, Tolerance]


DEFAULT_TOLERANCES: Mapping[str, Tolerance] = {
    "float16": Tolerance(norm=2e-3, atol=1e-2, rtol=1e-2),
    # bfloat16 keeps 8 significant bits: unit roundoff 2^-8 = 3.9e-3. A kernel that computes in
    # float32 and rounds its result once is off by at most that, relative, per element, and by
    # about 2e-3 in relative norm. The limits allow 4 times that, as fp16's do for its 2^-11;
    # rtol 1.6e-2 is torch.testing's for bfloat16, atol 1e-2 is fp16's (values near zero).
    "bfloat16": Tolerance(norm=1.6e-2, atol=1e-2, rtol=1.6e-2),
    "float32": Tolerance(norm=1e-5, atol=1e-5, rtol=1e-4),
    "float64": Tolerance(norm=1e-12, atol=1e-12, rtol=1e-10),
}


_EXACT = Tolerance(norm=0.0, atol=0.0, rtol=0.0)


def tolerance_for(dtype: np.dtype[Any], override: ToleranceSpec | None) -> Tolerance:
    name = as_dtype(dtype).name
    if isinstance(override, Tolerance):
        return override
    if override and name in override:
        return override[name]
    return DEFAULT_TOLERANCES.get(name, _EXACT)


@dataclass(frozen=True)
class Case:
    """One shape and dtype combination the kernel promises to handle.

    ``Case(x=Tensor((64, 4096), "float16"), w=Tensor((4096,), "float16"), eps=1e-6)``.
    Keyword arguments are the kernel function's arguments: ``Tensor`` values
    become fresh random device arrays, other values are passed as they are.
    ``id`` names the case in test ids; ``warm_cache=True`` skips the L2 flush
    (for kernels that in production read data a previous kernel just wrote);
    ``backends`` limits the case to some backends (e.g. very large shapes to
    ``("cuda",)``); ``tolerance`` replaces the target's for this case (a ``Tolerance``, or one per
    dtype name).
    """

    args: Mapping[str, Any]
    id: str | None = None
    warm_cache: bool = False
    backends: tuple[str, ...] | None = None
    tolerance: ToleranceSpec | None = None

    def __init__(self, *, id: str | None = None, warm_cache: bool = False,
                 backends: Sequence[str] | None = None, tolerance: ToleranceSpec | None = None,
                 **args: Any) -> None:
        if tolerance is not None and not isinstance(tolerance, (Tolerance, Mapping)):
            raise KtuneError(f"Case(tolerance=...) is a {type(tolerance).__name__}",
                             hint="give a ktune.Tolerance, or a dict of them by dtype name")
        object.__setattr__(self, "args", dict(args))
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "warm_cache", warm_cache)
        object.__setattr__(self, "backends", tuple(backends) if backends else None)
        object.__setattr__(self, "tolerance", tolerance)

    @property
    def tensors(self) -> dict[str, Tensor]:
        return {k: v for k, v in self.args.items() if isinstance(v, Tensor)}

    @property
    def input_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def runs_on(self, backend: str) -> bool:
        return self.backends is None or backend in self.backends
