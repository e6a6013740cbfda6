"""Length distributions written as text, for ``--trace`` and the scenario field ``trace``.

Forms (lengths in tokens; a value may end in K = 1024 or M = 1024², e.g. ``max=128K``):

* ``lognormal:mean=1024,sigma=1.5,min=128,max=8192``: ln L ~ Normal(mu, sigma²) (:func:`traces.lognormal`).
  Give exactly one of ``mean`` (of the unclipped distribution: mu = ln(mean) − sigma²/2), ``median``
  (mu = ln(median)) or ``mu`` (|mu| ≤ ln 2^40, a mean or median of at most 2^40 tokens); ``sigma`` in
  [0, 8] is required; ``min`` (default 1) and ``max`` (default none)
  clip each draw, as the generators do.
* ``pareto:median=4096,sigma=1,tail_start=65536,alpha=1.5,tail_frac=0.05,max=1M``: the same lognormal body
  plus a Pareto tail (:func:`traces.lognormal_pareto`): a document is a tail one with probability
  ``tail_frac``, then P(L > x) = (tail_start / x)^alpha.
* ``mix:0.9*lognormal:median=2048,sigma=1+0.1*pareto:...``: a mixture (:func:`traces.mixture`); each
  component is ``WEIGHT*SPEC`` with a per-document weight and any form above, a preset name or a trace file
  (its lengths resampled with replacement); components are joined by ``+`` (a ``+`` followed by
  ``WEIGHT*`` starts the next one).

A spec becomes a :class:`TracePreset` whose ``context_len`` is its ``max`` (or, without one, a bound of
2^40 tokens no draw reaches in practice); batches cut documents longer than the scenario's context as for
any preset. Sampling is deterministic in the seed. Bad input is one :class:`TraceError` line naming the
distribution, the parameter, the value and what is valid.
"""

from __future__ import annotations

import math
import re
from functools import partial
from pathlib import Path

import numpy as np

from dcpsim.traces.errors import TraceError
from dcpsim.traces.generators import empirical, lognormal, lognormal_pareto, mixture
from dcpsim.traces.io import read_trace
from dcpsim.traces.presets import TracePreset, get_preset
from dcpsim.traces.trace import MAX_LENGTH

__all__ = ["DISTRIBUTIONS", "is_distribution_spec", "parse_distribution", "resolve_length_source"]

UNBOUNDED = MAX_LENGTH  # the context_len of a spec without max (2^40)
MAX_SIGMA = 8.0  # ln tokens: wider spreads draw mostly 1-token and 2^40-token documents
MAX_MU = math.log(MAX_LENGTH)  # ln tokens: a median of at most 2^40 tokens
_BODY = ("mean", "median", "mu", "sigma")
DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "lognormal": _BODY + ("min", "max"),
    "pareto": _BODY + ("tail_start", "alpha", "tail_frac", "min", "max"),
}
_REQUIRED = {"lognormal": ("sigma",), "pareto": ("sigma", "tail_start", "alpha", "tail_frac")}
_WHOLE = ("min", "max")  # whole tokens
_SUFFIX = {"k": 1024, "m": 1024**2}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NEXT_COMPONENT = re.compile(r"\+(?=\s*[0-9.]+(?:[eE][-+]?[0-9]+)?\s*\*)")


def is_distribution_spec(text: object) -> bool:
    """Whether ``text`` is written as ``NAME:...`` with NAME a word (a distribution, ``mix``, or an unknown
    name that :func:`parse_distribution` will name in its error) and is not an existing file."""
    if not isinstance(text, str) or ":" not in text or Path(text).exists():
        return False
    return _NAME.fullmatch(text.split(":", 1)[0].strip()) is not None


def resolve_length_source(text: str) -> TracePreset:
    """A distribution spec or a preset name as a :class:`TracePreset`."""
    return parse_distribution(text) if is_distribution_spec(text) else get_preset(text)


def _number(dist: str, key: str, raw: str) -> float:
    s = raw.strip()
    scale = 1
    if s[-1:].lower() in _SUFFIX:
        scale, s = _SUFFIX[s[-1:].lower()], s[:-1]
    try:
        v = float(s) * scale
    except ValueError:
        raise TraceError(
            f"distribution {dist!r}: parameter {key!r} = {raw!r} is not a number; expected e.g. "
            f"{key}=1024 (K and M suffixes allowed)",
            field=key,
            value=raw,
        ) from None
    if not math.isfinite(v):
        raise TraceError(
            f"distribution {dist!r}: parameter {key!r} = {raw!r} is invalid; expected a finite number",
            field=key,
            value=raw,
        )
    return v


