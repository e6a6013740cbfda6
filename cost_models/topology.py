"""Where ranks live, and which links a transfer between them uses.

Rank order (Megatron-LM's, TP fastest, then the DP×CP pool, then PP): pool rank ``w`` of stage ``s`` occupies
GPUs (s·W + w)·t .. (s·W + w + 1)·t − 1. Link classes follow the *NVLink domain* of D = ``gpu.nvlink_domain``
GPUs (one 8-GPU HGX node; a whole GB200 NVL72 rack of 72): that rank sits in domain ⌊(s·W + w)·t / D⌋, two
ranks of one domain talk over NVLink (or Infinity Fabric), ranks of different domains over the scale-out
NICs. A TP group never straddles a domain (JobSpec: t divides D). With t = 8 on HGX nodes every CP group
crosses domains; with t = 1 an aligned group of ≤ 8 ranks stays inside one. On NVL72 (D = 72, not a power of
two) an aligned group crosses only where a multiple of 72 GPUs falls inside it (GPUs 64..79 do, 0..63 do not).

Which ranks a CP group connects (for groups listing their members; contiguous ones from ``first_rank``):
a ring (r = c/u outer steps) sends from each member to the member u positions on, cyclically, so it crosses
domains when any such pair does; the inner Ulysses all-to-all of u consecutive members crosses when any
inner group spans two domains (real_runtime.group_pool's layout).

NICs (rail-optimised clusters: every GPU has its own NIC, as in NVIDIA's DGX/HGX reference architectures,
unless ``gpu.nics_per_node`` says otherwise):

* A ring collective (NCCL all-gather, reduce-scatter, all-reduce) whose group has k ranks in each domain it
  spans runs k·t rings' worth of channels for its t TP shards, each crossing the domain boundary on its own
  NIC, so one shard's collective gets ``min(k·t, NICs per domain) / t`` NICs of bus bandwidth (k: the
  fewest members any spanned domain holds), never more than the NVLink rate its intra-domain hops run at.
* A point-to-point send (a CP ring step, a PP transfer) goes from one GPU over one NIC, whatever the group's
  size: every GPU of the group sends its own chunk at the same time on its own rail, so the per-GPU rate is
  one NIC's, shared when a node has fewer NICs than GPUs (``min(1, NICs per node / GPUs per node)``).

Not modelled: contention between CP, PP and DP traffic on one NIC, between the t TP shards beyond the NIC
count, and NCCL's per-size algorithm choice (tree, NVLS, CollNet/SHARP).
"""

from __future__ import annotations

import numpy as np

from dcpsim.cost_models.specs import JobSpec


def domain_of(job: JobSpec, stage: int, rank: np.ndarray | int) -> np.ndarray:
    """NVLink domain index of pool rank(s) ``rank`` at ``stage``."""
    return (stage * job.pool + np.asarray(rank, dtype=np.int64)) * job.tp // job.gpu.nvlink_domain


def spans_domains(job: JobSpec, stage: int, first: np.ndarray | int, size: np.ndarray | int) -> np.ndarray:
    """Whether the contiguous ranks first .. first+size−1 occupy more than one NVLink domain."""
    first = np.asarray(first, dtype=np.int64)
    last = first + np.asarray(size, dtype=np.int64) - 1
    return domain_of(job, stage, first) != domain_of(job, stage, last)


# The names of the first version ("node" meant the 8-GPU NVLink domain of an HGX node).
node_of = domain_of
spans_nodes = spans_domains


def link_name(crosses: np.ndarray | bool) -> np.ndarray:
    """'network' where a transfer crosses domains, else 'nvlink'."""
    return np.where(np.asarray(crosses), "network", "nvlink")


