"""Seeded synthetic generators of document lengths (tokens).

Every generator takes an explicit integer ``seed`` and draws from ``np.random.default_rng(seed)`` (or from
children of ``np.random.SeedSequence(seed)``), so the same arguments always give the same ``int64`` array.
Real-valued draws are rounded to the nearest token and then clipped to ``[min_len, max_len]``: a value above
``max_len`` becomes ``max_len``, which models a data pipeline that truncates over-long documents. (To keep the
tokens of over-long documents instead, draw without ``max_len`` and cut with :func:`traces.split_long`.)

Components of :func:`mixture` are any callables ``component(n, seed=...) -> array``, e.g.
``functools.partial(lognormal, mu=8.0, sigma=1.0)``, ``functools.partial(empirical, sample)``, or a preset's
``sample`` method.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dcpsim.traces._params import require_int, require_real
from dcpsim.traces.errors import TraceError
from dcpsim.traces.trace import LENGTH_EXPECTED, to_int64_column

__all__ = ["child_seeds", "empirical", "lognormal", "lognormal_pareto", "mixture"]

LengthSampler = Callable[..., np.ndarray]
"""A callable ``(n, seed=...) -> array`` of ``n`` document lengths (tokens)."""


def child_seeds(seed: int, count: int) -> list[int]:
    """``count`` independent integer seeds derived from ``seed`` (via ``np.random.SeedSequence.spawn``)."""
    root = np.random.SeedSequence(require_int(seed, "seed", 0, "child_seeds"))
    return [int(child.generate_state(1, np.uint64)[0]) for child in root.spawn(count)]


def _bounds(min_len: int, max_len: int | None, context: str) -> tuple[int, int | None]:
    low = require_int(min_len, "min_len", 1, context)
    high = None if max_len is None else require_int(max_len, "max_len", low, context)
    return low, high


def _to_lengths(x: np.ndarray, min_len: int, max_len: int | None, context: str) -> np.ndarray:
    """Round real draws to whole tokens, clip to [min_len, max_len], return int64."""
    x = np.rint(x)
    if max_len is not None:
        x = np.minimum(x, max_len)
    elif x.size and not np.all(x < 2.0**62):
        raise TraceError(
            f"{context}: a draw of {float(np.max(x)):.3g} tokens exceeds the int64 range; "
            "pass max_len or smaller parameters"
        )
    return np.maximum(x, min_len).astype(np.int64)


def lognormal(
    n: int, mu: float, sigma: float, seed: int, min_len: int = 1, max_len: int | None = None
) -> np.ndarray:
    """``n`` lengths (tokens) with ln(L) ~ Normal(mu, sigma²): median e^mu tokens, mean e^(mu + sigma²/2).

    Args:
        n: number of documents (≥ 0).
        mu, sigma: mean and standard deviation of the natural log of the length (ln tokens); sigma ≥ 0.
        seed: integer seed (≥ 0).
        min_len, max_len: clip bounds in tokens (see the module docstring).
    """
    ctx = "lognormal"
    n = require_int(n, "n", 0, ctx)
    mu = require_real(mu, "mu", ctx)
    sigma = require_real(sigma, "sigma", ctx, low=0.0)
    low, high = _bounds(min_len, max_len, ctx)
    rng = np.random.default_rng(require_int(seed, "seed", 0, ctx))
    return _to_lengths(rng.lognormal(mu, sigma, size=n), low, high, ctx)


def lognormal_pareto(
    n: int,
    mu: float,
    sigma: float,
    tail_start: float,
    alpha: float,
    tail_frac: float,
    seed: int,
    min_len: int = 1,
    max_len: int | None = None,
) -> np.ndarray:
    """``n`` lengths (tokens) from a lognormal body plus a Pareto tail.

    Each document is, independently, a tail document with probability ``tail_frac``: its length is Pareto
    (type I) with scale ``tail_start`` tokens and shape ``alpha``, P(L > x) = (tail_start / x)^alpha for
    x ≥ tail_start (mean alpha·tail_start/(alpha−1) when alpha > 1). Otherwise it is lognormal(mu, sigma)
    as in :func:`lognormal`. A smaller ``alpha`` gives a heavier tail.

    Args:
        tail_start: Pareto scale in tokens (> 0); tail_frac in [0, 1]; alpha > 0.
        other arguments: as in :func:`lognormal`.
    """
    ctx = "lognormal_pareto"
    n = require_int(n, "n", 0, ctx)
    mu = require_real(mu, "mu", ctx)
    sigma = require_real(sigma, "sigma", ctx, low=0.0)
    start = require_real(tail_start, "tail_start", ctx, low=0.0, low_open=True)
    shape = require_real(alpha, "alpha", ctx, low=0.0, low_open=True)
    frac = require_real(tail_frac, "tail_frac", ctx, low=0.0, high=1.0)
    low, high = _bounds(min_len, max_len, ctx)
    rng = np.random.default_rng(require_int(seed, "seed", 0, ctx))
    in_tail = rng.random(n) < frac
    body = rng.lognormal(mu, sigma, size=n)
    tail = start * (1.0 + rng.pareto(shape, size=n))  # numpy's pareto is Lomax; +1 and scale give type I
    return _to_lengths(np.where(in_tail, tail, body), low, high, ctx)


def empirical(sample: Any, n: int, seed: int) -> np.ndarray:
    """``n`` lengths (tokens) drawn uniformly with replacement from ``sample`` (e.g. a shipped sample).

    Raises:
        TraceError: an empty sample, or a sample value that is not a whole number ≥ 1 (naming its row).
    """
    ctx = "empirical"
    n = require_int(n, "n", 0, ctx)
    values = to_int64_column(
        sample, source="empirical(sample)", field="length", minimum=1, expected=LENGTH_EXPECTED
    )
    if values.size == 0:
        raise TraceError.bad_param("sample", "[]", "at least one length", ctx)
    rng = np.random.default_rng(require_int(seed, "seed", 0, ctx))
    return values[rng.integers(0, values.size, size=n)]


def mixture(components: Sequence[LengthSampler], weights: Sequence[float], n: int, seed: int) -> np.ndarray:
    """``n`` lengths (tokens), each from component i with probability weights[i] / sum(weights).

    Weights are per *document* (to weight by tokens, divide each token share by the component's mean
    length). How many documents each component contributes is multinomial; component i is called once as
    ``components[i](k_i, seed=s_i)`` with its own derived seed, and the result is shuffled, so documents of
    different components are interleaved.

    Raises:
        TraceError: no components, a weight count that differs, negative/non-finite weights or all zero, or a
            component that returns the wrong number of lengths or lengths < 1.
    """
    ctx = "mixture"
    n = require_int(n, "n", 0, ctx)
    if len(components) == 0:
        raise TraceError.bad_param("components", [], "at least one component", ctx)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (len(components),):
        raise TraceError.bad_param(
            "weights", list(weights), f"{len(components)} weights, one per component", ctx
        )
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
        raise TraceError.bad_param(
            "weights", w.tolist(), "finite non-negative weights with a positive sum", ctx
        )
    seeds = child_seeds(require_int(seed, "seed", 0, ctx), len(components) + 1)
    rng = np.random.default_rng(seeds[-1])
    counts = rng.multinomial(n, w / w.sum())
    parts = []
    for i, (component, k) in enumerate(zip(components, counts.tolist())):
        part = to_int64_column(
            component(k, seed=seeds[i]),
            source=f"mixture component {i}",
            field="length",
            minimum=1,
            expected=LENGTH_EXPECTED,
        )
        if part.size != k:
            raise TraceError(f"mixture: component {i} returned {part.size} lengths for n = {k}; expected {k}")
        parts.append(part)
    return np.concatenate(parts)[rng.permutation(n)]


def lognormal_mean(mu: float, sigma: float, cap: float = math.inf) -> float:
    """E[min(X, cap)] in tokens for ln X ~ Normal(mu, sigma²), closed form (cap = inf: e^(mu + sigma²/2))."""
    full = math.exp(mu + sigma * sigma / 2)
    if math.isinf(cap):
        return full
    if sigma == 0:
        return min(math.exp(mu), cap)
    z = (math.log(cap) - mu) / sigma
    phi = 0.5 * (1 + math.erf((z - sigma) / math.sqrt(2)))
    above = 0.5 * math.erfc(z / math.sqrt(2))
    return full * phi + cap * above


def pareto_mean(tail_start: float, alpha: float, cap: float = math.inf) -> float:
    """E[min(X, cap)] in tokens for a type-I Pareto (scale ``tail_start``, shape ``alpha``), closed form."""
    if cap <= tail_start:
        return cap
    if math.isinf(cap):
        return math.inf if alpha <= 1 else alpha * tail_start / (alpha - 1)
    if alpha == 1:
        return tail_start * (1 + math.log(cap / tail_start))
    return tail_start + tail_start**alpha * (cap ** (1 - alpha) - tail_start ** (1 - alpha)) / (1 - alpha)
