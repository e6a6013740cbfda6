"""The analytic cost model of docs/cost_model.md, driven by a :class:`~cost_models.calibration.Calibration`.

Per CP group of c = u·r ranks (u Ulysses ranks inside, a ring over r outer groups), for one rank, one stage of
``nl = job.stage_layers(stage)`` layers (Megatron's split, even or not: cost_models.pipeline_split):

* Linear layers (CostTerms.gemm_shapes; cost_models.gemm): each layer's GEMMs by their (M, N, K) after TP/SP
  sharding for (Σ L / c) tokens, forward one GEMM each, backward dgrad and wgrad, at the fitted
  GEMM rate plus their HBM traffic. With the term off: 4h²(1 + g/a) + 6hf FLOPs / t per token per layer at the
  calibration curve's efficiency of that token count, backward 2x.
* Attention: with dual-chunk balancing every rank does 1/c of Σ 2·L²·d·a / t; the kernel's efficiency is that
  of blocks of L / r tokens (a ring step pairs chunks of L / r; Ulysses gives each rank whole sequences with
  a/u heads). Backward 2.5x forward.
* Fixed costs (CostTerms.fixed_costs; cost_models.fixed_costs): every group's forward compute gets
  ``nl × (layer_overhead_fwd_s + (r − 1) · ring_step_overhead_fwd_s) + microbatch_overhead_fwd_s``
  and its backward the same with the ``_bwd_s`` fields (seconds, from the calibration; launches, norms, RoPE,
  activation, residuals, framework dispatch, the ring's per-step launches, the schedule's P2P launches).
  Added here and nowhere else; they do not depend on the group's tokens, so each extra microbatch and each
  extra ring step pays them again.
* Memory-bound operators (CostTerms.kernels; cost_models.kernels): norms, RoPE, the MLP activation and the
  residual adds by the bytes they move at HBM bandwidth, per token, forward and backward.
* Recompute (CostTerms.recompute; cost_models.recompute): selective adds the attention forward to the
  backward; full adds the recomputed share of the layers' forward compute, fixed costs, CP and TP
  communication (the stage's ends are not recomputed: added after).
* Ends of the pipeline (CostTerms.lm_head; cost_models.head): the embedding at stage 0, the LM head and
  loss at stage p − 1.
* Communication (CP ring and Ulysses, TP, PP, DP collectives; their link classes): cost_models.analytic_comm.

Modules by idea: this one is the model (``group_costs`` and the compute formulas); cost_models.analytic_comm its
communication; cost_models.analytic_pricing its declared fast pricing of sequences alone in a group
(:meth:`AnalyticCostModel.pricing`), which calls the formulas here rather than restating them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dcpsim.cost_models import gemm, kernels, moe, recompute
from dcpsim.cost_models.analytic_comm import AnalyticCommunication
from dcpsim.cost_models.analytic_pricing import AnalyticPricing
from dcpsim.cost_models.attention_backends import default_backend
from dcpsim.cost_models.base import GroupBatch, GroupCosts
from dcpsim.cost_models.calibration import Calibration, SaturatingCurve, default_calibration
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
from dcpsim.cost_models.specs import JobSpec
from dcpsim.cost_models.terms import CostTerms

OPTIMIZER_BYTES_PER_PARAM = 32.0  # Adam over fp32 master + 2 moments + bf16 grad/param, read and written


@dataclass(frozen=True)
class AnalyticCostModel(AnalyticCommunication):
    """Closed-form costs of docs/cost_model.md with calibrated kernel and link curves (its communication:
    :class:`~cost_models.analytic_comm.AnalyticCommunication`)."""

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

    # ---- the declared pricing (cost_models.analytic_pricing) -------------------------------------------
    def pricing(self) -> AnalyticPricing:
        """This model's :class:`~cost_models.base.Pricing` (cost_models.analytic_pricing): sequences alone in a
        group, the stage classes, the group overhead, the Ulysses floor; the numbers of ``group_costs``."""
        return self._memoized("pricing", lambda: AnalyticPricing(self))

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
        nl, t = job.stage_layers(stage), job.tp
        if r is None:
            size = size_i.astype(np.float64)
            u = u_i.astype(np.float64)
            r = size / u
        else:
            size, u = size_i, u_i
        G = len(size)
        tpr = tokens / size

        lin_f, lin_b = self._linear_s(tpr, stage)

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
        bwd = lin_b + att_b
        if self.terms.kernels:  # memory-bound operators by bytes moved (cost_models.kernels)
            kern_f, kern_b = self._memoized(f"kernels{stage}", lambda: kernels.per_token_s(job, stage))
            fwd = fwd + tpr * kern_f
            bwd = bwd + tpr * kern_b
        if self.terms.fixed_costs:
            # no ring anywhere: every group's r − 1 steps are 0, one number (x + the same scalar is the same sum)
            if fixed is not None:
                fixed_f, fixed_b = fixed
            elif n_ring:
                fixed_f, fixed_b = self.fixed_s(r, stage)
            else:  # (by layer count: every stage of an even split shares one)
                fixed_f, fixed_b = self._memoized(f"fixed_no_ring{nl}", lambda: self.fixed_s(np.ones(1), stage))
            fwd = fwd + fixed_f
            bwd = bwd + fixed_b
        if self.terms.recompute and job.recompute != "none":  # the backward re-runs forward work (recompute)
            if job.recompute == "selective":
                bwd = bwd + att_f
            else:
                frac = recompute.recomputed_fraction(job, stage)
                bwd = bwd + frac * fwd
                cp_b = cp_b + frac * cp_f
        return fwd, cp_f, bwd, cp_b, tpr

    def _at_stage(self, core: tuple, first_rank: np.ndarray, stage: int) -> tuple:
        """:meth:`_costs` from :meth:`_core`'s part: the stage's ends, TP communication and MoE terms added."""
        job, m, cal, nl = self.job, self.job.model, self._cal, self.job.stage_layers(stage)
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
            if self.terms.recompute and job.recompute == "full":  # the re-run forward's TP collectives
                tp_b = tp_b + recompute.recomputed_fraction(job, stage) * tp_layer * nl
        ep_f: np.ndarray | float = 0.0
        ep_b: np.ndarray | float = 0.0
        if m.is_moe:
            # MoE: EP dispatch/combine all-to-alls (cost_models.moe), their own fields (sim: comm kind "ep").
            ep_f, ep_b = moe.ep_comm_s(job, cal, tpr, stage, first_rank, self._p2p_bytes_scale(),
                                       by_destination=self.terms.links)
            # A layer that full recompute re-runs whole re-runs its MoE part once (in _core's share of the
            # forward), whatever job.moe_recompute says: the MoE-only recompute applies to the other layers,
            # and the re-run forward dispatches again (ep_comm_s doubles the backward for moe_recompute only).
            full = (recompute.recomputed_fraction(job, stage) if self.terms.recompute and job.recompute == "full"
                    else 0.0)
            if job.moe_recompute:  # one more forward of each MoE layer's MLP part (router, experts, shared)
                mlp = (gemm.moe_mlp_fwd_s(job, tpr, cal.gemm.peak_tflops) if self.terms.gemm_shapes
                       else moe.moe_mlp_fwd_s(job, cal, tpr))
                bwd = bwd + (1.0 - full) * moe.stage_layers(job, stage)[1] * mlp
            if full and not job.moe_recompute:
                ep_b = ep_b + full * ep_f
        return fwd, cp_f, bwd, cp_b, tp_f, tp_b, ep_f, ep_b

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

    def fixed_s(self, r: np.ndarray, stage: int = 0) -> tuple[np.ndarray | float, np.ndarray | float]:
        """Fixed (token-independent) forward and backward seconds of one group operation at ``stage``, per
        GPU (cost_models.fixed_costs): per layer, per ring step beyond the first (r − 1 per layer), per
        microbatch. Zero with CostTerms.fixed_costs off (then the calibration's per-layer overhead is dropped
        too: the first version's numbers)."""
        if not self.terms.fixed_costs:
            return 0.0, 0.0
        cal, nl = self._cal, self.job.stage_layers(stage)
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

    def _linear_s(self, tpr: np.ndarray, stage: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Forward and backward seconds of the stage's linear layers (QKV/O projections, MLP; a MoE layer's
        router, shared and routed experts) for ``tpr`` tokens per rank, on one GPU of the TP group. The one
        place the layers' GEMMs are priced: by shape (cost_models.gemm, CostTerms.gemm_shapes) or, with that
        term off, by FLOPs on the calibration's token curve with the backward 2x (cost_models.moe for a MoE
        model)."""
        job = self.job
        if self.terms.gemm_shapes:
            return gemm.stage_s(job, tpr, stage, self._cal.gemm.peak_tflops)
        if job.model.is_moe:
            fwd = moe.linear_fwd_s(job, self._cal, tpr, stage)
            return fwd, LINEAR_BWD_FACTOR * fwd
        lin_flops = tpr * self._memoized("lin_per_token", lambda: linear_fwd_flops_per_token(job.model))
        if job.tp != 1:  # x / 1 is x
            lin_flops = lin_flops / job.tp
        fwd = self._cal.gemm.seconds(lin_flops * job.stage_layers(stage), tpr)
        return fwd, LINEAR_BWD_FACTOR * fwd

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
