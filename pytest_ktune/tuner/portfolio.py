"""The default sampler's search where nothing is known: no device prior, no record of another key or
device, no parameters in use (an imported landscape, a stand-in target, priors switched off), in a
space of more than ``SCORED`` feasible configurations (in a smaller one ``bo``'s own steps, widening
from the best so far, cover it within a tune's budget: ``bo.BoSampler``).

``bo``'s model, centred on the best so far, is the right tool once a good configuration is known;
started from nothing it centres on whatever came first and stays in that basin. Here the sampler
runs a portfolio instead, over the feasible configurations only (a proposal is always one of them,
never one tried before):

* **a space-filling start**: ``start_size(d)`` configurations for ``d`` parameters, half of
  ``d + 1`` (at least two), each the untried one farthest from all tried so far (every untried one
  is measured: the start is a handful of points, so this costs little even on ten thousand). Not
  the ``d + 1`` that show a trend along each parameter: the farthest points are the space's
  corners, where a kernel is seldom fast, and the model, fitted to half as many, already steers
  by the parameters that matter (the tuner's batch of four asks this many before any is timed);
* then, trial by trial, one of three sub-strategies, drawn by Thompson sampling on how often each
  one's proposals improved on the best so far (a Beta(1 + improvements, 1 + the rest) draw each):
  ``model`` (``bo``'s own proposal: expected improvement next to the best), ``evolve`` (a genetic
  step: two parents, each the better of two drawn from the best ``population`` timed, crossed
  parameter by parameter, each parameter moved by a step with probability ``1 / d``, then the
  untried feasible configuration nearest the child) and ``explore`` (the untried configuration of
  highest expected improvement over the whole space: all of them in a space of up to ``SCORED``,
  a random ``SCORED`` of them in a larger one). Each starts with one success counted, so that each
  is tried.

The constants come from the space's size and shape, never from a landscape: the start and the
mutation rate from the number of parameters, the population from the number of feasible
configurations (its natural log: a larger space keeps more candidates alive).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from pytest_ktune.core.space import Value, config_key

ARMS = ("model", "evolve", "explore")


SCORED = 1024  # candidates the explore arm's model scores (all of them in a smaller space)


class Rows(Protocol):
    """The feasible configurations as ``bo.Positions`` holds them: each row's value positions."""

    feasible: list[Mapping[str, Value]]
    keys: list[str]
    names: list[str]
    pos: np.ndarray
    numeric: np.ndarray
    index: list[dict[Value, int]]
    row_of: dict[str, int]

    def untried(self, tried: Collection[str]) -> np.ndarray: ...


Model = Callable[[], Mapping[str, Value] | None]  # the model's proposal (``bo.propose``), made on demand


# the model's expected improvement of the feasible configurations numbered so (rows of ``Rows``): numbers, not
# the configurations, so that scoring a thousand makes no list of them and looks none of them up
Score = Callable[[np.ndarray], np.ndarray]


def row_sums(parts: Sequence[np.ndarray], n: int) -> np.ndarray:
    """``np.stack(parts, 1).sum(1)``, bit for bit, from the columns themselves: numpy sums a row's
    numbers pairwise (eight partial sums of every eighth number, added as a tree, then the remainder in
    order; halves first beyond 128), and this adds whole columns in that order."""
    if not parts:
        return np.zeros(n)
    if len(parts) > 128:  # numpy's block: two halves, the first a multiple of eight
        half = len(parts) // 2
        half -= half % 8
        halves: np.ndarray = row_sums(parts[:half], n) + row_sums(parts[half:], n)
        return halves
    if len(parts) < 8:
        out = parts[0].copy()
        for p in parts[1:]:
            out += p
        return out
    r = [p.copy() for p in parts[:8]]
    full = len(parts) - len(parts) % 8
    for i in range(8, full, 8):
        for j in range(8):
            r[j] += parts[i + j]
    tree: np.ndarray = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    for p in parts[full:]:
        tree += p
    return tree


