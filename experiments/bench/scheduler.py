"""Scheduling wall time of DCP policies: one global batch of n sequences over a pool of W ranks.

    .venv/bin/python experiments/bench/scheduler.py [--quick] [--policies hydra,mcore-dcp]
                                                    [--n 512,2048,8192,32768] [--w 64,256,1024,4096]
                                                    [--repeats 3] [--trace 256k]

The default grid runs n = 512 … 32,768 over W = 64 … 4,096 (16 cells; minutes); ``--quick`` runs
n = 512, 2,048 over W = 64, 256 (4 cells; seconds) with one repeat fewer.

For every (n, W) cell: n lengths from ``traces.get_preset(trace).sample(n, seed)``; a job of llama3-8b on H200,
TP 1, PP 4, pool W, with the per-rank token budget set so that the batch needs about ``--microbatches``
microbatches on memory alone (and never below what the longest sequence needs on the whole pool); each policy
plans the batch ``--repeats`` times and the best time counts. Times are the process's CPU time
(``time.process_time``: one process, one thread of work), so other jobs on a shared machine do not inflate
them; ``--wall`` uses ``time.perf_counter`` instead.

The cost model is the project's ``AnalyticCostModel`` (vectorised numpy, the same one ``dcpsim compare`` uses),
so HyDra's time includes its cost-model pricing; Megatron-Core's scheduler does not call the cost model (its
workload estimate is L²/c). Planning only: no plan is simulated or validated here.

Columns: ms per batch per policy; ``mbs`` the plan's microbatches; ``/nlogW`` = time / (n · log2 W),
normalised to the smallest (n, W) cell (the scaling column): ≤ 1 everywhere means growth no faster than
n·log W (per-batch fixed costs make it fall with n; a whole-pool scan per sequence grows like n·W, so its
column rises with W); the last column is the first policy's time over the second's (hydra ÷ mcore-dcp).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

try:  # run by a Python without dcpsim (the system one): one line saying which to use, not a traceback
    import dcpsim  # noqa: F401
except ModuleNotFoundError:
    print(f"{sys.argv[0]}: dcpsim is not installed for {sys.executable}; run it with the venv's Python: "
          f".venv/bin/python {sys.argv[0]}", file=sys.stderr)
    sys.exit(2)

from dcpsim import traces
from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.policies import create_policy
from dcpsim.traces.batching import GlobalBatch


def _int_list(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be ≥ 1")
    return out


def make_case(n: int, w: int, trace: str, seed: int, microbatches: int):
    """The batch, the job and the cost model of one benchmark cell."""
    lengths = traces.get_preset(trace).sample(n, seed)
    budget = max(math.ceil(lengths.sum() / (w * microbatches)), math.ceil(lengths.max() / w))
    job = JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h200"), tp=1, pp=4, pool=w,
                  context_len=int(traces.get_preset(trace).context_len), max_tokens_per_rank=int(budget))
    return GlobalBatch.of(lengths), job, AnalyticCostModel(job)


def time_policies(names: list[str], batch: GlobalBatch, job: JobSpec, cost_model, repeats: int,
                  wall: bool = False) -> dict[str, tuple[float, int]]:
    """Per policy, the best time (s; CPU time unless ``wall``) of planning ``batch`` and the plan's microbatch
    count. The policies take turns within each repeat (A B A B ...), so a slow minute of a shared machine
    weighs on all of them alike and the ratio in the same run stays meaningful."""
    policies = {name: create_policy(name) for name in names}
    clock = time.perf_counter if wall else time.process_time
    best = {name: (math.inf, 0) for name in names}
    for _ in range(repeats):
        for name, policy in policies.items():
            t0 = clock()
            plan = policy.plan(batch, job, cost_model)
            t = clock() - t0
            best[name] = (min(best[name][0], t), plan.num_microbatches)
            del plan  # (freed here, not inside the next call's timed region)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", default="hydra,mcore-dcp", help="comma-separated policies (default: %(default)s)")
    ap.add_argument("--quick", action="store_true", help="the small grid: n = 512, 2048; W = 64, 256")
    ap.add_argument("--n", type=_int_list, default=None, help="sequences per batch (default 512,2048,8192,32768)")
    ap.add_argument("--w", type=_int_list, default=None, help="pool sizes W (default 64,256,1024,4096)")
    ap.add_argument("--repeats", type=int, default=None, help="plans per cell; the best time counts (default 3; "
                    "--quick: 2)")
    ap.add_argument("--trace", default="256k", help="trace preset (default: %(default)s)")
    ap.add_argument("--microbatches", type=int, default=8, help="memory-minimum microbatches per batch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wall", action="store_true", help="wall-clock time instead of the process's CPU time")
    args = ap.parse_args(argv)
    if args.n is None:
        args.n = [512, 2048] if args.quick else [512, 2048, 8192, 32768]
    if args.w is None:
        args.w = [64, 256] if args.quick else [64, 256, 1024, 4096]
    if args.repeats is None:
        args.repeats = 2 if args.quick else 3
    if args.repeats < 1:
        ap.error(f"--repeats {args.repeats}: must be ≥ 1")
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    for name in names:  # warm-up: imports and first-call costs stay out of the timings
        b, j, c = make_case(64, 16, args.trace, args.seed, 2)
        create_policy(name).plan(b, j, c)

    rows = []
    for n in args.n:
        for w in args.w:
            batch, job, cm = make_case(n, w, args.trace, args.seed, args.microbatches)
            cell = {"n": n, "W": w, "M": job.max_tokens_per_rank}
            cell.update(time_policies(names, batch, job, cm, args.repeats, args.wall))
            rows.append(cell)
            print(f"  n={n:>6} W={w:>5}: " + "  ".join(f"{k} {cell[k][0] * 1e3:8.1f} ms" for k in names),
                  file=sys.stderr, flush=True)

    first = min(rows, key=lambda r: (r["n"], r["W"]))  # the smallest cell
    base = {k: first[k][0] / (first["n"] * math.log2(max(first["W"], 2))) for k in names}
    header = ["n", "W", "M tok/rank"]
    for k in names:
        header += [f"{k} ms", f"{k} mbs", f"{k} /nlogW"]
    if len(names) >= 2:
        header.append(f"{names[0]}/{names[1]}")
    table = []
    for r in rows:
        line = [f"{r['n']:,}", f"{r['W']:,}", f"{r['M']:,}"]
        for k in names:
            t, m = r[k]
            line += [f"{t * 1e3:.1f}", str(m), f"{t / (r['n'] * math.log2(max(r['W'], 2))) / base[k]:.2f}"]
        if len(names) >= 2:
            line.append(f"{r[names[0]][0] / r[names[1]][0]:.3f}")
        table.append(line)
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(header)]
    clock = "wall time" if args.wall else "CPU time"
    print(f"trace {args.trace}, llama3-8b on H200 TP1 PP4, AnalyticCostModel, best of {args.repeats} ({clock}), "
          "one process")
    print("  ".join(h.rjust(wd) for h, wd in zip(header, widths)))
    print("  ".join("-" * wd for wd in widths))
    for cells in table:
        print("  ".join(x.rjust(wd) for x, wd in zip(cells, widths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
