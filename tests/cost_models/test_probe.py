"""cost_models.analytic_pricing (alone_stage_totals with option=, HyDra's probes) gives group_costs' total_s of each
sequence
alone in a group like its option, bit for bit, on every branch of the model: rings and all-to-alls
on NVLink or the network (and a NIC share below 1, the network bytes scaled), options without a ring or without
all-to-alls among ones with them, every cost term off in turn, TP > 1 (its terms added), one pipeline stage (the
embedding and the LM head on the same stage), stages off domain boundaries (crossings per stage), the stage
classes priced once and cut to prefixes, a MoE model (its general path); and the golden totals of the version
before it (commit 1220d3e, printed by group_costs for the same groups)."""

from dataclasses import replace

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, CostTerms, JobSpec, get_gpu, get_model

from ._cases import alone, golden_model, make_job

# (size, ulysses) options: no ring, rings inside and across NVLink domains, inner all-to-alls on NVLink
OPTIONS = np.array([[1, 1], [2, 1], [2, 2], [8, 1], [8, 4], [8, 8], [16, 1], [16, 8], [64, 4], [64, 8], [32, 2]])
# group_costs(...).total_s at commit 1220d3e of lengths [1, 2, 900, 30000, 250000] in groups (1, 1), (8, 8), (8, 4),
# (16, 1), (64, 8) of make_job() (the first and last equal test_alone_total's golden numbers for those groups)
GOLDEN_ALL_0 = [0.0036029816883582973, 0.005653715278328605, 0.006994927437604285, 0.10016396900851357,
                0.42425359347041797]
GOLDEN_ALL_3 = [0.004373244995186744, 0.0064199550201823295, 0.008363360737341393, 0.11098777999884726,
                0.44597455960062354]
GOLDEN_LEGACY_3 = [0.0025540560557762203, 0.00460488387578252, 0.005568325137711689, 0.09348630795860638,
                   0.4388305968069675]


def _reference(cm, lengths, sizes, u, stage):
    return np.asarray(cm.group_costs(alone(lengths, sizes, u), stage).total_s, dtype=np.float64)


def _job(gpu="h200", tp=1, pp=4, pool=64, nics=None, model="llama3-8b"):
    g = get_gpu(gpu)
    if nics is not None:  # fewer NICs than GPUs: a cross-domain send gets nics / gpus of a NIC
        g = replace(g, nics_per_node=nics)
    return JobSpec(model=get_model(model), gpu=g, tp=tp, pp=pp, pool=pool, context_len=262144,
                   max_tokens_per_rank=16384)


@pytest.mark.parametrize("job,terms", [
    (_job(), "all"),
    (_job(), "legacy"),
    (_job(), "all,-fixed_costs"),
    (_job(), "all,-lm_head"),
    (_job(), "all,-links"),
    (_job(nics=4), "all"),  # p2p NIC share 1/2: the network branch's bytes scaled, the NVLink one's not
    (_job(tp=2), "all"),  # TP communication of the layers and the ends added
    (_job(tp=4), "all,-fixed_costs"),
    (_job(pp=1, pool=64), "all"),  # one stage: the embedding and the LM head both
    (_job(pool=12), "all"),  # stage 1 starts mid-node: the crossings (and the table) per stage
    (_job("gb200", tp=2, pool=72), "all"),  # NVL72 domains
    (_job("h100", model="qwen3-30b-a3b"), "all"),  # MoE: the model's general path, per-option parts gathered
])
def test_per_option_totals_equal_group_costs(job, terms):
    cm = AnalyticCostModel(job, terms=CostTerms.parse(terms))
    opts = OPTIONS[(OPTIONS[:, 0] <= job.pool) & (job.kv_heads_per_rank % OPTIONS[:, 1] == 0)]
    rng = np.random.default_rng(5)
    n = 160
    pick = rng.integers(0, len(opts), n)
    lengths = rng.integers(1, 300_000, n)
    lengths[:4] = [1, 2, 3, 1]  # the overhead probes' lengths
    stages = tuple(range(job.pp))
    prefix = tuple([None, 50, 0, 120][:job.pp])
    # every option, only ring-free options, only options without all-to-alls, one option
    for sel in (pick, np.flatnonzero(opts[:, 0] == opts[:, 1])[pick % 2],
                np.flatnonzero(opts[:, 1] == 1)[pick % 3], np.full(n, len(opts) - 1)):
        got = cm.pricing().alone_stage_totals(lengths, opts[:, 0], opts[:, 1], stages, prefix, option=sel)
        for s, k, row in zip(stages, prefix, got):
            k = n if k is None else k
            want = _reference(cm, lengths[:k], opts[sel[:k], 0], opts[sel[:k], 1], s)
            assert row.dtype == np.float64 and row.shape == want.shape
            assert row.tobytes() == want.tobytes(), (terms, s)


