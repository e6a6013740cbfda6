"""Links: every transfer and collective priced by the ranks it connects (cost_models.topology, analytic.py).

Hand values use the published calibration (cost_models.calibration.published_calibration): α–β per link,
t = base + hops·hop + bytes·factor / busbw with base 8.4 µs, hop 3.4 µs on NVLink and 14 µs on the network
(NCCL's latency model), busbw = the preset's nvlink_gbs / network_gbs.
"""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, CostTerms, GroupBatch, JobSpec, ModelSpec, get_gpu, get_model
from dcpsim.cost_models.calibration import published_calibration
from dcpsim.cost_models.errors import SpecError
from dcpsim.cost_models.gpu_files import resolve_gpu
from dcpsim.cost_models.memory import stage_params
from dcpsim.cost_models.topology import collective_nics, domain_of, fewest_ranks_per_domain, group_crossings
from dcpsim.policies import CPGroup, Engine, make_plan
from dcpsim.policies.engines import engine_for, ulysses_degrees
from dcpsim.policies.errors import PolicyError
from dcpsim.policies.flatten import flatten
from dcpsim.sim.engine import _op_costs
from dcpsim.traces.batching import GlobalBatch

LINKS = CostTerms.parse("legacy,+links")  # only the links term on: the hand values below isolate it
LEGACY = CostTerms.legacy()
BASE, NV_HOP, NET_HOP = 8.4e-6, 3.4e-6, 14e-6

# Llama-2-7B (meta-llama/Llama-2-7b-hf config.json): multi-head attention, 32 KV heads, so a Ulysses
# degree of 16 divides its KV heads (Llama 3's 8 KV heads would not allow it).
LLAMA2_7B = ModelSpec("llama2-7b", hidden=4096, ffn=11008, layers=32, heads=32, kv_heads=32, head_dim=128,
                      vocab=32000)


def model(job: JobSpec, terms: CostTerms = LINKS) -> AnalyticCostModel:
    return AnalyticCostModel(job, published_calibration(job.gpu), terms)


def send(nbytes: float, busbw_gbs: float, hop: float) -> float:
    return BASE + hop + nbytes / (busbw_gbs * 1e9)


# ---- PP transfers, per rank ---------------------------------------------------------------------------------
def test_pp_transfer_is_priced_by_each_ranks_own_pair_of_stages():
    """W = 3, TP 1, PP 4 on 8-GPU H100 nodes: pool rank w of stage s is GPU 3s + w, node ⌊(3s + w)/8⌋.
    Stage 0 → 1: GPUs 0,1,2 → 3,4,5, all on node 0. Stage 1 → 2: 3→6 and 4→7 stay on node 0, 5→8 crosses.
    Stage 2 → 3: 6→9 and 7→10 cross, 8→11 stays on node 1. The first version priced every rank by rank 0's
    pair: stage 1 → 2 all NVLink (rank 2 wrong), stage 2 → 3 all network (rank 2 wrong)."""
    job = JobSpec(get_model("llama3-8b"), get_gpu("h100"), tp=1, pp=4, pool=3)
    T = 8192
    nbytes = T * 4096 * 2  # tokens · h · 2 bytes / t = 67,108,864 bytes
    nv = send(nbytes, 370.0, NV_HOP)  # 8.4 + 3.4 µs + 181.375 µs = 193.175 µs
    net = send(nbytes, 47.0, NET_HOP)  # 8.4 + 14 µs + 1427.848 µs = 1450.248 µs
    assert nv == pytest.approx(193.175e-6, rel=1e-5) and net == pytest.approx(1450.248e-6, rel=1e-5)
    ranks = np.arange(3)
    want = {0: [nv, nv, nv], 1: [nv, nv, net], 2: [net, net, nv]}
    legacy = {0: [nv, nv, nv], 1: [nv, nv, nv], 2: [net, net, net]}
    for s in range(3):
        got = model(job).pp_transfer_s(np.full(3, T), s, ranks)
        np.testing.assert_allclose(got, want[s], rtol=1e-12)
        old = model(job, LEGACY).pp_transfer_s(np.full(3, T), s, ranks)
        np.testing.assert_allclose(old, legacy[s], rtol=1e-12)


