"""Mixture-of-experts terms of the analytic cost model (docs/cost_model.md, "MoE").

A MoE layer (``ModelSpec.is_moe_layer``) replaces the dense MLP by a router, E routed experts of which each
token uses k, and optionally a shared expert. For one GPU of a TP group holding T tokens (a rank's tokens of
one microbatch), per MoE layer, forward:

* Attention projections: 2 · attn_params · T / t FLOPs, at the GEMM efficiency of T tokens (as a dense layer).
* Router: 2 · h · E · T / t FLOPs (the gate GEMM), at T tokens.
* Routed experts: 2 · k · expert_params · T / t FLOPs, as a grouped GEMM whose per-expert problems have
  M = ep · T · k / E rows (· ETP / t when ETP ≠ t): the ep ranks of the EP group each send their T tokens to
  k of the E experts, and with balanced routing every expert receives the same share. The efficiency is the
  calibration's GEMM curve at that M (a grouped GEMM runs each expert's GEMM as its own tile set: CUTLASS grouped GEMM,
  Megatron-Core's ``--moe-grouped-gemm``), so many experts with few tokens each cost more per FLOP.
* Shared expert: 2 · shared_params · T / t FLOPs at T tokens (Qwen2-MoE).
* Expert-parallel all-to-all (Megatron-Core ``MoEAlltoAllTokenDispatcher``): a dispatch before the experts
  and a combine after, each an all-to-all over the ep ranks of the EP group with T · k / t tokens of h bf16
  values per GPU (T · k · h · 2 / t bytes, the nccl-tests buffer; (ep − 1)/ep of it leaves the GPU), priced
  by the calibration's all_to_all model on NVLink when the EP group's GPUs share an NVLink domain; else
  (CostTerms.links) the share addressed to the ep − L destinations in other domains crosses at the network
  rate (L: the fewest EP-group members in one domain; bytes / the GPU's NIC share) while the L − 1 local
  ones go over NVLink at the same time, and without that term the whole buffer crosses at the network rate. With
  ETP > 1 the dispatcher all-gathers the received tokens over the ETP group and reduce-scatters them after the
  experts (T · k · h · 2 · ETP / t bytes, NVLink). With ``JobSpec.moe_dispatcher`` = flex (Megatron-Core's
  flex dispatcher over DeepEP) a token crosses the network once per destination domain holding one of its
  experts and is fanned out over NVLink there, and inside a domain goes once per destination GPU
  (:func:`flex_copies`; docs/cost_model.md). The backward repeats both
  (gradients of dispatch and combine travel the same way). Fully exposed (Megatron-Core overlaps the EP
  all-to-all only with its ``--overlap-moe-expert-parallel-comm`` schedule, off by default).
* Backward compute: 2x forward, as every GEMM.
* Recomputation (``JobSpec.moe_recompute``, on by default in dcpsim, while in Megatron-Core it is opt-in:
  ``--recompute-granularity selective --recompute-modules moe``): the MoE part keeps only its input and runs its
  forward again in the backward (one more forward of the router and experts, and the dispatch and combine
  all-to-alls again). This is what
  makes long contexts fit: without it a token keeps k · (2h + 6 f_e) bytes per MoE layer for its experts
  (Qwen3-30B-A3B: 70 KB, as much as the whole dense part of the layer).

EP placement (``JobSpec.etp``, Megatron's ``--expert-tensor-parallel-size``, default TP): Megatron-Core orders
a stage's tp · cp · dp GPUs for the experts etp-ep-dp (``parallel_state``'s expert rank generator), so the
stage's GPUs fall into blocks of ETP · EP and one block's EP group holds GPUs ETP apart
(cost_models.topology.expert_group_gpus); expert data parallelism (EDP) spans the t · W / (ETP · EP) blocks.
At ETP = TP the block is pool ranks ⌊w / ep⌋·ep .. +ep−1; at ETP = 1 with EP ≤ 8 it is one HGX node.

Memory and gradient sync: a GPU holds the dense part of its stage (attention, router, shared expert, dense
layers) / t and the routed experts / (ETP · ep); the distributed optimizer shards the dense part's fp32 states
over the pool (W) and the experts' over EDP = t · W / (ETP · ep) ranks, which puts 12 · P_e / (t · W) bytes of
them on a GPU either way. The gradient sync reduce-scatters / all-gathers the dense part over the pool and the expert
part over EDP. Activations of a MoE layer (selective recompute, Korthikanti et al. 2022's accounting): the
dense layer's 34 · h bytes per token less its MLP's 19 · h, plus the router input (2h), and per routed copy
the expert input (2h), the gate and up outputs (4 · f_e) and the down-projection input (2 · f_e), and the same
for a shared expert: 15h + 2h + k · (2h + 6 f_e) [+ 2h + 6 f_s] bytes per token, / t; with recomputation
15h + 2h.

Not modelled: load imbalance across experts (routing is taken as perfectly balanced: every expert gets
T · k / E tokens of each rank), token dropping and capacity factors, the auxiliary load-balancing loss, the
permutation / unpermutation and top-k kernels (memory-bound; part of the fixed per-layer cost), and the fact
that an EP all-to-all synchronises the ranks of one EP group even when they belong to different CP groups
(each rank's all-to-all is priced at its own token count, as if its peers were ready).
"""