def start_size(dims: int) -> int:
    """The configurations of the space-filling start for ``dims`` parameters that can change (the
    module docstring says why half of ``dims + 1``)."""
    return max(2, (dims + 1) // 2)


@dataclass
class Portfolio:
    """The portfolio's memory across the proposals of one study: who proposed what, and how it went."""

    positions: Rows
    rng: random.Random
    proposed_by: dict[str, str] = field(default_factory=dict)  # configuration key -> arm
    scored: set[str] = field(default_factory=set)  # configuration keys already credited
    wins: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ARMS, 1))
    losses: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ARMS, 0))

    def __post_init__(self) -> None:
        at = self.positions
        span = np.asarray([max(len(ix) - 1, 1) for ix in at.index], float)
        self.span = span
        self.unit = at.pos / span  # each parameter's position among its values, in [0, 1]
        self.unit_t = np.ascontiguousarray(self.unit.T)  # the same, a parameter a row (``_distance``)
        self.dims = max(1, sum(len(ix) > 1 for ix in at.index))  # the parameters that can change
        self.start = min(start_size(self.dims), len(at.feasible))
        self.population = max(2, round(math.log(max(len(at.feasible), 2))))
        # each feasible row by its value positions: a child that lands on one needs no distances measured
        self.row_at = {tuple(r): i for i, r in enumerate(np.rint(at.pos).astype(int).tolist())}

    # -- the arms ----------------------------------------------------------------------------------

    def _distance(self, rows: np.ndarray, to: np.ndarray, units_t: np.ndarray | None = None) -> np.ndarray:
        """Distances from the configurations numbered ``rows`` to the point ``to`` (in ``unit`` space;
        a categorical parameter counts 1 where it differs); ``units_t``: ``self.unit_t[:, rows]``, where
        the caller measures from the same rows many times."""
        cols = self.unit_t[:, rows] if units_t is None else units_t
        numeric = self.positions.numeric
        # a parameter at a time, over every row at once: numpy's sum along a row of a few numbers costs
        # more than the differences themselves; ``row_sums`` adds them in the order that sum does
        parts = [np.abs(cols[j] - to[j]) if numeric[j] else (np.abs(cols[j] - to[j]) > 0).astype(float)
                 for j in range(len(cols))]
        return row_sums(parts, len(rows))

    def spread(self, untried: np.ndarray, tried: np.ndarray) -> int:
        """The untried row farthest from every tried one (the first: one at random), ties drawn at random.
        Only the start asks for it, while few are tried, so every untried row is measured."""
        if not len(tried):
            return int(untried[self.rng.randrange(len(untried))])
        near = np.full(len(untried), np.inf)
        for t in tried:
            near = np.minimum(near, self._distance(untried, self.unit[t]))
        far = np.flatnonzero(near == near.max())
        return int(untried[far[self.rng.randrange(len(far))]])

    def _draw(self, untried: np.ndarray, n: int) -> np.ndarray:
        # drawn as positions in ``untried`` (the same draws as from its rows themselves: a sample picks by
        # position), which spares a list of thousands of numpy integers at each proposal
        return untried if len(untried) <= n else untried[self.rng.sample(range(len(untried)), n)]

    def explore(self, untried: np.ndarray, score: Score) -> int:
        """The untried row of highest expected improvement over the whole space (among ``SCORED`` drawn)."""
        pick = self._draw(untried, SCORED)
        return int(pick[int(np.argmax(score(np.asarray(pick, int))))])

    def evolve(self, untried: np.ndarray, ranked: Sequence[int], score: Score) -> int:
        """Of ``d`` children of good parents (see the module docstring), the one the model expects most of."""
        units = self.unit_t[:, untried]
        free = np.zeros(len(self.positions.feasible), bool)
        free[untried] = True
        children = sorted({self._child(untried, ranked, units, free) for _ in range(self.dims)})
        return children[int(np.argmax(score(np.asarray(children, int))))]

    def _child(self, untried: np.ndarray, ranked: Sequence[int], units_t: np.ndarray | None = None,
               free: np.ndarray | None = None) -> int:
        """The untried row nearest a child of two good parents (``free``: whether each row is untried)."""
        pool = list(ranked[: self.population])

        def parent() -> int:
            a, b = self.rng.choice(pool), self.rng.choice(pool)
            return a if ranked.index(a) <= ranked.index(b) else b

        mum, dad = self.unit[parent()], self.unit[parent()]
        child = np.where([self.rng.random() < 0.5 for _ in self.positions.names], mum, dad)
        for j, ix in enumerate(self.positions.index):
            if len(ix) > 1 and self.rng.random() < 1.0 / self.dims:
                if self.positions.numeric[j]:
                    step = 1.0 / max(len(ix) - 1, 1)
                    child[j] = min(max(child[j] + self.rng.choice((-step, step)), 0.0), 1.0)
                else:
                    child[j] = self.rng.randrange(len(ix)) / self.span[j]
        # A child at an untried row (up to the rounding of a mutation's step) is nearest itself alone:
        # every other row is a whole step or more away. The draw among the nearest is made all the same,
        # so that the generator goes on as it would have.
        at = child * self.span
        row = self.row_at.get(tuple(np.rint(at).astype(int).tolist())) if free is not None and \
            np.abs(at - np.rint(at)).max() < 1e-6 else None
        if row is not None and free is not None and free[row]:
            self.rng.randrange(1)
            return row
        dist = self._distance(untried, child, units_t)
        best = np.flatnonzero(dist == dist.min())
        return int(untried[best[self.rng.randrange(len(best))]])

    # -- one proposal ------------------------------------------------------------------------------

    def credit(self, timed: Sequence[tuple[str, float]]) -> None:
        """Count, for each arm, whether its proposals timed since the last call beat the best before
        them (``timed``: configuration keys and times, in the order timed)."""
        best = math.inf
        for ck, v in timed:
            arm = self.proposed_by.get(ck)
            if arm is not None and ck not in self.scored:
                self.scored.add(ck)
                if v < best:
                    self.wins[arm] += 1
                else:
                    self.losses[arm] += 1
            best = min(best, v)

    def choose(self) -> str:
        draws = {a: self.rng.betavariate(self.wins[a], 1 + self.losses[a]) for a in ARMS}
        return max(ARMS, key=lambda a: (draws[a], -ARMS.index(a)))

    def propose(self, timed: Sequence[tuple[Mapping[str, Value], float]], *, failed: Sequence[Mapping[str, Value]],
                busy: Sequence[Mapping[str, Value]], model: Model, score: Score,
                key: Callable[[Mapping[str, Value]], str] = config_key) -> Mapping[str, Value] | None:
        """The next configuration, untried and feasible; None when every one was tried. ``timed``,
        ``failed`` and ``busy`` are as for ``bo.propose`` (timed in the order they were timed);
        ``model`` makes the model arm's proposal, ``score`` the model's expected improvement of
        feasible configurations by row number (it is asked only once two are timed); ``key``:
        ``config_key``, or a caller's memo of it."""
        at = self.positions
        keyed = [(key(c), v) for c, v in timed]
        self.credit(keyed)
        tried_keys = {k for k, _ in keyed} | {key(c) for c in [*failed, *busy]}
        untried = at.untried(tried_keys)
        if not len(untried):
            return None
        row_of = at.row_of
        tried = np.asarray([row_of[k] for k in tried_keys if k in row_of], int)
        ok = [(v, row_of[k]) for k, v in keyed if math.isfinite(v) and k in row_of]
        if len(ok) < self.start:
            return at.feasible[self.spread(untried, tried)]
        arm = self.choose()
        if arm == "model":
            pick = model()
        elif arm == "evolve":
            ranked = [r for _, r in sorted(ok)]
            pick = at.feasible[self.evolve(untried, ranked, score)]
        else:
            pick = at.feasible[self.explore(untried, score)]
        if pick is not None:
            self.proposed_by[key(pick)] = arm
        return pick


def knows_nothing(labels: Sequence[str]) -> bool:
    """Whether a study whose enqueued trials carry these warm-start labels starts from nothing: none
    came from a device prior, a record, or parameters in use (the target's default alone is a guess,
    and ``explore`` and ``grid`` are the loop's own)."""
    return all(label in ("default", "explore", "grid") for label in labels)
