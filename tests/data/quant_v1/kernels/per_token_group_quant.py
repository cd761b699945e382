"""Per-token-group quantisation to int8 or fp8 e4m3, as a pytest-ktune target.

The activation quantiser in front of a block-quantised GEMM (DeepSeek-V3 style fp8, or int8 w8a8).

* ``x``: ``[T, H]``, float16, bfloat16 (CUDA only) or float32, contiguous; ``H`` a multiple of ``group_size`` (``G``);
* ``out_dtype``: ``"int8"`` or ``"float8_e4m3fn"``; ``eps``: a floor for all-zero groups.

Each row is cut into ``H / G`` groups of ``G`` consecutive values. For each group, with
``qmax = 127`` (int8) or ``448`` (the largest finite e4m3fn value)::

    scale = max(max(|x_group|), eps) / qmax
    q     = quantise(x_group / scale)

where ``quantise`` rounds to nearest, ties to even: to an integer clamped to ``[-128, 127]`` for int8,
or to the nearest ``float8_e4m3fn`` value (saturating at +-448, no infinities, NaN stays NaN) for fp8.

The function, ``per_token_group_quant(x, group_size=128, out_dtype="int8", eps=1e-10)``, returns
``(q, scales)``: ``q`` is ``[T, H]`` int8, or uint8 holding the e4m3fn bit patterns (what
``torch.float8_e4m3fn`` stores, so ``q.view(torch.float8_e4m3fn)`` in torch); ``scales`` is
``[T, H / G]`` float32, row-major. Dequantise with ``q * scales`` broadcast over each group.

Codes are compared with a tolerance of one code step: the kernel divides in float32 and the reference
in float64, so a value within a rounding error of a rounding boundary may land on either side of it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ktune

FP8 = "float8_e4m3fn"
OUT_DTYPES = {"int8": np.dtype(np.int8), FP8: np.dtype(np.uint8)}  # fp8 as its bit patterns
QMAX = {"int8": 127.0, FP8: 448.0}
E4M3_MAX = 448.0
_E4M3_MIN_NORMAL = 2.0**-6
_E4M3_SUBNORMAL_STEP = 2.0**-9
_SLICE = 1 << 16  # elements the encoder takes at a time


def float8_e4m3fn_codes(v: Any) -> Any:
    """The ``float8_e4m3fn`` bit patterns (uint8) nearest to ``v``: round to nearest even, saturating
    at +-448, NaN to 0x7F/0xFF. Exact for any float64 input (no intermediate rounding). ``v`` may be
    any array library's (numpy's, CuPy's): the codes come back in the same one."""
    xp = ktune.array_namespace(v)
    v = xp.astype(xp.asarray(v), xp.float64, copy=False)
    if not isinstance(v, np.ndarray):
        return _codes(xp, v)  # on a GPU: the whole array at once
    out = np.empty(v.shape, np.uint8)
    flat_in, flat_out = v.reshape(-1), out.reshape(-1)
    # In slices that stay in cache: whole-array temporaries of a large case cost more than the work.
    for i in range(0, flat_in.size, _SLICE):
        flat_out[i:i + _SLICE] = _codes(xp, flat_in[i:i + _SLICE])
    return out


def _codes(xp: Any, v: Any) -> Any:
    sign = xp.astype(xp.signbit(v), xp.uint16) << 7
    a = xp.minimum(xp.abs(v), E4M3_MAX)  # satfinite: beyond 448 (inf included) is 448
    with np.errstate(invalid="ignore"):
        # Subnormals (and zero) are multiples of 2^-9 below 2^-6; code 8 is then 2^-6 itself.
        sub = xp.round(a / _E4M3_SUBNORMAL_STEP)
        # Normals: a = 2^e * (1 + m/8). frexp gives a = f * 2^ex with f in [0.5, 1), so e = ex - 1.
        f, ex = xp.frexp(xp.maximum(a, _E4M3_MIN_NORMAL))
        m = xp.round((2.0 * f - 1.0) * 8.0)  # exact products, so the ties-to-even rounding is the real one
        # A mantissa that rounds up to 8 carries into the exponent: (e + 7) * 8 + m does that itself.
        normal = (xp.astype(ex, xp.float64) - 1.0 + 7.0) * 8.0 + m
    code = xp.where(a < _E4M3_MIN_NORMAL, sub, normal)
    code = xp.where(xp.isnan(v), xp.full_like(code, 0x7F), code)
    return xp.astype(xp.astype(code, xp.uint16) | sign, xp.uint8)


def float8_e4m3fn_values(codes: np.ndarray) -> np.ndarray:
    """The float64 values of ``float8_e4m3fn`` bit patterns (0x7F and 0xFF are NaN)."""
    c = np.asarray(codes, dtype=np.uint8).astype(np.int64)
    mag = c & 0x7F
    exp, man = mag >> 3, mag & 7
    value = np.where(exp == 0, man * _E4M3_SUBNORMAL_STEP, (1.0 + man / 8.0) * 2.0 ** (exp - 7.0))
    value = np.where(mag == 0x7F, np.nan, value)
    out: np.ndarray = np.where(c & 0x80, -value, value)
    return out