def test_a_groups_pp_transfer_waits_for_its_slowest_member():
    """The engine's transfer delay of a group is the largest of its members' own transfers: group (1, 2) at
    stage 1 → 2 waits for rank 2's cross-node send; group (0,) goes over NVLink."""
    job = JobSpec(get_model("llama3-8b"), get_gpu("h100"), tp=1, pp=4, pool=3)
    batch = GlobalBatch.of([8192, 16384])
    ring = lambda ranks, ids: CPGroup(tuple(ranks), tuple(ids), Engine.for_size("ring", len(ranks)))
    fp = flatten(make_plan("t", 3, [[ring([0], [0]), ring([1, 2], [1])]]), batch)
    nv, net = send(8192 * 4096 * 2, 370.0, NV_HOP), send(8192 * 4096 * 2, 47.0, NET_HOP)
    _, _, xfer, *_ = _op_costs(fp, model(job), 4, None)
    np.testing.assert_allclose(xfer[1], [nv, net], rtol=1e-12)
    _, _, old, *_ = _op_costs(fp, model(job, LEGACY), 4, None)
    np.testing.assert_allclose(old[1], [nv, nv], rtol=1e-12)


# ---- NVLink domain: Ulysses reach ---------------------------------------------------------------------------
def ulysses16_comm(gpu: str) -> tuple[AnalyticCostModel, float]:
    job = JobSpec(LLAMA2_7B, get_gpu(gpu), tp=1, pp=1, pool=16, context_len=131072)
    gb = GroupBatch(np.array([131072]), np.array([0]), np.array([16]), np.array([16]), np.array([0]))
    return model(job), float(model(job).group_costs(gb).fwd_comm_s[0])


def test_ulysses_16_fits_one_gb200_nvl72_domain_at_nvlink_rate():
    """GB200 NVL72: 72 GPUs share one NVLink domain, so 16 ranks of TP 1 run one all-to-all over NVLink.
    One layer forward: 4 all-to-alls (Q, K, V, O) of (131072/16) · 32 heads · 128 · 2 = 67,108,864 bytes,
    each 8.4 µs + 15 · 3.4 µs + bytes · 15/16 / 740 GB/s = 144.42 µs; × 4 × 32 layers = 18.486 ms."""
    cm, comm = ulysses16_comm("gb200")
    assert 16 in ulysses_degrees(16, cm.job)
    assert engine_for("ulysses", 16, cm.job).ulysses == 16
    a2a = BASE + 15 * NV_HOP + 67108864 * 15 / 16 / 740e9
    assert a2a == pytest.approx(144.42e-6, rel=1e-4)
    assert comm == pytest.approx(4 * a2a * 32, rel=1e-12)


def test_ulysses_16_is_refused_on_8_gpu_h100_nodes_and_priced_across_nodes_if_forced():
    """H100 HGX: the NVLink domain is one 8-GPU node, so no Ulysses group of 16 ranks is offered; a group
    that uses one anyway crosses nodes and pays the network: 8.4 µs + 15 · 14 µs + bytes · 15/16 / 47 GB/s
    = 1557.0 µs per all-to-all, 10.8x the NVL72 figure."""
    cm, comm = ulysses16_comm("h100")
    assert max(ulysses_degrees(16, cm.job)) == 8
    with pytest.raises(PolicyError, match="NVLink domain"):
        engine_for("ulysses", 16, cm.job)
    a2a = BASE + 15 * NET_HOP + 67108864 * 15 / 16 / 47e9
    assert a2a == pytest.approx(1557.0e-6, rel=1e-4)
    assert comm == pytest.approx(4 * a2a * 32, rel=1e-12)


def test_tp_must_divide_the_nvlink_domain():
    m70 = get_model("llama3-70b")
    assert JobSpec(m70, get_gpu("gb200"), tp=8, pool=1).tp == 8  # 72 GPUs: TP 8 crosses compute trays
    with pytest.raises(SpecError, match="gpu.nvlink_domain = 72"):
        JobSpec(m70, get_gpu("gb200"), tp=16, pool=1)
    with pytest.raises(SpecError, match="job.tp"):
        JobSpec(m70, get_gpu("h100"), tp=16, pool=1)


