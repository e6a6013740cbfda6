"""The dgxc-benchmarking NeMo BF16 recipe rows (cost_models/data/measured/dgxc_recipes_bf16.csv) as dcpsim jobs.

Each row runs as published: TP, PP, CP, DP, VP, sequence length, micro batch size (a context window of
mbs · seq_len tokens), global batch; recompute as the tables state it (none listed: none; for Grok-1, the one
MoE row, that includes the MoE layers: grok1_314b.yaml sets no recompute, so ``moe_recompute`` is off, as
Megatron-Core's opt-in ``--recompute-modules moe`` is by default); TP overlap where
the source enables it. What the tables do not state, from NeMo's recipes (nemo/collections/llm/recipes/*.py,
``pretrain_recipe`` / ``pretrain_performance_optimizations``):

* the distributed optimizer with ``overlap_grad_reduce`` and ``overlap_param_gather`` on (the recipes'
  ``DistributedDataParallelConfig``);
* bf16 gradient buffers (``recipe.trainer.plugins.grad_reduce_in_fp32 = False`` in the performance
  optimizations of e.g. gpt3_175b.py, mixtral_8x7b.py, grok1 314b: assumed for every row);
* Llama 3.1 405B's uneven pipeline split: the recipe's ``trainer()`` passes
  ``account_for_embedding_in_pipeline_split = True`` and ``account_for_loss_in_pipeline_split = True`` to
  ``MegatronStrategy`` (NVIDIA/NeMo nemo/collections/llm/recipes/llama31_405b.py at v2.2.1, the flags added by
  #12039), so its 126 layers run at PP 8 × VP 8 as 2 per virtual stage, the first and the last 1 (``SPLIT``).

Models: the presets where dcpsim has them; the others from their published configurations (below). Rows
that cannot run as published are left out, with the reason (``SKIPPED``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources

import numpy as np

from dcpsim.cost_models import AnalyticCostModel, JobSpec, ModelSpec, get_gpu, get_model
from dcpsim.cost_models.terms import CostTerms

TP_OVERLAP_HIDDEN = 1.0  # TransformerEngine userbuffers: TP collectives hidden behind the GEMMs (see below)

MODELS: dict[str, ModelSpec] = {
    "llama3-8b": get_model("llama3-8b"),
    "llama3-70b": get_model("llama3-70b"),
    "llama3.1-405b": get_model("llama3.1-405b"),  # 126 layers, run with NeMo's split (SPLIT)
    # Llama 3.1 405B cut to 8 layers (dgxc's 405b-Proxy).
    "models/llama31_405b_proxy8L.toml": ModelSpec("llama3.1-405b-8L", hidden=16384, ffn=53248, layers=8, heads=128,
                                                  kv_heads=8, head_dim=128, vocab=128256,
                                                  source="Llama-3.1-405B config.json, 8 layers (dgxc 405b-Proxy)"),
    # GPT-3 175B (Brown et al. 2020, Table 2.1: 96 layers, d_model 12288, 96 heads of 128); GELU MLP of 4h, biases,
    # tied embeddings; vocabulary 50257 padded to 50688 (NeMo: a multiple of 128 · TP 4).
    "models/nemo_gpt3_175b.toml": ModelSpec("gpt3-175b", hidden=12288, ffn=49152, layers=96, heads=96, kv_heads=96,
                                            head_dim=128, vocab=50688, mlp="gelu", tied_embeddings=True,
                                            qkv_bias=True, o_bias=True, source="GPT-3 paper Table 2.1; NeMo gpt3_175b"),
    # Nemotron-4 15B (Parmar et al. 2024, Table 1: 32 layers, 6144 hidden, 48 heads, 8 KV heads, vocab 256000,
    # squared-ReLU MLP of 4h: two matrices, priced as "gelu").
    "models/nemotron4_15b.toml": ModelSpec("nemotron4-15b", hidden=6144, ffn=24576, layers=32, heads=48, kv_heads=8,
                                           head_dim=128, vocab=256000, mlp="gelu",
                                           source="Nemotron-4 15B technical report, Table 1"),
    # Nemotron-4 340B (NVIDIA 2024, Table 1: 96 layers, 18432 hidden, 96 heads, 8 KV heads, vocab 256000,
    # squared ReLU of 73728).
    "models/nemotron4_340b.toml": ModelSpec("nemotron4-340b", hidden=18432, ffn=73728, layers=96, heads=96, kv_heads=8,
                                            head_dim=192, vocab=256000, mlp="gelu",
                                            source="Nemotron-4 340B technical report, Table 1"),
    # Grok-1 314B as dgxc-benchmarking's grok1/grok1_314b.yaml configures it (NeMo 1 launcher, Megatron-Core):
    # 64 layers, hidden 6144, 48 heads, 8 query groups of 128, 8 experts of ffn 32768, top 2, "fast-geglu" (gated:
    # three matrices, priced as swiglu), no biases, untied embeddings; the Llama-3-70B tokenizer (128256) padded
    # to a multiple of 128 · TP 4 = 512: 128512. Every layer is MoE; no shared expert.
    "models/grok1_314b.toml": ModelSpec("grok1-314b", hidden=6144, ffn=32768, layers=64, heads=48, kv_heads=8,
                                        head_dim=128, vocab=128512, experts=8, experts_per_token=2,
                                        expert_ffn=32768, source="dgxc-benchmarking grok1/grok1_314b.yaml"),
}
# NeMo's llama31_405b recipe: the embedding and the loss each count as one layer of the pipeline split (module
# docstring); at PP 1 (the 8-layer proxy) they change nothing.
_NEMO_405B_SPLIT = {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
SPLIT: dict[str, dict] = {"llama3.1-405b": _NEMO_405B_SPLIT,
                          "models/llama31_405b_proxy8L.toml": _NEMO_405B_SPLIT}
SKIPPED = {
    "D8": "GB200 row (the fitting target is H100)",
}


@dataclass(frozen=True)
class Row:
    id: str
    model: str
    gpu: str
    n_gpus: int
    tp: int
    pp: int
    cp: int
    dp: int
    seq_len: int
    gbs: int
    mbs: int
    vp: int
    tp_overlap: bool
    published: float  # tokens/s/GPU
    ep: int = 1

    def job(self, **changes) -> JobSpec:
        fields = {"model": MODELS[self.model], "gpu": get_gpu(self.gpu), "tp": self.tp, "pp": self.pp,
                      "pool": self.dp * self.cp, "vpp": self.vp, "ep": self.ep, "context_len": self.seq_len * self.mbs,
                      "global_batch_tokens": self.gbs * self.seq_len,
                      "tp_comm_overlap": TP_OVERLAP_HIDDEN if self.tp_overlap else 0.0,
                      "grad_reduce_in_fp32": False, "overlap_grad_reduce": True, "overlap_param_gather": True,
                      "moe_recompute": False,
                      **SPLIT.get(self.model, {})}
        fields.update(changes)
        return JobSpec(**fields)

    @property
    def tokens_per_rank(self) -> int:
        """Tokens one rank holds in a microbatch: mbs sequences over CP."""
        return self.seq_len * self.mbs // self.cp


def rows() -> list[Row]:
    text = resources.files("dcpsim.cost_models.data.measured").joinpath("dgxc_recipes_bf16.csv").read_text()
    out = []
    for r in csv.DictReader(text.splitlines()):
        if r["id"] in SKIPPED:
            continue
        out.append(Row(r["id"], r["model"], r["gpu"], int(r["n_gpus"]), int(r["tp"]), int(r["pp"]), int(r["cp"]),
                       int(r["dp"]), int(r["seq_len"]), int(r["gbs"]), int(r["mbs"]),
                       1 if r["vp"] == "none" else int(r["vp"]), r["tp_overlap_in_source"].startswith("yes"),
                       float(r["published"]), int(r["ep"])))
    return out


def simulated_tokens_per_s_per_gpu(row: Row, terms: CostTerms | None = None, **changes) -> tuple[float, float]:
    """(tokens/s/GPU, peak GiB) of one iteration of ``row`` under static CP at the row's CP degree."""
    from dcpsim.policies import create_policy
    from dcpsim.sim.simulate import simulate_plan
    from dcpsim.traces.batching import GlobalBatch

    job = row.job(**changes)
    cm = AnalyticCostModel(job, terms=terms or CostTerms())
    batch = GlobalBatch(seq_ids=np.arange(row.gbs * row.mbs), lengths=np.full(row.gbs * row.mbs, row.seq_len), step=0)
    plan = create_policy("static-cp", cp_degree=row.cp).plan(batch, job, cm)
    m = simulate_plan(plan, batch, cm).metrics
    return m.tokens_per_s_per_gpu, m.peak_memory_gib


