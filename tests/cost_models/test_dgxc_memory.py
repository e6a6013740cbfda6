"""Memory admits what really ran (issue 23 item 5): the dgxc-benchmarking NeMo BF16 recipe configurations fit
with dcpsim's own budget (no override), and configurations that cannot run do not.

The configurations, as published (cost_models/data/measured/dgxc_recipes_bf16.csv: source, commit, excerpt per
row; tests/cost_models/_dgxc.py: what the tables leave unstated, from NeMo's recipes), recompute none in every
row (the tables list none); Llama 3.1 405B with its 126 layers split as NeMo's recipe does (the embedding and the
loss each count as one layer: Megatron-Core's account_for_embedding/loss_in_pipeline_split):

====  ==================  =====  ===  ===  ===  ====  ==  =====  ===
id    model               GPUs   TP   PP   CP   DP    VP  seq    mbs
====  ==================  =====  ===  ===  ===  ====  ==  =====  ===
D1    Llama 3.1 8B        8      1    1    2    4     1   8192   1
D2    Llama 3.1 8B        128    1    1    2    64    1   8192   1
D3    Llama 3.1 70B       64     4    4    2    2     5   8192   1
D4    Llama 3.1 70B       2048   4    4    2    64    5   8192   1
D5    Llama 3.1 405B 8L   32     8    1    2    2     1   8192   1
D6    Llama 3.1 405B      512    8    8    2    4     8   8192   1
D7    Llama 3.1 405B      2048   8    8    2    16    8   8192   1
D9    GPT-3 175B          128    4    8    1    4     6   2048   1
D10   Nemotron-4 15B      16     2    1    1    8     1   4096   2
D11   Nemotron-4 15B      2048   2    1    1    1024  1   4096   2
D12   Nemotron-4 340B     256    8    8    1    4     12  4096   1
D13   Grok-1 314B (EP 8)  2048   4    8    2    32    8   8192   1
====  ==================  =====  ===  ===  ===  ====  ==  =====  ===
"""

from __future__ import annotations

import pytest

from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.cost_models.errors import InfeasibleError
from dcpsim.cost_models.memory import memory_breakdown, memory_budget_tokens

from ._dgxc import rows, simulated_tokens_per_s_per_gpu

GIB = 2 ** 30
ROWS = {r.id: r for r in rows()}


@pytest.mark.parametrize("row_id", list(ROWS))
def test_published_configuration_fits_its_own_budget(row_id):
    """The budget M derived from memory holds a microbatch's tokens per rank, and the uniform plan's peak on
    every stage fits the GPU."""
    r = ROWS[row_id]
    job = r.job()
    assert memory_budget_tokens(job) >= r.tokens_per_rank
    for s in range(job.pp):
        b = memory_breakdown(job, s, r.tokens_per_rank, cp=r.cp > 1)
        assert b.total <= job.gpu.hbm_gb * 1e9, (s, b.to_dict())


@pytest.mark.parametrize("row_id", ["D1", "D3", "D6", "D10", "D12"])
def test_simulated_peak_fits_without_an_override(row_id):
    """The simulator's peak of static CP at the row's degree, with the budget the model derives, fits (what
    ``fits_memory`` reports)."""
    r = ROWS[row_id]
    _, peak_gib = simulated_tokens_per_s_per_gpu(r)
    assert peak_gib <= r.job().gpu.hbm_gb * 1e9 / GIB


def test_405b_fits_by_the_split_it_runs_with():
    """D6 at its 126 layers split as NeMo splits them fits on every stage; at 128 even layers (the model before
    the split was modelled) stage 0 holds one layer more and does not."""
    from dataclasses import replace

    r = ROWS["D6"]
    job = r.job()
    assert (job.stage_layers(0), job.stage_layers(1), job.stage_layers(7)) == (15, 16, 15)
    cap = job.gpu.hbm_gb * 1e9
    assert max(memory_breakdown(job, s, r.tokens_per_rank, cp=True).total for s in range(job.pp)) < cap
    even = r.job(model=replace(job.model, layers=128), account_for_embedding_in_pipeline_split=False,
                 account_for_loss_in_pipeline_split=False)
    assert memory_breakdown(even, 0, r.tokens_per_rank, cp=True).total > cap


