"""dcpsim's tokens/s/GPU on the dgxc-benchmarking NeMo BF16 rows (fitting data; dcpsim.experiments.replay.dgxc),
static CP at each row's degree, with the memory budget the model derives (no override but D6's).

The shipped H100 and H200 calibrations carry the GEMM peak fitted to these rows (629.0 TFLOP/s, least squares of
log errors: ``python -m dcpsim.experiments.replay.dgxc --fit``). Measured at this commit (``python -m
dcpsim.experiments.replay.dgxc`` prints the rows): mean |error| 5.8%, worst 21.8% (D12, Nemotron-4 340B at PP 8
without interleaving, pessimistic), mean error +0.4%. With the GEMM peak of before (0.8 × 989 TFLOP/s, an
assumption): 22.9%, worst 34.9%, every row but D12 optimistic. The bounds below hold today's figures so that a
change that moves them has to say so; the acceptance target is 10% mean, 20% worst (D12 misses it).
"""

from __future__ import annotations

import numpy as np

from dcpsim.experiments.replay.dgxc import errors, with_gemm_peak

MEAN_ABS_ERROR_NOW, WORST_ABS_ERROR_NOW = 0.058, 0.218


def test_dgxc_rows_error_as_measured():
    errs = errors()
    for k, e in errs.items():
        print(f"{k}: error {e:+.1%}")
    a = np.abs(list(errs.values()))
    print(f"mean |error| {a.mean():.1%}, worst {a.max():.1%}")
    assert a.mean() <= MEAN_ABS_ERROR_NOW + 0.005 and a.max() <= WORST_ABS_ERROR_NOW + 0.005
    assert abs(np.mean(list(errs.values()))) < 0.01  # the fit's level


def test_the_assumed_gemm_peak_was_optimistic_on_every_row_but_one():
    errs = errors(with_gemm_peak(791.2))
    assert sum(e > 0.1 for e in errs.values()) == 10 and errs["D12"] < 0