from __future__ import annotations

import math

import numpy as np

from dcpsim.cost_models.calibration import Calibration
from dcpsim.cost_models.specs import JobSpec, ModelSpec
from dcpsim.cost_models.topology import domain_counts, expert_group_gpus

BF16_BYTES = 2.0
# Bytes per token per hidden unit a dense layer keeps (Korthikanti et al. 2022, selective recompute).
DENSE_ACT = 34.0
DENSE_NON_MLP_ACT = 15.0  # those 34·h less its MLP's 19·h (same paper, §4.1)


def stage_layers(job: JobSpec, stage: int) -> tuple[int, int]:
    """(dense layers, MoE layers) of pipeline stage ``stage``: its JobSpec.stage_layers taken as one contiguous
    slice (JobSpec.stage_first_layer; with V > 1 chunks the rank really holds the layers of virtual stages
    c·p + stage, a mix this does not follow: docs/architecture.md, "Not modelled")."""
    return job.model.stage_layer_counts(job.stage_first_layer(stage), job.stage_layers(stage))


def stage_expert_params(job: JobSpec, stage: int) -> int:
    """Routed-expert parameters of stage ``stage`` (all E experts of its MoE layers; sharded by EP)."""
    return stage_layers(job, stage)[1] * job.model.experts * job.model.expert_params


def tokens_per_expert(job: JobSpec, tpr: np.ndarray | float) -> np.ndarray:
    """Rows M of each expert's GEMM: ep · T · k / E for T tokens per rank (balanced routing), times ETP / TP
    when the experts are sharded over ETP ≠ TP GPUs (an expert shard then sees the tokens of ETP GPUs' T / t)."""
    m = job.model
    rows = job.ep * np.asarray(tpr, dtype=np.float64) * m.experts_per_token / m.experts
    return rows if job.expert_tp == job.tp else rows * job.expert_tp / job.tp


def moe_mlp_fwd_s(job: JobSpec, cal: Calibration, tpr: np.ndarray) -> np.ndarray:
    """Forward compute seconds of one MoE layer's MLP part (router, routed experts as a grouped GEMM,
    shared expert) on one GPU for ``tpr`` tokens per rank."""
    m, t = job.model, job.tp
    tpr = np.asarray(tpr, dtype=np.float64)
    dense_flops = 2.0 * (m.router_params + m.shared_expert_params) * tpr / t
    expert_flops = 2.0 * m.experts_per_token * m.expert_params * tpr / t
    return cal.gemm.seconds(dense_flops, tpr) + cal.gemm.seconds(expert_flops, tokens_per_expert(job, tpr))


def moe_layer_fwd_s(job: JobSpec, cal: Calibration, tpr: np.ndarray) -> np.ndarray:
    """Forward compute seconds of one MoE layer's GEMMs (attention projections and the MoE MLP part)."""
    tpr = np.asarray(tpr, dtype=np.float64)
    return cal.gemm.seconds(2.0 * job.model.attn_params * tpr / job.tp, tpr) + moe_mlp_fwd_s(job, cal, tpr)


