"""Megatron-Core's pipeline split (cost_models.pipeline_split, JobSpec.split): the transformer layers of
every virtual stage in closed form, Megatron's layout rules refused in one line, and the time and memory of a
stage following its layers."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.cost_models.errors import SpecError
from dcpsim.cost_models.memory import (
    activation_bytes_per_token,
    in_flight,
    layer_activation_bytes_per_token,
    model_state_bytes,
    state_bytes_per_param,
)
from dcpsim.cost_models.pipeline_split import pipeline_split
from dcpsim.policies import create_policy
from dcpsim.policies.flatten import flatten
from dcpsim.sim.simulate import peak_tokens_in_flight, simulate_plan
from dcpsim.traces.batching import GlobalBatch

from ._cases import alone

BOTH = {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}


def model(layers):
    return replace(get_model("llama3-8b"), layers=layers)


def job(layers=32, pp=4, vpp=1, **kw):
    return JobSpec(model=model(layers), gpu=get_gpu("h100"), tp=1, pp=pp, vpp=vpp, pool=4, context_len=4096, **kw)


def test_405b_at_pp8_vp8_with_embedding_and_loss_counted():
    """126 layers, PP 8, VP 8, both flags: (126 + 2) / 64 = 2 slots per virtual stage; the first virtual stage
    builds 1 layer (the embedding takes the other slot), the last 1 (the loss), every other 2."""
    split = pipeline_split(126, 8, 8, True, True)
    assert split[0] == (1,) + (2,) * 7
    assert split[7] == (2,) * 7 + (1,)
    assert all(split[r] == (2,) * 8 for r in range(1, 7))
    j = JobSpec(model=replace(get_model("llama3-8b"), layers=126), gpu=get_gpu("h100"), pp=8, vpp=8, pool=2, **BOTH)
    assert [j.stage_layers(s) for s in range(8)] == [15] + [16] * 6 + [15]
    assert j.chunk_shares(0) == (1 / 15,) + (2 / 15,) * 7 and not j.even_split


@pytest.mark.parametrize("layers, pp, vpp, kw, want", [
    (126, 8, 1, BOTH, [(15,)] + [(16,)] * 6 + [(15,)]),  # 128 / 8 = 16 per rank
    (31, 4, 1, {"account_for_embedding_in_pipeline_split": True}, [(7,), (8,), (8,), (8,)]),
    (31, 4, 2, {"account_for_loss_in_pipeline_split": True}, [(4, 4), (4, 4), (4, 4), (4, 3)]),
    (32, 4, 1, {"num_layers_in_first_pipeline_stage": 2}, [(2,), (10,), (10,), (10,)]),
    (32, 4, 2, {"num_layers_in_first_pipeline_stage": 6, "num_layers_in_last_pipeline_stage": 6},
     [(3, 3), (5, 5), (5, 5), (3, 3)]),
    (30, 2, 1, {"num_layers_in_first_pipeline_stage": 14, "num_layers_in_last_pipeline_stage": 16}, [(14,), (16,)]),
    (32, 4, 2, {}, [(4, 4)] * 4),  # no option: layers / (p · V)
])
def test_closed_form_layouts(layers, pp, vpp, kw, want):
    j = job(layers, pp, vpp, **kw)
    assert [j.split[r] for r in range(pp)] == want
    assert sum(map(sum, j.split)) == layers
    assert j.even_split == (len({n for row in want for n in row}) == 1)


@pytest.mark.parametrize("layers, pp, vpp, kw, line", [
    (126, 8, 8, {}, "job.pp = 8 is invalid: must divide model.layers = 126"),
    (126, 8, 8, {"account_for_embedding_in_pipeline_split": True},
     "job.pp = 8 is invalid: must divide model.layers + 1 = 127"),
    (126, 8, 3, BOTH, "job.vpp = 3 is invalid: must divide (model.layers + 2) / pp = 16"),
    (32, 4, 1, {"num_layers_in_first_pipeline_stage": 4, **BOTH},
     "job.num_layers_in_first_pipeline_stage = 4 is invalid: unset when account_for_embedding"),
    (32, 4, 1, {"num_layers_in_first_pipeline_stage": 0},
     "job.num_layers_in_first_pipeline_stage = 0 is invalid: a positive integer"),
    (32, 4, 2, {"num_layers_in_last_pipeline_stage": 3},
     "job.num_layers_in_last_pipeline_stage = 3 is invalid: a multiple of job.vpp = 2"),
    (32, 4, 1, {"num_layers_in_first_pipeline_stage": 3},
     "job.num_layers_in_first_pipeline_stage = 3 is invalid: leaves 29 layers, not a multiple of the 3 middle"),
    (32, 2, 1, {"num_layers_in_first_pipeline_stage": 4, "num_layers_in_last_pipeline_stage": 4},
     "job.num_layers_in_first_pipeline_stage = 4 is invalid: leaves 24 layers for 0 middle stages"),
    (32, 1, 1, {"num_layers_in_first_pipeline_stage": 32},
     "job.num_layers_in_first_pipeline_stage = 32 is invalid: unset at job.pp = 1"),
])
def test_invalid_layouts_refused_in_one_line(layers, pp, vpp, kw, line):
    with pytest.raises(SpecError) as e:
        job(layers, pp, vpp, **kw)
    assert str(e.value).startswith(line) and "\n" not in str(e.value)


def test_recompute_layers_bounded_by_the_largest_chunk():
    assert job(30, 4, 2, recompute="full", recompute_layers=4, **BOTH).recompute_layers == 4
    with pytest.raises(SpecError, match=r"job.recompute_layers = 5 is invalid: an integer in 1..4"):
        job(30, 4, 2, recompute="full", recompute_layers=5, **BOTH)


def _uniform(j, n=32, L=4096):
    batch = GlobalBatch(seq_ids=np.arange(n), lengths=np.full(n, L), step=0)
    cm = AnalyticCostModel(j)
    return cm, batch, create_policy("static-cp", cp_degree=1).plan(batch, j, cm)


def test_stage_time_and_memory_drop_by_the_layer_removed():
    """30 layers at PP 4 × VP 2 with both flags (4 slots per chunk: rank 0 (3, 4), rank 3 (4, 3)) against 32
    even layers: stage 0 holds 7 layers, not 8. Its simulated busy time drops by one layer's time (a middle
    stage's compute less the per-microbatch fixed cost, over its 8 layers), its model states by one layer's,
    its activations per token by one layer's; the middle stages are unchanged."""
    even, split = job(32, 4, 2), job(30, 4, 2, **BOTH)
    assert split.split[0] == (3, 4) and split.split[3] == (4, 3) and split.stage_layers(1) == 8
    cm_e, batch, plan_e = _uniform(even)
    cm_s, _, plan_s = _uniform(split)
    cal = cm_e.cal
    g = alone([4096], [1], [1])
    mid = cm_e.group_costs(g, 1)
    layer_s = (float(mid.fwd_compute_s[0]) - cal.microbatch_overhead_fwd_s
               + float(mid.bwd_compute_s[0]) - cal.microbatch_overhead_bwd_s) / 8

    def busy(cm, plan, stage):
        tl = simulate_plan(plan, batch, cm).timeline.to_frame()
        rows = tl[(tl.stage == stage) & (tl["rank"] == 0) & (tl.kind == "compute") & (tl.phase != "S")]
        return float((rows.end - rows.start).sum()), len(rows) // 4  # F and B of 2 chunks per microbatch

    (b_e, m), (b_s, _) = busy(cm_e, plan_e, 0), busy(cm_s, plan_s, 0)
    assert b_e - b_s == pytest.approx(m * layer_s, rel=1e-9)
    assert busy(cm_e, plan_e, 1)[0] == pytest.approx(busy(cm_s, plan_s, 1)[0], rel=1e-12)

    m_ = even.model
    states = m_.params_per_layer / even.tp * sum(state_bytes_per_param(even)[:2]) \
        + m_.params_per_layer / even.tp * state_bytes_per_param(even)[2] / even.pool
    assert model_state_bytes(even, 0) - model_state_bytes(split, 0) == pytest.approx(states, rel=1e-12)
    assert activation_bytes_per_token(even, stage=0) - activation_bytes_per_token(split, stage=0) == pytest.approx(
        layer_activation_bytes_per_token(even), rel=1e-12)
    assert activation_bytes_per_token(split, stage=1) == activation_bytes_per_token(even, stage=1)


