"""Importer of Megatron-LM's functional-test golden values (github NVIDIA/Megatron-LM,
``tests/functional_tests/test_cases/<family>/<case>/golden_values_*h100*.json`` with the case's
``model_config.yaml`` next to it).

* ``iteration-time``: seconds per training iteration at the logged steps, as Megatron's training loop logs
  "elapsed time per iteration": the whole ``train_step`` — forward and backward of every microbatch
  (pipeline schedule), the gradient reduction over DP, the optimizer step. Step 1 (start-up: kernels compiled,
  allocator warmed) is left out.
* The case's ``MODEL_ARGS`` give the model (``--num-layers``, ``--hidden-size``, ``--num-attention-heads``,
  ``--num-query-groups``, ``--ffn-hidden-size`` (default 4 × hidden), ``--swiglu``, ``--kv-channels``), the
  layout (``--tensor/pipeline/context-parallel-size``; DP = GPUs / (TP·PP·CP), GPUs from the case name's
  ``<n>N<g>G``, else 8) and the batch (``--seq-length``, ``--micro-batch-size``, ``--global-batch-size``).
  Every sequence is ``seq-length`` tokens (no packing); each microbatch holds ``micro-batch-size`` of them
  per DP rank; an iteration has global / (micro × DP) microbatches. Vocabulary: GPT-2 BPE, 50,257 tokens padded
  to a multiple of 128 × TP (Megatron's ``--make-vocab-size-divisible-by`` default), embeddings tied unless
  ``--untie-embeddings-and-output-weights``.
* The GPU: ``h100`` for ``*h100*`` golden files (``a100`` is not a dcpsim preset: other files are refused).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from dcpsim.experiments.replay.runlog import Group, Iteration, LogError, RunLog
from dcpsim.userfile import load_json, read_text

GPT2_VOCAB = 50257  # GPT-2 BPE vocabulary (vocab.json of the functional tests' data)
COVERS = ("Megatron 'elapsed time per iteration': train_step = forward + backward of every microbatch, "
          "gradient reduction, optimizer step")
SOURCE = "github NVIDIA/Megatron-LM, tests/functional_tests/test_cases (golden values + model_config.yaml)"


def model_args(text: str) -> dict[str, str]:
    """The ``--flag: value`` entries under ``MODEL_ARGS:`` of a model_config.yaml (values as text)."""
    out: dict[str, str] = {}
    inside = False
    for line in text.splitlines():
        if re.match(r"^\S", line):
            inside = line.strip() == "MODEL_ARGS:"
            continue
        m = re.match(r"^\s+--([\w-]+):\s*(.*?)\s*(#.*)?$", line)
        if inside and m:
            out[m.group(1)] = m.group(2)
    return out


def _int(args: dict[str, str], key: str, default: int | None, where: str) -> int:
    if key not in args:
        if default is None:
            raise LogError(f"{where}: MODEL_ARGS has no --{key}; expected a positive integer")
        return default
    try:
        v = int(args[key])
    except ValueError:
        raise LogError(f"{where}: --{key} = {args[key]!r} is invalid: expected a positive integer") from None
    if v < 1:
        raise LogError(f"{where}: --{key} = {v} is invalid: expected a positive integer")
    return v


def import_megatron(path: str | Path) -> RunLog:
    p = Path(path)
    cfg_path = p.with_name("model_config.yaml")
    golden = load_json(p, "golden-values JSON", error=LogError)
    args = model_args(read_text(cfg_path, "model_config.yaml next to the golden values", error=LogError))
    if "h100" not in p.name:
        raise LogError(f"{p}: file name {p.name!r} names no H100 run; expected golden_values_*h100*.json")
    times = (golden.get("iteration-time") or {}).get("values") if isinstance(golden, dict) else None
    if not isinstance(times, dict) or not times:
        raise LogError(f"{p}: iteration-time.values = {times!r} is invalid: expected {{step: seconds}}")
    where = str(cfg_path)
    tp = _int(args, "tensor-model-parallel-size", 1, where)
    pp = _int(args, "pipeline-model-parallel-size", 1, where)
    cp = _int(args, "context-parallel-size", 1, where)
    m = re.search(r"(\d+)N(\d+)G", p.parent.name)
    gpus = int(m.group(1)) * int(m.group(2)) if m else 8
    if gpus % (tp * pp * cp):
        raise LogError(f"{where}: TP{tp} x PP{pp} x CP{cp} does not divide the case's {gpus} GPUs")
    dp = gpus // (tp * pp * cp)
    hidden = _int(args, "hidden-size", None, where)
    heads = _int(args, "num-attention-heads", None, where)
    seq = _int(args, "seq-length", None, where)
    micro = _int(args, "micro-batch-size", 1, where)
    glob = _int(args, "global-batch-size", micro * dp, where)
    if glob % (micro * dp):
        raise LogError(f"{where}: --global-batch-size {glob} is not a multiple of micro-batch-size x DP = {micro * dp}")
    pad = 128 * tp
    model: dict[str, Any] = {
        "name": p.parent.name, "hidden": hidden, "ffn": _int(args, "ffn-hidden-size", 4 * hidden, where),
        "layers": _int(args, "num-layers", None, where), "heads": heads,
        "kv_heads": _int(args, "num-query-groups", heads, where),
        "head_dim": _int(args, "kv-channels", hidden // heads, where),
        "vocab": -(-GPT2_VOCAB // pad) * pad, "mlp": "swiglu" if args.get("swiglu") == "true" else "gelu",
        "tied_embeddings": args.get("untie-embeddings-and-output-weights") != "true",
        "source": f"{SOURCE}: {p.parent.name}/model_config.yaml"}
    ranks = [tuple(range(r * cp, (r + 1) * cp)) for r in range(dp)]
    mb = tuple(Group(rk, (seq,) * micro, "ring") for rk in ranks)
    its = []
    for step, t in sorted(((int(k), v) for k, v in times.items()), key=lambda kv: kv[0]):
        if step <= 1:
            continue
        if not isinstance(t, (int, float)) or not t > 0:
            raise LogError(f"{p}: iteration-time at step {step} = {t!r} is invalid: expected seconds > 0")
        its.append(Iteration(step, float(t), (mb,) * (glob // (micro * dp))))
    if not its:
        raise LogError(f"{p}: no iteration-time after step 1")
    job = {"model": model, "gpu": "h100", "tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": 1,
           "tp_comm_overlap": 0.0, "attention_backend": None}
    return RunLog(job, tuple(its), dataset=f"megatron/{p.parent.name}", covers=COVERS, source=SOURCE,
                  meta={"file": p.name, "model_args": args})
