"""Kernels written as Python functions (Triton's ``@triton.jit``): a target's source is the module that
holds the function, and its program is found again from that module's text.

A Triton target's source, for hashing, for git and for the gate's A/B, is the text of the module that
defines its jit function (``sources={"triton": kernel}``, or ``"pkg.mod:kernel"``). The backend compiles
from that text (``Backend.compile(text, ...)``) and needs the function object the text defines: every
declaration records it here (``register``), by the module's program (its syntax tree, so that comments
and layout do not count) and the function's name, and ``lookup`` finds it again. A commit's copy of the
module, loaded by ``gate.snapshot`` for an A/B, registers its own functions under its own text, so the
reference side runs that commit's kernel. Triton itself is never imported here.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import inspect
from pathlib import Path
from typing import Any

_KERNELS: dict[tuple[str, str], Any] = {}


def is_python_kernel(obj: Any) -> bool:
    """Whether ``obj`` looks like a ``@triton.jit`` function (``JITFunction`` or, under ``TRITON_INTERPRET=1``,
    ``InterpretedFunction``): it wraps a Python function (``.fn``) and names its arguments."""
    return callable(getattr(obj, "fn", None)) and isinstance(getattr(obj, "arg_names", None), list)


@functools.lru_cache(maxsize=256)
def program_key(text: str) -> str:
    """A module text's program: the hash of its syntax tree (its text's where it does not parse)."""
    try:
        body = ast.dump(ast.parse(text))
    except (SyntaxError, ValueError):
        body = text
    return hashlib.sha256(body.encode()).hexdigest()


def resolve_kernel(spec: Any) -> Any:
    """The jit function a source names: the object itself, or ``"pkg.mod:name"`` imported; ValueError
    saying what is wrong otherwise."""
    if isinstance(spec, str):
        module, sep, name = spec.partition(":")
        if not sep or not module or not name:
            raise ValueError(f"{spec!r} is not 'package.module:function'")
        try:
            value: Any = importlib.import_module(module)
            for part in name.split("."):
                value = getattr(value, part)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"{spec!r} cannot be imported: {exc}") from None
        spec = value
    if not is_python_kernel(spec):
        raise ValueError(f"a {type(spec).__module__}.{type(spec).__name__} is no @triton.jit function")
    return spec


def register(fn: Any) -> tuple[Path, str]:
    """Record the jit function ``fn`` under its module's program; its module's file and its name."""
    path = Path(inspect.getfile(fn.fn)).resolve()
    name = str(fn.fn.__name__)
    _KERNELS[(program_key(path.read_text()), name)] = fn
    return path, name


def lookup(text: str, name: str) -> Any | None:
    """The jit function ``name`` of the module whose text is ``text``, as a declaration registered it; None
    where no module of that program declared one (a commit's version that was never loaded)."""
    return _KERNELS.get((program_key(text), name))


def constexpr_names(fn: Any) -> tuple[str, ...]:
    """The arguments of the jit function ``fn`` annotated ``tl.constexpr`` (by the annotation's text, as
    Triton reads them, so that ``from __future__ import annotations`` makes no difference)."""
    params = inspect.signature(fn.fn).parameters.values()
    return tuple(p.name for p in params if "constexpr" in str(p.annotation))