def test_domains_follow_megatron_rank_order_on_nvl72():
    """TP 4, W = 32: pool rank w of stage s is GPUs (32s + w)·4 ..; a domain holds 18 ranks."""
    job = JobSpec(get_model("llama3-70b"), get_gpu("gb200"), tp=4, pp=4, pool=32)
    np.testing.assert_array_equal(domain_of(job, 0, [0, 17, 18, 31]), [0, 0, 1, 1])
    np.testing.assert_array_equal(domain_of(job, 1, [0, 3, 4]), [1, 1, 2])  # GPUs 128, 140, 144
    assert fewest_ranks_per_domain(job, 0, 0, 32) == 14  # 18 in domain 0, 14 in domain 1


# ---- CP groups: the ranks they really list ------------------------------------------------------------------
def test_non_contiguous_groups_are_priced_by_the_domains_they_span():
    """Ranks 0 and 8 (TP 1, 8-GPU nodes) sit on two nodes: their ring crosses, although a contiguous group
    of two from rank 0 would not. hybrid(2, 2) on ranks (0, 8, 1, 9): inner Ulysses groups (0, 8) and
    (1, 9) cross nodes, the rings 0↔1 and 8↔9 do not."""
    job = JobSpec(get_model("llama3-8b"), get_gpu("h100"), tp=1, pp=1, pool=16)
    members = np.array([0, 8, 0, 8, 1, 9])
    owner = np.array([0, 0, 1, 1, 1, 1])
    ring, inner = group_crossings(job, 0, np.array([2, 4]), np.array([1, 2]), np.array([0, 0]), members, owner)
    np.testing.assert_array_equal(ring, [True, False])
    np.testing.assert_array_equal(inner, [False, True])
    gb = GroupBatch(np.array([65536, 65536]), np.array([0, 1]), np.array([2, 4]), np.array([1, 2]),
                    np.array([0, 0]), member_rank=members, member_group=owner)
    np.testing.assert_array_equal(model(job).cp_crossings(gb, 0)[0], [True, False])
    np.testing.assert_array_equal(model(job).cp_crossings(gb, 0)[1], [False, True])
    # The first version saw only first_rank and size: both groups inside node 0.
    old_ring, old_inner = model(job, LEGACY).cp_crossings(gb, 0)
    assert not old_ring.any() and not old_inner.any()


def test_every_inner_group_counts_not_only_the_first():
    """W = 5, stage 1 starts at GPU 5: a contiguous hybrid(2, 2) group on ranks 0..3 is GPUs 5..8, inner
    groups (5, 6) on node 0 and (7, 8) across nodes 0 and 1; the first version looked at (5, 6) only."""
    job = JobSpec(get_model("llama3-8b"), get_gpu("h100"), tp=1, pp=2, pool=5)
    gb = GroupBatch(np.array([4096]), np.array([0]), np.array([4]), np.array([2]), np.array([0]))
    assert bool(model(job).cp_crossings(gb, 1)[1][0])
    assert not bool(model(job, LEGACY).cp_crossings(gb, 1)[1][0])


def test_member_lists_of_contiguous_groups_price_as_before():
    """For contiguous groups the member list changes nothing: same crossings as from first_rank."""
    job = JobSpec(get_model("llama3-8b"), get_gpu("h100"), tp=2, pp=2, pool=12)
    size, u, first = np.array([4, 8, 2, 2, 1]), np.array([2, 4, 1, 2, 1]), np.array([0, 4, 0, 6, 11])
    members = np.concatenate([np.arange(f, f + c) for f, c in zip(first, size)])
    owner = np.repeat(np.arange(5), size)
    for s in range(2):
        a = group_crossings(job, s, size, u, first)
        b = group_crossings(job, s, size, u, first, members, owner)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


# ---- NICs in use: the gradient sync -------------------------------------------------------------------------
def grad_sync_hand(job: JobSpec, busbw_gbs: float, grad_bytes: float = 2.0) -> float:
    """Reduce-scatter + all-gather over the W ranks, ring over the network: base + (W−1)·hop + bytes·(W−1)/W
    / busbw each, bytes = the stage's parameters on one GPU of the TP group × ``grad_bytes`` for the
    reduce-scatter (2: bf16, the terms here; 4 with ``grad_dtype``: fp32, Megatron's default with --bf16),
    × 2 (bf16 weights) for the all-gather."""
    W = job.pool
    params = stage_params(job, 0) / job.tp
    return sum(BASE + (W - 1) * NET_HOP + params * b * (W - 1) / W / (busbw_gbs * 1e9) for b in (grad_bytes, 2.0))