def dense_layer_fwd_s(job: JobSpec, cal: Calibration, tpr: np.ndarray) -> np.ndarray:
    """Forward compute seconds of one dense layer's GEMMs for ``tpr`` tokens per rank."""
    m = job.model
    tpr = np.asarray(tpr, dtype=np.float64)
    return cal.gemm.seconds(2.0 * (m.attn_params + m.dense_mlp_params) * tpr / job.tp, tpr)


def linear_fwd_s(job: JobSpec, cal: Calibration, tpr: np.ndarray, stage: int) -> np.ndarray:
    """Forward compute seconds of all linear layers of ``stage`` of a MoE model."""
    n_dense, n_moe = stage_layers(job, stage)
    out = n_moe * moe_layer_fwd_s(job, cal, tpr)
    if n_dense:
        out = out + n_dense * dense_layer_fwd_s(job, cal, tpr)
    return out


def _ep_counts(job: JobSpec, stage: int, first_rank: np.ndarray) -> np.ndarray:
    """[n, k] members of each group's EP group (:func:`~cost_models.topology.expert_group_gpus`) per domain."""
    return domain_counts(job, expert_group_gpus(job, stage, first_rank))


def ep_group_crosses(job: JobSpec, stage: int, first_rank: np.ndarray) -> np.ndarray:
    """Whether the EP group of pool rank ``first_rank`` (Megatron's expert order etp-ep-dp:
    cost_models.topology.expert_group_gpus) spans NVLink domains."""
    return (_ep_counts(job, stage, first_rank) > 0).sum(axis=1) > 1


def ep_local_members(job: JobSpec, stage: int, first_rank: np.ndarray) -> np.ndarray:
    """L per group: the fewest members of its EP group that share one NVLink domain. A GPU in that domain
    addresses ep − L of its ep all-to-all destinations across domains."""
    counts = _ep_counts(job, stage, first_rank)
    return np.where(counts > 0, counts, np.inf).min(axis=1)


def hit_probability(job: JobSpec, members: np.ndarray | float) -> np.ndarray:
    """P(a token's k distinct experts include one of the E · n / ep experts that ``members`` = n GPUs of the
    EP group hold): 1 − C(E − E·n/ep, k) / C(E, k), uniform routing without node limit."""
    m = job.model
    E, k, ep = m.experts, m.experts_per_token, job.ep
    n = np.atleast_1d(np.asarray(members, dtype=np.float64))
    uniq, inv = np.unique(n, return_inverse=True)
    total = math.comb(E, k)
    miss = np.array([math.comb(E - int(round(E * x / ep)), k) / total for x in uniq.tolist()])
    return (1.0 - miss)[inv.reshape(n.shape)]