@ktune.array_api
def per_token_group_quant_reference(x: Any, group_size: int, out_dtype: str, eps: float) -> tuple[Any, Any]:
    """(q, scales) computed in float64, then rounded once as the kernel does, in whichever array
    library holds ``x``."""
    xp = ktune.array_namespace(x)
    tokens, hidden = x.shape
    groups = xp.reshape(xp.astype(x, xp.float64, copy=False), (tokens, hidden // group_size, group_size))
    scale = xp.maximum(xp.max(xp.abs(groups), axis=-1, keepdims=True), eps) / QMAX[out_dtype]
    v = groups / scale
    q = xp.astype(xp.clip(xp.round(v), -128, 127), xp.int8) if out_dtype == "int8" else float8_e4m3fn_codes(v)
    return xp.reshape(q, (tokens, hidden)), xp.astype(scale[..., 0], xp.float32)


def activations(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """Normal values with a spread of per-token magnitudes (1/8 to 8), and, where there are several
    tokens, an all-zero last token (padding), whose groups take the ``eps`` floor."""
    tokens = shape[0]
    magnitude = 2.0 ** rng.uniform(-3.0, 3.0, (tokens, 1))
    out = rng.standard_normal(shape) * magnitude
    if tokens > 1:
        out[-1] = 0.0
    result: np.ndarray = out.astype(dtype)
    return result


def _check(x: Any, group_size: int, out_dtype: str) -> None:
    where = f"target per_token_group_quant ({__file__})"
    if out_dtype not in OUT_DTYPES:
        raise ktune.KtuneError(f"out_dtype {out_dtype!r} is not supported", where=where,
                               hint=f"use one of {', '.join(OUT_DTYPES)}")
    if len(x.shape) != 2 or x.shape[1] % group_size:
        raise ktune.KtuneError(f"x of shape {tuple(x.shape)} does not split into groups of {group_size}",
                               where=where,
                               hint="pass x as [tokens, hidden] with hidden a multiple of group_size")


def _key(x: Any, group_size: int, out_dtype: str) -> dict[str, Any]:
    _check(x, group_size, out_dtype)
    return {"T": ktune.bucket(x.shape[0]), "H": x.shape[1], "G": group_size,
            "dtype": np.dtype(x.dtype).name, "out": out_dtype}


def _case(t: int, h: int, g: int, dtype: str, out: str, **kw: Any) -> ktune.Case:
    return ktune.Case(x=ktune.Tensor((t, h), dtype, init=activations), group_size=g, out_dtype=out,
                      eps=1e-10, **kw)


# One code step, and few of them: a systematic error (truncating, say) moves codes by one step on
# about half of the elements, a relative norm far above the limit.
_ONE_STEP = ktune.Tolerance(norm=1e-3, atol=1.0, rtol=0.0)


@ktune.target(
    sources={"cuda": "per_token_group_quant.cu", "opencl": "per_token_group_quant.cl"},
    # What serving stacks ship: 16 threads per group, 16 groups in a block of 256, 16-byte loads.
    default={"BLOCK": 256, "TPG": 16, "VEC": 8},
    space=ktune.Space(BLOCK=[32, 64, 128, 256, 512, 1024], TPG=[1, 2, 4, 8, 16, 32], VEC=[1, 2, 4, 8],
                      constraints=["G % VEC == 0",
                                   # values a thread holds in registers between the two passes
                                   "VEC * ((G // VEC + TPG - 1) // TPG) <= 64"]),
    key=_key,
    defines=lambda x, group_size, out_dtype: {"DTYPE_F16": int(x.dtype == np.float16),
                                              "DTYPE_BF16": int(np.dtype(x.dtype).name == "bfloat16"),
                                              "OUT_FP8": int(out_dtype == FP8), "GROUP": group_size},
    cases=[
        _case(4, 2048, 128, "float16", FP8),
        _case(7, 2048, 64, "float16", "int8"),
        _case(16, 4096, 128, "float32", "int8"),
        _case(3, 4096, 128, "float32", FP8),
        _case(1, 7168, 128, "float16", FP8, backends=["cuda"]),
        _case(4096, 7168, 128, "float16", FP8, backends=["cuda"]),
        _case(16384, 4096, 128, "float16", FP8, backends=["cuda"]),
        _case(4096, 28672, 128, "float16", FP8, backends=["cuda"]),
        _case(256, 4096, 64, "float16", "int8", backends=["cuda"]),
        _case(16384, 8192, 128, "float16", "int8", backends=["cuda"]),
        # bfloat16 activations (ml_dtypes arrays): CUDA only, OpenCL has no bfloat16.
        _case(1, 7168, 128, "bfloat16", FP8, backends=["cuda"]),
        _case(4096, 7168, 128, "bfloat16", "int8", backends=["cuda"]),
    ],
    reference=per_token_group_quant_reference,
    tolerance={"int8": _ONE_STEP, "uint8": _ONE_STEP,
               "float32": ktune.Tolerance(norm=1e-6, atol=0.0, rtol=1e-6)},
    # x read; one byte per element and one float32 scale per group written.
    bytes_moved=lambda x, group_size: x.nbytes + x.size + 4 * (x.size // group_size),
)
def per_token_group_quant(kernel: ktune.Kernel, x: Any, group_size: int = 128, out_dtype: str = "int8",
                          eps: float = 1e-10) -> tuple[Any, Any]:
    tokens, hidden = x.shape
    groups = tokens * (hidden // group_size)
    q = kernel.empty((tokens, hidden), OUT_DTYPES[out_dtype])
    scales = kernel.empty((tokens, hidden // group_size), np.float32)
    per_block = int(kernel["BLOCK"]) // int(kernel["TPG"])
    kernel.launch(grid=ktune.cdiv(groups, per_block), block=kernel["BLOCK"],
                  args=[q, scales, x, np.int64(groups), np.float32(eps)])
    return q, scales
