"""The configurations a proposal is checked on: a covering design over its whole feasible space.

For every key, the design holds every value of every parameter and every pair of values of two
parameters that some configuration valid for that key holds (a strength-2 covering array restricted
by the constraints). It is drawn greedily (each new configuration covers the most pairs not covered
yet, ties broken by a seeded shuffle), deterministic for a seed, the default first:

- a space of at most ``ENUM_LIMIT`` points is enumerated, so the pairs that are feasible are known
  exactly and all of them are covered;
- a larger one is never enumerated: for each pair not covered yet, configurations holding it are drawn
  (the other parameters at random) and their constraints tested, ``TRIES`` times at most; a pair found
  in none is counted as not found feasible (``Design.unconfirmed``), which the record says.

A configuration is valid for some of the keys; it covers pairs only for those.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pytest_ktune.core.space import Space, Value

ENUM_LIMIT = 20_000
TRIES = 24

Item = tuple[int, ...]  # (i, a, j, b): parameter i at its value a with parameter j at b; (i, a) with one parameter


@dataclass(frozen=True)
class Design:
    """The configurations chosen, which keys each is valid for, and what they cover, per key."""

    configs: tuple[Mapping[str, Value], ...]
    valid: tuple[frozenset[int], ...]  # per configuration: the indices of the keys it is valid for
    needed: tuple[int, ...]  # per key: the feasible pairs (values, with one parameter) to cover
    covered: tuple[int, ...]  # per key: how many of them the configurations cover
    unconfirmed: tuple[int, ...]  # per key: pairs no drawn configuration valid for it held (sampled spaces)
    exact: bool  # the feasible space was enumerated
    extra: int  # configurations drawn at random on top of the covering


def _items(idx: Sequence[int]) -> list[Item]:
    if len(idx) == 1:
        return [(0, idx[0])]
    return [(i, idx[i], j, idx[j]) for i, j in itertools.combinations(range(len(idx)), 2)]


class _Greedy:
    """The state of one drawing: what is left to cover, per key."""

    def __init__(self, keys: int) -> None:
        self.left: list[set[Item]] = [set() for _ in range(keys)]
        self.chosen: list[tuple[int, ...]] = []
        self.masks: list[frozenset[int]] = []

    def gain(self, idx: Sequence[int], mask: frozenset[int]) -> int:
        items = _items(idx)
        return sum(1 for k in mask for it in items if it in self.left[k])

    def take(self, idx: tuple[int, ...], mask: frozenset[int]) -> None:
        self.chosen.append(idx)
        self.masks.append(mask)
        for it in _items(idx):
            for k in mask:
                self.left[k].discard(it)

    def next_item(self, order: Sequence[tuple[Item, int]]) -> tuple[Item, int] | None:
        for item, k in order:
            if item in self.left[k]:
                return item, k
        return None


def covering_design(space: Space, keys: Sequence[Mapping[str, object]], default: Mapping[str, Value], *,
                    seed: int, extra: int = 0, enum_limit: int = ENUM_LIMIT) -> Design:
    """The design for ``space`` over ``keys`` (see the module docstring), starting with ``default``.
    Raises SpaceError where a constraint cannot be evaluated."""
    names = list(space.params)
    values = [list(space.params[n]) for n in names]
    rng = random.Random(seed)

    def point(idx: Sequence[int]) -> dict[str, Value]:
        return {n: values[i][a] for i, (n, a) in enumerate(zip(names, idx, strict=True))}

    def mask_of(idx: Sequence[int]) -> frozenset[int]:
        cfg = point(idx)
        return frozenset(k for k, key in enumerate(keys) if space.valid(cfg, dict(key)))

    first = tuple(values[i].index(default[n]) for i, n in enumerate(names))
    greedy = _Greedy(len(keys))
    exact = space.size <= enum_limit
    if exact:
        candidates = [(idx, mask_of(idx)) for idx in itertools.product(*(range(len(v)) for v in values))]
        candidates = [(idx, m) for idx, m in candidates if m]
        rng.shuffle(candidates)  # the order ties are broken in
        holding: dict[Item, list[int]] = {}
        for c, (idx, m) in enumerate(candidates):
            for it in _items(idx):
                holding.setdefault(it, []).append(c)
                for k in m:
                    greedy.left[k].add(it)
        needed = [len(s) for s in greedy.left]
        unconfirmed = [0] * len(keys)
        greedy.take(first, mask_of(first))
        order = _order(greedy, rng)
        while (nxt := greedy.next_item(order)) is not None:
            item, k = nxt
            options = [candidates[c] for c in holding[item] if k in candidates[c][1]]
            idx, m = max(options, key=lambda o: greedy.gain(o[0], o[1]))
            greedy.take(idx, m)
        def pool() -> tuple[tuple[int, ...], frozenset[int]] | None:
            return candidates[rng.randrange(len(candidates))] if candidates else None

    else:
        for k in range(len(keys)):
            greedy.left[k] = set(_all_items(values))
        greedy.take(first, mask_of(first))
        order = _order(greedy, rng)
        unconfirmed = [0] * len(keys)
        while (nxt := greedy.next_item(order)) is not None:
            item, k = nxt
            best: tuple[tuple[int, ...], frozenset[int]] | None = None
            best_gain = -1
            for _ in range(TRIES):
                idx = _draw_holding(item, values, rng)
                m = mask_of(idx)
                if k in m and (g := greedy.gain(idx, m)) > best_gain:
                    best, best_gain = (idx, m), g
            if best is None:
                greedy.left[k].discard(item)
                unconfirmed[k] += 1
            else:
                greedy.take(*best)
        needed = [len(_all_items(values)) - u for u in unconfirmed]

        def pool() -> tuple[tuple[int, ...], frozenset[int]] | None:
            idx = tuple(rng.randrange(len(v)) for v in values)
            m = mask_of(idx)
            return (idx, m) if m else None

    added = _extra(greedy, pool, extra)
    configs = tuple(point(idx) for idx in greedy.chosen)
    covered = [needed[k] - len(greedy.left[k]) for k in range(len(keys))]
    return Design(configs, tuple(greedy.masks), tuple(needed), tuple(covered), tuple(unconfirmed), exact, added)


def _order(greedy: _Greedy, rng: random.Random) -> list[tuple[Item, int]]:
    order = sorted((it, k) for k, left in enumerate(greedy.left) for it in left)
    rng.shuffle(order)
    return order


def _all_items(values: Sequence[Sequence[Value]]) -> list[Item]:
    if len(values) == 1:
        return [(0, a) for a in range(len(values[0]))]
    return [(i, a, j, b) for i, j in itertools.combinations(range(len(values)), 2)
            for a in range(len(values[i])) for b in range(len(values[j]))]


def _draw_holding(item: Item, values: Sequence[Sequence[Value]], rng: random.Random) -> tuple[int, ...]:
    idx = [rng.randrange(len(v)) for v in values]
    idx[item[0]] = item[1]
    if len(item) == 4:
        idx[item[2]] = item[3]
    return tuple(idx)


def _extra(greedy: _Greedy, pool: Callable[[], tuple[tuple[int, ...], frozenset[int]] | None], extra: int) -> int:
    """Up to ``extra`` more configurations at random, not chosen yet; how many were found."""
    added = 0
    seen = set(greedy.chosen)
    for _ in range(extra * TRIES):
        if added >= extra:
            break
        got = pool()
        if got is None or got[0] in seen:
            continue
        seen.add(got[0])
        greedy.chosen.append(got[0])
        greedy.masks.append(got[1])
        added += 1
    return added


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