def test_megatron_defaults_need_more_than_nemo_recipes():
    """fp32 gradient buffers (Megatron-LM's default with --bf16) put 2 more bytes per parameter on every rank."""
    r = ROWS["D1"]
    bf16, fp32 = memory_breakdown(r.job(), 0, 4096), memory_breakdown(r.job(grad_reduce_in_fp32=True), 0, 4096)
    params = 8.03e9
    assert fp32.gradients - bf16.gradients == pytest.approx(2 * params, rel=0.01)
    assert bf16.step_copy == pytest.approx(4 * params / 8, rel=0.01)  # the step's fp32 copy, not with activations


def test_impossible_configurations_do_not_fit():
    """Llama 3 70B unsharded on one H100 cannot hold its weights; Llama 3 8B at 8192 tokens per GPU without CP
    and with Megatron-LM's fp32 gradients needs ~60 GB of states plus ~36 GB of activations."""
    h100 = get_gpu("h100")
    with pytest.raises(InfeasibleError, match="model states"):
        memory_budget_tokens(JobSpec(model=get_model("llama3-70b"), gpu=h100, tp=1, pp=1, pool=8))
    job = JobSpec(model=get_model("llama3-8b"), gpu=h100, tp=1, pp=1, pool=8, context_len=8192)
    assert memory_budget_tokens(job) < 8192
    assert memory_breakdown(job, 0, 8192).total > h100.hbm_gb * 1e9
    assert AnalyticCostModel(job).peak_memory_gb(8192.0, 0) > h100.hbm_gb


@pytest.mark.parametrize("row_id", ["D3", "D6", "D9", "D12", "D10"])
def test_in_flight_depth_is_the_schedules(row_id):
    """memory.in_flight (what the budget assumes) equals the simulated schedule's peak in-flight tokens per
    stage over a microbatch's tokens per rank, interleaved (D3: V 5, D9: V 6, D12: V 12; D6: V 8 with chunks of
    1 and 2 layers, each weighed by its share of the stage's layers) or not (D10, one stage)."""
    import numpy as np

    from dcpsim.cost_models.memory import in_flight
    from dcpsim.policies import create_policy
    from dcpsim.policies.flatten import flatten
    from dcpsim.sim.simulate import peak_tokens_in_flight
    from dcpsim.traces.batching import GlobalBatch

    r = ROWS[row_id]
    job = r.job()
    n = r.gbs * r.mbs
    batch = GlobalBatch(seq_ids=np.arange(n), lengths=np.full(n, r.seq_len), step=0)
    plan = create_policy("static-cp", cp_degree=r.cp).plan(batch, job, AnalyticCostModel(job))
    shares = None if job.even_split else np.array([job.chunk_shares(s) for s in range(job.pp)])
    peak = peak_tokens_in_flight(flatten(plan, batch), job.pp, job.vpp, shares)
    for s in range(job.pp):
        assert float(peak[s].max()) == pytest.approx(in_flight(job, s) * r.tokens_per_rank, rel=1e-12)


def test_the_reserve_is_below_what_every_published_run_left_free():
    """JobSpec.memory_reserve_gb (6 GB) is at most what the tightest published configuration leaves beside its
    model states and activations (D6: 8.1 GB); the spec's comment quotes that bound."""
    slack = min(r.job().gpu.hbm_gb * 1e9 - max(memory_breakdown(r.job(), s, r.tokens_per_rank, cp=r.cp > 1).total
                                                 for s in range(r.pp)) for r in ROWS.values())
    reserve = ROWS["D1"].job().memory_reserve_gb
    assert 0.0 <= slack and reserve + slack / 1e9 == pytest.approx(8.1, abs=0.05)
