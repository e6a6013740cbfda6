"""Command-line options shared by the commands that run a scenario, and the Scenario they describe."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from dcpsim.experiments.scenario.definition import DEFAULT_SCENARIO, Scenario
from dcpsim.policies.registry import OptionType


def positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1 (within int64), checked as every typed option is (:func:`typed`)."""
    return typed(int, ge=1)(text)


def typed(base: type, *, ge: float | None = None, gt: float | None = None,
          le: float | None = None) -> Callable[[str], Any]:
    """argparse type: a value of ``base`` (int, float, bool) within the bounds, parsed and checked as a policy
    option is (:meth:`policies.registry.OptionType.arg_type`): ``--timeout abc`` or ``--sigma nan`` is one line."""
    return OptionType(base, ge=ge, gt=gt, le=le).arg_type()


def add_scenario_arguments(p: argparse.ArgumentParser) -> None:
    d = DEFAULT_SCENARIO
    g = p.add_argument_group("scenario (defaults: the built-in default scenario)")
    g.add_argument("--scenario", metavar="NAME|FILE",
                   help="a named scenario (see 'dcpsim scenarios') or a scenario TOML file; flags below override it")
    g.add_argument("--model", metavar="PRESET|FILE",
                   help=f"model preset (see 'dcpsim model --list'), a Hugging Face config.json or a model .toml "
                        f"(docs/models.md; default {d.model})")
    g.add_argument("--gpu", metavar="PRESET|FILE",
                   help=f"GPU preset (a100, h100, h200, b200, gb200, mi300x) or a GPU .toml file, optionally "
                        f"on top of a preset (docs/models.md, 'GPUs and clusters'; default {d.gpu})")
    g.add_argument("--tp", type=positive_int,
                   help=f"tensor-parallel degree; one simulator rank = TP GPUs (default {d.tp})")
    g.add_argument("--pp", type=positive_int, help=f"pipeline stages (default {d.pp})")
    g.add_argument("--vpp", type=positive_int, metavar="V",
                   help=f"virtual stages per pipeline rank: V > 1 runs Megatron's interleaved 1F1B "
                        f"(--num-virtual-stages-per-pipeline-rank; pp · V must divide the layers; default {d.vpp})")
    add_split_arguments(g)
    g.add_argument("--pool", type=positive_int, help=f"ranks per stage, W = DP x CP (default {d.pool})")
    g.add_argument("--context-len", type=positive_int,
                   help=f"context length in tokens; longer documents are cut (default {d.context_len})")
    g.add_argument("--global-batch-tokens", type=positive_int,
                   help=f"tokens per global batch (default {d.global_batch_tokens})")
    g.add_argument("--trace", metavar="PRESET|DIST|FILE",
                   help=f"trace preset name, a length distribution such as "
                        f"'lognormal:mean=1024,sigma=1.5,min=128,max=8192' (docs/models.md), or a length trace "
                        f"file: .csv, .parquet, .jsonl, .json with a 'length' column and optional 'step' "
                        f"(default preset {d.trace})")
    g.add_argument("--global-batch-seqs", type=positive_int, metavar="N",
                   help="sequences per global batch (Megatron's global batch size); replaces the token budget")
    g.add_argument("--ep", type=positive_int,
                   help=f"expert-parallel degree of a MoE model, carved from the pool (default {d.ep})")
    g.add_argument("--etp", type=positive_int, metavar="N",
                   help="expert-tensor-parallel degree, Megatron's --expert-tensor-parallel-size: routed experts "
                        "sharded over N GPUs; ETP x EP must divide TP x pool (default: = --tp, Megatron's default)")
    g.add_argument("--moe-dispatcher", choices=("alltoall", "flex"),
                   help="MoE token dispatcher, Megatron's --moe-token-dispatcher-type: alltoall sends every routed "
                        "copy, flex (DeepEP) one copy per destination node over the network (default alltoall)")
    g.add_argument("--moe-recompute", action=argparse.BooleanOptionalAction, default=None,
                   help="MoE layers recompute router and experts in the backward (default: on)")
    g.add_argument("--iterations", type=positive_int,
                   help=f"global batches (iterations) to simulate (default {d.iterations})")
    g.add_argument("--seed", type=typed(int, ge=0), help=f"seed of the trace sampling (default {d.seed})")
    g.add_argument("--calibration", metavar="FILE",
                   help="calibration JSON from 'dcpsim calibrate' (default: the GPU's shipped one)")
    g.add_argument("--max-seqlen-per-rank", type=positive_int, metavar="TOKENS",
                   help="per-rank token budget of a microbatch (default: derived from GPU memory)")
    g.add_argument("--cp-engine", choices=("ring", "ulysses", "hybrid", "auto"),
                   help="CP engine for the policies that take one (default: each policy's own)")
    g.add_argument("--cost-terms", metavar="TERMS",
                   help="cost-model terms: 'all' (default), 'legacy' (the first model: none of the terms added "
                        "since), or edits such as 'all,-tp_comm' or 'legacy,+lm_head' (docs/cost_model.md)")
    g.add_argument("--tp-comm-overlap", type=typed(float, ge=0.0, le=1.0), metavar="FRACTION",
                   help="fraction of the TP all-gathers / reduce-scatters hidden behind GEMMs (default 0: "
                        "exposed, as Megatron-LM without --tp-comm-overlap)")
    g.add_argument("--attention-backend", choices=("fa2", "fa3", "cudnn"),
                   help="attention kernels to price (default: TransformerEngine's pick on the GPU: cudnn on "
                        "Hopper; docs/cost_model.md)")
    g.add_argument("--recompute", choices=("none", "selective", "full"),
                   help="activation recompute, Megatron-LM's --recompute-granularity (default none: Megatron-LM's "
                        "default, no recompute)")
    g.add_argument("--recompute-method", choices=("uniform", "block"),
                   help="with --recompute full: Megatron-LM's --recompute-method (default uniform)")
    g.add_argument("--recompute-num-layers", type=positive_int, metavar="N",
                   help="with --recompute full: Megatron-LM's --recompute-num-layers (default 1)")
    g.add_argument("--overlap-grad-reduce", action=argparse.BooleanOptionalAction, default=None,
                   help="bucketed gradient reduce-scatter behind the backward (default off, as Megatron-LM)")
    g.add_argument("--overlap-param-gather", action=argparse.BooleanOptionalAction, default=None,
                   help="parameter all-gather behind the next forward; needs --overlap-grad-reduce (default off, "
                        "as Megatron-LM)")
    g.add_argument("--grad-reduce-in-fp32", action=argparse.BooleanOptionalAction, default=None,
                   help="fp32 gradient buffers (default on, as Megatron-LM with --bf16; NeMo's performance "
                        "recipes turn it off)")
    g.add_argument("--cp-degree", type=positive_int, help="fixed CP degree of static-cp (default: smallest that fits)")
    g.add_argument("--slow-ranks", metavar="W=F,...",
                   help="stragglers: compute slow-down factors F ≥ 1 of pool rank W at every stage (W=F), of one "
                        "stage's rank (sSrW=F) or of the rank holding global GPU N (gpuN=F), e.g. '3=1.3,s2r17=1.5' "
                        "(docs/experiments.md, 'What-if: stragglers')")
    g.add_argument("--stragglers", metavar="SPEC",
                   help="random stragglers: 'fraction=X,slowdown=DIST,seed=N', DIST one of fixed:F, uniform:A:B, "
                        "lognormal:M:S (median M), e.g. 'fraction=0.05,slowdown=lognormal:1.3:0.5,seed=1'")
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    o.add_argument("--timings", action="store_true",
                   help="put measured scheduling wall time into --json (otherwise 0.0, so --json is reproducible)")
    o.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def add_split_arguments(g) -> None:
    """Megatron-Core's uneven pipeline split, with Megatron's spelling (cost_models.pipeline_split)."""
    g.add_argument("--account-for-embedding-in-pipeline-split", action="store_true", default=None,
                   help="the embedding counts as one layer of the first virtual stage, which builds one transformer "
                        "layer fewer; pp · V must then divide layers + 1 (+ 1 more with the loss; default off)")
    g.add_argument("--account-for-loss-in-pipeline-split", action="store_true", default=None,
                   help="the loss counts as one layer of the last virtual stage, which builds one transformer layer "
                        "fewer (default off)")
    g.add_argument("--decoder-first-pipeline-num-layers", type=positive_int, metavar="N",
                   dest="num_layers_in_first_pipeline_stage",
                   help="transformer layers of the first pipeline stage, the rest split evenly over the others "
                        "(Megatron-LM's flag; default: an even split)")
    g.add_argument("--decoder-last-pipeline-num-layers", type=positive_int, metavar="N",
                   dest="num_layers_in_last_pipeline_stage",
                   help="transformer layers of the last pipeline stage (Megatron-LM's flag; default: an even split)")


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    base = DEFAULT_SCENARIO
    if getattr(args, "scenario", None):
        from dcpsim.experiments.scenario.files import load_scenario

        base = load_scenario(args.scenario)
    changes: dict[str, Any] = {k: getattr(args, k, None) for k in
                               ("model", "gpu", "tp", "pp", "vpp", "pool", "context_len", "global_batch_tokens",
                                "trace", "iterations", "seed", "calibration", "cost_terms", "tp_comm_overlap",
                                "attention_backend", "ep", "etp", "moe_dispatcher",
                                "moe_recompute", "global_batch_seqs", "slow_ranks", "stragglers", "recompute",
                                "recompute_method", "overlap_grad_reduce", "overlap_param_gather",
                                "grad_reduce_in_fp32", "account_for_embedding_in_pipeline_split",
                                "account_for_loss_in_pipeline_split", "num_layers_in_first_pipeline_stage",
                                "num_layers_in_last_pipeline_stage")}
    changes["recompute_layers"] = getattr(args, "recompute_num_layers", None)
    changes["max_tokens_per_rank"] = getattr(args, "max_seqlen_per_rank", None)
    if getattr(args, "gpu", None):
        changes["gpu_spec"] = {}  # --gpu replaces a scenario's [gpu] table
    sc = base.with_(**changes)
    opts = dict(sc.policy_options)
    for k in ("cp_engine", "cp_degree"):
        if getattr(args, k, None) is not None:
            opts[k] = getattr(args, k)
    if getattr(args, "max_seqlen_per_rank", None):
        opts["max_seqlen_per_rank"] = args.max_seqlen_per_rank
    return sc.with_(policy_options=opts)