def _params(dist: str, body: str) -> dict[str, float]:
    valid = DISTRIBUTIONS[dist]
    out: dict[str, float] = {}
    for item in (p for p in body.split(",") if p.strip()):
        if "=" not in item:
            raise TraceError(
                f"distribution {dist!r}: {item.strip()!r} is not key=value; valid keys: {', '.join(valid)}",
                value=item,
            )
        key, raw = (x.strip() for x in item.split("=", 1))
        if key not in valid:
            raise TraceError(
                f"distribution {dist!r}: unknown parameter {key!r}; valid: {', '.join(valid)}",
                field=key,
                value=raw,
            )
        if key in out:
            raise TraceError(f"distribution {dist!r}: parameter {key!r} is given twice", field=key, value=raw)
        out[key] = _number(dist, key, raw)
    for key in _REQUIRED[dist]:
        if key not in out:
            raise TraceError(
                f"distribution {dist!r}: parameter {key!r} is missing; required: "
                f"{', '.join(_REQUIRED[dist])} and one of mean, median, mu",
                field=key,
            )
    return out


def _bad(dist: str, key: str, value: float, valid: str) -> TraceError:
    return TraceError(
        f"distribution {dist!r}: parameter {key!r} = {value:g} is invalid; expected {valid}",
        field=key,
        value=value,
    )


def _mu(dist: str, p: dict[str, float]) -> float:
    given = [k for k in ("mean", "median", "mu") if k in p]
    if len(given) != 1:
        raise TraceError(
            f"distribution {dist!r}: give exactly one of mean, median, mu (got {', '.join(given) or 'none'})",
            field="mean",
        )
    sigma = p["sigma"]
    if not 0 <= sigma <= MAX_SIGMA:
        raise _bad(dist, "sigma", sigma, f"a number in [0, {MAX_SIGMA:g}] (ln tokens; real traces: 1 to 3)")
    k = given[0]
    if k == "mu":
        if not abs(p["mu"]) <= MAX_MU:
            raise _bad(dist, "mu", p["mu"], f"a number in [-{MAX_MU:.1f}, {MAX_MU:.1f}] (ln tokens: a median "
                       "of at most 2^40 tokens)")
        return p["mu"]
    if not 0 < p[k] <= MAX_LENGTH:
        raise _bad(dist, k, p[k], "a length > 0 and at most 2^40 tokens")
    return math.log(p[k]) - (sigma * sigma / 2 if k == "mean" else 0.0)


def _bounds(dist: str, p: dict[str, float]) -> tuple[int, int | None]:
    for k in _WHOLE:
        if k in p and (p[k] < 1 or p[k] > MAX_LENGTH or p[k] != int(p[k])):
            raise _bad(dist, k, p[k], "a whole number of tokens from 1 to 2^40")
    low = int(p.get("min", 1))
    high = int(p["max"]) if "max" in p else None
    if high is not None and low > high:
        raise TraceError(
            f"distribution {dist!r}: min = {low} is above max = {high}; expected min ≤ max",
            field="min",
            value=low,
        )
    return low, high


def _single(text: str) -> TracePreset:
    dist, body = (x.strip() for x in text.split(":", 1))
    if dist not in DISTRIBUTIONS:
        raise TraceError(
            f"unknown distribution {dist!r}; valid: {', '.join(DISTRIBUTIONS)}, mix (or a trace "
            "preset name or a trace file)",
            field="distribution",
            value=dist,
        )
    p = _params(dist, body)
    mu, sigma = _mu(dist, p), p["sigma"]
    low, high = _bounds(dist, p)
    cap = UNBOUNDED if high is None else high
    if dist == "lognormal":
        sampler = partial(_draw_lognormal, mu, sigma, low, cap)
    else:
        if not 0 < p["tail_start"] <= MAX_LENGTH:
            raise _bad(dist, "tail_start", p["tail_start"], "a length > 0 and at most 2^40 tokens")
        if p["alpha"] <= 0:
            raise _bad(dist, "alpha", p["alpha"], "a number > 0")
        if not 0 <= p["tail_frac"] <= 1:
            raise _bad(dist, "tail_frac", p["tail_frac"], "a fraction in [0, 1]")
        sampler = partial(_draw_pareto, mu, sigma, p["tail_start"], p["alpha"], p["tail_frac"], low, cap)
    return TracePreset(
        name=text,
        context_len=cap,
        description=f"{dist} distribution {body}",
        source="command-line distribution (traces.spec)",
        sampler=sampler,
    )


