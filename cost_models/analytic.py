"""The analytic cost model of DESIGN §5, driven by a :class:`~cost_models.calibration.Calibration`.

Per CP group of c = u·r ranks (u Ulysses ranks inside, a ring over r outer groups), for one rank, one stage of
``layers_per_stage`` layers:

* Linear layers: (Σ L / c) tokens · 4h²(1 + g/a) + 6hf FLOPs / t per layer, at the GEMM efficiency of that
  token count. Backward 2x.
* Attention: with dual-chunk balancing every rank does 1/c of Σ 2·L²·d·a / t; the kernel's efficiency is that
  of blocks of L / r tokens (a ring step pairs chunks of L / r; Ulysses gives each rank whole sequences with
  a/u heads). Backward 2.5x forward.
* Ring (p2p): r − 1 steps; each sends this rank's K and V chunk, 2 · (Σ L / r) · (g/(t·u)) · d · 2 bytes
  (twice that in backward: K, V out and dK, dV back), while the previous block computes; only
  max(0, transfer − block compute) per step is exposed.
* Ulysses (all-to-all): 4 all-to-alls per layer forward (Q, K, V, O) and 4 backward, fully exposed; the
  per-rank buffer is (Σ L / c) · heads · d · 2 bytes.
* Link class: a ring whose group spans NVLink domains runs at the network rate; the inner Ulysses group at
  NVLink rate when its u ranks share a domain (cost_models.topology). With ``terms.links`` (the default) the
  crossings come from the ranks each group really lists (a non-contiguous group is priced by the domains it
  spans), each PP transfer from its own rank's pair of stages, and cross-domain bandwidth from the NICs in
  use; with it off, the first version's pricing (contiguous groups from ``first_rank``, every PP transfer by
  pool rank 0's pair, one NIC per collective).
* Fixed costs (CostTerms.fixed_costs; cost_models.fixed_costs): every group's forward compute gets
  ``layers_per_stage × (layer_overhead_fwd_s + (r − 1) · ring_step_overhead_fwd_s) + microbatch_overhead_fwd_s``
  and its backward the same with the ``_bwd_s`` fields (seconds, from the calibration; launches, norms, RoPE,
  activation, residuals, framework dispatch, the ring's per-step launches, the schedule's P2P launches).
  Added here and nowhere else; they do not depend on the group's tokens, so each extra microbatch and each
  extra ring step pays them again.
* Ends of the pipeline (CostTerms.lm_head; cost_models.head): the embedding at stage 0, the LM head and
  loss at stage p − 1.
* TP communication (CostTerms.tp_comm): :meth:`AnalyticCostModel.tp_comm_layer_s`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dcpsim.cost_models import moe
from dcpsim.cost_models.attention_backends import default_backend
from dcpsim.cost_models.base import GroupBatch, GroupCosts
from dcpsim.cost_models.calibration import Calibration, SaturatingCurve, collective_terms, default_calibration
from dcpsim.cost_models.errors import CalibrationError
from dcpsim.cost_models.flops import (
    ATTENTION_BWD_FACTOR,
    LINEAR_BWD_FACTOR,
    attention_fwd_flops,
    linear_fwd_flops_per_token,
    model_flops,
)
from dcpsim.cost_models.head import embedding_compute_s, ends_tp_comm_s, head_compute_s
from dcpsim.cost_models.memory import memory_budget_tokens, model_state_bytes, peak_memory_bytes, stage_params
from dcpsim.cost_models.probe import first_of, option_block_totals, option_stage_totals, per_stage
from dcpsim.cost_models.specs import JobSpec
from dcpsim.cost_models.terms import CostTerms
from dcpsim.cost_models.topology import (
    collective_nics,
    fewest_ranks_per_domain,
    group_crossings,
    node_of,
    p2p_nic_share,
    spans_nodes,
)

BF16_BYTES = 2.0
OPTIMIZER_BYTES_PER_PARAM = 32.0  # Adam over fp32 master + 2 moments + bf16 grad/param, read and written


class _Select:
    """``np.where(cond, if_true(), if_false())`` for several pairs of branches on one condition, computing only
    a branch that some element takes (the condition read once)."""

    __slots__ = ("cond", "take")

    def __init__(self, cond) -> None:
        self.cond = cond = np.asarray(cond)
        k = np.count_nonzero(cond) if cond.ndim else -1  # (one count for any() and all())
        self.take = None if k < 0 else (False if k == 0 else (True if k == cond.size else None))

    def __call__(self, if_true, if_false) -> np.ndarray:
        if self.take is not None:
            out = if_true() if self.take else if_false()
            if np.shape(out) == self.cond.shape:
                return np.asarray(out, dtype=np.float64)
        return np.where(self.cond, if_true(), if_false())


@dataclass(frozen=True)
class AnalyticCostModel:
    """Closed-form costs of DESIGN §5 with calibrated kernel and link curves."""

    job: JobSpec
    calibration: Calibration | None = None
    terms: CostTerms = field(default_factory=CostTerms)  # which first-order terms are on (cost_models.terms)
    _cal: Calibration = field(init=False, repr=False, compare=False)
    # what group_costs reads on every call and that depends only on the (frozen) job, calibration and terms:
    # the attention curves, the CP links, the p2p NIC share (filled on first use: _memoized)
    _memo: dict = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_cal", self.calibration or default_calibration(self.job.gpu))

    def _memoized(self, name: str, make):
        """``make()``, computed on the first call that succeeds and kept (it depends only on the frozen job,
        calibration and terms); a look-up that raises raises again on every call, as it did unmemoised."""
        memo = self._memo
        if name not in memo:
            memo[name] = make()
        return memo[name]

    def _links(self, op: str) -> tuple:
        """(NVLink, network) models of ``op``."""
        return self._memoized(op, lambda: (self._cal.link(op, "nvlink"), self._cal.link(op, "network")))

    @property
    def cal(self) -> Calibration:
        return self._cal

    # ---- one CP group ----------------------------------------------------------------------------------
    def group_costs(self, groups: GroupBatch, stage: int = 0) -> GroupCosts:
        gid = groups.seq_group
        G = groups.num_groups
        L = groups.seq_len.astype(np.float64)
        # Every group holding one sequence, group i sequence i (HyDra's and the bound's probes): each per-group
        # sum below would add one weight to 0.0 and each gather would be the identity; both are skipped (the
        # same numbers: times and token counts are never -0.0).
        alone = len(L) == G and (G == 0 or (int(gid[0]) == 0 and not np.count_nonzero((gid[1:] - gid[:-1]) != 1)))
        parts = self._costs(L, L if alone else groups.tokens(), groups.size, groups.ulysses, groups.first_rank,
                            None if alone else gid, self.cp_crossings(groups, stage), stage)
        fwd, cp_f, bwd, cp_b, tp_f, tp_b, ep_f, ep_b = parts
        if tp_f is None:  # no TP communication anywhere: zeros (as 0 · nl + 0)
            tp_f, tp_b = np.zeros(G), np.zeros(G)
        return GroupCosts(fwd_compute_s=fwd, fwd_comm_s=cp_f, bwd_compute_s=bwd, bwd_comm_s=cp_b,
                          fwd_tp_comm_s=tp_f, bwd_tp_comm_s=tp_b, fwd_ep_comm_s=ep_f, bwd_ep_comm_s=ep_b)

    def alone_total_s(self, lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray, stage: int = 0) -> np.ndarray:
        """Total seconds (``GroupCosts.total_s``) of each sequence alone in a group of ``sizes`` contiguous ranks
        from pool rank 0 with inner Ulysses degree ``ulysses`` at ``stage``: the numbers of :meth:`group_costs`
        on that batch, bit for bit, without building it (HyDra's probes; the zero TP and EP terms not added)."""
        return self.alone_stage_totals(lengths, sizes, ulysses, (stage,))[0]

    def alone_stage_totals(self, lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray,
                           stages: tuple[int, ...], prefix: tuple[int | None, ...] | None = None,
                           option: np.ndarray | None = None) -> list[np.ndarray]:
        """``[alone_total_s(lengths[:k], sizes[:k], ulysses[:k], s) for s, k in zip(stages, prefix)]`` (k None:
        every entry), the stages' shared part priced once where they differ only at the pipeline's ends (a dense
        model whose stages start on an NVLink-domain boundary: :meth:`stage_classes`' condition, under which
        nothing but the embedding and the LM head reads the stage). With ``option``, ``sizes`` and ``ulysses``
        list the distinct groups and sequence i is in a group like ``option[i]``: what depends on the group
        alone (its links, its fixed costs) is priced once per group, the same numbers."""
        L, size, u, shared, ks = self._alone_args(lengths, sizes, ulysses, stages, prefix)
        if option is not None:  # per-option groups: cost_models.probe
            return option_stage_totals(self, L, size, u, np.asarray(option, dtype=np.int64), stages, ks, shared)
        first = np.zeros(len(L), dtype=np.int64)
        job = self.job

        def core_of(s: int, c: int) -> tuple:
            crossings = self._crossings(s, size[:c], u[:c], first[:c])
            return self._core(L[:c], L[:c], size[:c], u[:c], None, crossings, s)

        def total_of(part: tuple, s: int) -> np.ndarray:
            fwd, cp_f, bwd, cp_b, tp_f, tp_b, ep_f, ep_b = self._at_stage(part, first[:len(part[0])], s)
            total = fwd + cp_f + bwd + cp_b  # GroupCosts.total_s's order; x + 0.0 is x (never -0.0)
            if tp_f is not None:
                total = total + tp_f + tp_b
            if job.model.is_moe:
                total = total + ep_f + ep_b
            return total
        return per_stage(stages, ks, shared, core_of, first_of, total_of)

    def alone_block_totals(self, lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray,
                           stages: tuple[int, ...], prefix: tuple[int | None, ...] | None = None) -> list[np.ndarray]:
        """Row i: [groups, k] totals of every listed group (``sizes``, ``ulysses``) at each of the first k =
        ``prefix[i]`` ``lengths`` (None: all) at ``stages[i]``: ``alone_stage_totals`` of the block flattened
        group by group, bit for bit (cost_models.probe), without the per-sequence gathers."""
        L, size, u, shared, ks = self._alone_args(lengths, sizes, ulysses, stages, prefix)
        return option_block_totals(self, L, size, u, stages, ks, shared)

    def _alone_args(self, lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray, stages: tuple[int, ...],
                    prefix: tuple[int | None, ...] | None) -> tuple:
        """The alone totals' operands: the lengths (float64), sizes and Ulysses degrees (int64), whether the
        stages share their crossings (a dense model whose stages start on an NVLink-domain boundary) and each
        stage's count of sequences (None in ``prefix``: all)."""
        L = np.asarray(lengths, dtype=np.int64).astype(np.float64)
        size, u = np.asarray(sizes, dtype=np.int64), np.asarray(ulysses, dtype=np.int64)
        shared = not self.job.model.is_moe and self._stages_on_domain_boundaries()
        ks = [len(L) if k is None else k for k in (prefix or (None,) * len(stages))]
        return L, size, u, shared, ks

    def _costs(self, L: np.ndarray, tokens: np.ndarray, size_i: np.ndarray, u_i: np.ndarray, first_rank: np.ndarray,
               gid: np.ndarray | None, crossings: tuple[np.ndarray, np.ndarray], stage: int) -> tuple:
        """group_costs' fields (fwd compute, fwd CP comm, bwd compute, bwd CP comm, fwd TP, bwd TP — both None
        where there is no TP communication —, fwd EP, bwd EP) of groups of ``size_i`` ranks (int64) with
        Ulysses ``u_i`` holding ``tokens`` (float64 [G]); ``L`` (float64) the sequences, in groups ``gid``
        (None: sequence i alone in group i)."""
        return self._at_stage(self._core(L, tokens, size_i, u_i, gid, crossings, stage), first_rank, stage)

    def _core(self, L: np.ndarray, tokens: np.ndarray, size_i: np.ndarray, u_i: np.ndarray, gid: np.ndarray | None,
              crossings: tuple[np.ndarray, np.ndarray], stage: int, fixed: tuple | None = None,
              r: np.ndarray | None = None) -> tuple:
        """:meth:`_costs` before the stage's ends, TP and MoE terms: (fwd compute, fwd CP comm, bwd compute, bwd
        CP comm, tokens per rank); of a dense model only ``crossings`` depend on the stage. ``fixed``: the
        groups' :meth:`fixed_s` where known; ``r``: their ring degrees size / u where known (then ``size_i`` and
        ``u_i`` are float64)."""
        job, m = self.job, self.job.model
        nl, t = job.layers_per_stage, job.tp
        if r is None:
            size = size_i.astype(np.float64)
            u = u_i.astype(np.float64)
            r = size / u
        else:
            size, u = size_i, u_i
        G = len(size)
        tpr = tokens / size

        lin_f = self._linear_fwd_s(tpr, stage)

        att_flops = attention_fwd_flops(L, m)
        if t != 1:  # x / 1 is x
            att_flops = att_flops / t
        att_flops = att_flops / (size if gid is None else size[gid]) * nl
        block = np.maximum(L / (r if gid is None else r[gid]), 1e-9)  # (SaturatingCurve.seconds' clamp, once)
        attn_fwd, attn_bwd = self._memoized("attn", lambda: self.attention_curves()[:2])
        att_f = attn_fwd.seconds_clamped(att_flops, block)
        att_b = attn_bwd.seconds_clamped(ATTENTION_BWD_FACTOR * att_flops, block)
        if gid is not None:
            att_f = np.bincount(gid, weights=att_f, minlength=G)
            att_b = np.bincount(gid, weights=att_b, minlength=G)

        crosses, inner_crosses = crossings
        self._links("send_recv"), self._links("all_to_all")  # (a missing link model raises even with no ring)
        # (ring + a2a) · nl, each part left out where no group has it (0 + x is x), its mask where all have it
        ring = r > 1
        n_ring = np.count_nonzero(ring)
        if n_ring:
            ring_f, ring_b = self._ring_exposed(tokens, r, u, att_f / nl, att_b / nl, crosses,
                                                ring=None if n_ring == G else ring)
        else:
            ring_f = ring_b = None
        uly = u > 1
        n_uly = np.count_nonzero(uly)
        a2a = self._ulysses_time(tpr, u, inner_crosses, uly=None if n_uly == G else uly) if n_uly else None
        if ring_f is None:
            cp_f = np.zeros(G) if a2a is None else a2a * nl
            cp_b = cp_f.copy()
        elif a2a is None:
            cp_f, cp_b = ring_f * nl, ring_b * nl
        else:
            cp_f, cp_b = (ring_f + a2a) * nl, (ring_b + a2a) * nl
        fwd = lin_f + att_f
        bwd = LINEAR_BWD_FACTOR * lin_f + att_b
        if self.terms.fixed_costs:
            # no ring anywhere: every group's r − 1 steps are 0, one number (x + the same scalar is the same sum)
            if fixed is not None:
                fixed_f, fixed_b = fixed
            elif n_ring:
                fixed_f, fixed_b = self.fixed_s(r)
            else:
                fixed_f, fixed_b = self._memoized("fixed_no_ring", lambda: self.fixed_s(np.ones(1)))
            fwd = fwd + fixed_f
            bwd = bwd + fixed_b
        return fwd, cp_f, bwd, cp_b, tpr

    def _at_stage(self, core: tuple, first_rank: np.ndarray, stage: int) -> tuple:
        """:meth:`_costs` from :meth:`_core`'s part: the stage's ends, TP communication and MoE terms added."""
        job, m, cal, nl = self.job, self.job.model, self._cal, self.job.layers_per_stage
        fwd, cp_f, bwd, cp_b, tpr = core
        ends = self._ends(tpr, stage)
        if ends is not None:
            fwd = fwd + ends[0]
            bwd = bwd + ends[1]
        tp_f = tp_b = None
        if self.terms.tp_comm and job.tp > 1:
            tp_layer = self.tp_comm_layer_s(tpr)
            end_tp_f, end_tp_b = (ends[2], ends[3]) if ends is not None else (0.0, 0.0)
            tp_f, tp_b = tp_layer * nl + end_tp_f, tp_layer * nl + end_tp_b
        ep_f: np.ndarray | float = 0.0
        ep_b: np.ndarray | float = 0.0
        if m.is_moe:
            # MoE: EP dispatch/combine all-to-alls (cost_models.moe), their own fields (sim: comm kind "ep").
            ep_f, ep_b = moe.ep_comm_s(job, cal, tpr, stage, first_rank, self._p2p_bytes_scale(),
                                       by_destination=self.terms.links)
            bwd = bwd + moe.recompute_bwd_s(job, cal, tpr, stage)
        return fwd, cp_f, bwd, cp_b, tp_f, tp_b, ep_f, ep_b

    def stage_classes(self) -> tuple[int, ...]:
        """For each pipeline stage, the first stage whose :meth:`group_costs` are the same numbers for every
        group batch (callers that price several stages price one of each class).

        Of a dense model, the stages strictly between the ends (both ends too with CostTerms.lm_head off) cost
        the same when a stage's ranks start on an NVLink-domain boundary, pool · t a multiple of the domain's
        GPUs: then every group's crossings (contiguous or listed members, either links rule) are the same at
        every stage, and nothing else in group_costs reads the stage. Otherwise (a MoE model: its stages hold
        different layers; groups shifted across a domain boundary) every stage is its own class."""
        return self._memoized("stage_classes", self._stage_classes)

    def _stages_on_domain_boundaries(self) -> bool:
        """Whether every stage's ranks start on an NVLink-domain boundary (pool · t a multiple of the domain's
        GPUs): then every group's crossings are the same at every stage."""
        job = self.job
        return (job.pool * job.tp) % job.gpu.nvlink_domain == 0

    def _stage_classes(self) -> tuple[int, ...]:
        job = self.job
        p = job.pp
        if job.model.is_moe or not self._stages_on_domain_boundaries():
            return tuple(range(p))
        ends = {0, p - 1} if self.terms.lm_head else set()
        first_middle = next((s for s in range(p) if s not in ends), 0)  # (0: no stage is a middle one)
        return tuple(s if s in ends else first_middle for s in range(p))

    def attention_curves(self) -> tuple[SaturatingCurve, SaturatingCurve, str]:
        """Causal forward and backward attention curves and the name of what they price: the job's backend
        (default: TransformerEngine's pick on the GPU, cost_models.attention_backends) when the calibration
        has its curves and CostTerms.attention_backend is on, else the calibration's own single curve."""
        cal, job = self._cal, self.job
        if self.terms.attention_backend:
            name = job.attention_backend or default_backend(job.gpu.name)
            ac = cal.attention.get(name)
            if ac is not None:
                return ac.fwd_causal, ac.bwd_causal, f"{name} ({ac.kernel})"
            if job.attention_backend is not None:
                have = ", ".join(sorted(cal.attention)) or "none"
                raise CalibrationError(f"calibration {cal.name!r} has no curves for attention_backend = "
                                       f"{name!r}; it has: {have} (profile that kernel and run dcpsim calibrate)")
        return cal.attn_fwd, cal.attn_bwd, f"calibration curve of {cal.name}"

    def fixed_s(self, r: np.ndarray) -> tuple[np.ndarray | float, np.ndarray | float]:
        """Fixed (token-independent) forward and backward seconds of one group operation at one stage, per
        GPU (cost_models.fixed_costs): per layer, per ring step beyond the first (r − 1 per layer), per
        microbatch. Zero with CostTerms.fixed_costs off (then the calibration's per-layer overhead is dropped
        too: the first version's numbers)."""
        if not self.terms.fixed_costs:
            return 0.0, 0.0
        cal, nl = self._cal, self.job.layers_per_stage
        steps = np.maximum(np.asarray(r, dtype=np.float64) - 1.0, 0.0)
        fwd = nl * (cal.layer_overhead_fwd_s + steps * cal.ring_step_overhead_fwd_s) + cal.microbatch_overhead_fwd_s
        bwd = nl * (cal.layer_overhead_bwd_s + steps * cal.ring_step_overhead_bwd_s) + cal.microbatch_overhead_bwd_s
        return fwd, bwd

    def ends_s(self, tpr: np.ndarray, stage: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Forward and backward compute, and forward and backward TP communication (seconds), of the input
        embedding at stage 0 and of the LM head and loss at stage p − 1 (cost_models.head), per group; zeros
        elsewhere or with CostTerms.lm_head off."""
        tpr = np.asarray(tpr, dtype=np.float64)
        ends = self._ends(tpr, stage)
        if ends is None:
            zero = np.zeros_like(tpr)
            return zero, zero, zero, zero
        return ends

    def _ends(self, tpr: np.ndarray, stage: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """:meth:`ends_s` for float64 ``tpr``; None where it is all zeros (no end at this stage, or the term
        off)."""
        job = self.job
        first, last = stage == 0, stage == job.pp - 1
        if not self.terms.lm_head or not (first or last):
            return None
        if first:
            fwd, bwd = embedding_compute_s(job, tpr)
        if last:
            h_f, h_b = head_compute_s(job, self._cal, tpr)
            fwd, bwd = (fwd + h_f, bwd + h_b) if first else (h_f, h_b)
        if self.terms.tp_comm and job.tp != 1:
            tp_f, tp_b = ends_tp_comm_s(job, self._cal, tpr, first, last)
        else:  # (as ends_tp_comm_s gives at TP 1)
            tp_f = tp_b = np.zeros_like(tpr)
        return fwd, bwd, tp_f, tp_b

    def _linear_fwd_s(self, tpr: np.ndarray, stage: int = 0) -> np.ndarray:
        """Forward seconds of the stage's linear layers (QKV/O projections, SwiGLU MLP) for ``tpr`` tokens
        per rank, on one GPU of the TP group. The one place the GEMMs are priced; a MoE model's stage goes
        through cost_models.moe (router, grouped expert GEMMs, shared expert; dense layers as here)."""
        job = self.job
        if job.model.is_moe:
            return moe.linear_fwd_s(job, self._cal, tpr, stage)
        lin_flops = tpr * self._memoized("lin_per_token", lambda: linear_fwd_flops_per_token(job.model))
        if job.tp != 1:  # x / 1 is x
            lin_flops = lin_flops / job.tp
        return self._cal.gemm.seconds(lin_flops * job.layers_per_stage, tpr)

    def tp_comm_layer_s(self, tpr: np.ndarray) -> np.ndarray:
        """Exposed TP communication of one layer, forward (the backward is the same), per GPU (seconds).

        Megatron-LM sequence parallelism (Korthikanti et al. 2022, §4.2.2): per layer forward, an all-gather
        before the QKV and the first MLP GEMM and a reduce-scatter after the O and the second MLP GEMM, each
        of the full activation, tokens · h · 2 bytes (bf16) — the nccl-tests buffer size, of which a ring
        moves (t−1)/t per GPU. The backward mirrors them (all-gather ↔ reduce-scatter). The TP group sits
        inside an NVLink domain (JobSpec requires t to divide gpu.nvlink_domain), so the calibration's NVLink all_gather and
        reduce_scatter models price them, α included. ``job.tp_comm_overlap`` of it is hidden behind GEMMs
        (0 by default: Megatron-LM's default is no --tp-comm-overlap). Not counted: the backward's second
        all-gather of a column-parallel layer's input for its weight gradient (Megatron overlaps it with the
        data-gradient GEMM), and the loss's tiny all-reduces (cost_models.head)."""
        tpr = np.asarray(tpr, dtype=np.float64)
        job = self.job
        if not self.terms.tp_comm or job.tp == 1:
            return np.zeros_like(tpr)
        nbytes = tpr * job.model.hidden * BF16_BYTES
        ag = self._cal.link("all_gather", "nvlink").seconds("all_gather", nbytes, job.tp)
        rs = self._cal.link("reduce_scatter", "nvlink").seconds("reduce_scatter", nbytes, job.tp)
        return (1.0 - job.tp_comm_overlap) * 2.0 * (ag + rs)

    # ---- links (cost_models.topology) -------------------------------------------------------------------
    def cp_crossings(self, groups: GroupBatch, stage: int) -> tuple[np.ndarray, np.ndarray]:
        """Per group: whether its ring, and whether one of its inner Ulysses groups, crosses NVLink domains.
        With ``terms.links``: from the ranks the group lists (GroupBatch.member_rank, when given); without,
        the first version's contiguous ranks from ``first_rank`` (and only the first inner group)."""
        return self._crossings(stage, groups.size, groups.ulysses, groups.first_rank, groups.member_rank,
                               groups.member_group)

    def _crossings(self, stage: int, size: np.ndarray, ulysses: np.ndarray, first_rank: np.ndarray,
                   member_rank: np.ndarray | None = None,
                   member_group: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`cp_crossings` of groups given by their arrays (GroupBatch's fields)."""
        job = self.job
        if not self.terms.links:
            return spans_nodes(job, stage, first_rank, size), spans_nodes(job, stage, first_rank, ulysses)
        return group_crossings(job, stage, size, ulysses, first_rank, member_rank, member_group)

    def _p2p_bytes_scale(self) -> float:
        """Cross-domain point-to-point bytes are divided by the GPU's share of a NIC (1 on rail-optimised
        clusters: cost_models.topology.p2p_nic_share); 1 with ``terms.links`` off."""
        return 1.0 / p2p_nic_share(self.job) if self.terms.links else 1.0

    def _ring_exposed(self, tokens, r, u, att_f_layer, att_b_layer, crosses, ring=False):
        """Exposed ring time per layer (forward, backward). ``ring``: the groups with a ring (r > 1; None: all
        of them, nothing masked; default: computed here)."""
        m = self.job.model
        kv_bytes = 2.0 * (tokens / r) * (self.job.kv_heads_per_rank / u) * m.head_dim * BF16_BYTES
        nv, net = self._links("send_recv")
        k = self._memoized("p2p_scale", self._p2p_bytes_scale)
        kv2 = 2 * kv_bytes
        select = _Select(crosses)
        step_f = select(lambda: net.send_recv_s(kv_bytes if k == 1.0 else k * kv_bytes),
                        lambda: nv.send_recv_s(kv_bytes))
        step_b = select(lambda: net.send_recv_s(kv2 if k == 1.0 else k * 2 * kv_bytes), lambda: nv.send_recv_s(kv2))
        steps = r - 1
        exp_f = steps * np.maximum(0.0, step_f - att_f_layer / r)
        exp_b = steps * np.maximum(0.0, step_b - att_b_layer / r)
        if ring is None:
            return exp_f, exp_b
        if ring is False:
            ring = r > 1
        return np.where(ring, exp_f, 0.0), np.where(ring, exp_b, 0.0)

    def _ulysses_time(self, tpr, u, crosses, uly=False):
        """Four all-to-alls per layer (same forward and backward). ``uly``: the groups with u > 1 (None: all of
        them, nothing masked; default: computed here)."""
        m, job = self.job.model, self.job
        q_bytes = tpr * job.heads_per_rank * m.head_dim * BF16_BYTES
        kv_bytes = tpr * job.kv_heads_per_rank * m.head_dim * BF16_BYTES
        nv, net = self._links("all_to_all")
        # every member sends on its own rail, shared on nodes with fewer NICs
        k = self._memoized("p2p_scale", self._p2p_bytes_scale)
        # LinkModel.seconds("all_to_all", ·, u) with its factor and latencies computed once for the four, and
        # its n > 1 mask left to the one below
        n = np.asarray(u, dtype=np.float64)
        factor, hops = collective_terms("all_to_all", n)
        lat: dict[str, np.ndarray] = {}
        select = _Select(crosses)

        def a2a(nbytes):
            def on_net():
                lat_net = lat["net"] = lat["net"] if "net" in lat else net.latency_s(hops)
                return net.transfer_s(lat_net, (nbytes if k == 1.0 else k * nbytes) * factor)

            def on_nv():
                lat_nv = lat["nv"] = lat["nv"] if "nv" in lat else nv.latency_s(hops)
                return nv.transfer_s(lat_nv, nbytes * factor)

            return select(on_net, on_nv)

        both = 2 * a2a(q_bytes) + 2 * a2a(kv_bytes)
        if uly is None:
            return both
        return np.where(n > 1 if uly is False else uly, both, 0.0)

    # ---- pipeline, data parallel, memory ---------------------------------------------------------------
    def pp_transfer_s(self, tokens_per_rank: np.ndarray, stage: int, rank: np.ndarray | int) -> np.ndarray:
        """Activations (forward) or their gradients (backward) of pool rank(s) ``rank`` between ``stage`` and
        ``stage + 1``: tokens · h · 2 bytes, split over the t GPUs of the TP group by sequence parallelism,
        each GPU sending its share on its own link. With ``terms.links`` every rank's transfer is priced by
        its own pair of GPUs, (stage, rank) → (stage + 1, rank): NVLink when both sit in one NVLink domain,
        else one NIC per GPU (cost_models.topology); without, by pool rank 0's pair for every rank (the
        first version)."""
        job = self.job
        nbytes = np.asarray(tokens_per_rank, dtype=np.float64) * job.model.hidden * BF16_BYTES / job.tp
        nxt = min(stage + 1, job.pp - 1)
        if not self.terms.links:
            crosses = bool(node_of(job, stage, 0) != node_of(job, nxt, 0))
            return self._cal.link("send_recv", "network" if crosses else "nvlink").seconds("send_recv", nbytes, 2)
        rank = np.asarray(rank, dtype=np.int64)
        crosses = node_of(job, stage, rank) != node_of(job, nxt, rank)
        nv, net = self._cal.link("send_recv", "nvlink"), self._cal.link("send_recv", "network")
        return np.where(crosses, net.seconds("send_recv", self._p2p_bytes_scale() * nbytes, 2),
                        nv.seconds("send_recv", nbytes, 2))

    def grad_sync_s(self, stage: int) -> float:
        """Reduce-scatter of bf16 gradients and all-gather of bf16 parameters over the pool (distributed
        optimizer), per GPU of the stage's TP shard."""
        job = self.job
        experts = moe.stage_expert_params(job, stage) if job.model.is_moe else 0  # synced over EDP instead
        nbytes = (stage_params(job, stage) - experts) / job.tp * BF16_BYTES
        link = "network" if bool(spans_nodes(job, stage, 0, job.pool)) else "nvlink"
        rs = self._collective_s("reduce_scatter", link, nbytes, stage, 0, job.pool)
        ag = self._collective_s("all_gather", link, nbytes, stage, 0, job.pool)
        if experts:
            return float(rs + ag) + moe.grad_sync_expert_s(job, self._cal, stage, link)
        return float(rs + ag)

    def _collective_s(self, op: str, link: str, nbytes: float, stage: int, first: int, size: int) -> float:
        """One TP shard's ring collective ``op`` over the contiguous pool ranks first .. first+size−1.

        Across domains, with ``terms.links``, its bus bandwidth is that of the NICs it gets,
        collective_nics(k) × the calibration's per-NIC network rate for k = the fewest of its ranks in any
        domain it spans (rail-optimised rings: cost_models.topology), and never above the NVLink rate of the
        same collective; without, one NIC's rate (the first version). Inside a domain: NVLink."""
        model = self._cal.link(op, link)
        if link == "network" and self.terms.links:
            nics = collective_nics(self.job, fewest_ranks_per_domain(self.job, stage, first, size))
            nv_bw = self._cal.link(op, "nvlink").busbw_gbs
            nbytes = nbytes * model.busbw_gbs / min(nics * model.busbw_gbs, max(nv_bw, model.busbw_gbs))
        return float(model.seconds(op, nbytes, size))

    def optimizer_s(self, stage: int) -> float:
        """Adam on one GPU's shard, bound by HBM bandwidth."""
        job = self.job
        shard = stage_params(job, stage) / job.tp / job.pool
        return float(shard * OPTIMIZER_BYTES_PER_PARAM / (job.gpu.hbm_bw_gbs * 1e9))

    def max_tokens_per_rank(self) -> int:
        return memory_budget_tokens(self.job, self.terms)

    def peak_memory_gb(self, max_tokens_in_flight: np.ndarray, stage: int, largest_tokens: np.ndarray | None = None,
                       cp_tokens: np.ndarray | None = None) -> np.ndarray:
        return peak_memory_bytes(self.job, stage, max_tokens_in_flight, largest_tokens, cp_tokens, self.terms) / 1e9

    def model_state_gb(self, stage: int) -> float:
        return model_state_bytes(self.job, stage) / 1e9

    def model_flops(self, lengths: np.ndarray) -> float:
        return model_flops(lengths, self.job.model)
