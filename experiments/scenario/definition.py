"""Scenarios: everything that defines a run (model, GPU, parallel layout, trace, policies, seed), the built-in
default, and the objects built from one (job, cost model, global batches)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from dcpsim.cost_models import AnalyticCostModel, Calibration, CostTerms, JobSpec, get_model
from dcpsim.cost_models.errors import SpecError
from dcpsim.cost_models.gpu_files import resolve_gpu
from dcpsim.cost_models.specs import GPUSpec
from dcpsim.cost_models.stragglers import Stragglers

DEFAULT_POLICIES = ("static-cp", "mcore-dcp", "hydra")


@dataclass(frozen=True)
class Scenario:
    """A what-if question: which policies, on which trace, model, cluster and layout.

    The default is a Llama-3-8B-class model on 64 H200 GPUs (TP 1, PP 4, a pool of 16 ranks per stage) at
    256K context, 4M-token global batches drawn from the ``256k`` trace preset.
    """

    name: str = "default"
    description: str = "llama3-8b on 64 H200 (TP1 PP4 pool 16) at 256K context, 256k trace preset"
    model: str = "llama3-8b"
    gpu: str = "h200"  # a GPU preset or a GPU .toml file (cost_models.gpu_files); the label of a [gpu] table
    gpu_spec: dict[str, Any] = field(default_factory=dict)  # a [gpu] table (GPU fields, 'base'); wins over gpu
    tp: int = 1
    pp: int = 4
    vpp: int = 1  # virtual stages per pipeline rank (V > 1: interleaved 1F1B, policies.pipeline_order)
    # Megatron-Core's uneven pipeline split (cost_models.pipeline_split): the embedding / the loss count as
    # one layer each; or the first / last pipeline stage's transformer layers (0: unset, an even split)
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    num_layers_in_first_pipeline_stage: int = 0
    num_layers_in_last_pipeline_stage: int = 0
    pool: int = 16
    context_len: int = 262144
    global_batch_tokens: int = 4 * 1024 * 1024
    trace: str = "256k"  # a preset name, a distribution 'lognormal:mean=..' (traces.spec) or a trace file
    iterations: int = 1
    seed: int = 0
    policies: tuple[str, ...] = DEFAULT_POLICIES
    calibration: str | None = None  # a calibration JSON; default: the GPU's shipped calibration
    max_tokens_per_rank: int | None = None
    memory_reserve_gb: float = 6.0
    cost_terms: str = "all"  # which cost-model terms are on: 'all', 'legacy', edits like 'all,-tp_comm'
    tp_comm_overlap: float = 0.0  # fraction of TP communication hidden behind GEMMs (0: Megatron's default)
    attention_backend: str | None = None  # fa2, fa3, cudnn; default: TransformerEngine's pick on the GPU
    ep: int = 1  # expert-parallel degree of a MoE model, carved from the pool (cost_models.moe)
    moe_recompute: bool = True  # MoE layers recompute router + experts in the backward (cost_models.moe)
    etp: int = 0  # expert-tensor-parallel degree, Megatron's --expert-tensor-parallel-size (0: = tp, its default)
    moe_dispatcher: str = "alltoall"  # MoE token dispatcher: alltoall or flex (DeepEP), cost_models.moe
    recompute: str = "none"  # activation recompute, Megatron's --recompute-granularity (none: its default)
    recompute_method: str = "uniform"  # with full: Megatron's --recompute-method
    recompute_layers: int = 0  # with full: Megatron's --recompute-num-layers (0: its usual 1)
    overlap_grad_reduce: bool = False  # Megatron's --overlap-grad-reduce (off by default)
    overlap_param_gather: bool = False  # Megatron's --overlap-param-gather (off by default)
    grad_reduce_in_fp32: bool = True  # fp32 gradient buffers (Megatron with --bf16)
    global_batch_seqs: int = 0  # > 0: global batches of this many sequences (the token budget is then unused)
    slow_ranks: str = ""  # stragglers by name: '3=1.3,s2r5=1.5,gpu17=2' (cost_models.stragglers); '' = none
    stragglers: str = ""  # random stragglers: 'fraction=0.05,slowdown=lognormal:1.3:0.5,seed=1'; '' = none
    policy_options: dict[str, Any] = field(default_factory=dict)  # options passed to every policy that takes them

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.pool

    def layout(self) -> str:
        """The layout as run headers print it: TP, PP (VP when interleaved), the pool; a MoE model's EP, ETP and
        dispatcher; the recompute mode when there is one."""
        s = f"TP{self.tp} PP{self.pp}" + (f" VP{self.vpp}" if self.vpp > 1 else "") + f" pool {self.pool}"
        if self.ep > 1 or self.etp:
            s += f", EP{self.ep} ETP{self.etp or self.tp} {self.moe_dispatcher} dispatcher"
        return s + (f", recompute {self.recompute}" if self.recompute != "none" else "")

    def with_(self, **changes: Any) -> Scenario:
        valid = {f.name for f in fields(self)}
        bad = sorted(set(changes) - valid)
        if bad:
            raise SpecError(f"scenario has no field {bad[0]!r}; valid: {', '.join(sorted(valid))}")
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if self.vpp == 1:  # the non-interleaved default: outputs as before the field existed
            del d["vpp"]
        for f in STEP_FIELDS:  # Megatron step settings at their defaults: outputs as before the fields existed
            if d[f] == getattr(DEFAULT_SCENARIO, f):
                del d[f]
        d["policies"] = list(self.policies)
        d["num_gpus"] = self.num_gpus
        return d

    def job(self) -> JobSpec:
        return JobSpec(model=get_model(self.model), gpu=self.gpu_object(), tp=self.tp, pp=self.pp, vpp=self.vpp,
                       pool=self.pool, context_len=self.context_len, global_batch_tokens=self.global_batch_tokens,
                       memory_reserve_gb=self.memory_reserve_gb, max_tokens_per_rank=self.max_tokens_per_rank,
                       tp_comm_overlap=self.tp_comm_overlap, attention_backend=self.attention_backend, ep=self.ep,
                       etp=self.etp or None, moe_dispatcher=self.moe_dispatcher, moe_recompute=self.moe_recompute,
                       stragglers=self.straggler_spec(), recompute=self.recompute,
                       recompute_method=self.recompute_method, recompute_layers=self.recompute_layers or None,
                       overlap_grad_reduce=self.overlap_grad_reduce, overlap_param_gather=self.overlap_param_gather,
                       grad_reduce_in_fp32=self.grad_reduce_in_fp32,
                       account_for_embedding_in_pipeline_split=self.account_for_embedding_in_pipeline_split,
                       account_for_loss_in_pipeline_split=self.account_for_loss_in_pipeline_split,
                       num_layers_in_first_pipeline_stage=self.num_layers_in_first_pipeline_stage or None,
                       num_layers_in_last_pipeline_stage=self.num_layers_in_last_pipeline_stage or None)

    def straggler_spec(self) -> Stragglers:
        """The stragglers named by ``slow_ranks`` and ``stragglers`` (cost_models.stragglers)."""
        spec = Stragglers.parse(self.slow_ranks, self.stragglers, slow_what="slow_ranks", random_what="stragglers")
        spec.check(self.pp, self.pool, self.tp, "slow_ranks")  # the explicit ones are what can be out of range
        return spec

    def gpu_object(self) -> GPUSpec:
        """The GPU: the ``[gpu]`` table when there is one, else the preset or file named by ``gpu``."""
        if self.gpu_spec:
            return resolve_gpu(self.gpu_spec, "scenario [gpu] table")
        return resolve_gpu(self.gpu, "gpu")

    def cost_model(self) -> AnalyticCostModel:
        cal = Calibration.load(self.calibration) if self.calibration else None
        return AnalyticCostModel(self.job(), cal, CostTerms.parse(self.cost_terms, "cost_terms"))

    def batches(self):
        """The global batches of this scenario (one per iteration), deterministic in ``seed``."""
        from dcpsim import traces
        from dcpsim.traces.spec import is_distribution_spec, resolve_length_source

        seqs = self.global_batch_seqs or None
        if not is_distribution_spec(self.trace) and Path(self.trace).suffix:  # a file
            tr = traces.read_trace(self.trace)
            # A 'step' column decides the batches itself; otherwise the token budget (or sequence count) does.
            budget = None if tr.step is not None or seqs else self.global_batch_tokens
            return traces.form_batches(tr, budget, self.context_len, global_batch_seqs=seqs)[: self.iterations]
        return traces.sample_batches(resolve_length_source(self.trace), self.iterations, self.global_batch_tokens,
                                     context_len=self.context_len, seed=self.seed, global_batch_seqs=seqs)


DEFAULT_SCENARIO = Scenario()
# Megatron training-step settings (cost_models.recompute, dp_overlap), MoE layout settings (cost_models.moe) and
# the pipeline split (cost_models.pipeline_split): left out of outputs at their defaults
STEP_FIELDS = ("recompute", "recompute_method", "recompute_layers", "overlap_grad_reduce", "overlap_param_gather",
               "grad_reduce_in_fp32", "etp", "moe_dispatcher", "account_for_embedding_in_pipeline_split",
               "account_for_loss_in_pipeline_split", "num_layers_in_first_pipeline_stage",
               "num_layers_in_last_pipeline_stage")
