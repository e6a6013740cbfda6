"""AnalyticCostModel.group_costs' shortcuts give the numbers of its general path, bit for bit.

group_costs skips what cannot change a number: the per-group sums and gathers when every group holds one
sequence (group i sequence i), the ring and all-to-all terms when no group has them, the branch of a link
choice that no group takes, the ÷ 1 of TP 1; LinkModel.seconds prices a single group size on floats; the
contiguous-group crossings use shifts and masks for powers of two. Each test compares a batch that takes a
shortcut with one that cannot (an extra group forces the general path) on the groups they share, and the
golden totals were printed by the version before the shortcuts (commit 3188ce2) for the same groups.
"""

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, CostTerms, JobSpec, get_gpu, get_model
from dcpsim.cost_models.base import GroupBatch
from dcpsim.cost_models.calibration import COLLECTIVES, LinkModel, default_calibration

from ._cases import alone, golden_model, make_job, random_options

FIELDS = ("fwd_compute_s", "fwd_comm_s", "bwd_compute_s", "bwd_comm_s", "fwd_tp_comm_s", "bwd_tp_comm_s")


def _fields(costs, n):
    return [np.broadcast_to(np.asarray(getattr(costs, f), dtype=np.float64), (len(costs.fwd_compute_s),))[:n]
            for f in FIELDS]


def _plus_group(gb: GroupBatch, lengths, size, ulysses, first=0):
    """``gb`` and one more group (holding ``lengths``): the batch is no longer one sequence per group."""
    G = gb.num_groups
    return GroupBatch(np.r_[gb.seq_len, np.asarray(lengths, dtype=np.int64)],
                      np.r_[gb.seq_group, np.full(len(lengths), G, dtype=np.int64)],
                      np.r_[gb.size, size], np.r_[gb.ulysses, ulysses], np.r_[gb.first_rank, first])


def _assert_same(cm, a: GroupBatch, b: GroupBatch, stage):
    n = a.num_groups
    for x, y, name in zip(_fields(cm.group_costs(a, stage), n), _fields(cm.group_costs(b, stage), n), FIELDS):
        np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.mark.parametrize("model,gpu,tp,terms", [
    ("llama3-8b", "h200", 1, "all"),
    ("llama3-8b", "h200", 1, "legacy"),
    ("llama3-8b", "h200", 4, "all"),  # TP communication, KV heads per rank 2
    ("llama3-8b", "gb200", 2, "all,-links"),  # NVL72 domains (72 GPUs: not a power of two), first-version links
    ("qwen3-30b-a3b", "h100", 1, "all"),  # MoE: EP all-to-alls and the router's recompute
])
def test_one_sequence_per_group_equals_the_general_path(model, gpu, tp, terms):
    job = make_job(model, gpu, tp)
    cm = AnalyticCostModel(job, terms=CostTerms.parse(terms))
    rng = np.random.default_rng(3)
    n = 300
    sizes, u = random_options(rng, n, job)
    first = rng.integers(0, job.pool - sizes + 1)
    lengths = rng.integers(1, 300_000, n)
    gb = alone(lengths, sizes, u, first)
    for stage in range(job.pp):
        _assert_same(cm, gb, _plus_group(gb, [5, 7], 2, 1), stage)


@pytest.mark.parametrize("terms", ["all", "legacy"])
def test_batches_without_ring_or_all_to_all_equal_the_general_path(terms):
    cm = AnalyticCostModel(make_job(), terms=CostTerms.parse(terms))
    lengths = np.array([1, 900, 30_000, 250_000])
    ring_only = alone(lengths, [1, 2, 16, 64], [1, 1, 1, 1])  # no all-to-all
    ulysses_only = alone(lengths, [1, 2, 4, 8], [1, 2, 4, 8])  # no ring step
    inside = alone(lengths, [2, 4, 8, 8], [1, 2, 1, 8])  # nothing crosses a node
    for stage in (0, 1, 3):
        for gb in (ring_only, ulysses_only, inside):
            # a group whose ring and inner all-to-alls cross nodes forces every term and branch
            _assert_same(cm, gb, _plus_group(gb, [40_000], 32, 4, first=6), stage)


def test_golden_totals_of_the_version_before_the_shortcuts():
    gb = GroupBatch(seq_len=np.array([3000, 5000, 120000, 700, 65536]), seq_group=np.array([0, 0, 1, 1, 2]),
                    size=np.array([2, 16, 8]), ulysses=np.array([2, 4, 1]), first_rank=np.array([0, 8, 28]))
    golden = {
        "all,-kernels": {0: [0.06688593887907834, 0.4443585343325778, 0.3344950796193751],
                1: [0.066851805545745, 0.4442941609992445, 0.3344251745527084],
                3: [0.08910985063112417, 0.4855937905901848, 0.37920803720346674]},
        "legacy": {s: [0.06571528045546382, 0.45877546278093584, 0.33517178276527676] for s in (0, 1, 3)},
    }
    for terms, by_stage in golden.items():
        cm = golden_model(terms)
        for stage, want in by_stage.items():
            assert cm.group_costs(gb, stage).total_s.tolist() == want


