"""The analytic model's probe path: sequences each alone in a group like one of a few listed groups (options).

HyDra prices thousands of (length, option) pairs per plan in a few calls (``AnalyticCostModel.alone_stage_totals``
with ``option=``): each sequence alone in a contiguous group from pool rank 0 whose size and inner Ulysses degree
are those of option ``option[i]``. Everything that depends on the option alone — its ring degree, its ring and
inner groups' links (NVLink or network latency and bandwidth, the NIC share), its all-to-all factor and latency,
its fixed costs — is worked out once per option table (:class:`OptionTable`, kept on the cost model for the
next call with the same options) and gathered in one indexing; the per-sequence arithmetic is then the
analytic model's (``_core`` and ``_at_stage`` with the ends of :mod:`cost_models.head`), operation for
operation in the same order on the same operands, without its calls, masks and branch selections:

* a branch choice (NVLink or network) becomes a gathered latency, bandwidth and byte scale: the network branch
  multiplies its bytes by the NIC share k, the NVLink branch by 1.0 (x · 1.0 is x, so both give the branch's
  numbers; with k = 1 there is no multiplication at all);
* a masked term (no ring: r = 1; no Ulysses: u = 1) comes out as 0.0 instead of being masked: the ring's
  r − 1 steps are 0 (0 · a finite non-negative number is 0.0) and an option without all-to-alls gets
  latency and factor 0 (0 + 0 · bytes / bw is 0.0); 0.0 + x is x (no term is ever −0.0), so the sums are the
  same;
* a factor 2 (or 4) of the model's products is folded into a neighbouring constant: scaling by a power of two
  is exact in binary floating point (no overflow or subnormal at these magnitudes), so it commutes with every
  rounding — (2 · x) · y and x · (2 · y) are the same number, and 2 · a + 2 · b is 2 · (a + b).

The numbers are ``group_costs(...).total_s`` bit for bit (tests/cost_models/test_alone_total.py). A MoE model
(its stages hold different layers; expert GEMMs and EP all-to-alls) takes the model's general path.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from dcpsim.cost_models.flops import ATTENTION_BWD_FACTOR, LINEAR_BWD_FACTOR, linear_fwd_flops_per_token
from dcpsim.cost_models.head import (
    EMBED_BWD_BYTES_PER_HIDDEN,
    EMBED_FWD_BYTES_PER_HIDDEN,
    LOSS_BWD_BYTES_PER_LOGIT,
    LOSS_FWD_BYTES_PER_LOGIT,
    ends_tp_comm_s,
)

if TYPE_CHECKING:
    from dcpsim.cost_models.analytic import AnalyticCostModel

BF16_BYTES = 2.0  # (cost_models.analytic's)
CACHED_TABLES = 64  # option tables kept per cost model (a planner's table grows rarely)


@dataclass(frozen=True)
class OptionTable:
    """What the analytic model's probe arithmetic reads per option, one row per quantity ([quantities, options]:
    one indexing gathers every quantity of every sequence). ``ring`` / ``a2a``: whether any option has a ring
    (r > 1) / inner all-to-alls (u > 1)."""

    rows: np.ndarray  # float64 [quantities, options]
    by_option: np.ndarray  # float64 [options, quantities] (rows.T, C-contiguous: one gather copies an option's row)
    names: tuple[str, ...]
    ring: bool
    a2a: bool


def option_table(cm: AnalyticCostModel, size: np.ndarray, u: np.ndarray, stage: int) -> OptionTable:
    """The option table of groups of ``size`` ranks (int64) with inner Ulysses ``u`` (int64), contiguous from pool
    rank 0, at ``stage`` (its crossings). Each quantity is computed as the model computes it per sequence (the
    same operands: per option instead of per sequence)."""
    job = cm.job
    ring_x, inner_x = cm._crossings(stage, size, u, np.zeros(len(size), dtype=np.int64))
    size_f, u_f = size.astype(np.float64), u.astype(np.float64)
    r = size_f / u_f
    k = cm._memoized("p2p_scale", cm._p2p_bytes_scale)
    cols: dict[str, np.ndarray] = {"size": size_f, "r": r}
    ring, a2a = bool(np.count_nonzero(r > 1)), bool(np.count_nonzero(u_f > 1))
    if ring:  # _ring_exposed: send_recv_s(bytes) = latency_s(1.0) + bytes / (busbw · 1e9) on the ring's link
        nv, net = cm._links("send_recv")
        cols["steps"] = r - 1
        cols["kvh_u"] = job.kv_heads_per_rank / u_f
        cols["sr_lat"] = np.where(ring_x, net.latency_s(1.0), nv.latency_s(1.0))
        cols["sr_bw"] = np.where(ring_x, net.busbw_gbs * 1e9, nv.busbw_gbs * 1e9)
        if k != 1.0:
            cols["sr_k"] = np.where(ring_x, k, 1.0)
    if a2a:  # _ulysses_time: latency_s(u − 1) + bytes · factor / (busbw · 1e9) on the inner group's link
        nv, net = cm._links("all_to_all")
        hops = u_f - 1
        factor = 1.0 * hops / np.maximum(u_f, 1)  # collective_terms("all_to_all", u)
        on = u_f > 1  # (u = 1: latency and factor 0, a term of 0.0 where the model masks it to 0.0)
        cols["a_lat"] = np.where(on, np.where(inner_x, net.latency_s(hops), nv.latency_s(hops)), 0.0)
        cols["a_fac"] = np.where(on, factor, 0.0)
        cols["a_bw"] = np.where(inner_x, net.busbw_gbs * 1e9, nv.busbw_gbs * 1e9)
        if k != 1.0:
            cols["a_k"] = np.where(inner_x, k, 1.0)
    else:
        cm._links("all_to_all")  # (a missing link model raises even where nothing runs all-to-alls)
    if not ring:
        cm._links("send_recv")
    if cm.terms.fixed_costs:
        fixed_f, fixed_b = cm.fixed_s(r)
        cols["fixed_f"] = np.broadcast_to(fixed_f, r.shape)
        cols["fixed_b"] = np.broadcast_to(fixed_b, r.shape)
    names = tuple(cols)
    rows = np.stack([cols[n] for n in names]) if names else np.zeros((0, len(r)))
    return OptionTable(rows, np.ascontiguousarray(rows.T), names, ring, a2a)


def _table(cm: AnalyticCostModel, size: np.ndarray, u: np.ndarray, key_stage: int, stage: int) -> OptionTable:
    """:func:`option_table`, kept on the cost model under (``key_stage``, the options) for the next call."""
    cache = cm._memoized("option_tables", dict)
    key = (key_stage, size.tobytes(), u.tobytes())
    tab = cache.get(key)
    if tab is None:
        if len(cache) >= CACHED_TABLES:
            cache.clear()
        tab = cache[key] = option_table(cm, size, u, stage)
    return tab


def option_stage_totals(cm: AnalyticCostModel, L: np.ndarray, size: np.ndarray, u: np.ndarray, opt: np.ndarray,
                        stages: tuple[int, ...], ks: list[int], shared: bool) -> list[np.ndarray]:
    """``alone_stage_totals(L, size, u, stages, prefix, option=opt)`` of a dense model: row i the totals of the
    first ``ks[i]`` sequences at ``stages[i]`` (float64 ``L``; int64 ``size``, ``u``, ``opt``); ``shared``: the
    stages' crossings are the same (the part before the ends priced once). A MoE model: its general path
    (:func:`_moe_stage_totals`)."""
    if cm.job.model.is_moe:
        return _moe_stage_totals(cm, L, size, u, opt, stages, ks)

    def core_of(s: int, c: int) -> tuple:
        tab = _table(cm, size, u, -1 if shared else s, s)
        return _core(cm, L[:c], tab, dict(zip(tab.names, np.take(tab.by_option, opt[:c], axis=0).T)))
    return per_stage(stages, ks, shared, core_of, first_of, lambda part, s: _total(cm, part, s))


def option_block_totals(cm: AnalyticCostModel, L: np.ndarray, size: np.ndarray, u: np.ndarray,
                        stages: tuple[int, ...], ks: list[int], shared: bool) -> list[np.ndarray]:
    """``alone_block_totals``: row i the totals [options, ks[i]] of every option (int64 ``size``, ``u``) at each of
    the first ``ks[i]`` lengths ``L`` (float64) at ``stages[i]``, the numbers of :func:`option_stage_totals` of the
    flattened block (each entry's operations the same, on an option's column and a length's row)."""
    if cm.job.model.is_moe:
        n, c = len(size), len(L)
        flat = _moe_stage_totals(cm, np.tile(L, n), size, u, np.repeat(np.arange(n), c), stages, [n * c] * len(ks))
        return [row.reshape(n, c)[:, :k] for row, k in zip(flat, ks)]

    def core_of(s: int, c: int) -> tuple:
        tab = _table(cm, size, u, -1 if shared else s, s)
        return _core(cm, L[None, :c], tab, {n: row[:, None] for n, row in zip(tab.names, tab.rows)})

    def first_cols(core: tuple, k: int) -> tuple:
        return core if core[0].shape[1] == k else tuple(x[:, :k] for x in core)
    return per_stage(stages, ks, shared, core_of, first_cols, lambda part, s: _total(cm, part, s))


def first_of(core: tuple, k: int) -> tuple:
    """A core's first ``k`` sequences."""
    return core if len(core[0]) == k else tuple(x[:k] for x in core)


def per_stage(stages: tuple[int, ...], ks: list[int], shared: bool, core_of: Callable[[int, int], tuple],
              first: Callable[[tuple, int], tuple],
              total_of: Callable[[tuple, int], np.ndarray]) -> list[np.ndarray]:
    """``total_of(first(core, k), s)`` for each stage s of ``stages`` and count k of ``ks``: the core
    (``core_of(s, count)``) computed once, at the largest count, when the stages share it (``shared``), else per
    stage at its own count (the alone-totals loop of AnalyticCostModel and of this module's option paths)."""
    core: tuple | None = None
    out = []
    for s, k in zip(stages, ks):
        if core is None or not shared:
            core = core_of(s, max(ks) if shared else k)
        out.append(total_of(first(core, k), s))
    return out


def _moe_stage_totals(cm: AnalyticCostModel, L: np.ndarray, size: np.ndarray, u: np.ndarray, opt: np.ndarray,
                      stages: tuple[int, ...], ks: list[int]) -> list[np.ndarray]:
    """:func:`option_stage_totals` of a MoE model (every stage its own): the model's ``_core`` and ``_at_stage``
    with the crossings and fixed costs priced per option and gathered (elementwise: the same numbers), kept on the
    model for the next call with the same options."""
    cache = cm._memoized("option_groups", dict)
    out = []
    for s, k in zip(stages, ks):
        key = (s, size.tobytes(), u.tobytes())
        per = cache.get(key)
        if per is None:
            if len(cache) >= CACHED_TABLES:
                cache.clear()
            ring_x, inner_x = cm._crossings(s, size, u, np.zeros(len(size), dtype=np.int64))
            size_f, u_f = size.astype(np.float64), u.astype(np.float64)
            r = size_f / u_f
            fixed = cm.fixed_s(r) if cm.terms.fixed_costs else None
            per = cache[key] = (ring_x, inner_x, fixed, size_f, u_f, r)
        ring_x, inner_x, fixed, size_f, u_f, r = per
        o = opt[:k]
        core = cm._core(L[:k], L[:k], size_f[o], u_f[o], None, (ring_x[o], inner_x[o]), s,
                        fixed=None if fixed is None else (fixed[0][o], fixed[1][o]), r=r[o])
        fwd, cp_f, bwd, cp_b, tp_f, tp_b, ep_f, ep_b = cm._at_stage(core, np.zeros(k, dtype=np.int64), s)
        total = fwd + cp_f + bwd + cp_b
        if tp_f is not None:
            total = total + tp_f + tp_b
        out.append(total + ep_f + ep_b)
    return out


def _core(cm: AnalyticCostModel, L: np.ndarray, tab: OptionTable, g: dict[str, np.ndarray]) -> tuple:
    """(fwd, CP fwd, bwd, CP bwd, tokens per rank, the GEMM curve's x + half and peak · 1e12 · x) of ``L`` in
    groups whose quantities of ``tab`` are ``g`` (gathered per sequence, or a column per option against a row of
    lengths: then every result is [options, lengths], broadcast elementwise): AnalyticCostModel._core's numbers
    for a dense model (its operations in its order, in place where an operand is not needed again and has the
    result's shape: a · b is b · a and a + b is b + a in IEEE 754)."""
    job, m, cal = cm.job, cm.job.model, cm.cal
    nl, t, hd = job.layers_per_stage, job.tp, m.head_dim
    size, r = g["size"], g["r"]
    tpr = L / size
    # linear layers: gemm.seconds(flops, tpr) = flops · (x + half) / (peak · 1e12 · x), x = max(tpr, 1e-9)
    gemm = cal.gemm
    g_den = np.maximum(tpr, 1e-9)
    g_num = g_den + gemm.half
    g_den *= gemm.peak_tflops * 1e12
    lin_f = tpr * cm._memoized("lin_per_token", lambda: linear_fwd_flops_per_token(m))
    if t != 1:
        lin_f /= t
    lin_f *= nl
    lin_f *= g_num
    lin_f /= g_den
    # attention: attention_fwd_flops (2 · L · L · d · a) / t / size · nl at blocks of L / r, clamped once
    att = L * L
    att *= 2.0 * hd  # (2 · L · L · d: a factor 2 is exact on either side of a rounding)
    att *= m.heads
    if t != 1:
        att /= t
    att = att / size
    att *= nl
    Lr = L / r
    block = np.maximum(Lr, 1e-9)
    attn_fwd, attn_bwd = cm._memoized("attn", lambda: cm.attention_curves()[:2])
    att_f = block + attn_fwd.half
    att_f *= att
    den = block * (attn_fwd.peak_tflops * 1e12)
    att_f /= den
    att *= ATTENTION_BWD_FACTOR
    att_b = block + attn_bwd.half
    att_b *= att
    np.multiply(block, attn_bwd.peak_tflops * 1e12, out=den)
    att_b /= den
    cp_f = cp_b = None
    if tab.ring:  # _ring_exposed: steps · max(0, lat + bytes / bw − att / nl / r), bytes 2·kv fwd, 4·kv bwd
        kv = Lr
        kv *= g["kvh_u"]
        kv *= 2.0 * BF16_BYTES * hd  # 2 · (L / r) · (kvh / u) · d · 2 (factors of 2 exact, folded)
        if "sr_k" in g:
            kv *= g["sr_k"]
        lat, bw, steps = g["sr_lat"], g["sr_bw"], g["steps"]
        hide = np.divide(att_f, nl, out=den)
        hide /= r
        cp_f = kv / bw
        cp_f += lat
        cp_f -= hide
        np.maximum(0.0, cp_f, out=cp_f)
        cp_f *= steps
        kv *= 2
        kv /= bw
        kv += lat
        np.divide(att_b, nl, out=hide)
        hide /= r
        kv -= hide
        cp_b = np.maximum(0.0, kv, out=kv)
        cp_b *= steps
    if tab.a2a:  # _ulysses_time: 2 · (lat + q · factor / bw) + 2 · (lat + kv · factor / bw)
        lat, fac, bw = g["a_lat"], g["a_fac"], g["a_bw"]
        a_k = g.get("a_k")

        def a2a(heads: int) -> np.ndarray:  # lat + tpr · heads · d · 2 · factor / bw (the 2 folded into d)
            b = tpr * heads
            b *= BF16_BYTES * hd
            if a_k is not None:
                b *= a_k
            b *= fac
            b /= bw
            b += lat
            return b

        both = a2a(job.heads_per_rank)
        both += a2a(job.kv_heads_per_rank)
        both *= 2  # (2 · x + 2 · y = 2 · (x + y) exactly)
        if cp_f is None or cp_b is None:
            cp_f = both
            cp_f *= nl
            cp_b = cp_f.copy()
        else:
            cp_f += both
            cp_f *= nl
            cp_b += both
            cp_b *= nl
    elif cp_f is not None and cp_b is not None:
        cp_f *= nl
        cp_b *= nl
    else:
        cp_f = np.zeros(tpr.shape)
        cp_b = cp_f.copy()
    fwd = att_f
    fwd += lin_f
    lin_f *= LINEAR_BWD_FACTOR
    bwd = att_b
    bwd += lin_f
    if "fixed_f" in g:
        fwd += g["fixed_f"]
        bwd += g["fixed_b"]
    return fwd, cp_f, bwd, cp_b, tpr, g_num, g_den


def _total(cm: AnalyticCostModel, core: tuple, stage: int) -> np.ndarray:
    """``GroupCosts.total_s`` at ``stage`` from :func:`_core`'s part (not changed: the stages share it):
    AnalyticCostModel._at_stage's ends and TP terms (cost_models.head's embedding, LM head and loss, operation
    for operation) and the sum ((fwd + CP fwd) + bwd) + CP bwd."""
    job, terms = cm.job, cm.terms
    fwd, cp_f, bwd, cp_b, tpr, g_num, g_den = core
    first, last = stage == 0, stage == job.pp - 1
    ends = terms.lm_head and (first or last)
    if ends:
        hbm = job.gpu.hbm_bw_gbs * 1e9
        if first:  # embedding_compute_s
            per_token = tpr * job.model.hidden
            e_f = per_token * EMBED_FWD_BYTES_PER_HIDDEN
            e_f /= hbm
            e_b = per_token
            e_b *= EMBED_BWD_BYTES_PER_HIDDEN
            e_b /= hbm
        if last:  # head_compute_s: the LM head's GEMM at x = max(tpr, 1e-9) (the linear layers' x), the loss
            gemm_f = tpr * (2.0 * job.model.hidden)  # (tpr · 2 · h · V, the exact 2 folded into h)
            gemm_f *= job.model.vocab
            logits = tpr * job.model.vocab
            if job.tp != 1:
                gemm_f /= job.tp
                logits /= job.tp
            gemm_f *= g_num
            gemm_f /= g_den
            h_f = logits * LOSS_FWD_BYTES_PER_LOGIT
            h_f /= hbm
            h_f += gemm_f
            logits *= LOSS_BWD_BYTES_PER_LOGIT
            logits /= hbm
            gemm_f *= 2.0
            h_b = gemm_f
            h_b += logits
            if first:
                e_f += h_f
                e_b += h_b
            else:
                e_f, e_b = h_f, h_b
        total = fwd + e_f
        e_b += bwd
    else:
        total = fwd + cp_f
        total += bwd
        total += cp_b
        e_b = None
    if e_b is not None:
        total += cp_f
        total += e_b
        total += cp_b
    if terms.tp_comm and job.tp != 1:
        nl = job.layers_per_stage
        end_f, end_b = ends_tp_comm_s(job, cm.cal, tpr, first, last) if ends else (0.0, 0.0)
        tp_layer = cm.tp_comm_layer_s(tpr)
        total += tp_layer * nl + end_f
        total += tp_layer * nl + end_b
    return total
