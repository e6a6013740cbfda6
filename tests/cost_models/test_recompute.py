"""Activation recompute with Megatron-LM's meanings (cost_models.recompute; CostTerms.recompute): what each mode
keeps, what its backward re-runs, and the fast pricing agreeing with group_costs."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.cost_models import recompute as rc
from dcpsim.cost_models.errors import SpecError
from dcpsim.cost_models.memory import activation_bytes_per_token, saved_bytes_per_token_layer, transient_bytes
from dcpsim.cost_models.terms import CostTerms

from ._cases import alone


def job(**kw):
    base = {"model": get_model("llama3-8b"), "gpu": get_gpu("h100"), "tp": 2, "pp": 2, "pool": 4, "context_len": 16384,
                "max_tokens_per_rank": 16384}
    base.update(kw)
    return JobSpec(**base)


def costs(j, terms=None, L=8192, c=2):
    return AnalyticCostModel(j, terms=terms or CostTerms()).group_costs(alone([L], [c], [1]), 0)


def test_megatron_semantics_of_method_and_num_layers():
    """16 layers per stage: uniform groups of 4 keep 4 checkpoints and rebuild 4 layers at once; block 4
    checkpoints the first 4 layers one by one and keeps 12 whole."""
    u, b = job(recompute="full", recompute_layers=4), job(recompute="full", recompute_method="block",
                                                          recompute_layers=4)
    assert (rc.checkpointed_layers(u), rc.checkpoints(u), rc.rebuilt_layers(u),
            rc.recomputed_fraction(u)) == (16, 4, 4, 1.0)
    assert (rc.checkpointed_layers(b), rc.checkpoints(b), rc.rebuilt_layers(b),
            rc.recomputed_fraction(b)) == (4, 4, 1, 0.25)
    whole = saved_bytes_per_token_layer(u.model) / 2 + 16 * 4  # per layer on one GPU, log-sum-exp included
    ckpt = 2 * 4096 / 2
    assert activation_bytes_per_token(u) == pytest.approx(4 * ckpt)
    assert activation_bytes_per_token(b) == pytest.approx(12 * whole + 4 * ckpt)
    assert float(transient_bytes(u, 0, 1000.0, 0.0) - transient_bytes(job(), 0, 1000.0,
                                                                      0.0)) == pytest.approx(4 * 1000 * whole)


def test_memory_falls_and_backward_grows_with_recompute():
    modes = [job(), job(recompute="selective"), job(recompute="full")]
    mem = [activation_bytes_per_token(j) for j in modes]
    assert mem[0] > mem[1] > mem[2]
    bwd = [float(costs(j).bwd_compute_s[0]) for j in modes]
    assert bwd[0] < bwd[1] < bwd[2]
    no_ends = CostTerms.parse("all,-lm_head")  # the embedding is not recomputed
    fwd = float(costs(modes[0], no_ends).fwd_compute_s[0])
    extra = float(costs(modes[2], no_ends).bwd_compute_s[0] - costs(modes[0], no_ends).bwd_compute_s[0])
    assert extra == pytest.approx(fwd, rel=1e-12)  # full, uniform: the layers' whole forward once more
    assert np.all(costs(modes[2]).bwd_tp_comm_s > costs(modes[0]).bwd_tp_comm_s)
    assert np.all(costs(modes[2]).bwd_comm_s >= costs(modes[0]).bwd_comm_s)
    assert float(costs(modes[0]).fwd_compute_s[0]) == float(costs(modes[2]).fwd_compute_s[0])


def test_selective_adds_the_attention_forward():
    free_linear = float(costs(job(recompute="selective")).bwd_compute_s[0] - costs(job()).bwd_compute_s[0])
    m = AnalyticCostModel(job())
    attn = m.attention_curves()[0]
    from dcpsim.cost_models.flops import attention_fwd_flops
    flops = float(attention_fwd_flops(np.array([8192.0]), m.job.model)[0]) / 2 / 2 * m.job.stage_layers(0)
    assert free_linear == pytest.approx(float(attn.seconds_clamped(np.array([flops]), np.array([4096.0]))[0]),
                                        rel=1e-12)


def test_term_off_prices_as_none():
    off = CostTerms.parse("all,-recompute")
    assert costs(job(recompute="full"), off).total_s[0] == costs(job(), off).total_s[0]
    assert activation_bytes_per_token(job(recompute="full"), off) == activation_bytes_per_token(job(), off)


@pytest.mark.parametrize("mode", ["selective", "full"])
def test_fast_pricing_matches_group_costs(mode):
    m = AnalyticCostModel(job(recompute=mode))
    L, c, u = np.array([1024, 8192, 16000]), np.array([1, 2, 4]), np.array([1, 1, 2])
    for s in (0, 1):
        np.testing.assert_array_equal(m.pricing().alone_total_s(L, c, u, s), m.group_costs(alone(L, c, u), s).total_s)


@pytest.mark.parametrize("kw,field", [({"recompute": "some"}, "job.recompute"),
                                      ({"recompute": "full", "recompute_method": "random"}, "job.recompute_method"),
                                      ({"recompute_layers": 2}, "job.recompute_layers"),
                                      ({"recompute": "full", "recompute_layers": 17}, "job.recompute_layers")])
def test_bad_settings_are_one_clear_error(kw, field):
    with pytest.raises(SpecError, match=field):
        job(**kw)


def test_cli_flags_reach_the_job_and_cost_prints_the_breakdown(capsys):
    import json

    from dcpsim.experiments.cli import main
    from dcpsim.experiments.cli.args import scenario_from_args
    from dcpsim.experiments.scenario.definition import DEFAULT_SCENARIO

    ns = type("A", (), {"recompute": "full", "recompute_method": "block", "recompute_num_layers": 2,
                        "overlap_grad_reduce": True, "overlap_param_gather": True, "grad_reduce_in_fp32": False})()
    j = scenario_from_args(ns).job()
    assert (j.recompute, j.recompute_method, j.recompute_layers) == ("full", "block", 2)
    assert j.overlap_grad_reduce and j.overlap_param_gather and not j.grad_reduce_in_fp32
    assert "recompute" not in DEFAULT_SCENARIO.to_dict()  # defaults: outputs as before the fields existed
    assert main(["cost", "--model", "llama3-8b", "--seq-len", "8192", "--cp", "2", "--pool", "8", "--memory",
                 "--json"]) == 0
    (stage,) = json.loads(capsys.readouterr().out)
    assert stage["weights_gb"] == pytest.approx(2 * 8.03,
                                                rel=0.01) and stage["gradients_gb"] == pytest.approx(4 * 8.03, rel=0.01)


def test_full_recompute_reruns_a_moe_layer_once():
    """Full recompute of every layer re-runs each MoE layer's forward once, router, experts and their
    dispatch included, so Megatron-Core's MoE-only recompute (``moe_recompute``) adds nothing on top; with
    block recompute the MoE-only recompute still applies to the layers kept whole."""
    moe_job = {"model": get_model("qwen3-30b-a3b"), "tp": 1, "pp": 1, "pool": 8, "ep": 8}
    full = [costs(job(recompute="full", moe_recompute=mr, **moe_job)) for mr in (True, False)]
    for field in ("bwd_compute_s", "bwd_ep_comm_s"):
        assert getattr(full[0], field)[0] == pytest.approx(getattr(full[1], field)[0], rel=1e-12)
    none = costs(job(moe_recompute=False, **moe_job))
    assert full[1].bwd_ep_comm_s[0] == pytest.approx(2 * none.fwd_ep_comm_s[0], rel=1e-12)  # one dispatch re-run
    block = [costs(job(recompute="full", recompute_method="block", recompute_layers=4, moe_recompute=mr,
                       **moe_job)) for mr in (True, False)]
    assert block[0].bwd_compute_s[0] > block[1].bwd_compute_s[0]
