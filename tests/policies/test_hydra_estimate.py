"""Pricer.estimate (policies/hydra/work.py) reads a per-option row interpolated once over every distinct length:
it gives, bit for bit, the grid's local power law at the requested positions alone (linear interpolation in
log-log between the grid points, exact at them), whatever positions, repeats and order are asked; None for an
option without a non-decreasing grid row."""

import numpy as np

from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.policies.hydra.degrees import OPTION_KEY, allowed_degrees
from dcpsim.policies.hydra.pricing import MIN_WORK_S
from dcpsim.policies.hydra.work import Pricer, build_grid
from dcpsim.traces import get_preset


def test_estimate_is_the_power_law_at_the_asked_positions():
    lengths = np.asarray(get_preset("256k").sample(500, 3), dtype=np.int64)
    job = JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h200"), tp=1, pp=4, pool=64, context_len=262144,
                  max_tokens_per_rank=int(np.ceil(lengths.sum() / (64 * 8))))
    cm = AnalyticCostModel(job)
    pricer = Pricer(lengths, cm)
    D = allowed_degrees(64, "pow2", 1, "auto", job)
    grid = build_grid(lengths, D, "auto", job, cm, job.max_tokens_per_rank, pricer=pricer)
    rng = np.random.default_rng(1)
    keys = list(pricer._grid_rows)
    assert len(keys) >= len(D)  # every degree has a non-decreasing row
    for _ in range(12):
        key = keys[int(rng.integers(len(keys)))]
        c, u = key // OPTION_KEY, key % OPTION_KEY
        pos = rng.integers(0, len(lengths), int(rng.integers(1, 80)))
        row = pricer._grid_rows[key]
        want = np.exp(np.interp(np.log(lengths[pos].astype(np.float64)), np.log(grid.lengths.astype(np.float64)),
                                np.log(np.maximum(row, MIN_WORK_S))))
        got = pricer.estimate(pos, c, u)
        assert got.tobytes() == want.tobytes()
        at_grid = np.flatnonzero(np.isin(lengths[pos], grid.lengths))  # exact at grid points (to rounding)
        j = np.searchsorted(grid.lengths, lengths[pos][at_grid])
        np.testing.assert_allclose(got[at_grid], np.maximum(row[j], MIN_WORK_S), rtol=1e-12)
    assert pricer.estimate(np.arange(3), 3, 1) is None  # no grid row for a degree the grid does not hold
