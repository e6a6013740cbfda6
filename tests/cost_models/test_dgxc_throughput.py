"""dcpsim's tokens/s/GPU on the dgxc-benchmarking NeMo BF16 rows (fitting data; tests/cost_models/_dgxc.py),
static CP at each row's degree, with the memory budget the model derives (no override).

Measured at this commit (``python -m pytest tests/cost_models/test_dgxc_throughput.py -s`` prints the rows):
mean |error| 6.0%, worst 17.8% (D13, Grok-1 314B, pessimistic; every other row within 10.2%), with GEMMs by
shape at the shipped H100 GEMM rate of 688.4 TFLOP/s, which these rows fitted (build_defaults step 7: least
squares on log error; these rows are fitting data, so this is an in-sample figure, and the rate was fitted
before D6 and D7 ran at their 126 layers). D6 and D7 (Llama 3.1 405B at PP 8 × VP 8) run with NeMo's uneven
split, 126 layers with the embedding and the loss each counted as one (stages of 15, 16, …, 16, 15 layers):
+7.5% and +8.0%; modelled at 128 even layers they were +3.3% and +3.8% (mean 4.9%), D6 with its tokens per
rank given because stage 0 missed the budget. Before (GEMMs on the token
curve at the kernel fit's 791.2 TFLOP/s): 22.9%, worst 34.9%, every row but D12 optimistic. The bounds below
hold today's figures so that a change that moves them has to say so; the acceptance target is 10% mean, 20%
worst. D12 (Nemotron-4 340B) runs at VP 12, NeMo's recommended configuration for the recipe (the dgxc table
prints VP NA); at VP 1 it was the one row past 20% (-21.4%).
"""

from __future__ import annotations

import numpy as np

from ._dgxc import rows, simulated_tokens_per_s_per_gpu

MEAN_ABS_ERROR_NOW, WORST_ABS_ERROR_NOW = 0.067, 0.178


def test_dgxc_rows_error_as_measured():
    errors = {}
    for r in rows():
        tps, _ = simulated_tokens_per_s_per_gpu(r)
        errors[r.id] = tps / r.published - 1.0
        print(f"{r.id}: simulated {tps:.1f}, published {r.published:.1f} tokens/s/GPU, error {errors[r.id]:+.1%}")
    a = np.abs(list(errors.values()))
    print(f"mean |error| {a.mean():.1%}, worst {a.max():.1%}")
    assert a.mean() <= MEAN_ABS_ERROR_NOW + 0.005 and a.max() <= WORST_ABS_ERROR_NOW + 0.005
