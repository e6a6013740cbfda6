"""dcpsim's tokens/s/GPU on the dgxc-benchmarking NeMo BF16 rows (fitting data; tests/cost_models/_dgxc.py),
static CP at each row's degree, with the memory budget the model derives (no override but D6's).

Measured at this commit (``python -m pytest tests/cost_models/test_dgxc_throughput.py -s`` prints the rows):
mean |error| 22.9%, worst 34.9% (D5), every row but D12 optimistic — GEMMs are still priced by the calibrated
token curve, not by shape (issue 23 item 4, its second half). Without the memory-bound kernels
(``all,-kernels``): 26.4%, worst 37.2%; before the recompute/overlap/memory work of the same issue (those
terms off, fp32 gradients, no DP overlap): 23.9%, worst 29.5% (DP overlap hides time dcpsim's optimistic
compute does not have). The bounds below hold today's figures so that a
change that moves them has to say so; the acceptance target is 10% mean, 20% worst.
"""

from __future__ import annotations

import numpy as np

from ._dgxc import rows, simulated_tokens_per_s_per_gpu

MEAN_ABS_ERROR_NOW, WORST_ABS_ERROR_NOW = 0.229, 0.349


def test_dgxc_rows_error_as_measured():
    errors = {}
    for r in rows():
        # D6, modelled at 128 layers, misses its budget by 1% (test_dgxc_memory): its tokens per rank are given
        tps, _ = simulated_tokens_per_s_per_gpu(r,
                                                **({"max_tokens_per_rank": r.tokens_per_rank} if r.id == "D6" else {}))
        errors[r.id] = tps / r.published - 1.0
        print(f"{r.id}: simulated {tps:.1f}, published {r.published:.1f} tokens/s/GPU, error {errors[r.id]:+.1%}")
    a = np.abs(list(errors.values()))
    print(f"mean |error| {a.mean():.1%}, worst {a.max():.1%}")
    assert a.mean() <= MEAN_ABS_ERROR_NOW + 0.005 and a.max() <= WORST_ABS_ERROR_NOW + 0.005