def test_grad_sync_across_nodes_uses_the_nics_of_the_ranks_per_node():
    """TP 2, W = 8 on H100 nodes: 4 ranks (8 GPUs) per node, two shards' rings each get min(4·2, 8)/2 = 4
    NICs: 4 × 47 = 188 GB/s. The first version priced one NIC (47 GB/s), 4x slower."""
    job = JobSpec(get_model("llama3-8b"), get_gpu("h100"), tp=2, pp=1, pool=8)
    assert fewest_ranks_per_domain(job, 0, 0, 8) == 4 and collective_nics(job, 4) == 4.0
    assert model(job).grad_sync_s(0) == pytest.approx(grad_sync_hand(job, 188.0), rel=1e-12)
    assert model(job, LEGACY).grad_sync_s(0) == pytest.approx(grad_sync_hand(job, 47.0), rel=1e-12)


def test_fp32_gradients_double_the_reduce_scatter_bytes():
    """With ``grad_dtype`` the reduce-scatter moves the fp32 gradient buffer (4 B/param; Megatron-LM with
    --bf16); with ``grad_reduce_in_fp32`` off (NeMo's recipes) it moves bf16, as the first version did."""
    from dataclasses import replace
    job = JobSpec(get_model("llama3-8b"), get_gpu("h100"), tp=2, pp=1, pool=8)
    fp32 = CostTerms.parse("legacy,+links,+grad_dtype")
    assert model(job, fp32).grad_sync_s(0) == pytest.approx(grad_sync_hand(job, 188.0, 4.0), rel=1e-12)
    bf16_job = replace(job, grad_reduce_in_fp32=False)
    assert model(bf16_job, fp32).grad_sync_s(0) == pytest.approx(grad_sync_hand(job, 188.0), rel=1e-12)


def test_fewer_nics_per_node_share_them():
    """The same job on nodes with 4 NICs: min(8, 4)/2 = 2 NICs per shard, 94 GB/s."""
    gpu = resolve_gpu({"base": "h100", "nics_per_node": 4})
    job = JobSpec(get_model("llama3-8b"), gpu, tp=2, pp=1, pool=8)
    assert model(job).grad_sync_s(0) == pytest.approx(grad_sync_hand(job, 94.0), rel=1e-12)


def test_nic_bandwidth_never_exceeds_nvlink():
    """TP 1, W = 16: 8 NICs × 47 = 376 GB/s would beat NVLink's 370: the ring runs at 370."""
    job = JobSpec(get_model("llama3-8b"), get_gpu("h100"), tp=1, pp=1, pool=16)
    assert model(job).grad_sync_s(0) == pytest.approx(grad_sync_hand(job, 370.0), rel=1e-12)


def test_inside_one_domain_nothing_changes():
    """W = 8, TP 1: the pool is one node; NVLink, links on or off."""
    job = JobSpec(get_model("llama3-8b"), get_gpu("h100"), tp=1, pp=1, pool=8)
    assert model(job).grad_sync_s(0) == model(job, LEGACY).grad_sync_s(0)


# ---- NICs in use: point-to-point sends ----------------------------------------------------------------------
def test_a_cp_ring_step_across_nodes_uses_one_nic_per_gpu_shared_when_nodes_have_fewer():
    """A ring step is one GPU's send to the next member: on rail-optimised nodes over its own NIC, whatever
    the group's size; on nodes with 4 NICs for 8 GPUs two GPUs share one (half the rate). Ring of 16 at TP 1
    over two nodes, one layer, no compute to hide behind: 15 steps of K and V, 2 · (65536/16) · 8 KV heads
    · 128 · 2 = 16,777,216 bytes each, forward 15 · (8.4 + 14 µs + bytes / 47 GB/s) = 5.690 ms."""
    nbytes = 2 * (65536 / 16) * 8 * 128 * 2
    args = (np.array([65536.0]), np.array([16.0]), np.array([1.0]), np.zeros(1), np.zeros(1), np.array([True]))
    rail = JobSpec(get_model("llama3-8b"), get_gpu("h100"), tp=1, pp=1, pool=16)
    fwd, bwd = model(rail)._ring_exposed(*args)
    assert float(fwd[0]) == pytest.approx(15 * send(nbytes, 47.0, NET_HOP), rel=1e-12)
    assert float(fwd[0]) == pytest.approx(5.690e-3, rel=1e-3)
    assert float(bwd[0]) == pytest.approx(15 * send(2 * nbytes, 47.0, NET_HOP), rel=1e-12)
    half = JobSpec(get_model("llama3-8b"), resolve_gpu({"base": "h100", "nics_per_node": 4}), tp=1, pp=1, pool=16)
    fwd, _ = model(half)._ring_exposed(*args)
    assert float(fwd[0]) == pytest.approx(15 * send(2 * nbytes, 47.0, NET_HOP), rel=1e-12)
    fwd, _ = model(half, LEGACY)._ring_exposed(*args)  # the first version: one NIC each, always
    assert float(fwd[0]) == pytest.approx(15 * send(nbytes, 47.0, NET_HOP), rel=1e-12)


