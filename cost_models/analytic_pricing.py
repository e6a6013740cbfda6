"""The analytic model's own :class:`~cost_models.base.Pricing`: sequences alone in a group, by option, through the
model's formulas (``AnalyticCostModel._core`` and ``_at_stage``, the functions ``group_costs`` runs), without
building a :class:`~cost_models.base.GroupBatch` per call, and the stage classes.

What is faster than :class:`~cost_models.pricing.GroupCostsPricing` (the same numbers, bit for bit:
tests/cost_models/test_pricing.py, test_alone_total.py, test_probe.py):

* what depends on an option alone (its ring degree, its ring and inner groups' NVLink-domain crossings, its
  fixed costs) is worked out once per option table, kept on the model for the next call with the same
  options, and gathered per sequence (elementwise: the same numbers as per sequence);
* no per-group sums or gathers (each group holds one sequence: ``group_costs``' own "alone" path);
* where the stages differ only at the pipeline's ends (:meth:`AnalyticPricing.stage_classes`' condition),
  the part before the ends is priced once for every stage asked.

A new cost term goes into the model's formulas (cost_models.analytic, analytic_comm) and nowhere else: this
module calls them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dcpsim.cost_models import moe
from dcpsim.cost_models.pricing import GroupCostsPricing

if TYPE_CHECKING:
    from dcpsim.cost_models.analytic import AnalyticCostModel

CACHED_TABLES = 64  # option tables kept per cost model (a planner's table grows rarely)


@dataclass(frozen=True, eq=False)
class AnalyticPricing(GroupCostsPricing):
    """:class:`~cost_models.base.Pricing` of an :class:`~cost_models.analytic.AnalyticCostModel` (module
    docstring); what it does not override is the default's, built on these."""

    cost_model: AnalyticCostModel

    # ---- stage classes ------------------------------------------------------------------------------------
    def stage_classes(self) -> tuple[int, ...]:
        """Of a dense model, the stages strictly between the ends (both ends too with CostTerms.lm_head off)
        cost the same when a stage's ranks start on an NVLink-domain boundary, pool · t a multiple of the
        domain's GPUs: then every group's crossings (contiguous or listed members, either links rule) are the
        same at every stage, and nothing else in group_costs reads the stage but its layer count, which differs
        only at the ends (Megatron's uneven splits: cost_models.pipeline_split; the ends are then their
        own classes with CostTerms.lm_head off too). Otherwise (a MoE model: its stages hold different layers;
        groups shifted across a domain boundary) every stage is its own class."""
        cm = self.cost_model
        return cm._memoized("stage_classes", lambda: self._classes(
            cm.terms.lm_head or not cm.job.even_split,
            not cm.job.model.is_moe and self.stages_on_domain_boundaries()))

    def compute_stage_classes(self) -> tuple[int, ...]:
        """Of a dense model, every stage between the ends: each runs the same layers (JobSpec.stage_layers; an
        uneven split differs only at the ends) and only the ends differ (the embedding at stage 0, the LM head
        at p − 1: ``AnalyticCostModel.ends_s``); links, which depend on the stage, are CP communication,
        outside what this reads. The ends stay their own classes whether or not CostTerms.lm_head is on. A MoE
        model: every stage its own."""
        return self._classes(True, not self.cost_model.job.model.is_moe)

    def _classes(self, ends_apart: bool, middle_shared: bool) -> tuple[int, ...]:
        """The one rule of both: each stage its own class unless ``middle_shared``; then every stage in one
        class but the ends, which are their own when ``ends_apart``."""
        p = self.cost_model.job.pp
        if not middle_shared:
            return tuple(range(p))
        ends = {0, p - 1} if ends_apart else set()
        first_middle = next((s for s in range(p) if s not in ends), 0)  # (0: no stage is a middle one)
        return tuple(s if s in ends else first_middle for s in range(p))

    def stages_on_domain_boundaries(self) -> bool:
        """Whether every stage's ranks start on an NVLink-domain boundary (pool · t a multiple of the domain's
        GPUs): then every group's crossings are the same at every stage."""
        job = self.cost_model.job
        return (job.pool * job.tp) % job.gpu.nvlink_domain == 0

    # ---- what the terms say ------------------------------------------------------------------------------
    def prices_fixed_costs(self) -> bool:
        return bool(self.cost_model.terms.fixed_costs)

    def ulysses_floor(self, tpr: np.ndarray, u: np.ndarray) -> np.ndarray | float:
        return self.cost_model.ulysses_floor(tpr, u)

    def ep_floor(self, tpr: np.ndarray, stage: int) -> tuple[np.ndarray | float, np.ndarray | float]:
        """cost_models.moe.ep_comm_floor's line at ``tpr``: the forward's floor; the backward the same, twice
        with MoE recompute (the re-run forward dispatches again), as ``moe.ep_comm_s`` prices them."""
        cm = self.cost_model
        job = cm.job
        if not job.model.is_moe:
            return 0.0, 0.0
        alpha, beta = moe.ep_comm_floor(job, cm._cal, stage, cm._p2p_bytes_scale(), by_destination=cm.terms.links)
        if alpha == 0.0 and beta == 0.0:
            return 0.0, 0.0
        f = alpha + beta * np.asarray(tpr, dtype=np.float64)
        return f, (2.0 if job.moe_recompute else 1.0) * f

    # ---- alone totals -------------------------------------------------------------------------------------
    def alone_stage_totals(self, lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray,
                           stages: tuple[int, ...], prefix: tuple[int | None, ...] | None = None,
                           option: np.ndarray | None = None) -> list[np.ndarray]:
        """The numbers of ``group_costs(...).total_s``, bit for bit (the zero TP and EP terms not added: x + 0.0
        is x). With ``option``, what depends on the option alone is priced once per option and gathered."""
        cm = self.cost_model
        L = np.asarray(lengths, dtype=np.int64).astype(np.float64)
        size, u = np.asarray(sizes, dtype=np.int64), np.asarray(ulysses, dtype=np.int64)
        shared = self._shared_core()
        ks = [len(L) if k is None else k for k in (prefix or (None,) * len(stages))]
        if option is None:
            def core_of(s: int, c: int) -> tuple:
                first = np.zeros(c, dtype=np.int64)
                return cm._core(L[:c], L[:c], size[:c], u[:c], None, cm._crossings(s, size[:c], u[:c], first), s)
        else:
            opt = np.asarray(option, dtype=np.int64)

            def core_of(s: int, c: int) -> tuple:
                ring_x, inner_x, fixed, size_f, u_f, r = self._options(size, u, -1 if shared else s, s)
                o = opt[:c]
                return cm._core(L[:c], L[:c], size_f[o], u_f[o], None, (ring_x[o], inner_x[o]), s,
                                fixed=None if fixed is None else (fixed[0][o], fixed[1][o]), r=r[o])
        return _per_stage(stages, ks, shared, core_of, self._total)

    def alone_block_totals(self, lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray,
                           stages: tuple[int, ...], prefix: tuple[int | None, ...] | None = None) -> list[np.ndarray]:
        """:meth:`alone_stage_totals` of the block flattened option by option (length j of option i at i·k + j),
        reshaped: one call for every stage where they share their core, else one per stage at its own k."""
        L = np.asarray(lengths, dtype=np.int64)
        n = len(np.asarray(sizes))
        ks = [len(L) if k is None else k for k in (prefix or (None,) * len(stages))]
        shared = self._shared_core()
        calls = [(tuple(stages), max(ks, default=0))] if shared else [((s,), k) for s, k in zip(stages, ks)]
        rows = []
        for ss, c in calls:
            flat = self.alone_stage_totals(np.tile(L[:c], n), sizes, ulysses, ss, None, np.repeat(np.arange(n), c))
            rows += [row.reshape(n, c) for row in flat]
        return [row[:, :k] for row, k in zip(rows, ks)]

    def _shared_core(self) -> bool:
        """Whether every stage has the same core (``AnalyticCostModel._core``): a dense model whose stages start
        on domain boundaries and hold the same layers (an even split)."""
        job = self.cost_model.job
        return not job.model.is_moe and self.stages_on_domain_boundaries() and job.even_split

    def _options(self, size: np.ndarray, u: np.ndarray, key_stage: int, stage: int) -> tuple:
        """Per option (int64 ``size``, ``u``), contiguous from pool rank 0 at ``stage``: its ring's and inner
        groups' crossings, its fixed costs (None with them off), size and u as float64 and its ring degree; kept
        on the model under (``key_stage``, the options) for the next call."""
        cm = self.cost_model
        cache = cm._memoized("option_groups", dict)
        key = (key_stage, size.tobytes(), u.tobytes())
        per = cache.get(key)
        if per is None:
            if len(cache) >= CACHED_TABLES:
                cache.clear()
            ring_x, inner_x = cm._crossings(stage, size, u, np.zeros(len(size), dtype=np.int64))
            size_f, u_f = size.astype(np.float64), u.astype(np.float64)
            r = size_f / u_f
            fixed = cm.fixed_s(r, stage) if cm.terms.fixed_costs else None
            if fixed is not None:
                fixed = (np.broadcast_to(fixed[0], r.shape), np.broadcast_to(fixed[1], r.shape))
            per = cache[key] = (ring_x, inner_x, fixed, size_f, u_f, r)
        return per

    def _total(self, core: tuple, stage: int) -> np.ndarray:
        """``GroupCosts.total_s`` of a core (``AnalyticCostModel._core``'s part) at ``stage``: the stage's ends,
        TP and MoE terms added (``_at_stage``), summed in ``total_s``'s order."""
        cm = self.cost_model
        fwd, cp_f, bwd, cp_b, tp_f, tp_b, ep_f, ep_b = cm._at_stage(core, np.zeros(len(core[0]), dtype=np.int64),
                                                                   stage)
        total = fwd + cp_f + bwd + cp_b  # x + 0.0 is x (never -0.0)
        if tp_f is not None:
            total = total + tp_f + tp_b
        if cm.job.model.is_moe:
            total = total + ep_f + ep_b
        return total


def _per_stage(stages: tuple[int, ...], ks: list[int], shared: bool, core_of: Callable[[int, int], tuple],
               total_of: Callable[[tuple, int], np.ndarray]) -> list[np.ndarray]:
    """``total_of(core's first k, s)`` for each stage s of ``stages`` and count k of ``ks``: the core
    (``core_of(s, count)``) computed once, at the largest count, when the stages share it (``shared``), else per
    stage at its own count."""
    core: tuple | None = None
    out = []
    for s, k in zip(stages, ks):
        if core is None or not shared:
            core = core_of(s, max(ks) if shared else k)
        out.append(total_of(core if len(core[0]) == k else tuple(x[:k] for x in core), s))
    return out