def flex_copies(job: JobSpec, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per token of a GPU in its EP group's smallest domain (L members), the copies the flex (DeepEP)
    dispatcher moves: (across the network: one per other domain holding one of its experts,
    Σ_{d ≠ own} p(n_d); over NVLink: one per other GPU of its own domain holding one, (L − 1)·p(1), plus the
    fan-out of the tokens that arrive from other domains, as many as it sends by symmetry, each to
    (L − 1)·p(1)/p(L) other GPUs of the domain). ``counts``: [n, k] members per domain (:func:`_ep_counts`)."""
    L = np.where(counts > 0, counts, np.inf).min(axis=1)
    p_dom = np.where(counts > 0, hit_probability(job, np.maximum(counts, 1.0)), 0.0)
    remote = p_dom.sum(axis=1) - hit_probability(job, L)
    p1 = float(hit_probability(job, 1.0)[0])
    local = (L - 1) * p1 * (1.0 + remote / hit_probability(job, L))
    return remote, local


def ep_comm_layer_s(
    job: JobSpec,
    cal: Calibration,
    tpr: np.ndarray,
    crosses: np.ndarray,
    net_bytes_scale: float = 1.0,
    local: np.ndarray | None = None,
    counts: np.ndarray | None = None,
    remote_only: bool = False,
) -> np.ndarray:
    """Exposed EP communication of one MoE layer, forward (the backward is the same), per GPU: dispatch and
    combine all-to-alls over the EP group, and with ETP > 1 the ETP all-gather / reduce-scatter of the
    received tokens. ``net_bytes_scale`` multiplies the bytes of an all-to-all that crosses NVLink domains
    (1 / the GPU's share of a NIC: cost_models.topology.p2p_nic_share, every GPU sending on its own rail).
    ``local`` (L per group, :func:`ep_local_members`): only the ep − L destinations in other domains go over
    the network, concurrently with the L − 1 on NVLink; None: a crossing all-to-all runs wholly at the
    network rate (the rule of the first version for any group that spans nodes). ``counts`` (members per
    domain, needed for ``job.moe_dispatcher`` = flex): the flex dispatcher's copies (:func:`flex_copies`).
    ``remote_only``: a crossing all-to-all by destination priced by its network part alone (a lower bound:
    the bound's floor, :func:`ep_comm_floor`)."""
    m, ep = job.model, job.ep
    tpr = np.asarray(tpr, dtype=np.float64)
    routed_bytes = tpr * m.experts_per_token * m.hidden * BF16_BYTES
    out = np.zeros_like(tpr)
    if ep > 1:
        buf = routed_bytes / job.tp  # nccl-tests buffer; the link model moves (ep − 1)/ep of it
        nv_link, net_link = cal.link("all_to_all", "nvlink"), cal.link("all_to_all", "network")
        if job.moe_dispatcher == "flex":
            if counts is None:
                raise ValueError("ep_comm_layer_s: the flex dispatcher needs counts (members per domain)")
            # buffers whose moved (ep − 1)/ep share is copies · T/t · h · 2 bytes
            tok = tpr * m.hidden * BF16_BYTES / job.tp * ep / (ep - 1)
            rem, loc = flex_copies(job, counts)
            p1 = float(hit_probability(job, 1.0)[0])
            nv = nv_link.seconds("all_to_all", tok * (ep - 1) * p1, ep)
            remote = net_link.seconds("all_to_all", net_bytes_scale * tok * rem, ep)
            if local is None:
                net = net_link.seconds("all_to_all", net_bytes_scale * tok * (rem + loc), ep)
            elif remote_only:
                net = remote
            else:
                net = np.maximum(remote, nv_link.seconds("all_to_all", tok * loc, ep))
        else:
            nv = nv_link.seconds("all_to_all", buf, ep)
            if local is None:
                net = net_link.seconds("all_to_all", net_bytes_scale * buf, ep)
            else:  # per-destination shares: (ep − L)/(ep − 1) of the moved bytes remote, (L − 1)/(ep − 1) local
                remote = net_link.seconds("all_to_all", net_bytes_scale * buf * (ep - local) / (ep - 1), ep)
                net = remote if remote_only else np.maximum(
                    remote, nv_link.seconds("all_to_all", buf * (local - 1) / (ep - 1), ep))
        out = out + 2.0 * np.where(crosses, net, nv)
    etp = job.expert_tp
    if etp > 1:  # the received tokens of the ETP group: etp · T · k / t per GPU after the all-gather
        gathered = routed_bytes if etp == job.tp else routed_bytes * etp / job.tp
        ag = cal.link("all_gather", "nvlink").seconds("all_gather", gathered, etp)
        rs = cal.link("reduce_scatter", "nvlink").seconds("reduce_scatter", gathered, etp)
        out = out + ag + rs
    return out


def ep_comm_s(
    job: JobSpec,
    cal: Calibration,
    tpr: np.ndarray,
    stage: int,
    first_rank: np.ndarray,
    net_bytes_scale: float = 1.0,
    by_destination: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Exposed EP communication of ``stage`` (all its MoE layers), (forward, backward); the backward is the
    forward's again, twice when the MoE layers are recomputed (the recomputed forward dispatches again).
    ``by_destination``: price a crossing all-to-all by its remote destinations (:func:`ep_comm_layer_s`)."""
    n_moe = stage_layers(job, stage)[1]
    if not n_moe:
        z = np.zeros_like(np.asarray(tpr, dtype=np.float64))
        return z, z
    fwd = n_moe * _ep_layer_at(job, cal, tpr, stage, first_rank, net_bytes_scale, by_destination, False)
    return fwd, (2.0 if job.moe_recompute else 1.0) * fwd


def _ep_layer_at(job: JobSpec, cal: Calibration, tpr: np.ndarray, stage: int, first_rank: np.ndarray,
                 net_bytes_scale: float, by_destination: bool, remote_only: bool) -> np.ndarray:
    """:func:`ep_comm_layer_s` of the EP groups of pool ranks ``first_rank`` at ``stage``."""
    counts = _ep_counts(job, stage, first_rank) if job.ep > 1 else np.ones((1, 1))
    crosses = (counts > 0).sum(axis=1) > 1
    if np.ndim(first_rank) == 0:
        crosses = crosses[0]
    local = np.where(counts > 0, counts, np.inf).min(axis=1) if by_destination and job.ep > 1 else None
    flex = counts if job.moe_dispatcher == "flex" else None
    return ep_comm_layer_s(job, cal, tpr, crosses, net_bytes_scale, local, flex, remote_only)


def ep_comm_floor(job: JobSpec, cal: Calibration, stage: int, net_bytes_scale: float = 1.0,
                  by_destination: bool = False) -> tuple[float, float]:
    """(α, β) with α + β · tpr ≤ the forward EP communication :func:`ep_comm_s` prices for ``tpr`` ≥ 0 tokens
    per rank at ``stage``, whichever pool rank's EP group it is (the backward is at least the same again):
    every group's layer time is affine in tpr (its network part alone where a by-destination all-to-all takes
    the larger of two affine parts), so the least intercept and the least slope over the stage's groups give
    a line below all of them. (0, 0) for a stage without MoE layers or with EP = ETP = 1."""
    n_moe = stage_layers(job, stage)[1]
    if not n_moe or (job.ep == 1 and job.expert_tp == 1):
        return 0.0, 0.0
    ranks = np.arange(job.pool)
    t0 = _ep_layer_at(job, cal, np.zeros(job.pool), stage, ranks, net_bytes_scale, by_destination, True)
    t1 = _ep_layer_at(job, cal, np.ones(job.pool), stage, ranks, net_bytes_scale, by_destination, True)
    alpha = float(np.min(t0))
    beta = max(float(np.min(t1 - t0)), 0.0)
    return n_moe * alpha, n_moe * beta


def moe_activation_bytes_per_token(model: ModelSpec, recompute: bool = False) -> float:
    """Activation bytes one token keeps in one MoE layer on a TP group (before the / t split); with
    ``recompute`` only the MoE part's input (2h) beside the attention part."""
    h = model.hidden
    if recompute:
        return DENSE_NON_MLP_ACT * h + 2 * h
    per = DENSE_NON_MLP_ACT * h + 2 * h + model.experts_per_token * (2 * h + 6 * model.expert_ffn)
    if model.shared_expert_ffn:
        per += 2 * h + 6 * model.shared_expert_ffn
    return per


def moe_extra_activation_bytes(job: JobSpec, stage: int) -> float:
    """Activation bytes per token on one GPU of ``stage`` that its MoE layers keep beyond the dense
    34·h/t per layer (negative if a MoE layer keeps less than a dense one)."""
    n_moe = stage_layers(job, stage)[1]
    per = moe_activation_bytes_per_token(job.model, job.moe_recompute)
    return n_moe * (per - DENSE_ACT * job.model.hidden) / job.tp


def grad_sync_expert_s(job: JobSpec, cal: Calibration, stage: int, link: str, rs_exposed: float,
                       ag_exposed: float, grad_bytes: float) -> float:
    """Reduce-scatter of the expert gradients (``grad_bytes`` per parameter: the gradient buffer's dtype, which
    the caller derives from the job, cost_models.analytic_comm) and all-gather of the bf16 expert
    parameters over the EDP group (tp · pool / (ETP · ep) ranks), per GPU: its P_e / (ETP · ep) expert parameters; the
    ``_exposed`` shares of each left exposed by DP overlap (cost_models.dp_overlap)."""
    params = stage_expert_params(job, stage) / (job.expert_tp * job.ep)
    edp = job.expert_dp
    rs = cal.link("reduce_scatter", link).seconds("reduce_scatter", params * grad_bytes, edp)
    ag = cal.link("all_gather", link).seconds("all_gather", params * BF16_BYTES, edp)
    return float(rs * rs_exposed + ag * ag_exposed)
