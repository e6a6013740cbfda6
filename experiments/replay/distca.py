"""Importer of DistCA's end-to-end benchmark JSON (github hao-ai-lab/distca, branch e2e-make-slurm-script,
``benchmarks/_250809_e2e_benchmark/data/``, written by ``tests/test_e2e_combined.py``).

What a record is (read from ``test_e2e_combined.py``):

* ``config``: ``mode`` (baseline, wlbllm, d2), ``tp_size``, ``dp_size``, ``num_tokens``, ``num_layers``,
  ``model_path`` (DeepSeek-R1-Distill-Llama-8B = the Llama-3.1-8B shape; the model is cut to ``num_layers``).
  Megatron-Core with TransformerEngine, bf16, TP inside 8-GPU H200 nodes, one microbatch per iteration.
* ``samples[i].samples``: the document-length lists the iteration drew; ``duration_ms``: the wall time of
  ``N = 3`` calls of ``forward_backward_batch`` after 5 warm-up calls, divided by N (wall clock between
  ``torch.cuda.synchronize()`` calls, a barrier before the stop). One call is Megatron-Core's
  ``forward_backward_func`` over one microbatch (forward and backward), then ``self.optimizer.step()``
  (the distributed optimizer's Adam step and its parameter all-gather). No DP gradient reduction: the model
  is wrapped in Megatron DDP with ``overlap_grad_reduce`` False, and neither ``test_e2e_combined.py`` nor its
  ``megatron_test_utils.py`` sets ``config.finalize_model_grads_func``, the hook through which
  ``forward_backward_func`` reduces gradients. The logs say so (``grad_sync: false``) and the replay
  leaves the simulated gradient reduce-scatter out; the rest of the simulated iteration (forward, backward,
  parameter all-gather, optimizer step) is what was measured. Sequence parallelism is on (TP > 1), TP
  communication is not overlapped (``tp_comm_overlap`` 0).

Placement (``test_e2e_combined.py``):

* ``baseline``: DP rank r of ``dp_size`` packs lists r and r + dp_size (``_seq_lens[as_rank] +
  _seq_lens[as_rank + as_world_size]``) into one microbatch at CP 1.
* ``wlbllm``: every document of the iteration, longest first, goes to the DP replica of least workload
  Σ (l/64K)² + l/64K if it fits ``Lmax = num_tokens · 2 · batch_size / dp_size`` tokens, else to the shortest
  replica if it fits there, else it is deferred; deferred documents then go to the least-loaded replica
  regardless. Each replica then shards every document over its CP group (per-document CP). ``batch_size`` =
  len(samples) / 2. The files record no CP degree: ``cp`` defaults to the config's ``cp_size`` when present,
  else 1 (the named files ran dp_size × TP 8 GPUs, dp_size nodes: CP 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dcpsim.experiments.replay.runlog import Group, Iteration, LogError, RunLog
from dcpsim.userfile import load_json

K = 1024
COVERS = ("forward_backward_batch: forward + backward of one microbatch, then the distributed optimizer's step "
          "(parameter all-gather included); no DP gradient reduction; wall time, mean of 3 repeats after warm-up")
SOURCE = "github hao-ai-lab/distca (branch e2e-make-slurm-script), tests/test_e2e_combined.py"
MODEL = "llama3-8b"  # DeepSeek-R1-Distill-Llama-8B: the Llama-3.1-8B shape (hidden 4096, 32 heads, 8 KV heads)


def wlbllm_rebalance(lists: list[list[int]], dp: int, num_tokens: int) -> list[list[int]]:
    """WLB-LLM's greedy re-balance over DP replicas, as ``test_e2e_combined.py`` runs it."""
    batch_size = len(lists) // 2
    lmax = num_tokens * 2 * batch_size // dp
    docs = sorted((d for lst in lists for d in lst), reverse=True)

    def workload(mb: list[int]) -> float:
        return sum((x / (64 * K)) ** 2 + x / (64 * K) for x in mb)

    out: list[list[int]] = [[] for _ in range(dp)]
    deferred = []
    for d in docs:
        loads, lengths = [workload(b) for b in out], [sum(b) for b in out]
        i, j = loads.index(min(loads)), lengths.index(min(lengths))
        if lengths[i] + d <= lmax:
            out[i].append(d)
        elif lengths[j] + d <= lmax:
            out[j].append(d)
        else:
            deferred.append(d)
    for d in deferred:
        loads = [workload(b) for b in out]
        out[loads.index(min(loads))].append(d)
    return out


