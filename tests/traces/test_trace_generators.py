"""Seeded generators: determinism, ranges, distribution shape, parameter errors."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcpsim.traces import TraceError, empirical, lognormal, lognormal_pareto, mixture
from dcpsim.traces.generators import child_seeds, lognormal_mean, pareto_mean

N = 200_000


def test_lognormal_deterministic_int64_and_seed_sensitive() -> None:
    a = lognormal(1000, 8.0, 1.0, seed=3)
    assert a.dtype == np.int64 and a.shape == (1000,)
    np.testing.assert_array_equal(a, lognormal(1000, 8.0, 1.0, seed=3))
    assert not np.array_equal(a, lognormal(1000, 8.0, 1.0, seed=4))


def test_lognormal_matches_its_parameters() -> None:
    x = lognormal(N, 8.0, 0.9, seed=0)
    logs = np.log(x)
    assert abs(np.median(x) / math.exp(8.0) - 1) < 0.02
    assert abs(logs.std() - 0.9) < 0.01
    assert abs(x.mean() / lognormal_mean(8.0, 0.9) - 1) < 0.02


@settings(max_examples=30, deadline=None)
@given(
    mu=st.floats(0, 14),
    sigma=st.floats(0, 3),
    min_len=st.integers(1, 100),
    span=st.integers(0, 10**6),
    seed=st.integers(0, 2**32),
)
def test_lognormal_clips_to_bounds(mu: float, sigma: float, min_len: int, span: int, seed: int) -> None:
    x = lognormal(500, mu, sigma, seed, min_len=min_len, max_len=min_len + span)
    assert x.min() >= min_len and x.max() <= min_len + span


def test_lognormal_pareto_tail_shape() -> None:
    start, alpha = 100_000.0, 1.5
    x = lognormal_pareto(N, 7.0, 0.5, start, alpha, 0.2, seed=1)
    tail = x[x >= start].astype(np.float64)
    # Body draws above 100K are negligible (e^7 ≈ 1.1K, sigma 0.5): the tail share is tail_frac.
    assert abs(tail.size / N - 0.2) < 0.01
    hill = tail.size / np.log(tail / start).sum()  # maximum-likelihood Pareto shape
    assert abs(hill - alpha) < 0.05
    assert abs(np.median(x[x < start]) / math.exp(7.0) - 1) < 0.03


def test_lognormal_pareto_degenerate_fractions() -> None:
    body = lognormal_pareto(1000, 7.0, 0.5, 1e6, 1.5, 0.0, seed=2)
    tail = lognormal_pareto(1000, 7.0, 0.5, 1e6, 1.5, 1.0, seed=2, max_len=2_000_000)
    assert body.max() < 1e6 and tail.min() >= 1e6 and tail.max() <= 2_000_000


@pytest.mark.parametrize("cap", [math.inf, 300_000.0, 50_000.0])
def test_closed_form_means_match_monte_carlo(cap: float) -> None:
    rng = np.random.default_rng(5)
    body = np.minimum(rng.lognormal(10.0, 0.8, N), cap)
    assert abs(body.mean() / lognormal_mean(10.0, 0.8, cap) - 1) < 0.01
    tail = np.minimum(100_000 * (1 + rng.pareto(2.5, N)), cap)
    assert abs(tail.mean() / pareto_mean(100_000, 2.5, cap) - 1) < 0.01
    assert pareto_mean(1.0, 1.0, math.e) == pytest.approx(2.0)
    assert pareto_mean(1.0, 0.5) == math.inf


def test_empirical_draws_only_sample_values() -> None:
    sample = np.array([3, 300, 30_000])
    x = empirical(sample, 9000, seed=0)
    assert set(np.unique(x)) == {3, 300, 30_000}
    assert np.all(np.abs(np.bincount(np.searchsorted(sample, x)) / 9000 - 1 / 3) < 0.03)
    np.testing.assert_array_equal(x, empirical(sample, 9000, seed=0))


def _const(value: int, n: int, seed: int) -> np.ndarray:
    return np.full(n, value, dtype=np.int64)


def test_mixture_weights_and_interleaving() -> None:
    x = mixture([partial(_const, 1), partial(_const, 2), partial(_const, 3)], [1, 3, 0], 40_000, seed=9)
    assert x.dtype == np.int64 and x.size == 40_000
    assert abs(np.mean(x == 2) - 0.75) < 0.01 and not np.any(x == 3)
    assert np.mean(x[:-1] != x[1:]) > 0.3  # shuffled, not one block per component
    np.testing.assert_array_equal(
        x, mixture([partial(_const, 1), partial(_const, 2), partial(_const, 3)], [1, 3, 0], 40_000, seed=9)
    )


def test_mixture_components_get_distinct_seeds() -> None:
    comp = partial(lognormal, mu=8.0, sigma=1.0)
    x = mixture([comp, comp], [1, 1], 2000, seed=0)
    assert np.unique(x).size > 1500  # two copies of one stream would repeat values


def test_child_seeds_deterministic_and_distinct() -> None:
    assert child_seeds(7, 5) == child_seeds(7, 5)
    assert len(set(child_seeds(7, 5))) == 5
    assert child_seeds(7, 5) != child_seeds(8, 5)


@pytest.mark.parametrize(
    ("call", "param"),
    [
        (lambda: lognormal(-1, 8, 1, 0), "n"),
        (lambda: lognormal(10, 8, -1, 0), "sigma"),
        (lambda: lognormal(10, float("nan"), 1, 0), "mu"),
        (lambda: lognormal(10, 8, 1, -5), "seed"),
        (lambda: lognormal(10, 8, 1, 0, min_len=0), "min_len"),
        (lambda: lognormal(10, 8, 1, 0, min_len=10, max_len=5), "max_len"),
        (lambda: lognormal(10, 8, 1, 1.5), "seed"),
        (lambda: lognormal(True, 8, 1, 0), "n"),
        (lambda: lognormal_pareto(10, 8, 1, 0, 1.5, 0.1, 0), "tail_start"),
        (lambda: lognormal_pareto(10, 8, 1, 1e5, 0, 0.1, 0), "alpha"),
        (lambda: lognormal_pareto(10, 8, 1, 1e5, 1.5, 1.1, 0), "tail_frac"),
        (lambda: empirical([], 10, 0), "sample"),
        (lambda: mixture([], [], 10, 0), "components"),
        (lambda: mixture([partial(_const, 1)], [1, 2], 10, 0), "weights"),
        (lambda: mixture([partial(_const, 1)], [-1], 10, 0), "weights"),
        (lambda: mixture([partial(_const, 1)], [0], 10, 0), "weights"),
    ],
)
def test_bad_parameters_are_named(call, param: str) -> None:
    with pytest.raises(TraceError, match=f"parameter '{param}'"):
        call()


def test_bad_sample_and_bad_component_output() -> None:
    with pytest.raises(TraceError, match=r"row 2, field 'length': zero"):
        empirical([5, 0], 3, 0)
    with pytest.raises(TraceError, match="component 0 returned 1 lengths"):
        mixture([lambda n, seed: np.ones(1, dtype=np.int64)], [1], 5, 0)
    with pytest.raises(TraceError, match="mixture component 0: row 1, field 'length': zero"):
        mixture([partial(_const, 0)], [1], 5, 0)


def test_overflow_without_max_len_is_an_error() -> None:
    with pytest.raises(TraceError, match="int64 range"):
        lognormal(10, 60.0, 1.0, 0)
    assert lognormal(10, 60.0, 1.0, 0, max_len=1000).max() == 1000
