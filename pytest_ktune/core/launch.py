"""Launch arithmetic a target's function uses: grid sizes from problem sizes."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """Ceiling division, for grid sizes: ``cdiv(1000, 256) == 4``."""
    return -(-a // b)