def pad_to_cp(docs: list[int], cp: int) -> list[int]:
    """WLB-LLM pads the last document so the total divides cp · 2 · 8 (``doc_lens[-1] += ...``)."""
    q = cp * 2 * 8
    total = sum(docs)
    if total % q:
        docs = docs[:-1] + [docs[-1] + q - total % q]
    return docs


def import_distca(path: str | Path, cp: int | None = None) -> RunLog:
    p = Path(path)
    d = load_json(p, "DistCA benchmark JSON", error=LogError)
    cfg = d.get("config") if isinstance(d, dict) else None
    if not isinstance(cfg, dict):
        raise LogError(f"{p}: config = {cfg!r} is invalid: expected DistCA's benchmark object with 'config'")
    mode = cfg.get("mode")
    if mode not in ("baseline", "wlbllm"):
        raise LogError(f"{p}: config.mode = {mode!r} is invalid: expected baseline or wlbllm (d2's placement is "
                       "planned at run time and not recorded)")
    for key in ("tp_size", "dp_size", "num_tokens", "num_layers"):
        if not isinstance(cfg.get(key), int) or cfg[key] < 1:
            raise LogError(f"{p}: config.{key} = {cfg.get(key)!r} is invalid: expected a positive integer")
    dp, tp, n = cfg["dp_size"], cfg["tp_size"], cfg["num_tokens"]
    cp = cp or int(cfg.get("cp_size", 1) if mode == "wlbllm" else 1)
    its = []
    for k, s in enumerate(d.get("samples") or []):
        lists, ms = s.get("samples"), s.get("duration_ms")
        where = f"{p}: samples[{k}]"
        if not isinstance(lists, list) or not lists or not all(isinstance(x, list) and x for x in lists):
            raise LogError(f"{where}.samples = {lists!r} is invalid: expected non-empty lists of document lengths")
        if not isinstance(ms, (int, float)) or isinstance(ms, bool) or not ms > 0:
            raise LogError(f"{where}.duration_ms = {ms!r} is invalid: expected a positive time in milliseconds")
        its.append(Iteration(int(s.get("sample_id", k)), float(ms) / 1e3, (_groups(mode, lists, dp, cp, n, where),)))
    if not its:
        raise LogError(f"{p}: samples is empty; expected at least one measured iteration")
    job: dict[str, Any] = {"model": MODEL, "layers": cfg["num_layers"], "gpu": "h200", "tp": tp, "pp": 1,
                           "dp": dp, "cp": cp, "ep": 1, "tp_comm_overlap": 0.0,
                           "attention_backend": None, "grad_sync": False}
    meta = {"mode": mode, "file": p.name, "config": cfg}
    return RunLog(job, tuple(its), dataset=f"distca/{p.stem}", covers=COVERS, source=SOURCE, meta=meta)


def _groups(mode: str, lists: list[list[int]], dp: int, cp: int, num_tokens: int, where: str) -> tuple[Group, ...]:
    if mode == "baseline":
        if len(lists) != 2 * dp:
            raise LogError(f"{where}.samples has {len(lists)} lists; baseline with dp_size {dp} draws 2 x dp_size")
        return tuple(Group((r,), tuple(lists[r] + lists[r + dp]), "ring") for r in range(dp))
    replicas = wlbllm_rebalance(lists, dp, num_tokens) if dp > 1 else [[x for lst in lists for x in lst]]
    return tuple(Group(tuple(range(r * cp, (r + 1) * cp)), tuple(pad_to_cp(docs, cp)), "ring")
                 for r, docs in enumerate(replicas) if docs)
