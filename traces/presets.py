"""Named length-distribution presets: ``get_preset(name).sample(n, seed)`` gives ``n`` document lengths.

Every preset returns ``int64`` lengths in tokens, each in ``1..context_len``, and is deterministic: the same
``(name, n, seed)`` gives the same array. (Arrays for different ``n`` are not prefixes of one another.)

Documents longer than a preset's context are **cut into context-sized pieces** (:func:`traces.split_long`,
remainder last) rather than truncated: no tokens are lost and Σ L² reflects what the model trains on with
document masks. ``sample(n, ...)`` draws ``n`` documents, splits them, and returns the first ``n`` pieces.

Presets (statistics over pieces, from 400,000 draws; "Σ L²" is the share of causal-attention work):

- ``32k`` (context 32,768): resampled from the WLB-LLM sample (``wlbllm`` below); its documents above 32K
  (0.9% of documents, 17% of tokens) become 32K pieces plus a remainder.
- ``256k`` (context 262,144): a token-weighted mixture shaped after published long-context mixes. ProLong
  (Gao et al. 2024, "How to Train Long-Context Language Models (Effectively)") trains at 64K then 512K on 30%
  code repositories, 30% books, 3% textbooks and 37% short data, packed with document masks; Qwen2.5-1M
  (Yang et al. 2025) stages 64K/128K/256K with about 75% long and 25% short data. Here:

  * short documents (37% of tokens): resampled from the ProLong sample (``prolong`` below);
  * long documents, books and code repositories (63% of tokens, ProLong's 30 + 30 + 3): lognormal body with
    median 65,536 tokens (mu = ln 65536), sigma = 0.7, plus a Pareto tail from 131,072 tokens with alpha = 1.5
    for 10% of long documents, truncated at 1,048,576 tokens (2^20) and then cut into 256K pieces.
    The per-document weight of the long component follows from the closed-form means
    (:func:`traces.generators.lognormal_mean`, :func:`traces.generators.pareto_mean`): about 4.7% of
    documents.

  Resulting shape: mean 7.8K tokens; above 32K: 4.5% of documents, 62% of tokens, 97% of Σ L²; above 128K:
  1.3% of documents, 34% of tokens, 75% of Σ L²; 0.4% of pieces fill the whole 256K window.
- ``wlbllm`` (context 131,072): the raw WLB-LLM sample, resampled (max 124,913 tokens).
- ``prolong`` (context 524,288): the raw ProLong sample, resampled (max 340,149 tokens).

Sources of the samples: hao-ai-lab/DistCA @2afd219 (Apache-2.0), see ``traces/data/SOURCES.md``.

:func:`register_preset` adds a preset to the table (the one piece of module state).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from dcpsim.traces._params import require_int
from dcpsim.traces.data import load_sample
from dcpsim.traces.errors import TraceError
from dcpsim.traces.generators import empirical, lognormal_mean, lognormal_pareto, mixture, pareto_mean
from dcpsim.traces.splitting import MAX_PIECES, split_long

__all__ = ["TracePreset", "available_presets", "get_preset", "register_preset"]

_DISTCA = "hao-ai-lab/DistCA @2afd219 (Apache-2.0)"


@dataclass(frozen=True)
class TracePreset:
    """A named distribution of document lengths for a context length.

    Attributes:
        name: registry key.
        context_len: the context window in tokens; every sampled length is in 1..context_len.
        description: one line on what the preset models.
        source: where its data and parameters come from.
        sampler: ``(n, seed) -> lengths``; called by :meth:`sample`, which checks its output.
    """

    name: str
    context_len: int
    description: str
    source: str
    sampler: Callable[[int, int], np.ndarray] = field(repr=False, compare=False)

    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        """``n`` document lengths (tokens, ``int64``, each in 1..context_len), deterministic in (n, seed)."""
        ctx = f"preset {self.name!r}"
        n = require_int(n, "n", 0, ctx)
        if n > MAX_PIECES:
            raise TraceError.bad_param("n", n, f"at most {MAX_PIECES:,} documents (2^24) per draw", ctx)
        seed = require_int(seed, "seed", 0, ctx)
        out = np.asarray(self.sampler(n, seed), dtype=np.int64)
        if out.shape != (n,) or (n and (out.min() < 1 or out.max() > self.context_len)):
            raise TraceError(
                f"{ctx}: its sampler returned shape {out.shape} with values outside 1..{self.context_len}; "
                f"expected {n} lengths in 1..{self.context_len}"
            )
        return out


_PRESETS: dict[str, TracePreset] = {}


def register_preset(preset: TracePreset, *, replace: bool = False) -> TracePreset:
    """Add ``preset`` to the table under ``preset.name`` (an existing name needs ``replace=True``)."""
    if preset.name in _PRESETS and not replace:
        raise TraceError(f"trace preset {preset.name!r} is already registered; pass replace=True to override")
    _PRESETS[preset.name] = preset
    return preset


def available_presets() -> list[str]:
    """Names of the registered presets, sorted."""
    return sorted(_PRESETS)


def get_preset(name: str) -> TracePreset:
    """The preset called ``name``; TraceError listing the valid names if there is none."""
    try:
        return _PRESETS[name]
    except (KeyError, TypeError):
        raise TraceError(
            f"unknown trace preset {name!r}; expected one of {', '.join(available_presets())}",
            field="preset",
            value=name,
        ) from None


# --- samplers (module-level functions bound with functools.partial, so presets stay plain values) ---------


def _resample(sample_name: str, n: int, seed: int) -> np.ndarray:
    """``n`` lengths resampled from a shipped sample."""
    return empirical(load_sample(sample_name), n, seed)


def _split_first(draw: Callable[[int, int], np.ndarray], context_len: int, n: int, seed: int) -> np.ndarray:
    """Draw ``n`` documents, cut them at ``context_len`` and keep the first ``n`` pieces."""
    return split_long(draw(n, seed), context_len)[:n]


# 256k mixture parameters (see the module docstring).
LONG_TOKEN_SHARE = 0.63
LONG_BODY_MU = math.log(65536)
LONG_BODY_SIGMA = 0.7
LONG_TAIL_START = 131072
LONG_TAIL_ALPHA = 1.5
LONG_TAIL_FRAC = 0.1
LONG_MAX_LEN = 2**20


def _long_docs(n: int, seed: int) -> np.ndarray:
    """Books and code repositories for the 256k preset (tokens, before cutting at the context)."""
    return lognormal_pareto(
        n,
        LONG_BODY_MU,
        LONG_BODY_SIGMA,
        LONG_TAIL_START,
        LONG_TAIL_ALPHA,
        LONG_TAIL_FRAC,
        seed,
        max_len=LONG_MAX_LEN,
    )


def long_doc_weight(long_token_share: float = LONG_TOKEN_SHARE) -> float:
    """Per-document probability of a long document that gives ``long_token_share`` of the 256k tokens."""
    cap = float(LONG_MAX_LEN)
    mean_long = (1 - LONG_TAIL_FRAC) * lognormal_mean(LONG_BODY_MU, LONG_BODY_SIGMA, cap) + (
        LONG_TAIL_FRAC * pareto_mean(LONG_TAIL_START, LONG_TAIL_ALPHA, cap)
    )
    mean_short = float(load_sample("prolong").mean())
    odds = long_token_share / (1 - long_token_share) * mean_short / mean_long
    return odds / (1 + odds)


def _mix_256k(n: int, seed: int) -> np.ndarray:
    p = long_doc_weight()
    return mixture([partial(_resample, "prolong"), _long_docs], [1 - p, p], n, seed)


def _register_defaults() -> None:
    register_preset(
        TracePreset(
            name="32k",
            context_len=32768,
            description="32K-context training: WLB-LLM lengths, documents above 32K cut into 32K pieces",
            source=f"WLB-LLM length sample (synthetic reconstruction), {_DISTCA}",
            sampler=partial(_split_first, partial(_resample, "wlbllm"), 32768),
        )
    )
    register_preset(
        TracePreset(
            name="256k",
            context_len=262144,
            description="256K-context training: 37% of tokens short (ProLong sample), "
            "63% long books/code repos "
            "(lognormal median 64K + Pareto tail from 128K, alpha 1.5), cut into 256K pieces",
            source="ProLong (Gao et al. 2024) and Qwen2.5-1M (Yang et al. 2025) mixes; "
            f"ProLong sample, {_DISTCA}",
            sampler=partial(_split_first, _mix_256k, 262144),
        )
    )
    # context = the sample's longest document rounded up to a power of two (checked by the tests).
    for name, context, label in (
        ("wlbllm", 131072, "WLB-LLM length sample (synthetic reconstruction)"),
        ("prolong", 524288, "ProLong data-mix length sample"),
    ):
        register_preset(
            TracePreset(
                name=name,
                context_len=context,
                description=f"the raw {label}, resampled",
                source=f"{label}, {_DISTCA}",
                sampler=partial(_resample, name),
            )
        )


_register_defaults()