def group_crossings(job: JobSpec, stage: int, size: np.ndarray, ulysses: np.ndarray, first_rank: np.ndarray,
                    member_rank: np.ndarray | None = None,
                    member_group: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per group: (its ring crosses domains, one of its inner Ulysses groups crosses domains).

    ``member_rank`` lists every group's members in group order, all members of a group consecutive and the
    groups in order (``member_group`` names the group of each; GroupBatch's layout); without it the groups
    are the contiguous ranks from ``first_rank``, priced in closed form.
    """
    size = np.asarray(size, dtype=np.int64)
    u = np.asarray(ulysses, dtype=np.int64)
    if member_rank is None:
        return _contiguous_crossings(job, stage, size, u, np.asarray(first_rank, dtype=np.int64))
    return _listed_crossings(job, stage, size, u, np.asarray(member_rank, dtype=np.int64))


def _listed_crossings(job: JobSpec, stage: int, size: np.ndarray, u: np.ndarray,
                      ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    G = int(size.shape[0])
    if G == 0:
        return np.zeros(0, dtype=bool), np.zeros(0, dtype=bool)
    start = np.cumsum(size) - size
    start_m, size_m, u_m = np.repeat(start, size), np.repeat(size, size), np.repeat(u, size)
    pos = np.arange(len(ranks)) - start_m
    dom = domain_of(job, stage, ranks)
    # Ring: member p sends to member (p + u) mod c.
    ring = np.add.reduceat((dom != dom[start_m + (pos + u_m) % size_m]).astype(np.int64), start) > 0
    # Inner groups: u consecutive members; one spans when its lowest and highest domain differ.
    istart = np.flatnonzero(pos % u_m == 0)
    spans = np.minimum.reduceat(dom, istart) != np.maximum.reduceat(dom, istart)
    owner = np.repeat(np.arange(G), size)[istart]
    inner = np.bincount(owner, weights=spans, minlength=G) > 0
    return ring, inner


def _contiguous_crossings(job: JobSpec, stage: int, size: np.ndarray, u: np.ndarray,
                          first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Closed form for groups of contiguous ranks: with R = D/t ranks per domain and o the group's first
    rank counted from the stage's GPU 0, a domain boundary (a multiple of R) lies inside the group iff its
    first and last rank differ in domain; the ring (r ≥ 2) then crosses it. An inner group of u > R ranks
    always spans one; for u dividing R the boundaries fall between inner groups iff o is a multiple of u.
    Other groups (u ≤ R not dividing R) go through the general rule."""
    R = job.gpu.nvlink_domain // job.tp
    o = stage * job.pool + first
    if R & (R - 1) == 0:  # ⌊x / R⌋ by a shift (int64 shifts floor as // does)
        sh = R.bit_length() - 1
        spans = (o >> sh) != ((o + size - 1) >> sh)
    else:
        spans = o // R != (o + size - 1) // R
    ring = spans & (size > u)
    cand = spans & (u > 1)
    if not np.count_nonzero(cand):  # no inner group can span a boundary
        return ring, cand
    mask = u - 1
    if not np.count_nonzero(u & mask) and int(u.min()) > 0:  # powers of two: x mod u is x & (u − 1)
        if R & (R - 1) == 0 and int(u.max()) <= R:  # u divides R: no odd group, no inner group above R
            inner = cand & ((o & mask) != 0)
            odd = np.zeros(0, dtype=np.int64)
        else:
            inner = cand & ((u > R) | ((o & mask) != 0))
            odd = np.flatnonzero(cand & (u <= R) & ((R & mask) != 0))
    else:
        inner = cand & ((u > R) | (o % u != 0))
        odd = np.flatnonzero(cand & (u <= R) & (R % u != 0))
    if len(odd):
        ranks = np.concatenate([np.arange(f, f + c) for f, c in zip(first[odd].tolist(), size[odd].tolist())])
        inner[odd] = _listed_crossings(job, stage, size[odd], u[odd], ranks)[1]
    return ring, inner


def expert_group_gpus(job: JobSpec, stage: int, rank: np.ndarray | int) -> np.ndarray:
    """[n, ep] global GPU indices of the EP group of pool rank(s) ``rank``'s first GPU at ``stage``.

    Megatron-Core orders the expert ranks of a stage etp-ep-dp (ETP fastest; ``parallel_state``'s expert rank
    generator) over the same tp · cp · dp GPUs as the dense order tp-cp-dp: the stage's GPUs fall into blocks of
    ETP · EP consecutive GPUs, and one block's EP group holds the ETP-position-alike GPUs, ETP apart. With
    ETP · EP dividing the NVLink domain's GPUs every EP group is inside one domain; with more it spans
    ETP · EP / D domains. (At ETP = TP the block is EP consecutive pool ranks, the first version's rule.)"""
    b = job.expert_tp * job.ep
    gpu0 = (stage * job.pool + np.atleast_1d(np.asarray(rank, dtype=np.int64))) * job.tp
    base0 = stage * job.pool * job.tp
    base = base0 + (gpu0 - base0) // b * b
    return base[:, None] + job.expert_tp * np.arange(job.ep)


def domain_counts(job: JobSpec, gpus: np.ndarray) -> np.ndarray:
    """[n, k] per row of ``gpus`` (global GPU indices), how many of them each NVLink domain it touches holds
    (domains counted from the row's first GPU's; 0 for a domain in between that holds none)."""
    dom = np.asarray(gpus, dtype=np.int64) // job.gpu.nvlink_domain
    rel = dom - dom[:, :1]
    n = dom.shape[0]
    counts = np.zeros((n, int(rel.max()) + 1 if rel.size else 1))
    np.add.at(counts, (np.repeat(np.arange(n), dom.shape[1]), rel.ravel()), 1.0)
    return counts


def fewest_ranks_per_domain(job: JobSpec, stage: int, first: int, size: int) -> int:
    """The fewest of the contiguous ranks first .. first+size−1 that any domain they touch holds."""
    dom = domain_of(job, stage, np.arange(first, first + size))
    counts = np.bincount(dom - dom.min())
    return int(counts[counts > 0].min())


def collective_nics(job: JobSpec, ranks_per_domain: int) -> float:
    """NICs of bus bandwidth one TP shard's ring collective gets when its group holds ``ranks_per_domain``
    ranks in (each of) the domains it spans: min(k·t, NICs per domain) / t."""
    t = job.tp
    return min(ranks_per_domain * t, job.gpu.nics_per_domain) / t


def p2p_nic_share(job: JobSpec) -> float:
    """The share of one NIC a GPU's cross-domain point-to-point send gets: min(1, NICs / GPUs per node)."""
    return min(1.0, job.gpu.nics_per_node / job.gpu.gpus_per_node)
