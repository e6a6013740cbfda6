"""HyDra's degrees and engines to choose from: the CP degrees a plan may use (:func:`allowed_degrees`) and the inner
Ulysses degrees each engine choice allows a group (:func:`engine_options`), kept per (size, engine, KV heads per
rank, ranks per NVLink domain): a planner asks for the same few sizes many times per plan."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from dcpsim.cost_models.specs import JobSpec
from dcpsim.policies.engines import ulysses_degrees_of
from dcpsim.policies.errors import PolicyError

__all__ = ["allowed_degrees", "engine_option_tuple", "engine_options", "engine_options_of"]


def engine_options(size: int, cp_engine: str, job: JobSpec) -> list[int]:
    """Inner Ulysses degrees u that ``cp_engine`` allows for a group of ``size`` ranks (empty: none).

    ring → [1]; ulysses → [size] when Ulysses can span the group; hybrid → the largest valid u (Ulysses inside
    the node, ring across); auto → every valid u, to be priced.
    """
    return list(engine_option_tuple(size, cp_engine, job))


def engine_option_tuple(size: int, cp_engine: str, job: JobSpec) -> tuple[int, ...]:
    """:func:`engine_options` as a tuple (kept per size, engine and the job's KV heads and NVLink domain)."""
    return engine_options_of(int(size), cp_engine, job.kv_heads_per_rank, max(1, job.gpu.nvlink_domain // job.tp))


@lru_cache(maxsize=4096)
def engine_options_of(size: int, cp_engine: str, kv_heads_per_rank: int, domain_ranks: int) -> tuple[int, ...]:
    if size == 1 or cp_engine == "ring":
        return (1,)
    us = ulysses_degrees_of(size, kv_heads_per_rank, domain_ranks)
    if cp_engine == "ulysses":
        return (size,) if size in us else ()
    if cp_engine == "hybrid":
        return (max(us),)
    return us


def allowed_degrees(pool: int, mode: str, min_cp_size: int, cp_engine: str, job: JobSpec) -> np.ndarray:
    """CP degrees HyDra may use, ascending.

    ``pow2``: powers of two ≤ W, plus W itself when W is not a power of two (so that anything that fits the
    pool can be placed); ``any``: every integer 1..W. Both keep only degrees ≥ ``min_cp_size`` that the CP
    engine can run.
    """
    if mode == "pow2":
        cand = [1 << i for i in range(pool.bit_length()) if (1 << i) <= pool]
        if cand[-1] != pool:
            cand.append(pool)
    elif mode == "any":
        cand = list(range(1, pool + 1))
    else:
        raise PolicyError(f"degrees = {mode!r} is unknown; valid: pow2, any")
    if min_cp_size < 1 or min_cp_size > pool:
        raise PolicyError(f"min_cp_size = {min_cp_size} must be between 1 and the pool size {pool}")
    out = [c for c in cand if c >= min_cp_size and engine_options(c, cp_engine, job)]
    if not out:
        raise PolicyError(f"no CP degree ≥ min_cp_size = {min_cp_size} on a pool of {pool} ranks can run "
                          f"cp_engine = {cp_engine!r} (KV heads per rank {job.kv_heads_per_rank}); "
                          "use cp_engine hybrid or auto")
    return np.asarray(out, dtype=np.int64)
