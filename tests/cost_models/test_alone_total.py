"""AnalyticCostModel.alone_total_s (each sequence alone in a contiguous group from pool rank 0, HyDra's probes)
gives group_costs' total_s of that batch bit for bit, whatever mix of rings, all-to-alls and link choices the
batch holds, with every cost term on or off, TP > 1 and a MoE model; and the totals the version before it
printed (commit 2722142, group_costs' total_s) for the same groups.
"""

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, CostTerms

from ._cases import alone, golden_model, make_job, random_options


def _reference(cm, lengths, sizes, u, stage):
    return np.asarray(cm.group_costs(alone(lengths, sizes, u), stage).total_s, dtype=np.float64)


@pytest.mark.parametrize("model,gpu,tp,terms", [
    ("llama3-8b", "h200", 1, "all"),
    ("llama3-8b", "h200", 1, "legacy"),
    ("llama3-8b", "h200", 4, "all"),  # TP communication (its terms are added)
    ("llama3-8b", "h200", 2, "all,-fixed_costs,-lm_head"),
    ("llama3-8b", "gb200", 2, "all,-links"),  # NVL72 domains, first-version links
    ("qwen3-30b-a3b", "h100", 1, "all"),  # MoE: EP all-to-alls added after the TP terms
])
def test_alone_totals_equal_group_costs(model, gpu, tp, terms):
    job = make_job(model, gpu, tp)
    cm = AnalyticCostModel(job, terms=CostTerms.parse(terms))
    rng = np.random.default_rng(7)
    n = 200
    sizes, u = random_options(rng, n, job)
    lengths = rng.integers(1, 300_000, n)
    # mixed options, then batches where every group or none rings / runs all-to-alls (the masks skipped)
    batches = [(lengths, sizes, u), (lengths, np.full(n, 16), np.ones(n, dtype=np.int64)),
               (lengths, np.full(n, 8), np.full(n, 8)), (lengths, np.ones(n, dtype=np.int64), np.ones(n)),
               (lengths[:0], sizes[:0], u[:0])]
    for stage in range(job.pp):
        for L, c, uu in batches:
            got = cm.pricing().alone_total_s(L, c, uu, stage)
            want = _reference(cm, L, c, uu, stage)
            assert got.dtype == np.float64 and got.shape == want.shape
            assert got.tobytes() == want.tobytes(), (stage, terms)


def test_golden_alone_totals_of_the_version_before():
    lengths, sizes, u = [1, 2, 900, 30000, 250000], [1, 8, 4, 32, 64], [1, 2, 4, 1, 8]
    golden = {
        ("all,-kernels", 0): [0.0036029816883582973, 0.006009031382701782, 0.00807920949075606, 0.09993264441874891,
                     0.42425359347041797],
        ("all,-kernels", 3): [0.004373244995186744, 0.006775271124555507, 0.010051177536701459, 0.10572699919068015,
                     0.44597455960062354],
        ("legacy", 3): [0.0025540560557762203, 0.003865799971756547, 0.007006672661643392, 0.0874769283844852,
                        0.4388305968069675],
    }
    for (terms, stage), want in golden.items():
        cm = golden_model(terms)
        assert cm.pricing().alone_total_s(lengths, sizes, u, stage).tolist() == want
        assert _reference(cm, lengths, sizes, u, stage).tolist() == want


@pytest.mark.parametrize("model,gpu,pool,terms", [
    ("llama3-8b", "h200", 64, "all"),  # stages share everything but the ends: priced once
    ("llama3-8b", "h200", 64, "all,-lm_head"),
    ("llama3-8b", "h200", 12, "all"),  # stage 1 starts mid-node: crossings differ, each stage its own
    ("qwen3-30b-a3b", "h100", 64, "all"),  # MoE: each stage its own layers
])
def test_several_stages_and_prefixes_equal_one_stage_at_a_time(model, gpu, pool, terms):
    job = make_job(model, gpu, pool=pool)
    cm = AnalyticCostModel(job, terms=CostTerms.parse(terms))
    rng = np.random.default_rng(11)
    n = 150
    sizes = rng.choice([1, 2, 4, 8], n)
    u = np.minimum(sizes, rng.choice([1, 2, 4, 8], n))
    lengths = rng.integers(1, 300_000, n)
    stages = tuple(range(job.pp))
    for prefix in (None, (40, None, 0, 150), (7, 7, 7, 7)):
        got = cm.pricing().alone_stage_totals(lengths, sizes, u, stages, prefix)
        for s, k, row in zip(stages, prefix or (None,) * len(stages), got):
            k = n if k is None else k
            want = _reference(cm, lengths[:k], sizes[:k], u[:k], s)
            assert row.tobytes() == want.tobytes(), (s, k)


@pytest.mark.parametrize("terms", ["all", "legacy", "all,-fixed_costs"])
def test_per_option_groups_equal_per_sequence_groups(terms):
    # the options listed once (one unused), each sequence pointing at its own: links and fixed costs priced
    # per option give the per-sequence numbers
    job = make_job(pool=64)
    cm = AnalyticCostModel(job, terms=CostTerms.parse(terms))
    opts = np.array([[1, 1], [8, 1], [8, 8], [16, 4], [64, 8], [2, 2], [32, 1]])
    rng = np.random.default_rng(2)
    pick = rng.integers(0, len(opts) - 1, 120)
    lengths = rng.integers(1, 300_000, 120)
    got = cm.pricing().alone_stage_totals(lengths, opts[:, 0], opts[:, 1], (0, 1, 3), (None, 30, None), option=pick)
    for s, k, row in zip((0, 1, 3), (120, 30, 120), got):
        want = _reference(cm, lengths[:k], opts[pick[:k], 0], opts[pick[:k], 1], s)
        assert row.tobytes() == want.tobytes(), s
