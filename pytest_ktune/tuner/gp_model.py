"""The Gaussian process behind the ``bo`` sampler (``tuner.bo``): a Matérn 5/2 kernel with one length scale
per parameter, chosen by the marginal likelihood over a small grid (the whole grid for up to
``FULL_GRID_UP_TO`` parameters, coordinate-wise above that), on standardised log timings with a fixed noise;
its Cholesky factor (``Factor``) grown by new inputs while the length scales stay; expected improvement."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

LENGTH_SCALES = (0.1, 0.2, 0.4, 0.8, 1.6)


NEAR = 1e-6  # evidence this close to the most (relative, beyond 1) is compared exactly (``GaussianProcess._choose``)


NOISE = 1e-2  # the observation noise, as a fraction of the (standardised) variance of the log timings


FULL_GRID_UP_TO = 3  # parameters; above that, length scales are chosen one parameter at a time


def _matern52(r2: np.ndarray) -> np.ndarray:
    """The Matérn 5/2 kernel of squared scaled distances."""
    s = np.sqrt(5.0 * r2)
    # (1 + s + s² / 3) e^-s, the same operations in the same order, in two arrays instead of six
    out: np.ndarray = 1.0 + s
    sq = s * s
    sq /= 3.0
    out += sq
    np.negative(s, out=s)
    np.exp(s, out=s)
    out *= s
    return out


def _sq_dist(a: np.ndarray, b: np.ndarray, columns: np.ndarray, params: int) -> np.ndarray:
    """Squared distances per parameter: shape (params, len(a), len(b))."""
    d = a[:, None, :] - b[None, :, :]
    out = np.zeros((params, len(a), len(b)))
    for c in range(a.shape[1]):
        out[columns[c]] += d[:, :, c] ** 2
    return out


_erf = np.frompyfunc(math.erf, 1, 1)


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    """Expected improvement below ``best`` of normal predictions (minimisation)."""
    z = (best - mu) / sd
    cdf = 0.5 * (1.0 + _erf(z / math.sqrt(2.0)).astype(float))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    out: np.ndarray = (best - mu) * cdf + sd * pdf
    return out


class GaussianProcess:
    """A zero-mean GP on standardised targets with unit signal variance and fixed noise."""

    def __init__(self, x: np.ndarray, y: np.ndarray, columns: Sequence[int], noise: float = NOISE,
                 scales: np.ndarray | None = None) -> None:
        self.x = x
        self.mean = float(y.mean())
        self.std = float(y.std()) or 1.0
        self.y = (y - self.mean) / self.std
        self.columns = np.asarray(columns, int)  # the parameter each input column belongs to
        self.params = int(self.columns.max()) + 1 if len(self.columns) else 0
        self.noise = noise
        self._d2 = _sq_dist(x, x, self.columns, self.params)
        self._chol_inv: np.ndarray | None = None  # the factor's inverse, made when first needed (``predict``)
        self.scales = np.ones(self.params)
        if scales is not None and len(scales) == self.params:  # length scales chosen before, kept
            self.scales = np.asarray(scales, float)
            _, k = self._evidence(self.scales[None, :])
            self._chol, self._alpha = self._weights(k[0])
        else:
            self._chol, self._alpha = self._fit()

    @classmethod
    def on(cls, factor: Factor, y: np.ndarray) -> GaussianProcess:
        """The model of ``y`` (one per input of ``factor``, in its order) with the factor's length scales."""
        gp = cls.__new__(cls)
        gp.x, gp.columns, gp.noise, gp.scales = factor.x, factor.columns, factor.noise, factor.scales
        gp.params = int(gp.columns.max()) + 1 if len(gp.columns) else 0
        gp.mean = float(y.mean())
        gp.std = float(y.std()) or 1.0
        gp.y = (y - gp.mean) / gp.std
        gp._chol, gp._chol_inv = factor.chol, factor.chol_inv
        gp._alpha = factor.chol_inv.T @ (factor.chol_inv @ gp.y)  # K^-1 y, as L^-T L^-1 y
        return gp

    def _evidence(self, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each row of length scales in ``grid``: log evidence (up to a constant) and the kernel matrix
        (plus noise), all at once.

        One Cholesky factorisation of the kernel matrix bordered by the targets, [[K, y], [y', c]], gives
        both terms: its top left block is K's factor (the log determinant), its last row L^-1 y (whose
        square is y' K^-1 y). numpy has no triangular solver, and its general solve cost twice the factor;
        the weights are made once, for the scales chosen (``_weights``)."""
        r2 = np.einsum("gp,pij->gij", 1.0 / grid ** 2, self._d2)
        n = len(self.x)
        k = _matern52(r2) + self.noise * np.eye(n)
        bordered = np.empty((len(grid), n + 1, n + 1))
        bordered[:, :n, :n] = k
        bordered[:, n, :n] = self.y
        bordered[:, :n, n] = self.y
        # positive definite: K's least eigenvalue is at least the noise, so y' K^-1 y < 1 + y'y / noise
        bordered[:, n, n] = 1.0 + float(self.y @ self.y) / self.noise
        chol = np.linalg.cholesky(bordered)
        tail = chol[:, n, :n]
        logdet = np.log(np.diagonal(chol[:, :n, :n], axis1=1, axis2=2)).sum(1)
        return -0.5 * (tail * tail).sum(1) - logdet, k

    def _exact(self, k: np.ndarray) -> float:
        """The log evidence of the kernel matrix ``k`` from its own factor and a solve of it (``_evidence``'s,
        up to rounding): where two grid rows' evidence is that close, the choice between them is this."""
        chol, alpha = self._weights(k)
        return float(-0.5 * (alpha * self.y).sum() - np.log(np.diagonal(chol)).sum())

    def _choose(self, ev: np.ndarray, k: Callable[[int], np.ndarray]) -> int:
        """The grid row of the most evidence (the first of equals); ``k``: a row's kernel matrix. Rows
        within rounding of the most are compared by ``_exact``, so that a choice the bordered factor's
        rounding could turn is made as the factor and solve of each matrix make it."""
        i = int(np.argmax(ev))
        close = np.flatnonzero(ev >= ev[i] - NEAR * (1.0 + abs(float(ev[i]))))
        if len(close) < 2:
            return i
        exact = [self._exact(k(int(j))) for j in close]
        return int(close[int(np.argmax(exact))])

    def _weights(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The Cholesky factor of the kernel matrix ``k`` (plus noise) and the weights K^-1 y."""
        chol = np.linalg.cholesky(k[None])  # positive definite: a kernel matrix plus noise on its diagonal
        # One solve of K itself, not two triangular ones: numpy has no triangular solver
        alpha = np.linalg.solve(k[None], self.y[None, :, None])[..., 0]
        return chol[0], alpha[0]

    def _fit(self) -> tuple[np.ndarray, np.ndarray]:
        scales = np.asarray(LENGTH_SCALES)
        if self.params <= FULL_GRID_UP_TO:
            grid = np.asarray(list(itertools.product(scales, repeat=self.params)))
            ev, k = self._evidence(grid)
            i = self._choose(ev, lambda j: k[j])
            self.scales = grid[i]
            return self._weights(k[i])
        best = np.full(self.params, scales[len(scales) // 2])
        held: tuple[float, np.ndarray] | None = None  # the evidence and kernel matrix of ``best``
        others_at: dict[int, list[float]] = {}  # each parameter's grid, last chosen on: the scales of the others
        for _ in range(2):  # coordinate-wise: each parameter's scale with the others held
            for p in range(self.params):
                if not self._d2[p].any():
                    continue  # a parameter that does not vary among the timings: its scale changes nothing
                others = [*best[:p], *best[p + 1:]]
                if others_at.get(p) == others:
                    continue  # the others' scales as when this one's was chosen: the same grid, the same choice
                others_at[p] = others
                grid = np.repeat(best[None, :], len(scales), 0)
                grid[:, p] = scales
                # one row of the grid is ``best`` itself, whose evidence is known after the first
                # parameter: only the others are computed (each row's on its own, so the same numbers)
                at = int(np.flatnonzero(scales == best[p])[0]) if held is not None else -1
                ev, k = self._evidence(np.delete(grid, at, 0) if at >= 0 else grid)
                if held is not None:
                    ev = np.insert(ev, at, held[0])

                def matrix(j: int, k: np.ndarray = k, at: int = at,
                           held: tuple[float, np.ndarray] | None = held) -> np.ndarray:
                    # the grid row's kernel matrix: ``best``'s is held, the others' were just made
                    if held is not None and j == at:
                        return held[1]
                    made: np.ndarray = k[j if held is None or j < at else j - 1]
                    return made

                i = self._choose(ev, matrix)
                held = (float(ev[i]), matrix(i))
                best = grid[i]
        self.scales = best
        if held is None:  # no parameter varies among the timings
            _, k = self._evidence(best[None, :])
            return self._weights(k[0])
        return self._weights(held[1])

    def _cross(self, x: np.ndarray) -> np.ndarray:
        """The kernel between ``x`` and the model's inputs."""
        # with the length scales known, the scaled squared distance is a plain one between scaled inputs:
        # one product of matrices instead of one slice per parameter
        inv = 1.0 / self.scales[self.columns] if len(self.columns) else np.ones(0)
        a, b = x * inv, self.x * inv
        r2 = np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T, 0.0)
        return _matern52(r2)

    def mean_at(self, x: np.ndarray) -> np.ndarray:
        """The standardised mean at ``x`` (``predict``'s, without the deviation)."""
        out: np.ndarray = self._cross(x) @ self._alpha
        return out

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The standardised mean and standard deviation at ``x``."""
        ks = self._cross(x)
        mu = ks @ self._alpha
        if self._chol_inv is not None or len(x) > len(self.x):
            # More candidates than timings (the explore arm scores a thousand): one product with the
            # factor's inverse, made once per model, costs a fifth of solving against the factor for
            # every candidate (numpy has no triangular solver: its general one factorises again).
            if self._chol_inv is None:
                self._chol_inv = np.linalg.inv(self._chol)
            v = self._chol_inv @ ks.T
        else:
            v = np.linalg.solve(self._chol, ks.T)
        var = np.maximum(1.0 - (v * v).sum(0), 1e-12)
        return mu, np.sqrt(var)


class Factor:
    """The Cholesky factor of the kernel matrix (plus noise) of some model inputs, with its inverse, for
    length scales that are kept: grown by a few inputs at a time instead of made again.

    A proposal's model has the previous one's inputs and a few more (the batch just timed, the
    configurations it believes): with the scales kept, the factor of the larger matrix begins with
    the smaller one's, and only its new rows are computed, O(n² p) for p new inputs instead of
    O(n³) (``grown``). ``keys`` names each input's configuration, in the factor's order."""

    def __init__(self, x: np.ndarray, keys: Sequence[str], scales: np.ndarray, columns: np.ndarray, *,
                 noise: float, chol: np.ndarray, chol_inv: np.ndarray | None = None) -> None:
        self.x = x
        self.keys = list(keys)
        self.scales = scales
        self.columns = columns
        self.noise = noise
        self.chol = chol
        self.chol_inv = np.linalg.inv(chol) if chol_inv is None else chol_inv

    def kernel(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The kernel between the rows of ``a`` and those of ``b``."""
        inv = 1.0 / self.scales[self.columns] if len(self.columns) else np.ones(0)
        a, b = a * inv, b * inv
        return _matern52(np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T, 0.0))

    def grown(self, x: np.ndarray, keys: Sequence[str]) -> Factor:
        """The factor with the inputs ``x`` (named ``keys``) added after these."""
        k_new = self.kernel(self.x, x)
        b = self.chol_inv @ k_new  # the new rows' part below the old factor: L^-1 k
        k_nn = self.kernel(x, x)
        np.fill_diagonal(k_nn, 1.0)  # a point's distance to itself is 0, not the rounding of the expansion
        tail = np.linalg.cholesky(k_nn + self.noise * np.eye(len(x)) - b.T @ b)
        tail_inv = np.linalg.inv(tail)
        n, p = len(self.x), len(x)
        chol = np.zeros((n + p, n + p))
        chol[:n, :n], chol[n:, :n], chol[n:, n:] = self.chol, b.T, tail
        chol_inv = np.zeros((n + p, n + p))
        chol_inv[:n, :n], chol_inv[n:, n:] = self.chol_inv, tail_inv
        chol_inv[n:, :n] = -tail_inv @ b.T @ self.chol_inv
        return Factor(np.vstack([self.x, x]), [*self.keys, *keys], self.scales, self.columns, noise=self.noise,
                      chol=chol, chol_inv=chol_inv)