@pytest.mark.parametrize("job,terms", [
    (_job(), "all"),
    (_job(), "legacy"),
    (_job(nics=4), "all"),
    (_job(tp=2), "all"),
    (_job(pp=1, pool=64), "all"),
    (_job(pool=12), "all"),
    (_job("h100", model="qwen3-30b-a3b"), "all"),
])
def test_block_totals_equal_the_flattened_block(job, terms):
    # every option at every length ([options, lengths], the grid's probes) = the per-option path on the block
    # flattened option by option, each stage cut to its prefix of lengths
    cm = AnalyticCostModel(job, terms=CostTerms.parse(terms))
    opts = OPTIONS[(OPTIONS[:, 0] <= job.pool) & (job.kv_heads_per_rank % OPTIONS[:, 1] == 0)]
    lengths = np.random.default_rng(9).integers(1, 300_000, 37)
    lengths[-2:] = [1, 2]
    stages = tuple(range(job.pp))
    prefix = tuple([None, 5, 0, 30][:job.pp])
    n, c = len(opts), len(lengths)
    got = cm.pricing().alone_block_totals(lengths, opts[:, 0], opts[:, 1], stages, prefix)
    flat = cm.pricing().alone_stage_totals(np.tile(lengths, n), opts[:, 0], opts[:, 1], stages,
                                           option=np.repeat(np.arange(n), c))
    for s, k, row, want in zip(stages, prefix, got, flat):
        k = c if k is None else k
        assert row.shape == (n, k)
        assert row.tobytes() == want.reshape(n, c)[:, :k].copy().tobytes(), (terms, s)


def test_a_second_call_with_the_same_options_reuses_its_table_and_gives_the_same_numbers():
    cm = AnalyticCostModel(make_job())
    lengths = np.array([5, 900, 30000, 250000])
    pick = np.array([0, 4, 7, 9])
    first = cm.pricing().alone_stage_totals(lengths, OPTIONS[:, 0], OPTIONS[:, 1], (3,), option=pick)[0]
    tables = dict(cm._memo["option_groups"])
    again = cm.pricing().alone_stage_totals(lengths, OPTIONS[:, 0], OPTIONS[:, 1], (3,), option=pick)[0]
    assert cm._memo["option_groups"] == tables and len(tables) == 1
    assert again.tobytes() == first.tobytes()
    empty = cm.pricing().alone_stage_totals(lengths[:0], OPTIONS[:, 0], OPTIONS[:, 1], (3,), option=pick[:0])
    assert empty[0].shape == (0,)


def test_golden_per_option_totals_of_the_version_before():
    # printed by group_costs(...).total_s at commit 1220d3e (before the probe path) for these groups
    lengths = [1, 2, 900, 30000, 250000]
    pick = [0, 5, 4, 6, 9]  # (1, 1), (8, 8), (8, 4), (16, 1), (64, 8)
    golden = {("all,-kernels", 0): GOLDEN_ALL_0, ("all,-kernels", 3): GOLDEN_ALL_3, ("legacy", 3): GOLDEN_LEGACY_3}
    for (terms, stage), want in golden.items():
        cm = golden_model(terms)
        got = cm.pricing().alone_stage_totals(lengths, OPTIONS[:, 0], OPTIONS[:, 1], (stage,), option=np.array(pick))[0]
        assert got.tolist() == want, (terms, stage)
