"""The analytic model's communication (cost_models.analytic): CP ring and Ulysses, TP, PP and DP collectives.

Per CP group of c = u·r ranks (u Ulysses ranks inside, a ring over r outer groups), for one rank, one layer:

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
* TP communication (CostTerms.tp_comm): :meth:`AnalyticCommunication.tp_comm_layer_s`.
* PP transfers and the data-parallel gradient sync: :meth:`AnalyticCommunication.pp_transfer_s`,
  :meth:`AnalyticCommunication.grad_sync_s`.

:class:`AnalyticCommunication` is a base class of :class:`~cost_models.analytic.AnalyticCostModel`: its
methods read the model's job, calibration, terms and memo.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from dcpsim.cost_models import dp_overlap, moe
from dcpsim.cost_models.base import GroupBatch
from dcpsim.cost_models.calibration import Calibration, collective_terms
from dcpsim.cost_models.memory import stage_params, state_bytes_per_param
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



class AnalyticCommunication:
    """The communication terms of the analytic model (module docstring)."""

    job: JobSpec
    terms: CostTerms
    _cal: Calibration

    if TYPE_CHECKING:
        def _memoized(self, name: str, make: Callable[[], Any]) -> Any: ...

    def _links(self, op: str) -> tuple:
        """(NVLink, network) models of ``op``."""
        return self._memoized(op, lambda: (self._cal.link(op, "nvlink"), self._cal.link(op, "network")))


    # ---- TP ---------------------------------------------------------------------------------------------
    def tp_comm_layer_s(self, tpr: np.ndarray) -> np.ndarray:
        """Exposed TP communication of one layer, forward (the backward is the same), per GPU (seconds).

        Megatron-LM sequence parallelism (Korthikanti et al. 2022, §4.2.2): per layer forward, an all-gather
        before the QKV and the first MLP GEMM and a reduce-scatter after the O and the second MLP GEMM, each
        of the full activation, tokens · h · 2 bytes (bf16) — the nccl-tests buffer size, of which a ring
        moves (t−1)/t per GPU. The backward mirrors them (all-gather ↔ reduce-scatter). The TP group sits
        inside an NVLink domain (JobSpec requires t to divide gpu.nvlink_domain), so the calibration's NVLink
        all_gather and reduce_scatter models price them, α included. ``job.tp_comm_overlap`` of it is hidden behind
        GEMMs (0 by default: Megatron-LM's default is no --tp-comm-overlap). Not counted: the backward's second
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

    def ulysses_floor(self, tpr: np.ndarray, u: np.ndarray) -> np.ndarray:
        """A lower bound on :meth:`_ulysses_time` · the layers of any stage, of groups with inner degree ``u`` holding
        ``tpr`` tokens per rank, wherever their inner groups sit (assumption U of docs/bound.md): the four
        all-to-alls per layer are α + β·tpr on each link class, so α* + β*·tpr with α*, β* the smaller of the
        NVLink and the network intercept and slope is below either. 0 where u = 1."""
        uniq, idx = np.unique(np.asarray(u, dtype=np.float64), return_inverse=True)  # priced once per degree
        t0 = [self._ulysses_time(np.zeros_like(uniq), uniq, np.full(uniq.shape, x)) for x in (False, True)]
        t1 = [self._ulysses_time(np.ones_like(uniq), uniq, np.full(uniq.shape, x)) for x in (False, True)]
        alpha = np.minimum(t0[0], t0[1])
        beta = np.maximum(np.minimum(t1[0] - t0[0], t1[1] - t0[1]), 0.0)
        nl = min(self.job.stage_layers(s) for s in range(self.job.pp))  # (every stage's floor: the fewest layers)
        per = np.where(uniq > 1, nl, 0.0)
        return (per * alpha)[idx] + (per * beta)[idx] * np.asarray(tpr, dtype=np.float64)

    # ---- pipeline, data parallel -------------------------------------------------------------------------
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
        """Reduce-scatter of the gradients and all-gather of the bf16 parameters over the pool (distributed
        optimizer), per GPU of the stage's TP shard. The gradients travel in their buffer's dtype: fp32 where
        Megatron-LM accumulates and reduces them in fp32 (its behaviour with --bf16 unless
        --grad-reduce-in-bf16: megatron/training/arguments.py, "bfloat16 requires gradient accumulation and
        all-reduce to be done in fp32"; the buffer's dtype is the reduce-scatter's,
        megatron/core/distributed/param_and_grad_buffer.py), bf16 with ``job.grad_reduce_in_fp32`` off (and with
        ``terms.grad_dtype`` off, the first version)."""
        job = self.job
        experts = moe.stage_expert_params(job, stage) if job.model.is_moe else 0  # synced over EDP instead
        params = (stage_params(job, stage) - experts) / job.tp
        grad_bytes = state_bytes_per_param(job)[1] if self.terms.grad_dtype else BF16_BYTES  # off: the first version
        link = "network" if bool(spans_nodes(job, stage, 0, job.pool)) else "nvlink"
        rs = self._collective_s("reduce_scatter", link, params * grad_bytes, stage, 0, job.pool)
        ag = self._collective_s("all_gather", link, params * BF16_BYTES, stage, 0, job.pool)
        if self.terms.dp_overlap:  # --overlap-grad-reduce / --overlap-param-gather (cost_models.dp_overlap)
            rs_x, ag_x = dp_overlap.exposed_fractions(job, stage_params(job, stage) / job.tp)
            rs, ag = rs * rs_x, ag * ag_x
        else:
            rs_x = ag_x = 1.0
        if experts:
            return float(rs + ag) + moe.grad_sync_expert_s(job, self._cal, stage, link, rs_x, ag_x, grad_bytes)
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

