"""HyDra: load-driven dynamic context parallelism (docs/hydra.md: the algorithm, why it is right, the map of
this package, the measurements). One iteration's plan in five steps, each its own module:

1. **Work** (:mod:`.work`, priced through :mod:`.pricing`): per-rank work of a grid of lengths × allowed degrees
   × engines, the group's fixed overhead split off.
2. **Target and microbatch count** (:mod:`.target`): the closed-form τ(m) for every candidate count, sequences
   too heavy to balance set apart; the m with the smallest 1F1B estimate.
3. **Degrees and engines** (:mod:`.degrees`): the smallest allowed degree whose load alone meets τ; one planning
   engine per degree, and after placement each group's Ulysses × ring split.
4. **Placement** (:mod:`.placement`, :mod:`.fill`): long sequences shape the groups, the rest fill them largest
   first into the roomiest bin.
5. **Order and columns** (:mod:`.order`): the heavy block where the 1F1B recurrence puts it best; aligned halves
   mirrored so that every rank's total load evens out. (``plan.meta``: docs/hydra.md, the options.)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar, Literal, NamedTuple

import numpy as np

from dcpsim.cost_models.base import CostModel
from dcpsim.cost_models.specs import JobSpec
from dcpsim.policies.engines import ENGINE_CHOICES, engine_from_ulysses
from dcpsim.policies.hydra.degrees import (
    allowed_degrees,
    engine_options,
    group_engines,
    planning_engines_many,
    sequence_degrees_many,
    sorted_unique,
)
from dcpsim.policies.hydra.order import (
    balance_columns,
    best_order,
    candidate_orders,
    height_profiles,
    makespans,
)
from dcpsim.policies.hydra.placement import Layout, Structure, finish, structure
from dcpsim.policies.hydra.pricing import prices_fixed_costs, rank_loads
from dcpsim.policies.hydra.target import TargetChoice, TargetSearch, build_target_model, choose_target
from dcpsim.policies.hydra.work import Pricer, WorkGrid, build_grid
from dcpsim.policies.opening import plan_inputs
from dcpsim.policies.plan import CPGroup, Plan, make_plan
from dcpsim.policies.registry import option, register_policy

if TYPE_CHECKING:
    from dcpsim.traces.batching import GlobalBatch

__all__ = ["HyDra", "rank_loads"]

# degrees="auto" plans "any" too on pools of at most this many ranks (its grid prices every degree 1..W)
ANY_MAX_POOL = 128


class _Draft(NamedTuple):
    """One microbatch count's placement, ordered and scored (the 1F1B recurrence of its heights), before
    engines and the Plan are made for the winner."""

    score: float
    layout: Layout
    keys: list[int]  # microbatches in placement numbering
    order: list[int]  # the run order: indices into keys
    choice: TargetChoice
    n_heavy: int


class _Context(NamedTuple):
    """What every draft of one plan shares."""

    job: JobSpec
    W: int
    M: int
    D: np.ndarray  # allowed degrees
    ids: np.ndarray
    lengths: np.ndarray
    slow: np.ndarray | None
    pricer: Pricer
    stage_scale: np.ndarray | None


def _heights(keys: list[int], n_mbs: int, mb: np.ndarray, load: np.ndarray) -> np.ndarray:
    """Each run slot's height: the largest load of the groups (microbatch ``mb``, load ``load``) in microbatch
    ``keys[slot]`` (0 where it has none); ``n_mbs`` microbatches in all."""
    slot_of = np.zeros(n_mbs, dtype=np.int64)
    slot_of[keys] = np.arange(len(keys))
    height = np.zeros(len(keys))
    np.maximum.at(height, slot_of[mb], load)
    return height


@register_policy("hydra")
@dataclass(frozen=True)
class HyDra:
    """Load-driven DCP: one closed-form load target, degrees from load, placement by sorted lists and heaps,
    the hybrid engine per group (module docstring; the options below)."""

    cp_engine: str = option("auto", choices=ENGINE_CHOICES)
    # auto: pow2, and on pools of ≤ ANY_MAX_POOL ranks also any; the plan with the smaller columns_s is kept
    degrees: Literal["pow2", "any", "auto"] = "auto"
    min_cp_size: int = option(1, ge=1)
    tolerance: float = option(0.05, ge=0.0, le=10.0)  # a fraction of τ
    num_microbatches: int | None = option(None, ge=1)  # None: chosen for 1F1B
    max_seqlen_per_rank: int | None = option(None, ge=1)  # tokens; None: the cost model's memory budget
    # light microbatch heights ramp at both ends (order.height_profiles); False: flat; None: on unless the cost
    # model leaves fixed costs out (CostTerms.fixed_costs off, e.g. --cost-terms legacy: the first plans)
    profile: bool | None = None
    # microbatch counts planned: m, ⌈m/2⌉, …, ⌈m/k⌉, the best by the recurrence; None: 3 (1 without fixed costs)
    m_candidates: int | None = option(None, ge=1)
    # how τ follows from the batch's rank-work F (target.solve_tau): the closed-form fixed point, or "mean"
    # (τ = the mean load per slot at the smallest loads alone, no fixed point: a researcher's variant)
    target: Literal["fixed-point", "mean"] = "fixed-point"
    name: ClassVar[str]  # set by @register_policy

    def plan(self, batch: GlobalBatch, job: JobSpec, cost_model: CostModel) -> Plan:
        if self.degrees == "auto":
            # Odd degrees let long sequences take the ranks their load needs (prod-2048-256k seed 2: 3.4%
            # faster), yet lose elsewhere (default seed 1: 6% slower), and only the finished plans tell: plan
            # both (any also at pow2's chosen count), keep the smaller ``columns_s`` (docs/hydra.md §13).
            both = job.pool <= ANY_MAX_POOL and prices_fixed_costs(cost_model)  # legacy: the first plans
            best = replace(self, degrees="pow2")._plan(batch, job, cost_model, columns=both)
            if both:
                alt = replace(self, degrees="any")._plan(batch, job, cost_model, columns=True,
                                                         extra_m=(int(best.meta["chosen_microbatches"]),))
                if alt.meta["columns_s"] < best.meta["columns_s"] * (1 - 1e-9):
                    best = alt
            return best
        return self._plan(batch, job, cost_model)

    def _plan(self, batch: GlobalBatch, job: JobSpec, cost_model: CostModel, extra_m: tuple[int, ...] = (),
              columns: bool = False) -> Plan:
        """One degree set's plan; ``extra_m``: microbatch counts to plan besides m, ⌈m/2⌉, …, ⌈m/k⌉;
        ``columns``: record ``meta["columns_s"]``, the largest of the ranks' own 1F1B recurrences."""
        inp = plan_inputs(self.name, batch, cost_model, self.max_seqlen_per_rank)
        ids, lengths, M, W = inp.ids, inp.lengths, inp.budget, job.pool
        D = allowed_degrees(W, self.degrees, self.min_cp_size, self.cp_engine, job)
        inp.check_fit(int(D[-1]) * M, f"more than the largest allowed CP group holds: {int(D[-1])} ranks × {M} tokens "
                      f"per rank = {int(D[-1]) * M} (pool W = {W}, degrees = {self.degrees!r}, cp_engine = "
                      f"{self.cp_engine!r}); cut it or raise the budget")
        kmin = np.searchsorted(M * D, lengths, side="left")  # smallest degree index with L ≤ M·c
        # Stragglers (cost_models.stragglers): a pool rank's factor is its slowest stage's (one plan for all
        # stages); the target balances over the effective ranks Σ 1/f, groups on slow ranks hold less.
        slow = job.slowdown().max(axis=0) if job.stragglers else None
        pricer = Pricer(lengths, cost_model)
        grid = build_grid(lengths, D, self.cp_engine, job, cost_model, M, pricer=pricer)
        tm = build_target_model(grid)
        capacity = None if slow is None else float((1.0 / slow).sum())
        search = TargetSearch(grid, tm, W, job.pp, lengths, M, capacity, rule=self.target)  # kept across counts
        choices, profiles = self._choices(search, grid, job, extra_m)
        degrees = sequence_degrees_many(grid, tm, [c.tau for c in choices], lengths, kmin, pricer)
        engines_of = planning_engines_many([(D[k], u, heavy, c.tau) for (k, u, heavy), c in zip(degrees, choices)],
                                           lengths, job, pricer, self.cp_engine)
        ctx = _Context(job, W, M, D, ids, lengths, slow, pricer, grid.stage_scale)
        draft = self._best_draft(ctx, choices, degrees, engines_of, profiles)
        engines = group_engines(draft.layout, job, pricer, self.cp_engine)
        return self._assemble(W, job.pp, draft, engines, ids, M, grid.stage_scale, columns)

    def _best_draft(self, ctx: _Context, choices: list[TargetChoice], degrees: list, engines_of: list,
                    profiles: list[np.ndarray | None]) -> _Draft:
        """The draft with the smallest score (the earliest on ties within 1e-9), best first: every choice's heavy
        groups and first quarter of phase A scored by :meth:`_structure_bound`, then in ascending bound the rest
        of phase A and the fill, skipping a choice once its bound is at least the best score so far. Without it
        (every choice filled in list order): +27% plan time at the 2,048 × 256 cell (docs/hydra.md §5, §8)."""
        starts = [self._start(ctx, *x) for x in zip(choices, degrees, engines_of, profiles)]
        n_prof = [0 if p is None else len(p) for p in profiles]
        bounds = [self._structure_bound(st, c.tau, n, ctx) if len(choices) > 1 else 0.0
                  for st, c, n in zip(starts, choices, n_prof)]
        best: tuple[_Draft, int] | None = None
        for i in sorted(range(len(choices)), key=lambda q: (bounds[q], q)):
            # an earlier choice wins a tie: it may score up to 1e-9 above the best, a later one must beat it
            lim = np.inf if best is None else best[0].score * (1 + 2e-9 if i < best[1] else 1 - 1e-9)
            if bounds[i] >= lim:
                continue
            starts[i].advance()
            if best is not None and self._structure_bound(starts[i], choices[i].tau, n_prof[i], ctx) >= lim:
                continue
            layout = finish(starts[i], ctx.pricer.work, ctx.pricer.estimate)
            keys, order, score = self._order(layout, choices[i].tau, ctx.job.pp, n_prof[i], ctx.stage_scale)
            if (best is None or score < best[0].score * (1 - 1e-9)
                    or (i < best[1] and score <= best[0].score * (1 + 1e-9))):
                best = (_Draft(score, layout, keys, order, choices[i], int(degrees[i][2].sum())), i)
        assert best is not None  # the smallest bound is never cut
        return best[0]

    def _choices(self, search: TargetSearch, grid: WorkGrid, job: JobSpec,
                 extra_m: tuple[int, ...]) -> tuple[list[TargetChoice], list[np.ndarray | None]]:
        """The target choices to place (the 1F1B estimate's pick of m, then ⌈m/2⌉, …, ⌈m/k⌉ and ``extra_m``)
        and the light microbatches' height profile of each (None: flat). The closed-form pick of m misses at
        times (h100-512-256k seed 0: 85 microbatches, 36 is 8% faster): the finished layouts decide."""
        choice = choose_target(search, self.num_microbatches)
        first_version = not grid.extra_overhead  # no fixed costs priced: plan as the first version did
        use_profile = (not first_version) if self.profile is None else self.profile
        candidates = (1 if first_version else 3) if self.m_candidates is None else self.m_candidates
        choices = [choice]
        if self.num_microbatches is None:
            m0 = choice.m_light + choice.m_heavy
            tried = {m0}
            for m_alt in [-(-m0 // d) for d in range(2, candidates + 1)] + [m for m in extra_m if m not in tried]:
                if m_alt < 2 * job.pp or m_alt <= choice.m_heavy:
                    continue
                alt = choose_target(search, m_alt)
                m_got = alt.m_light + alt.m_heavy
                if m_got in tried or (m_alt not in extra_m and m_got > m0):  # extra counts may exceed m
                    continue
                tried.add(m_got)
                choices.append(alt)
        # Light heights ramp at both ends when the 1F1B recurrence says so (flat when groups, not work, set m).
        ramp = [i for i, c in enumerate(choices) if use_profile and c.m_light and c.level >= c.tau * (1 - 1e-9)]
        profiles: list[np.ndarray | None] = [None] * len(choices)
        for i, prof in zip(ramp, height_profiles([(choices[i].m_light, choices[i].tau, choices[i].heavy_heights)
                                                  for i in ramp], job.pp)):
            profiles[i] = prof
        return choices, profiles

    def _start(self, ctx: _Context, choice: TargetChoice, degrees: tuple, engines: tuple,
               profile: np.ndarray | None) -> Structure:
        """The structure (:func:`placement.structure`) of one choice with its light heights (None: flat)."""
        (k, _, heavy), (u_seq, shares, ovh) = degrees, engines
        D, job, sizes = ctx.D, ctx.job, ctx.D[k]
        at_fill = np.flatnonzero((sizes == D[0]) & ~heavy)
        fill = (int(D[0]), int(u_seq[at_fill[0]]) if at_fill.size
                else engine_options(int(D[0]), self.cp_engine, job)[0])
        ovh.setdefault(fill, float(ctx.pricer.overhead(np.array([fill[0]]), np.array([fill[1]]))[0]))
        return structure(pool=ctx.W, slowdown=ctx.slow, budget=ctx.M, tau=choice.tau, tol=self.tolerance,
                         aligned=self.degrees == "pow2", lengths=ctx.lengths, sizes=sizes, ulysses=u_seq,
                         shares=shares, heavy=heavy, m_light=choice.m_light, order_key=ctx.ids, overhead=ovh,
                         fill=fill, light_heights=profile)

    # ---- step 5: order, plan ---------------------------------------------------------------------------
    def _order(self, layout: Layout, tau: float, pp: int, n_profile: int,
               stage_scale: np.ndarray | None = None) -> tuple[list[int], list[int], float]:
        """The microbatches' run order by the 1F1B recurrence: their keys (placement numbering), the order
        (indices into keys) and the makespan of their heights (each the tallest group's load) in that order."""
        keys, ends = self._run_keys(sorted_unique(layout.mb).tolist(), layout.caps, layout.heavy_mbs, tau, n_profile)
        height = _heights(keys, len(layout.caps), layout.mb, layout.load)
        is_heavy = np.asarray(keys) < layout.heavy_mbs
        order, score = best_order(height, is_heavy, pp, ends) if keys else ([], 0.0)
        if stage_scale is not None and keys:  # the score with each stage at its share (the order stays)
            score = float(makespans(height[order][None, :], pp, stage_scale=stage_scale)[0])
        return keys, order, score

    def _run_keys(self, keys: list[int], caps: list[float], heavy_mbs: int, tau: float,
                  n_profile: int) -> tuple[list[int], int]:
        """The microbatch keys (ascending) in run-order slots, and the ramp length ``ends`` kept at both ends:
        a height profile's ramps (its first and last light microbatches below τ) stay at the two ends, the
        microbatches placement opened beyond the profile go before the ramp down, the heavy block between."""
        short = [c < (1.0 + self.tolerance) * tau * (1 - 1e-9) for c in caps[heavy_mbs:heavy_mbs + n_profile]]
        ends = next((i for i, x in enumerate(short) if not x), 0)
        if ends:
            prof = [k for k in keys if heavy_mbs <= k < heavy_mbs + n_profile]
            extra = [k for k in keys if k >= heavy_mbs + n_profile]
            keys = [k for k in keys if k < heavy_mbs] + prof[:len(prof) - ends] + extra + prof[len(prof) - ends:]
        return keys, ends

    def _structure_bound(self, st: Structure, tau: float, n_profile: int, ctx: _Context) -> float:
        """A lower bound on :meth:`_order`'s score of the finished layout from its groups so far: the rest only adds
        load, heights only grow and the recurrence of a fixed order is monotone in every height."""
        caps, heavy_mbs = st.pk.caps, st.heavy_mbs
        keys, ends = self._run_keys(list(range(len(caps))), caps, heavy_mbs, tau, n_profile)
        if not keys:
            return 0.0
        height = _heights(keys, len(caps), np.asarray([b.mb for b in st.pk.bins], dtype=np.int64),
                          np.asarray([b.load for b in st.pk.bins], dtype=np.float64))
        orders = candidate_orders(height, np.asarray(keys) < heavy_mbs, ctx.job.pp, ends)
        return float(makespans(height[orders], ctx.job.pp, stage_scale=ctx.stage_scale).min())

    def _assemble(self, W: int, pp: int, draft: _Draft, engines: np.ndarray, ids: np.ndarray, M: int,
                  stage_scale: np.ndarray | None = None, columns: bool = False) -> Plan:
        """Balance the columns (aligned mirroring) of the draft's microbatches in run order, build the Plan;
        ``columns``: also the largest of every rank's own column through the recurrence after the mirroring
        (``meta["columns_s"]``)."""
        layout, keys, order, choice = draft.layout, draft.keys, draft.order, draft.choice
        run_of = np.zeros(len(layout.caps), dtype=np.int64)  # microbatch key → position in the run order
        run_of[np.asarray(keys, dtype=np.int64)[order]] = np.arange(len(keys))
        rows = run_of[layout.mb]
        size = layout.size
        offsets = np.cumsum(size) - size
        idx = np.repeat(rows * W + layout.first - offsets, size) + np.arange(int(size.sum()))  # every member slot
        flat = np.zeros(len(keys) * W)
        flat[idx] = np.repeat(layout.load, size)
        loads = flat.reshape(len(keys), W)
        pos = balance_columns(loads, layout.slow) if self.degrees == "pow2" else np.tile(np.arange(W), (len(keys), 1))
        # each group's first rank after the mirroring: the least of its block's new positions, one reduceat
        firsts = np.minimum.reduceat(pos.reshape(-1)[idx], offsets) if len(size) else np.zeros(0, dtype=np.int64)
        # the groups' sequence ids in placement order, and the groups by microbatch, then first rank
        by_group = layout.placed[np.argsort(layout.seq_group[layout.placed], kind="stable")]
        count = np.bincount(layout.seq_group, minlength=len(size))
        ends_at = np.cumsum(count)
        id_tup = tuple(ids[by_group].tolist())  # (a slice of a tuple is the group's tuple)
        go = np.argsort(rows * W + firsts, kind="stable")  # the groups by (microbatch, first rank): distinct
        c_go, f_go = size[go].tolist(), firsts[go].tolist()
        opts = list(zip(c_go, engines[go].tolist()))
        engine_of = {k: engine_from_ulysses(*k) for k in set(opts)}  # (blocks and engines repeat: made once)
        block_of = {k: tuple(range(k[0], k[0] + k[1])) for k in set(zip(f_go, c_go))}
        ends_go = ends_at[go]
        seqs = [id_tup[a:b] for a, b in zip((ends_go - count[go]).tolist(), ends_go.tolist())]
        groups = CPGroup.many([block_of[k] for k in zip(f_go, c_go)], seqs, [engine_of[k] for k in opts])
        cut = np.cumsum(np.bincount(rows, minlength=len(keys))).tolist()
        mbs = [groups[a:b] for a, b in zip([0] + cut[:-1], cut)]
        caps = [layout.caps[keys[i]] for i in order]
        col_meta: dict[str, float] = {}
        if columns:  # every rank's own loads at its new position, each rank's column through the recurrence
            mirrored = np.zeros_like(loads)
            np.put_along_axis(mirrored, pos, loads, axis=1)
            col_meta["columns_s"] = (float(makespans(mirrored.T, pp, stage_scale=stage_scale).max())
                                     if len(keys) else 0.0)
        return make_plan(
            self.name, W, mbs, target_s=choice.tau, tolerance=self.tolerance, num_microbatches=len(keys),
            chosen_microbatches=choice.m_light + choice.m_heavy, heavy_sequences=draft.n_heavy,
            heavy_microbatches=layout.heavy_mbs, microbatch_caps_s=caps, max_tokens_per_rank=M,
            estimate_s=choice.estimate_s, recurrence_s=draft.score, degrees=self.degrees, cp_engine=self.cp_engine,
            stage_scale=None if stage_scale is None else [float(x) for x in stage_scale], **col_meta)