def _draw_lognormal(mu: float, sigma: float, low: int, cap: int, n: int, seed: int) -> np.ndarray:
    return lognormal(n, mu, sigma, seed, min_len=low, max_len=cap)


def _draw_pareto(mu, sigma, start, alpha, frac, low, cap, n: int, seed: int) -> np.ndarray:
    return lognormal_pareto(n, mu, sigma, start, alpha, frac, seed, min_len=low, max_len=cap)


def _component_sample(preset: TracePreset, n: int, seed: int) -> np.ndarray:
    return preset.sample(n, seed)


def mix_files(text: str) -> list[str]:
    """The trace files a ``mix:`` spec names among its components, in order (nothing is read; [] for any other
    text). Callers that cache results keyed by their inputs hash these files (experiments.sweep.keys)."""
    if not text.strip().startswith("mix:"):
        return []
    body = text.split(":", 1)[1].strip()
    out = []
    for part in (p.strip() for p in _NEXT_COMPONENT.split(body)):
        spec = part.split("*", 1)[1].strip() if "*" in part else ""
        if spec and _is_file_spec(spec):
            out.append(spec)
    return out


def _is_file_spec(spec: str) -> bool:
    """A mixture component that names a trace file (not a distribution, not a preset): it has a suffix."""
    return not is_distribution_spec(spec) and bool(Path(spec).suffix)


def _mix(text: str) -> TracePreset:
    body = text.split(":", 1)[1].strip()
    parts = [p.strip() for p in _NEXT_COMPONENT.split(body)]
    if not body or not all(parts):
        raise TraceError(
            f"distribution 'mix': {body!r} has no components; expected "
            "'mix:W*SPEC+W*SPEC', e.g. mix:0.9*lognormal:median=2048,sigma=1+0.1*32k",
            field="mix",
            value=body,
        )
    comps, weights = [], []
    for part in parts:
        if "*" not in part:
            raise TraceError(
                f"distribution 'mix': component {part!r} has no weight; expected WEIGHT*SPEC",
                field="mix",
                value=part,
            )
        w_raw, spec = (x.strip() for x in part.split("*", 1))
        w = _number("mix", "weight", w_raw)
        if w < 0:
            raise _bad("mix", "weight", w, "a weight ≥ 0")
        if spec.startswith("mix:"):
            raise TraceError(
                "distribution 'mix': a mixture cannot contain a mixture", field="mix", value=part
            )
        comps.append(_file_source(spec) if _is_file_spec(spec) else resolve_length_source(spec))
        weights.append(w)
    if not sum(weights) > 0:
        raise TraceError("distribution 'mix': the weights sum to 0; expected a positive sum", field="weight")
    cap = max(c.context_len for c in comps)
    sampler = partial(_draw_mix, tuple(comps), tuple(weights))
    return TracePreset(
        name=text,
        context_len=cap,
        description=f"mixture of {len(comps)} components",
        source="command-line distribution (traces.spec)",
        sampler=sampler,
    )


def _file_source(path: str) -> TracePreset:
    """A trace file as a mixture component: its lengths, resampled with replacement."""
    lengths = read_trace(path).lengths
    return TracePreset(
        name=path,
        context_len=int(lengths.max()),
        description=f"lengths of {path}, resampled",
        source=path,
        sampler=partial(_draw_empirical, lengths),
    )


def _draw_empirical(lengths: np.ndarray, n: int, seed: int) -> np.ndarray:
    return empirical(lengths, n, seed)


def _draw_mix(comps: tuple[TracePreset, ...], weights: tuple[float, ...], n: int, seed: int) -> np.ndarray:
    return mixture([partial(_component_sample, c) for c in comps], list(weights), n, seed)


def parse_distribution(text: str) -> TracePreset:
    """The :class:`TracePreset` a distribution spec describes (module docstring)."""
    text = str(text).strip()
    if text.split(":", 1)[0].strip() == "mix":
        return _mix(text)
    return _single(text)
