"""The configurations a proposal is checked on: a covering design over its whole feasible space.

For every key, the design holds every value of every parameter and every pair of values of two
parameters that some configuration valid for that key holds (a strength-2 covering array restricted by
the constraints). The feasible space is solved, not sampled: ``Space.feasible`` propagates the
constraints, so a point they allow only when fifteen switches are all on is found as surely as any
other, and the values and pairs that some feasible configuration holds are known exactly. A value or a
pair that no feasible configuration holds is *dead*: counted per key, and the dead values named.

The design is drawn greedily (for the first value or pair not covered yet, in a seeded order, the
feasible configuration holding it that covers the most others, among at most ``CHOICES`` of them),
deterministic for a seed, the default first. A configuration is valid for some of the keys; it covers
pairs only for those. Keys the constraints see alike (the same values of the key dimensions they name)
share one solve.

A design that would need more than ``limit`` configurations is left unfinished (``complete`` is False),
so that the check can refuse the space rather than call part of it verified.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pytest_ktune.core.space import Space, Value

MAX_CONFIGS = 512  # the most configurations one check verifies
CHOICES = 64  # the candidates weighed for each value or pair to cover


@dataclass(frozen=True)
class Design:
    """The configurations chosen, which keys each is valid for, and what they cover, per key."""

    configs: tuple[Mapping[str, Value], ...]
    valid: tuple[frozenset[int], ...]  # per configuration: the indices of the keys it is valid for
    feasible: tuple[int, ...]  # per key: how many configurations are valid for it
    needed: tuple[int, ...]  # per key: the pairs (values, with one parameter) some feasible configuration holds
    covered: tuple[int, ...]  # per key: how many of them the configurations cover
    dead: tuple[int, ...]  # per key: the pairs (values) no feasible configuration holds
    dead_values: tuple[str, ...]  # NAME=value held by no configuration feasible for any key
    complete: bool  # every needed pair is covered (False: more than ``limit`` configurations would be needed)
    extra: int  # configurations drawn at random on top of the covering


class _Items:
    """The values or pairs of a space as integers: per pair of parameters (i < j), a block of
    ``len_i * len_j`` ids; with one parameter, its values."""

    def __init__(self, lens: Sequence[int]) -> None:
        self.lens = list(lens)
        if len(lens) == 1:
            self.pairs: list[tuple[int, int]] = []
            self.offsets = np.zeros(1, dtype=np.int64)
            self.count = lens[0]
            return
        self.pairs = [(i, j) for i in range(len(lens)) for j in range(i + 1, len(lens))]
        sizes = [lens[i] * lens[j] for i, j in self.pairs]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.count = int(sum(sizes))

    def of(self, rows: np.ndarray) -> np.ndarray:
        """The item ids each configuration (a row of value indices) holds: shape (rows, items per row)."""
        if not self.pairs:
            return rows[:, :1].astype(np.int64)
        return np.stack([self.offsets[p] + rows[:, i] * self.lens[j] + rows[:, j]
                         for p, (i, j) in enumerate(self.pairs)], axis=1)

    def column(self, rows: np.ndarray, p: int) -> np.ndarray:
        if not self.pairs:
            return rows[:, 0].astype(np.int64)
        i, j = self.pairs[p]
        out: np.ndarray = self.offsets[p] + rows[:, i] * self.lens[j] + rows[:, j]
        return out

    def decode(self, item: int) -> tuple[tuple[int, int], ...]:
        """The (parameter, value index) an item fixes: one, or two."""
        if not self.pairs:
            return ((0, item),)
        p = int(np.searchsorted(self.offsets, item, side="right")) - 1
        i, j = self.pairs[p]
        rest = item - int(self.offsets[p])
        return ((i, rest // self.lens[j]), (j, rest % self.lens[j]))


def _solve(space: Space, keys: Sequence[Mapping[str, object]], names: Sequence[str],
           index: Sequence[Mapping[Value, int]], strides: np.ndarray) -> list[np.ndarray]:
    """Per key, the feasible configurations as sorted codes (value indices in mixed radix)."""
    seen = set().union(*(c.names for c in space.constraints)) if space.constraints else set()
    solved: dict[str, np.ndarray] = {}
    weights = [(n, {v: a * int(strides[i]) for v, a in index[i].items()}) for i, n in enumerate(names)]
    out = []
    for key in keys:
        alike = json.dumps({d: key[d] for d in sorted(seen & set(key))}, sort_keys=True, default=str)
        if alike not in solved:
            codes = (sum([w[p[n]] for n, w in weights]) for p in space.feasible(dict(key)))
            solved[alike] = np.unique(np.fromiter(codes, dtype=np.int64))
        out.append(solved[alike])
    return out


def covering_design(space: Space, keys: Sequence[Mapping[str, object]], default: Mapping[str, Value], *,
                    seed: int, extra: int = 0, limit: int = MAX_CONFIGS) -> Design:
    """The design for ``space`` over ``keys`` (see the module docstring), starting with ``default``.
    Raises SpaceError where a constraint cannot be evaluated."""
    names = list(space.params)
    values = [list(space.params[n]) for n in names]
    lens = [len(v) for v in values]
    index = [{v: a for a, v in enumerate(vals)} for vals in values]
    strides = np.array([int(np.prod(lens[i + 1:], dtype=np.int64)) for i in range(len(lens))], dtype=np.int64)
    rng = random.Random(seed)
    per_key = _solve(space, keys, names, index, strides)
    codes = np.unique(np.concatenate(per_key)) if per_key else np.zeros(0, dtype=np.int64)
    valid = np.stack([np.isin(codes, mine) for mine in per_key], axis=1) if per_key \
        else np.zeros((len(codes), 0), dtype=bool)
    rows = (codes[:, None] // strides[None, :]) % np.array(lens, dtype=np.int64)[None, :]
    items = _Items(lens)
    needed = [np.zeros(items.count, dtype=bool) for _ in keys]
    for p in range(max(1, len(items.pairs))):
        col = items.column(rows, p)
        for k in range(len(keys)):
            needed[k][col[valid[:, k]]] = True
    left = [n.copy() for n in needed]

    def point(row: Sequence[int]) -> dict[str, Value]:
        return {n: values[i][int(a)] for i, (n, a) in enumerate(zip(names, row, strict=True))}

    chosen: list[tuple[dict[str, Value], frozenset[int]]] = []
    taken: set[int] = set()

    def take(r: int) -> None:
        ids = items.of(rows[r:r + 1])[0]
        mask = frozenset(int(k) for k in np.flatnonzero(valid[r]))
        for k in mask:
            left[k][ids] = False
        chosen.append((point(rows[r]), mask))
        taken.add(r)

    first_code = sum(index[i][default[n]] * int(strides[i]) for i, n in enumerate(names))
    at = int(np.searchsorted(codes, first_code))
    if at < len(codes) and codes[at] == first_code:
        take(at)
    else:  # valid for no key: still checked first, on no case
        chosen.append((dict(default), frozenset()))
    order = [(k, int(item)) for k, need in enumerate(needed) for item in np.flatnonzero(need)]
    rng.shuffle(order)
    complete = True
    for k, item in order:
        if not left[k][item]:
            continue
        if len(chosen) >= limit:
            complete = False
            break
        holds = valid[:, k].copy()
        for i, a in items.decode(item):
            holds &= rows[:, i] == a
        candidates = np.flatnonzero(holds)
        if len(candidates) > CHOICES:
            candidates = candidates[sorted(rng.sample(range(len(candidates)), CHOICES))]
        ids = items.of(rows[candidates])
        gain = np.zeros(len(candidates), dtype=np.int64)
        for kk in range(len(keys)):
            gain += valid[candidates, kk] * left[kk][ids].sum(axis=1)
        take(int(candidates[int(np.argmax(gain))]))
    added = 0
    spare = [r for r in range(len(codes)) if r not in taken] if extra else []
    for r in sorted(rng.sample(spare, min(extra, len(spare)))) if spare else []:
        take(r)
        added += 1
    dead_values = tuple(f"{names[i]}={values[i][a]!r}" for i in range(len(names))
                        for a in sorted(set(range(lens[i])) - set(np.unique(rows[:, i]).tolist())))
    return Design(configs=tuple(c for c, _ in chosen), valid=tuple(m for _, m in chosen),
                  feasible=tuple(int(valid[:, k].sum()) for k in range(len(keys))),
                  needed=tuple(int(n.sum()) for n in needed),
                  covered=tuple(int(n.sum() - lf.sum()) for n, lf in zip(needed, left, strict=True)),
                  dead=tuple(items.count - int(n.sum()) for n in needed), dead_values=dead_values,
                  complete=complete, extra=added)


def value_cover(configs: Sequence[Mapping[str, Value]]) -> list[int]:
    """Indices of a few of ``configs`` (the first always) that hold every value any of them holds."""
    if not configs:
        return []
    left = {(n, v) for c in configs for n, v in c.items()}
    chosen: list[int] = []
    while left:
        i = 0 if not chosen else max(range(len(configs)),
                                     key=lambda c: sum((n, v) in left for n, v in configs[c].items()))
        chosen.append(i)
        left -= set(configs[i].items())
    return chosen


def describe(design: Design) -> str:
    """In words, what the design covers and what is dead (for the check's record)."""
    many = len(design.configs[0]) > 1 if design.configs else False
    what = "every value of every parameter and every pair of values of two parameters" if many else \
        "every value of its parameter"
    text = (f"{what} that a feasible configuration holds, for each key, in the whole feasible space, solved "
            f"({', '.join(f'{n:,}' for n in design.feasible)} feasible configurations per key): "
            f"{sum(design.covered)} covered")
    if any(design.dead):
        unit = "pairs" if many else "values"
        text += f"; {sum(design.dead)} {unit} no feasible configuration holds (dead, not checked)"
    if design.dead_values:
        shown = ", ".join(design.dead_values[:6]) + (", ..." if len(design.dead_values) > 6 else "")
        text += f", among them the values {shown}, which no key allows"
    if design.extra:
        text += f", and {design.extra} more drawn at random"
    return text
