"""HyDra's Pricer memo (policies/hydra/work.py: one [option, distinct length] table found through a (size,
ulysses) look-up) answers exactly what the work model prices, whatever the order of the requests, the mix of
options in one request and how far the table grows (work_at_rows, the options looked up once,
                                                    too); build_grid with a pricer (probes reused for their grid
columns) gives the grid of the reference path without one; and the work model's numbers are those the version
before the table printed (commit 3188ce2) for the same groups.
"""


import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, CostTerms, JobSpec, get_gpu, get_model
from dcpsim.policies.hydra.degrees import allowed_degrees
from dcpsim.policies.hydra.pricing import group_overhead, sequence_work
from dcpsim.policies.hydra.work import Pricer, build_grid
from dcpsim.traces import get_preset
from tests.cost_models._cases import calibration_before


def _case(n: int, w: int, terms: str = "all", trace: str = "256k", seed: int = 4):
    lengths = np.asarray(get_preset(trace).sample(n, seed), dtype=np.int64)
    budget = max(int(np.ceil(lengths.sum() / (w * 8))), int(np.ceil(lengths.max() / w)))
    job = JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h200"), tp=1, pp=4, pool=w,
                  context_len=int(get_preset(trace).context_len), max_tokens_per_rank=budget)
    return lengths, job, AnalyticCostModel(job, terms=CostTerms.parse(terms))


# more options than the table's first rows (8), sizes past its first look-up, one not a power of two
OPTIONS = [(c, u) for c in (1, 2, 3, 4, 8, 16, 32, 64, 128, 256) for u in (1, 2, 4, 8) if u <= c and c % u == 0]


@pytest.mark.parametrize("narrow", [False, True])
def test_memo_answers_equal_the_work_model_in_any_order(narrow):
    lengths, job, cm = _case(400, 256)
    pricer = Pricer(lengths, cm, narrow=narrow)
    if narrow:  # narrowed to the heaviest stage (the last) by the grid's probes, as the planner does
        build_grid(lengths, allowed_degrees(256, "pow2", 1, "auto", job), "auto", job, cm,
                   job.max_tokens_per_rank, pricer=pricer)
        assert pricer.stages == (3,)
    rng = np.random.default_rng(5)
    for step in range(14):
        m = int(rng.integers(1, 300))
        pos = rng.integers(0, len(lengths), m)
        if step % 4 == 0:  # one option for the whole request, as scalars
            c, u = OPTIONS[int(rng.integers(len(OPTIONS)))]
            got = pricer.work(pos, c, u)
            sizes, uly = np.full(m, c), np.full(m, u)
        else:
            pick = rng.integers(0, len(OPTIONS), m)
            sizes = np.array([OPTIONS[i][0] for i in pick])
            uly = np.array([OPTIONS[i][1] for i in pick])
            got = pricer.work(pos, sizes, uly)
        np.testing.assert_array_equal(got, sequence_work(lengths[pos], sizes, uly, cm))
        np.testing.assert_array_equal(pricer.overhead(sizes, uly), group_overhead(sizes, uly, cm))
    np.testing.assert_array_equal(pricer.overhead(3, 1), group_overhead(np.array([3]), np.array([1]), cm))
    assert pricer.work(np.zeros(0, dtype=np.int64), 4, 2).shape == (0,)


def test_work_model_golden_numbers():
    job = JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h200"), tp=1, pp=4, pool=64, context_len=262144,
                  max_tokens_per_rank=16384)
    sizes, uly = np.array([1, 8, 16, 64]), np.array([1, 8, 4, 8])
    lengths = np.array([1000, 32768, 262144, 262144])
    golden = {
        "all,-kernels": ([0.004354199225094443, 0.006414999847929526, 0.007714199925783911, 0.011477399935515706],
                [0.019400608848645987, 0.12895003164228788, 1.8720484020860448, 0.47342856292668134]),
        "legacy": ([0.002540500626770155, 0.004601301288801275, 0.004806101371555164, 0.0071101013818994],
                   [0.013932598349037414, 0.10946749244434535, 1.8725343291582446, 0.4716311236387361]),
    }
    for terms, (overhead, work) in golden.items():  # (before GEMMs by shape and the end-to-end H200 fit)
        cm = AnalyticCostModel(job, calibration_before("h200"),
                               CostTerms.parse(terms if terms == "legacy" else terms + ",-gemm_shapes"))
        assert group_overhead(sizes, uly, cm).tolist() == overhead
        assert sequence_work(lengths, sizes, uly, cm).tolist() == work
        pricer = Pricer(lengths, cm)
        assert pricer.work(np.arange(4), sizes, uly).tolist() == work
        assert pricer.overhead(sizes, uly).tolist() == overhead


def test_estimate_is_the_grid_in_log_log_and_above_the_price_where_the_work_is_log_log_convex():
    # Pricer.estimate (what phase B ranks other classes by): exact at grid points; between them the chord in
    # log-log, which lies above a log-log convex work (GEMMs + attention, no ring: one rank, or Ulysses alone)
    lengths, job, cm = _case(600, 64)
    D = allowed_degrees(64, "pow2", 1, "auto", job)
    pricer = Pricer(lengths, cm)
    grid = build_grid(lengths, D, "auto", job, cm, job.max_tokens_per_rank, pricer=pricer)
    pos = np.arange(len(lengths))
    for size, u in ((1, 1), (8, 8)):
        est = pricer.estimate(pos, size, u)
        assert est is not None
        work = pricer.work(pos, size, u)
        on_grid = np.isin(lengths, grid.lengths)
        assert on_grid.any() and np.allclose(est[on_grid], work[on_grid], rtol=1e-9)
        assert (est >= work * (1 - 1e-9)).all()
        assert (est / work).max() < 1.01  # a 5% geometric grid: the chord stays within 1% of the price
    assert pricer.estimate(pos, 3, 1) is None  # not a grid option: no estimate
