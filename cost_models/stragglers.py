"""Stragglers: per-rank compute slow-down factors of a job (what-if: slow GPUs, thermal throttling, noisy peers).

A *slot* is one simulator rank: pool rank w of pipeline stage s (one TP group of t GPUs; Megatron's rank order puts
it on global GPUs (s·W + w)·t … (s·W + w)·t + t − 1). Each slot has a slow-down factor f ≥ 1 that multiplies its
compute time (1 = full speed, 1.5 = its kernels take 50 % longer). A CP group runs at the pace of its slowest
member (sim.engine). Only compute is scaled: communication (CP, TP, PP, gradient sync) runs on links, which a
slow GPU does not slow in this model; the optimizer step is not scaled either.

Two sources, combined (a slot named by both keeps the larger factor):

* **explicit** (``--slow-ranks`` / scenario ``slow_ranks``): comma-separated items
  ``W=F`` pool rank W at *every* stage (the DP×CP index: what a policy's plan sees), ``sSrW=F`` pool rank W of
  stage S only, ``gpuN=F`` the slot holding global GPU N (Megatron's order: TP fastest, then the pool, then PP);
* **random** (``--stragglers`` / scenario ``stragglers``): ``fraction=X,slowdown=DIST,seed=N``: round(X·p·W)
  distinct slots drawn uniformly (numpy's default_rng(seed)), each with a factor from DIST:
  ``fixed:F`` (every one F), ``uniform:A:B`` (F ~ U[A, B], 1 ≤ A ≤ B), ``lognormal:M:S`` (F = 1 + (M − 1)·e^(S·Z),
  Z ~ N(0, 1): median M > 1, always > 1, a heavy right tail for S > 0).

Deterministic: the factors are a pure function of the spec, p, W and t.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from dcpsim.cost_models.errors import SpecError

_ITEM = re.compile(r"^(?:(?P<rank>\d+)|s(?P<stage>\d+)r(?P<srank>\d+)|gpu(?P<gpu>\d+))$")
DISTRIBUTIONS = ("fixed:F", "uniform:A:B", "lognormal:M:S")
RANDOM_KEYS = ("fraction", "slowdown", "seed")


def _factor(text: str, what: str, item: str) -> float:
    try:
        f = float(text)
    except ValueError:
        f = math.nan
    if not (math.isfinite(f) and f >= 1.0):
        raise SpecError(f"{what}: {item!r}: factor {text!r} is invalid: a slow-down factor ≥ 1 (1 = full speed, "
                        "1.5 = compute takes 50 % longer)")
    return f


@dataclass(frozen=True)
class Stragglers:
    """The stragglers of a job: explicit slots and a random model. Empty (the default) = every slot at speed 1.

    ``explicit``: (kind, index, stage, factor) with kind 'rank' (pool rank at every stage), 'slot' (stage,
    pool rank) or 'gpu' (a global GPU index); ``fraction`` of slots drawn at random with ``slowdown`` (a DIST
    string, see the module docstring) from ``seed``.
    """

    explicit: tuple[tuple[str, int, int, float], ...] = ()
    fraction: float = 0.0
    slowdown: str = "fixed:1.5"
    seed: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.fraction) and 0.0 <= self.fraction <= 1.0):
            raise SpecError(f"stragglers: fraction = {self.fraction!r} is invalid: a fraction of the ranks in [0, 1]")
        _distribution(self.slowdown, "stragglers")  # checks it
        if not (isinstance(self.seed, int) and self.seed >= 0):
            raise SpecError(f"stragglers: seed = {self.seed!r} is invalid: an integer ≥ 0")

    def __bool__(self) -> bool:
        return bool(self.explicit) or self.fraction > 0.0

    @staticmethod
    def parse(slow_ranks: str = "", stragglers: str = "", *, slow_what: str = "--slow-ranks",
              random_what: str = "--stragglers") -> Stragglers:
        """From the two option strings ('' = none); a bad item is one SpecError naming it and what is valid."""
        explicit = []
        for item in (x.strip() for x in slow_ranks.split(",")):
            if not item:
                continue
            key, eq, val = item.partition("=")
            m = _ITEM.match(key.strip())
            if not eq or m is None:
                raise SpecError(f"{slow_what}: {item!r} is invalid: items are W=F (pool rank W at every stage), "
                                "sSrW=F (stage S, pool rank W) or gpuN=F (global GPU N), F ≥ 1")
            f = _factor(val.strip(), slow_what, item)
            if m["rank"] is not None:
                explicit.append(("rank", int(m["rank"]), -1, f))
            elif m["gpu"] is not None:
                explicit.append(("gpu", int(m["gpu"]), -1, f))
            else:
                explicit.append(("slot", int(m["srank"]), int(m["stage"]), f))
        kw: dict[str, object] = {}
        for item in (x.strip() for x in stragglers.split(",")):
            if not item:
                continue
            key, eq, val = (s.strip() for s in item.partition("="))
            if not eq or key not in RANDOM_KEYS:
                raise SpecError(f"{random_what}: {item!r} is invalid: keys are {', '.join(RANDOM_KEYS)} "
                                "(e.g. fraction=0.05,slowdown=lognormal:1.3:0.5,seed=1)")
            if key in kw:
                raise SpecError(f"{random_what}: {key!r} given twice")
            if key == "fraction":
                try:
                    kw[key] = float(val)
                except ValueError:
                    raise SpecError(f"{random_what}: fraction = {val!r} is invalid: a fraction of the ranks "
                                    "in [0, 1]") from None
            elif key == "seed":
                if not val.isdigit():
                    raise SpecError(f"{random_what}: seed = {val!r} is invalid: an integer ≥ 0")
                kw[key] = int(val)
            else:
                _distribution(val, random_what)
                kw[key] = val
        if kw and "fraction" not in kw:
            raise SpecError(f"{random_what}: {stragglers!r} has no fraction: say which fraction of the ranks "
                            "straggles, e.g. fraction=0.05")
        return Stragglers(tuple(explicit), **kw)  # type: ignore[arg-type]

    def check(self, pp: int, pool: int, tp: int, what: str = "job.stragglers") -> None:
        """Every explicit slot exists in a job of ``pp`` stages × ``pool`` ranks × ``tp`` GPUs per rank."""
        for kind, idx, stage, _f in self.explicit:
            if kind == "gpu" and idx >= pp * pool * tp:
                raise SpecError(f"{what}: gpu{idx} is out of range: the job has {pp * pool * tp} GPUs "
                                f"(gpu0 .. gpu{pp * pool * tp - 1})")
            if kind in ("rank", "slot") and idx >= pool:
                raise SpecError(f"{what}: pool rank {idx} is out of range: the pool has W = {pool} ranks "
                                f"(0 .. {pool - 1})")
            if kind == "slot" and stage >= pp:
                raise SpecError(f"{what}: stage {stage} is out of range: the job has {pp} pipeline stages "
                                f"(0 .. {pp - 1})")

    def factors(self, pp: int, pool: int, tp: int = 1) -> np.ndarray:
        """[pp, pool] the slow-down factor of every slot (all ones without stragglers)."""
        self.check(pp, pool, tp)
        out = np.ones((pp, pool))
        if self.fraction > 0.0:
            rng = np.random.default_rng(self.seed)
            k = int(round(self.fraction * pp * pool))
            slots = rng.choice(pp * pool, size=k, replace=False)
            out.reshape(-1)[slots] = _distribution(self.slowdown, "stragglers").draw(rng, k)
        for kind, idx, stage, f in self.explicit:
            if kind == "rank":
                out[:, idx] = np.maximum(out[:, idx], f)
            elif kind == "slot":
                out[stage, idx] = max(out[stage, idx], f)
            else:
                s, w = divmod(idx // tp, pool)
                out[s, w] = max(out[s, w], f)
        return out

    def describe(self) -> str:
        parts = []
        for kind, idx, stage, f in self.explicit:
            name = {"rank": f"{idx}", "slot": f"s{stage}r{idx}", "gpu": f"gpu{idx}"}[kind]
            parts.append(f"{name}={f:g}")
        if self.fraction > 0.0:
            parts.append(f"fraction={self.fraction:g},slowdown={self.slowdown},seed={self.seed}")
        return ",".join(parts) or "none"


@dataclass(frozen=True)
class _Dist:
    kind: str
    a: float
    b: float = 0.0

    def draw(self, rng: np.random.Generator, k: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(k, self.a)
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b, size=k)
        return 1.0 + (self.a - 1.0) * np.exp(self.b * rng.standard_normal(k))


def _distribution(text: str, what: str) -> _Dist:
    """Parse a slow-down distribution; one SpecError naming it and the valid forms."""
    kind, _, rest = text.partition(":")
    args = rest.split(":") if rest else []
    valid = f"one of {', '.join(DISTRIBUTIONS)} (factors ≥ 1)"
    try:
        vals = [float(x) for x in args]
    except ValueError:
        vals = []
    ok = all(math.isfinite(v) for v in vals)
    if kind == "fixed" and ok and len(vals) == 1 and vals[0] >= 1.0:
        return _Dist("fixed", vals[0])
    if kind == "uniform" and ok and len(vals) == 2 and 1.0 <= vals[0] <= vals[1]:
        return _Dist("uniform", vals[0], vals[1])
    if kind == "lognormal" and ok and len(vals) == 2 and vals[0] > 1.0 and vals[1] >= 0.0:
        return _Dist("lognormal", vals[0], vals[1])
    raise SpecError(f"{what}: slowdown = {text!r} is invalid: {valid}; lognormal:M:S needs a median M > 1 "
                    "and S ≥ 0")


NO_STRAGGLERS = Stragglers()
