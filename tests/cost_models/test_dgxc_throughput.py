"""dcpsim's tokens/s/GPU on the dgxc-benchmarking NeMo BF16 rows (fitting data; tests/cost_models/_dgxc.py),
static CP at each row's degree, with the memory budget the model derives (no override).

Measured at this commit (``python -m pytest tests/cost_models/test_dgxc_throughput.py -s`` prints the rows), 12
rows: mean |error| 3.6%, worst 8.1% (D1, Llama 3.1 8B on 8 GPUs, pessimistic), with GEMMs by shape at the
shipped H100 GEMM rate of 656.6 TFLOP/s, which these rows fitted (build_defaults step 7: least squares on log
error; these rows are fitting data, so this is an in-sample figure). D6 and D7 (Llama 3.1 405B at PP 8 × VP 8)
run with NeMo's uneven split: 126 layers, the embedding and the loss each counted as one (stages of 15, 16, …,
16, 15 layers). D12 (Nemotron-4 340B) runs at VP 12, NeMo's recommended configuration for the recipe (the dgxc
table prints VP NA; at VP 1 it was -21.4%). D13 (Grok-1, EP 8 at ETP = TP 4) runs since MoE is placed as
Megatron does, without MoE recompute as its configuration has it (with dcpsim's default MoE recompute it read
-19.1%). Before GEMMs by shape (the token curve at the kernel fit's 791.2 TFLOP/s, 11 rows): 22.9%, worst
34.9%. The bounds below hold today's figures so that a change that moves them has to say so; the acceptance
target is 10% mean, 20% worst.
"""

from __future__ import annotations

import numpy as np

from ._dgxc import rows, simulated_tokens_per_s_per_gpu

MEAN_ABS_ERROR_NOW, WORST_ABS_ERROR_NOW = 0.036, 0.081


def test_dgxc_rows_error_as_measured():
    errors = {}
    for r in rows():
        tps, _ = simulated_tokens_per_s_per_gpu(r)
        errors[r.id] = tps / r.published - 1.0
        print(f"{r.id}: simulated {tps:.1f}, published {r.published:.1f} tokens/s/GPU, error {errors[r.id]:+.1%}")
    a = np.abs(list(errors.values()))
    print(f"mean |error| {a.mean():.1%}, worst {a.max():.1%}")
    assert a.mean() <= MEAN_ABS_ERROR_NOW + 0.005 and a.max() <= WORST_ABS_ERROR_NOW + 0.005
