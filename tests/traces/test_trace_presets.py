"""Named presets: registry, determinism, ranges and the heavy tail of the 256k preset."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.traces import (
    TraceError,
    TracePreset,
    available_presets,
    get_preset,
    load_sample,
    presets,
    register_preset,
)
from dcpsim.traces.presets import LONG_TOKEN_SHARE, long_doc_weight

REQUIRED = ["256k", "32k", "prolong", "wlbllm"]


def _shares(x: np.ndarray, threshold: int) -> tuple[float, float, float]:
    """Share of documents, tokens and Σ L² above ``threshold`` tokens."""
    lengths = x.astype(np.float64)
    above = lengths > threshold
    return (
        above.mean(),
        lengths[above].sum() / lengths.sum(),
        (lengths[above] ** 2).sum() / (lengths**2).sum(),
    )


def test_registry_lists_required_presets() -> None:
    assert set(REQUIRED) <= set(available_presets())
    assert available_presets() == sorted(available_presets())
    with pytest.raises(
        TraceError, match="unknown trace preset '1m'; expected one of 256k, 32k, prolong, wlbllm"
    ):
        get_preset("1m")


@pytest.mark.parametrize("name", REQUIRED)
def test_deterministic_by_seed_and_within_context(name: str) -> None:
    preset = get_preset(name)
    a = preset.sample(20_000, seed=11)
    assert a.dtype == np.int64 and a.shape == (20_000,)
    assert a.min() >= 1 and a.max() <= preset.context_len
    np.testing.assert_array_equal(a, get_preset(name).sample(20_000, seed=11))
    assert not np.array_equal(a, preset.sample(20_000, seed=12))
    assert preset.sample(0, seed=1).shape == (0,)
    assert preset.description and preset.source


@pytest.mark.parametrize("name", ["wlbllm", "prolong"])
def test_raw_presets_context_is_max_rounded_to_power_of_two(name: str) -> None:
    longest = int(load_sample(name).max())
    context = get_preset(name).context_len
    assert context & (context - 1) == 0 and context // 2 < longest <= context
    assert set(np.unique(get_preset(name).sample(5000, seed=0))) <= set(load_sample(name).tolist())


def test_32k_cuts_long_documents_into_32k_pieces() -> None:
    x = get_preset("32k").sample(200_000, seed=0)
    assert x.max() == 32768
    assert np.mean(x == 32768) > 0.005  # the ~0.9% of WLB-LLM documents above 32K leave full pieces
    # cutting conserves tokens: pieces average a bit less than documents, never more
    assert 0.9 * load_sample("wlbllm").mean() < x.mean() < load_sample("wlbllm").mean()


def test_256k_heavy_tail() -> None:
    x = get_preset("256k").sample(400_000, seed=0)
    assert get_preset("256k").context_len == 262144 and x.max() == 262144
    docs32, tokens32, squares32 = _shares(x, 32768)
    docs128, tokens128, squares128 = _shares(x, 131072)
    # A few documents carry most of the attention work.
    assert docs32 < 0.08 and squares32 > 0.9
    assert docs128 < 0.03 and squares128 > 0.6
    # Token split close to the ProLong long/short mix (63% long).
    assert 0.55 < tokens32 < 0.7 and 0.25 < tokens128 < 0.45
    # And much heavier than either raw sample.
    assert squares32 > _shares(load_sample("prolong"), 32768)[2] + 0.3


def test_256k_long_weight_follows_token_share() -> None:
    p = long_doc_weight()
    assert 0.02 < p < 0.1
    assert long_doc_weight(0.75) > p > long_doc_weight(0.5)
    assert LONG_TOKEN_SHARE == 0.63


def test_register_and_sampler_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(presets, "_PRESETS", dict(presets._PRESETS))  # keep the real table untouched
    bad = TracePreset("tmp-bad", 100, "returns too long", "test", lambda n, seed: np.full(n, 101))
    register_preset(bad, replace=True)
    with pytest.raises(TraceError, match="outside 1..100"):
        get_preset("tmp-bad").sample(3, seed=0)
    with pytest.raises(TraceError, match="already registered"):
        register_preset(bad)
    assert "tmp-bad" in available_presets()
    with pytest.raises(TraceError, match="parameter 'n'"):
        get_preset("32k").sample(-1)
    with pytest.raises(TraceError, match="parameter 'seed'"):
        get_preset("32k").sample(5, seed=-1)
