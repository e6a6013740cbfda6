"""The valid inner Ulysses degrees of a CP group: one rule, read by the plan validator, the bound and the planners.

A group of c ranks runs Megatron-Core / TransformerEngine's hierarchical ``a2a+p2p`` context parallelism with an
inner all-to-all (Ulysses) degree u and a ring over c / u. Degree u is valid when

* u divides c (``hierarchical_context_parallel_sizes`` multiply to the CP size);
* u divides the KV heads per TP rank, and so the heads per TP rank (a model's heads are a multiple of its KV
  heads and t divides the heads): TE's all-to-all scatters heads, and asserts that the heads and the KV heads
  of a rank divide by its degree (``AttnFuncWithCPAndQKVOA2A``: "The number of attention heads needs to be
  divisible by CP size");
* u ranks, u·t GPUs, fit one NVLink domain (``gpu.nvlink_domain`` GPUs: 8 on HGX nodes, 72 on GB200 NVL72):
  Megatron places the all-to-all level of a2a+p2p on NVLink and the ring on the network (its documentation of
  ``--cp-comm-type a2a+p2p``), and the simulator's ``hybrid`` engine is "Ulysses inside an NVLink domain, ring
  across". TE itself would run a wider all-to-all over the network; no planner chooses one, and the validator
  refuses it when told the domain, so the bound need not consider it.

On every shipped model and GPU the third condition never binds (at most 8 KV heads, domains of at least 8
GPUs: u·t ≤ KV heads ≤ 8, or u = 1 when t exceeds the KV heads); a user's model with more KV heads meets it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dcpsim.cost_models.specs import JobSpec


def domain_ranks(job: JobSpec) -> int:
    """Ranks (of t GPUs each) in one NVLink domain."""
    return max(1, job.gpu.nvlink_domain // job.tp)


def ulysses_problem(u: int, kv_heads_per_rank: int | None = None, heads_per_rank: int | None = None,
                    domain: int | None = None) -> str | None:
    """Why degree ``u`` is invalid for a rank of ``kv_heads_per_rank`` KV heads and ``heads_per_rank`` heads
    in NVLink domains of ``domain`` ranks (None: not checked), or None when it is valid (module docstring; u
    dividing the group's size is the caller's: an engine's u · ring is its size)."""
    if u <= 1:
        return None
    for what, n in (("KV heads", kv_heads_per_rank), ("heads", heads_per_rank)):
        if n is not None and n % u:
            return f"Ulysses degree {u} does not divide the {what} per rank ({n})"
    if domain is not None and u > domain:
        return (f"Ulysses degree {u} does not fit in an NVLink domain ({domain} ranks): its all-to-all would "
                "leave NVLink")
    return None


@lru_cache(maxsize=4096)
def ulysses_degrees_of(size: int, kv_heads_per_rank: int, domain: int) -> tuple[int, ...]:
    """The valid degrees u of a group of ``size`` ranks (u divides it, :func:`ulysses_problem` finds nothing),
    ascending (kept per argument triple: a planner asks for the same few sizes many times)."""
    return tuple(u for u in range(1, min(size, domain) + 1)
                 if size % u == 0 and ulysses_problem(u, kv_heads_per_rank, None, domain) is None)


def ulysses_degrees(job: JobSpec, size: int | None = None) -> tuple[int, ...]:
    """The valid degrees of a group of ``size`` ranks of ``job`` (None: of a group of some size, a multiple of
    u: every u valid for a group of ``kv_heads_per_rank`` ranks)."""
    kv = job.kv_heads_per_rank
    return ulysses_degrees_of(kv if size is None else int(size), kv, domain_ranks(job))