def log_errors(calibration, ids: tuple[str, ...] | None = None) -> dict[str, float]:
    """log(simulated / published tokens/s/GPU) per row with ``calibration``, each row at the budget it derives."""
    from dcpsim.policies import create_policy
    from dcpsim.sim.simulate import simulate_plan
    from dcpsim.traces.batching import GlobalBatch

    out = {}
    for r in rows():
        if ids is not None and r.id not in ids:
            continue
        job = r.job()
        cm = AnalyticCostModel(job, calibration)
        n = r.gbs * r.mbs
        batch = GlobalBatch(seq_ids=np.arange(n), lengths=np.full(n, r.seq_len), step=0)
        plan = create_policy("static-cp", cp_degree=r.cp).plan(batch, job, cm)
        out[r.id] = float(np.log(simulate_plan(plan, batch, cm).metrics.tokens_per_s_per_gpu / r.published))
    return out


def fit_gemm_peak(base) -> float:
    """The GEMM rate (TFLOP/s, 4 significant digits) minimising Σ log(simulated / published)² over the rows:
    build_defaults.H100_GEMM_PEAK_TFLOPS. The simulated time is ≈ a + b / peak, so the search is over 1/peak."""
    from dataclasses import replace

    from scipy.optimize import minimize_scalar

    from dcpsim.cost_models.calibration import SaturatingCurve

    def loss(inv: float) -> float:
        cal = replace(base, gemm=SaturatingCurve(1.0 / inv, base.gemm.half))
        return sum(e * e for e in log_errors(cal).values())

    peak = get_gpu("h100").peak_bf16_tflops
    res = minimize_scalar(loss, bounds=(1.0 / (0.95 * peak), 1.0 / (0.2 * peak)), method="bounded",
                          options={"xatol": 1e-7})
    return float(f"{1.0 / res.x:.4g}")


if __name__ == "__main__":  # PYTHONPATH=. python -m tests.cost_models._dgxc --fit
    import sys

    from dcpsim.cost_models import Calibration
    from dcpsim.cost_models.calibration import DATA_DIR

    if sys.argv[1:] != ["--fit"]:
        sys.exit("usage: python -m tests.cost_models._dgxc --fit")
    print(fit_gemm_peak(Calibration.load(DATA_DIR / "calibration_h100.json")))