def test_nic_scaling_matches_a_published_multi_node_all_reduce():
    """NVIDIA/nccl-tests#119: 3 nodes x 8 A100-SXM4-40GB with 4 HDR 200 Gb/s NICs each, all_reduce_perf up
    to 128 MB: peak bus bandwidth about 96 GB/s (one NIC would carry 23.5). The NIC rule gives min(8, 4) = 4
    NICs x 23.5 = 94 GB/s; within 5% (bandwidth only: the buffer below makes α negligible, and NCCL's
    latency over 24 ranks is not what this checks)."""
    gpu = resolve_gpu({"base": "a100", "hbm_gb": 40.0, "nics_per_node": 4})
    job = JobSpec(get_model("llama3-8b"), gpu, tp=1, pp=1, pool=24)
    n, nbytes = 24, 1e13
    t = model(job)._collective_s("all_reduce", "network", nbytes, 0, 0, n)
    busbw = nbytes * 2 * (n - 1) / n / t / 1e9
    assert busbw == pytest.approx(96.0, rel=0.05)
    assert busbw == pytest.approx(94.0, rel=1e-5)


def test_closed_form_for_contiguous_groups_equals_the_general_rule():
    """The contiguous groups' closed form (cost_models.topology._contiguous_crossings) against the rule for
    listed ranks, on random groups of every shape: HGX and NVL72 domains, TP 1..8, any first rank, u | c."""
    rng = np.random.default_rng(0)
    for gpu, tps in (("h100", (1, 2, 4, 8)), ("gb200", (1, 2, 4, 8))):
        for t in tps:
            job = JobSpec(get_model("llama3-70b"), get_gpu(gpu), tp=t, pp=4, pool=37)
            size = rng.integers(1, 38, 400)
            u = np.array([rng.choice([d for d in range(1, c + 1) if c % d == 0]) for c in size])
            first = np.array([rng.integers(0, 38 - c) for c in size])
            members = np.concatenate([np.arange(f, f + c) for f, c in zip(first, size)])
            owner = np.repeat(np.arange(len(size)), size)
            for s in range(4):
                a = group_crossings(job, s, size, u, first)
                b = group_crossings(job, s, size, u, first, members, owner)
                np.testing.assert_array_equal(a[0], b[0])
                np.testing.assert_array_equal(a[1], b[1])


def test_a_ulysses_all_to_all_across_nodes_shares_fewer_nics():
    """The forced Ulysses group of 16 on H100 nodes (above) on nodes with 4 NICs for 8 GPUs: each all-to-all's
    bytes go at half a NIC per GPU, 8.4 µs + 15 · 14 µs + 2 · bytes · 15/16 / 47 GB/s."""
    gpu = resolve_gpu({"base": "h100", "nics_per_node": 4})
    job = JobSpec(LLAMA2_7B, gpu, tp=1, pp=1, pool=16, context_len=131072)
    gb = GroupBatch(np.array([131072]), np.array([0]), np.array([16]), np.array([16]), np.array([0]))
    a2a = BASE + 15 * NET_HOP + 2 * 67108864 * 15 / 16 / 47e9
    assert float(model(job).group_costs(gb).fwd_comm_s[0]) == pytest.approx(4 * a2a * 32, rel=1e-12)
    a2a_one_nic = BASE + 15 * NET_HOP + 67108864 * 15 / 16 / 47e9
    assert float(model(job, LEGACY).group_costs(gb).fwd_comm_s[0]) == pytest.approx(4 * a2a_one_nic * 32, rel=1e-12)
