"""Memory-bound operators by bytes moved (cost_models.kernels; CostTerms.kernels)."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.cost_models.kernels import layer_bytes, stage_s
from dcpsim.cost_models.terms import CostTerms

from ._cases import alone


def test_hand_count_llama3_8b():
    """h 4096, f 14336, 32 + 8 heads of 128: norms 8h + RoPE 4·40·128 + SwiGLU 6f + residuals 12h forward."""
    h, f, rope = 4096, 14336, 4 * 40 * 128
    assert layer_bytes(get_model("llama3-8b")) == (8 * h + rope + 6 * f + 12 * h, 12 * h + rope + 10 * f + 12 * h)
    job = JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h100"), tp=2, pp=4)
    fwd, bwd = stage_s(job, np.array([1000.0]), 1)
    assert float(fwd[0]) == pytest.approx(8 * 1000 * (20 * h + rope + 6 * f) / 2 / 3350e9, rel=1e-12)
    assert float(bwd[0]) > float(fwd[0])


def test_moe_layers_run_the_activation_on_their_experts():
    m = get_model("qwen3-30b-a3b")
    dense_f, moe_f = layer_bytes(m)[0], layer_bytes(m, moe_layer=True)[0]
    assert moe_f - dense_f == pytest.approx(6 * (m.experts_per_token * m.expert_ffn - m.ffn))


def test_term_adds_the_kernels_to_compute_and_nothing_else():
    job = JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h100"), tp=1, pp=2, pool=4, max_tokens_per_rank=8192)
    gb = alone([4096, 8000], [1, 2], [1, 1])
    on = AnalyticCostModel(job).group_costs(gb, 0)
    off = AnalyticCostModel(job, terms=CostTerms.parse("all,-kernels")).group_costs(gb, 0)
    kf, kb = stage_s(job, np.array([4096.0, 4000.0]), 0)
    np.testing.assert_allclose(on.fwd_compute_s - off.fwd_compute_s, kf, rtol=1e-12)
    np.testing.assert_allclose(on.bwd_compute_s - off.bwd_compute_s, kb, rtol=1e-12)
    np.testing.assert_array_equal(on.fwd_comm_s, off.fwd_comm_s)
