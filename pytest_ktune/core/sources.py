"""Kernel sources held in Python: generated, or kept as strings, rather than read from a file."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """A kernel source as text: ``sources={"cuda": ktune.Source(CUDA_TEXT, name="conv.cu")}``.

    It is compiled, hashed and recorded like a file's text. ``name`` is the file it stands for,
    relative to the file that defines the target (default: the target's name, with ``.cu`` or
    ``.cl``): compile errors name it, and its ``#include "..."``s are looked up in its folder. No
    file need exist there; git holds no copy of the text, so a changed source is not confirmed A/B
    against its baseline's (the gate says so).
    """

    text: str
    name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"ktune.Source takes the kernel's text as a str, got {type(self.text).__name__}")
        if self.name is not None and not self.name.strip():
            raise ValueError("ktune.Source's name= is empty: give a file name such as 'conv.cu'")


SUFFIXES = {"cuda": ".cu", "opencl": ".cl"}  # the C backends' sources (a ktune.Source stands for one)