def test_golden_exposed_communication_of_the_version_before_the_shortcuts():
    # short sequences on rings and all-to-alls that cross nodes (exposed, not hidden behind attention),
    # next to groups that stay inside one: every link choice is taken by some group
    gb = GroupBatch(seq_len=np.array([2000, 1500, 500, 4000, 300000, 1000]),
                    seq_group=np.array([0, 1, 1, 2, 3, 4]), size=np.array([16, 8, 32, 64, 4]),
                    ulysses=np.array([1, 8, 4, 8, 2]), first_rank=np.array([0, 4, 6, 0, 0]))
    comm = {"all,-kernels": [0.003811824805098238, 0.004167353191489361, 0.003688353655413315, 0.002846616216216216,
                    0.0005164354894871855],
            "legacy": [0.0038589187970805173, 0.004167353191489361, 0.003707627235752968, 0.002846616216216216,
                       0.0005219422267270864]}
    total = {("all,-kernels", 0): [0.020074558172988505, 0.015455215585770813, 0.016093283808765225,
                          0.5908789848139758, 0.008539701196775495],
             ("all,-kernels", 3): [0.021510050888970976, 0.017561302464206945, 0.0175287765247477, 0.6167911644595168,
                          0.010645788075211625],
             ("legacy", 0): [0.013538401265121954, 0.014382001133016947, 0.012476576794728545,
                             0.6143413379671975, 0.007097487168702139]}
    for (terms, stage), want in total.items():
        c = golden_model(terms).group_costs(gb, stage)
        assert c.total_s.tolist() == want
        assert c.fwd_comm_s.tolist() == comm[terms]


@pytest.mark.parametrize("op", COLLECTIVES)
def test_link_seconds_of_one_group_size_equals_the_array_path(op):
    nv = default_calibration(get_gpu("h200")).link(op, "nvlink")
    nbytes = np.array([0.0, 1.0, 3e3, 7.5e6, 2.5e9])
    for n in (0, 1, 2, 3, 8, 72):
        want = nv.seconds(op, nbytes, np.full(nbytes.shape, n))
        np.testing.assert_array_equal(nv.seconds(op, nbytes, n), want)
        assert float(nv.seconds(op, 3e3, n)) == want[2]  # a scalar buffer too
        if op == "send_recv" and n == 2:
            np.testing.assert_array_equal(nv.send_recv_s(nbytes), want)


def test_link_seconds_closed_form():
    link = LinkModel(base_s=8.4e-6, hop_s=3.4e-6, busbw_gbs=400.0)
    # all-gather over 8 ranks of a 64 MB buffer: base + 7 hops + 64e6 · 7/8 / 400 GB/s
    assert link.seconds("all_gather", 64e6, 8) == pytest.approx(8.4e-6 + 7 * 3.4e-6 + 64e6 * 7 / 8 / 400e9,
                                                                 rel=1e-15)
    # send/recv: one hop, the whole buffer; nothing to send alone
    assert link.seconds("send_recv", 1e6, 2) == pytest.approx(8.4e-6 + 3.4e-6 + 1e6 / 400e9, rel=1e-15)
    assert link.seconds("send_recv", 1e6, 1) == 0.0


@pytest.mark.parametrize("model,gpu,tp,pp,pool,terms,classes", [
    ("llama3-8b", "h200", 1, 4, 64, "all", (0, 1, 1, 3)),  # the ends add the embedding and the LM head
    ("llama3-8b", "h200", 1, 4, 64, "legacy", (0, 0, 0, 0)),  # no ends, no listed links
    ("llama3-8b", "h200", 1, 1, 64, "all", (0,)),
    ("llama3-8b", "h200", 1, 8, 12, "all", tuple(range(8))),  # 12 ranks: stage 1 starts inside a node
    ("llama3-8b", "h200", 2, 8, 12, "all", (0, 1, 1, 1, 1, 1, 1, 7)),  # 24 GPUs a stage: three whole nodes
    ("llama3-8b", "gb200", 1, 4, 36, "all", (0, 1, 2, 3)),  # 36 of an NVL72 domain's 72 GPUs
    ("llama3-8b", "gb200", 2, 4, 36, "all", (0, 1, 1, 3)),
    ("qwen3-30b-a3b", "h100", 1, 4, 64, "all", (0, 1, 2, 3)),  # MoE: stages hold different layers
])
def test_stage_classes_cost_the_same(model, gpu, tp, pp, pool, terms, classes):
    job = JobSpec(model=get_model(model), gpu=get_gpu(gpu), tp=tp, pp=pp, pool=pool, context_len=262144,
                  max_tokens_per_rank=16384)
    cm = AnalyticCostModel(job, terms=CostTerms.parse(terms))
    assert cm.pricing().stage_classes() == classes
    rng = np.random.default_rng(11)
    G = 200
    sizes = rng.choice([c for c in (1, 2, 3, 4, 6, 8, 12) if c <= pool], G)
    u = np.array([rng.choice([x for x in (1, 2, 4) if c % x == 0 and job.kv_heads_per_rank % x == 0])
                  for c in sizes])
    first = rng.integers(0, pool - sizes + 1)
    lengths = rng.integers(1, 40_000, G)
    members = np.concatenate([rng.permutation(pool)[:c] for c in sizes])
    for gb in (alone(lengths, sizes, u, first),
               GroupBatch(lengths, np.arange(G), sizes, u, first, members, np.repeat(np.arange(G), sizes))):
        costs = {s: _fields(cm.group_costs(gb, s), G) for s in range(pp)}
        for s, r in enumerate(classes):
            for x, y, name in zip(costs[s], costs[r], FIELDS):
                np.testing.assert_array_equal(x, y, err_msg=f"stage {s} vs {r}: {name}")
        if len(set(classes)) < pp or pp == 1 or job.model.is_moe:
            continue
        # a dense model whose stages are all their own class: some group costs differ (not too fine)
        assert any(not np.array_equal(np.r_[tuple(costs[0])], np.r_[tuple(costs[s])]) for s in range(1, pp))
