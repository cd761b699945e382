"""Launch arithmetic a target's function uses: grid sizes from problem sizes."""

from __future__ import annotations

from collections.abc import Sequence


def cdiv(a: int, b: int) -> int:
    """Ceiling division, for grid sizes: ``cdiv(1000, 256) == 4``."""
    return -(-a // b)


def grid(size: int | Sequence[int], block: int | Sequence[int]) -> int | tuple[int, ...]:
    """The blocks that cover ``size`` threads with blocks of ``block``, per dimension (x first):
    ``grid((1000, 30), (256, 8)) == (4, 4)``. Dimensions the block leaves out are 1 thread wide, so
    ``grid((1000, 30), 256) == (4, 30)``; two ints give an int, ``grid(1000, 256) == 4``."""
    if isinstance(size, int) and isinstance(block, int):
        return cdiv(size, block)
    sizes = (size,) if isinstance(size, int) else tuple(int(s) for s in size)
    blocks = (block,) if isinstance(block, int) else tuple(int(b) for b in block)
    if len(blocks) > len(sizes):
        raise ValueError(f"a block of {len(blocks)} dimensions {blocks} for a size of {len(sizes)} {sizes}")
    if any(b <= 0 for b in blocks):
        raise ValueError(f"block {blocks} must be positive")
    blocks += (1,) * (len(sizes) - len(blocks))
    return tuple(cdiv(s, b) for s, b in zip(sizes, blocks, strict=True))
