"""Inputs a proposal is checked on beyond the base target's cases: edge values, and a shape that does not divide.

Random inputs never take some values a kernel branches on (a gate clamped above 8, an exponential
that overflows), and declared shapes are often powers of two that every vector width divides. So for
the smallest case of each key (the base's own cases on the backend) the check adds:

- one case per kind of edge value in ``EDGE_INITS`` (zeros, tiny, large magnitudes, a sweep across the
  dtype's range through the values where common branches differ), given to the float tensors whose
  values are signed (``normal`` or ``uniform`` init; other tensors are drawn as declared);
- one case whose integer key dimensions (above 2) are made odd (4096 becomes 4095, the tensors' sizes
  that are small multiples of it with them), where the target's key function gives a key that differs
  only in those dimensions: a shape no power-of-two vector width or block divides. The proposal's
  constraints decide which configurations run on it, as for any key.

Each added case is kept only where the base kernel, with its default configuration, agrees with the
reference on it (``_check`` runs that screen): the template must be right wherever the base kernel is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ktune.core.case import EDGE_INITS, Case, Tensor
from pytest_ktune.core.dtypes import dtype_family
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.target import Target

_SIGNED_INITS = ("normal", "uniform")
_EDGE_WORDS = {"zeros": "zeros", "tiny": "tiny magnitudes (subnormal to small normal)",
               "large": "large magnitudes", "sweep": "a sweep of magnitudes through the usual branch points"}
_MULTIPLES = (1, 2, 3, 4)


@dataclass(frozen=True)
class Variant:
    """A case made from one of the base target's: other values in its float tensors, or other sizes."""

    base: int  # index into the base target's cases
    inputs: str = ""  # an edge init kind, or "" (drawn as declared)
    sizes: tuple[tuple[int, int], ...] = ()  # tensor sizes replaced: (declared, used)

    def case_id(self, base_id: str) -> str:
        if self.inputs:
            return f"{base_id}~{self.inputs}"
        return f"{base_id}~odd(" + ",".join(f"{a}->{b}" for a, b in self.sizes[:2]) + ")"

    def describe(self) -> str:
        if self.inputs:
            return f"{_EDGE_WORDS.get(self.inputs, self.inputs)} in its signed float tensors"
        return "a shape that does not divide (" + ", ".join(f"{a} -> {b}" for a, b in self.sizes) + ")"

    def case(self, base_case: Case, base_id: str) -> Case:
        sizes = dict(self.sizes)
        args: dict[str, Any] = {}
        for name, given in base_case.args.items():
            if isinstance(given, Tensor):
                edge = bool(self.inputs) and given.init in _SIGNED_INITS and dtype_family(given.dtype) == "f"
                args[name] = Tensor(tuple(sizes.get(d, d) for d in given.shape), given.dtype,
                                    init=self.inputs if edge else given.init, scale=given.scale, low=given.low,
                                    high=given.high)
            else:
                args[name] = given
        return Case(id=self.case_id(base_id), warm_cache=base_case.warm_cache, backends=base_case.backends, **args)

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "inputs": self.inputs, "sizes": [list(s) for s in self.sizes]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Variant:
        return cls(int(data["base"]), str(data["inputs"]), tuple((int(a), int(b)) for a, b in data["sizes"]))


def variant_cases(base: Target, variants: Sequence[Variant]) -> list[Case]:
    return [v.case(base.cases[v.base], base.case_id(base.cases[v.base])) for v in variants]


def digest(variants: Sequence[Variant]) -> str:
    return json.dumps([v.to_json() for v in variants], sort_keys=True)


def _smallest_per_key(base: Target, backend: str) -> list[int]:
    best: dict[str, int] = {}
    for i, c in enumerate(base.cases):
        if not c.runs_on(backend):
            continue
        label = json.dumps(base.case_key(c), sort_keys=True, default=str)
        if label not in best or c.input_bytes < base.cases[best[label]].input_bytes:
            best[label] = i
    return list(best.values())


def _odd(v: int) -> int:
    return v - 1 if v % 2 == 0 else v - 2


def _odd_shape(base: Target, index: int) -> Variant | None:
    """The case ``index`` with its integer key dimensions made odd, where the key function agrees."""
    case = base.cases[index]
    key = base.case_key(case)
    dims = {k: v for k, v in key.items() if isinstance(v, int) and not isinstance(v, bool) and v > 2}
    sizes_in = {d for t in case.tensors.values() for d in t.shape}
    tries = [dict(dims)] + [{k: v} for k, v in dims.items()] if len(dims) > 1 else [dict(dims)]
    for chosen in tries:
        mapping = {m * v: m * _odd(v) for v in chosen.values() for m in _MULTIPLES if m * v in sizes_in}
        if not mapping:
            continue
        variant = Variant(index, "", tuple(sorted(mapping.items())))
        try:
            new_key = base.case_key(variant.case(case, "probe"))
        except (KtuneError, TypeError, ValueError):
            continue
        others_same = all(new_key.get(k) == v for k, v in key.items() if k not in chosen)
        if others_same and set(new_key) == set(key):
            return variant
    return None


def candidate_variants(base: Target, backend: str) -> list[Variant]:
    """The added cases to screen on the base kernel (see the module docstring)."""
    out: list[Variant] = []
    for i in _smallest_per_key(base, backend):
        case = base.cases[i]
        if any(t.init in _SIGNED_INITS and dtype_family(t.dtype) == "f" for t in case.tensors.values()):
            out.extend(Variant(i, kind) for kind in EDGE_INITS)
        odd = _odd_shape(base, i)
        if odd is not None:
            out.append(odd)
    return out
