"""Count the SASS instructions of CUDA template configurations, without a GPU.

NVRTC compiles each configuration to a cubin for a real architecture (``sm_90`` by default: the H200),
nvdisasm lists its instructions, and the table gives, per configuration, the kernel's instructions (NOPs
left out), per element a thread handles (``--per``: the product of these parameters, each at least 1;
``VEC,ITEMS`` by default, those of them the configuration has), and its special-function (MUFU)
instructions. The count is static: a branch's both sides and a division's slow path are in it, a loop's
body once. It says what a configuration costs in instructions, not in time.

Needs ``libnvrtc`` and ``nvdisasm`` (``pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvdisasm``; ``--lib``
and ``--nvdisasm`` name them where they are not found).

Run: ``python3 benchmarks/sass_count.py --target silu_and_mul --dtype float16 --set VEC=8 \
--variant ROWS=0,FAST=0 --variant ROWS=1,FAST=1 [--out FILE.md]``
"""

from __future__ import annotations

import argparse
import ctypes
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common
import nvrtc_check

common.add_repo_to_path()

from pytest_ktune.core.discover import discover  # noqa: E402

DTYPES = {"float16": {"DTYPE_F16": 1, "DTYPE_BF16": 0}, "bfloat16": {"DTYPE_F16": 0, "DTYPE_BF16": 1},
          "float32": {"DTYPE_F16": 0, "DTYPE_BF16": 0}}
_LINE = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def cubin(lib: Any, source: str, name: str, options: Sequence[str]) -> bytes:
    """The cubin NVRTC makes of ``source``; SystemExit with NVRTC's log where it does not compile."""
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
    try:
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        if lib.nvrtcCompileProgram(prog, len(options), opts):
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            raise SystemExit(f"error: {name} {' '.join(options)} does not compile:\n{log.value.decode()}")
        size = ctypes.c_size_t()
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetCUBIN(prog, buf)
        return buf.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def parse_opcodes(listing: str) -> list[str]:
    """The opcodes of an nvdisasm listing, in order, their predicates left out (``@!P0 FMUL`` is FMUL)."""
    return [m.group(1) for line in listing.splitlines() if (m := _LINE.match(line))]


def opcodes(nvdisasm: str, data: bytes) -> list[str]:
    """The opcodes nvdisasm lists for a cubin, in order."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(data)
        f.flush()
        listing = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout
    return parse_opcodes(listing)


def parse_assignments(text: str) -> dict[str, int]:
    out = {}
    for part in filter(None, text.split(",")):
        name, sep, value = part.partition("=")
        if not sep:
            raise SystemExit(f"error: {part!r} is not NAME=VALUE")
        out[name.strip()] = int(value)
    return out


def elements(config: Mapping[str, Any], per: str) -> int:
    n = 1
    for name in filter(None, per.split(",")):
        n *= max(1, int(config.get(name.strip(), 1)))
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=common.ROOT / "example_project")
    ap.add_argument("--target", action="append", required=True, help="a target name (repeatable)")
    ap.add_argument("--dtype", default="float16", choices=sorted(DTYPES))
    ap.add_argument("--set", default="", help="NAME=VALUE,... over the default in every variant")
    ap.add_argument("--variant", action="append", required=True, help="NAME=VALUE,... (repeatable)")
    ap.add_argument("--per", default="VEC,ITEMS", help="the parameters whose product is a thread's elements")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--lib", default=None)
    ap.add_argument("--nvdisasm", default=None)
    ap.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = ap.parse_args()
    lib = nvrtc_check.Nvrtc(nvrtc_check.find_lib(args.lib)).lib
    nvdisasm = args.nvdisasm or shutil.which("nvdisasm") or next(
        (str(p) for base in sys.path for p in sorted(Path(base or ".").glob("nvidia/*/bin/nvdisasm"))), None)
    if nvdisasm is None:
        raise SystemExit("error: nvdisasm not found; pip install nvidia-cuda-nvdisasm, or give --nvdisasm")
    targets = {t.name: t for t in discover(args.root) if "cuda" in t.sources}
    rows = ["| target | configuration | SASS instructions | per element | MUFU |", "|---|---|---|---|---|"]
    for name in args.target:
        if name not in targets:
            raise SystemExit(f"error: no CUDA target {name!r} under {args.root}; have {', '.join(sorted(targets))}")
        t = targets[name]
        source, path = t.source_text("cuda"), t.source_path("cuda")
        for variant in args.variant:
            config = {**t.default, **parse_assignments(args.set), **parse_assignments(variant)}
            defines = {**DTYPES[args.dtype], **config}
            options = ["--std=c++17", f"--gpu-architecture={args.arch}", f"-I{path.parent}",
                       *(f"-D{k}={int(v) if isinstance(v, bool) else v}" for k, v in defines.items())]
            ops = [o for o in opcodes(nvdisasm, cubin(lib, source, path.name, options)) if o != "NOP"]
            mufu = sum(o.startswith("MUFU") for o in ops)
            shown = " ".join(f"{k}={v}" for k, v in config.items())
            rows.append(f"| {name} {args.dtype} | {shown} | {len(ops)} | {len(ops) / elements(config, args.per):.1f} "
                        f"| {mufu} |")
    table = "\n".join(rows)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