def test_chunks_carry_their_share_and_the_peak_weighs_it():
    """Chunk 0 of rank 0 (3 of its 7 layers) runs 3/7 of the stage's body plus the embedding, chunk 1 4/7; the
    simulated in-flight peak, each chunk's forward weighed by its share, is what memory.in_flight assumes; and
    the iteration is no faster than its lower bound."""
    j = job(30, 4, 2, **BOTH)
    cm, batch, plan = _uniform(j)
    res = simulate_plan(plan, batch, cm)
    tl = res.timeline.to_frame()
    f = tl[(tl.stage == 0) & (tl["rank"] == 0) & (tl.kind == "compute") & (tl.phase == "F") & (tl.microbatch == 0)]
    d = (f.end - f.start).to_numpy()
    assert len(d) == 2
    whole = float(cm.group_costs(alone([4096], [1], [1]), 0).fwd_compute_s[0])
    emb = float(cm.ends_s(np.array([4096.0]), 0)[0][0])
    assert sorted(d) == pytest.approx(sorted([(whole - emb) * 3 / 7 + emb, (whole - emb) * 4 / 7]), rel=1e-12)
    shares = np.array([j.chunk_shares(s) for s in range(j.pp)])
    peak = peak_tokens_in_flight(flatten(plan, batch), j.pp, j.vpp, shares)
    for s in range(j.pp):
        assert float(peak[s].max()) == pytest.approx(in_flight(j, s) * 4096, rel=1e-12)
    assert res.metrics.efficiency <= 1.0 + 1e-12
