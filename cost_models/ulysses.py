"""The inner Ulysses degrees of a CP group: one module, read by the plan validator, the bound and the planners.

A group of c ranks runs Megatron-Core / TransformerEngine's hierarchical ``a2a+p2p`` context parallelism with an
inner all-to-all (Ulysses) degree u and a ring over c / u. Degree u is **valid** (a plan may use it; the
validator and the bound) when

* u divides c (``hierarchical_context_parallel_sizes`` multiply to the CP size; an engine's u · ring is its
  group's size);
* u divides the KV heads per TP rank, and so the heads per TP rank (a model's heads are a multiple of its KV
  heads and t divides the heads): TE's all-to-all scatters heads, and asserts that a rank's heads and KV heads
  divide by its degree (``AttnFuncWithCPAndQKVOA2A``: "The number of attention heads needs to be divisible by
  CP size").

The planners **offer** a valid degree only when its u ranks, u·t GPUs, also fit one NVLink domain
(``gpu.nvlink_domain`` GPUs: 8 on HGX nodes, 72 on GB200 NVL72): Megatron documents the all-to-all level of
a2a+p2p as the NVLink one and the ring as the network one, and the ``hybrid`` engine is "Ulysses inside an
NVLink domain, ring across". That is a choice, not a requirement: TE runs a wider all-to-all over the network,
the cost model prices it there (cost_models.topology: an inner group spanning domains is priced by the links
it crosses), and the validator accepts it, so the bound, which must hold for every plan the validator
accepts, considers it too. On every shipped model and GPU the domain never binds (at most 8 KV heads, domains
of at least 8 GPUs: u·t ≤ KV heads ≤ 8, or u = 1 when t exceeds the KV heads); a user's model with more KV
heads, or a GPU file with a smaller domain, meets it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dcpsim.cost_models.specs import JobSpec


def domain_ranks(job: JobSpec) -> int:
    """Ranks (of t GPUs each) in one NVLink domain."""
    return max(1, job.gpu.nvlink_domain // job.tp)


def ulysses_problem(u: int, kv_heads_per_rank: int | None = None, heads_per_rank: int | None = None) -> str | None:
    """Why degree ``u`` is not valid for a rank of ``kv_heads_per_rank`` KV heads and ``heads_per_rank`` heads
    (None: not checked), or None when it is (module docstring; u dividing the group's size is the caller's)."""
    for what, n in (("KV heads", kv_heads_per_rank), ("heads", heads_per_rank)):
        if n is not None and u > 1 and n % u:
            return f"Ulysses degree {u} does not divide the {what} per rank ({n})"
    return None


@lru_cache(maxsize=4096)
def ulysses_degrees_of(size: int, kv_heads_per_rank: int, domain: int | None = None) -> tuple[int, ...]:
    """The valid degrees u of a group of ``size`` ranks, ascending: u divides ``size`` and
    :func:`ulysses_problem` finds nothing; with ``domain``, only those whose u ranks fit a domain of ``domain``
    ranks (what the planners offer). Kept per argument triple: a planner asks for the same few sizes many
    times."""
    top = size if domain is None else min(size, domain)
    return tuple(u for u in range(1, top + 1) if size % u == 0 and ulysses_problem(u, kv_heads_per_rank) is None)


def ulysses_degrees(job: JobSpec, size: int | None = None, *, within_domain: bool = True) -> tuple[int, ...]:
    """The degrees of a group of ``size`` ranks of ``job`` that the planners offer (``within_domain``: fitting
    one NVLink domain) or that are valid (``within_domain=False``: what the validator accepts). ``size`` None:
    a group of some size (a multiple of u): every u valid for a group of ``kv_heads_per_rank`` ranks."""
    kv = job.kv_heads_per_rank
    return ulysses_degrees_of(kv if size is None else int(size), kv, domain_ranks(job) if within_domain else None)
