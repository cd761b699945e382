"""Whether Inductor's kernel of SiLU-and-mul launches with programmatic dependent launch (PDL) on this GPU.

A kernel launched with PDL may start while the one before it on the stream finishes, so back-to-back replays
of it in a CUDA graph overlap where one profiled launch cannot: a bench that times such replays would then
favour it over a kernel launched without. This prints Inductor's PDL setting, then compiles
``F.silu(g[:, :I]) * g[:, I:]`` (T=256, I=14336, fp16, static shapes) with the generated code logged and prints
the lines of it that say how the kernel is configured and launched (its heuristics, block sizes, warps, and any
PDL or grid-dependency control).

Usage (on a GPU): python3 benchmarks/inductor_pdl.py
"""

from __future__ import annotations

import io
import logging
import re


def main() -> int:
    import torch
    import torch.nn.functional as F
    from torch._inductor import config

    triton_cfg = getattr(config, "triton", None)
    print("torch", torch.__version__)
    for name in ("enable_pdl", "use_pdl", "pdl"):
        print(f"inductor config triton.{name}:", getattr(triton_cfg, name, "(no such option)"))
    text = io.StringIO()
    handler = logging.StreamHandler(text)
    torch._logging.set_logs(output_code=True)  # type: ignore[attr-defined]
    logging.getLogger("torch._inductor").addHandler(handler)
    t, inter = 256, 14336
    g = torch.randn(t, 2 * inter, device="cuda", dtype=torch.float16)
    f = torch.compile(lambda g: F.silu(g[:, :inter]) * g[:, inter:], fullgraph=True, dynamic=False)
    f(g)
    torch.cuda.synchronize()
    wanted = re.compile(r"pdl|griddep|launch|triton_heuristics|@triton|def triton|XBLOCK|num_warps|num_stages",
                        re.IGNORECASE)
    for line in text.getvalue().splitlines():
        if wanted.search(line):
            print(line.rstrip()[:220])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
