"""Replay measured training iterations through dcpsim with their exact placement and report the error.

Each iteration of a run log (format: docs/validation.md) is simulated as logged (no policy): its microbatches'
CP groups, documents and engines, priced by the analytic cost model of the logged job. Prints per iteration
predicted against measured time, then MAPE, mean error (predicted / measured - 1, averaged), correlation and
the worst iterations with the cost terms that make up their predicted time.

Examples:
  dcpsim replay run.jsonl
  dcpsim replay --from distca 64k/benchmark.20250813_015721.baseline.json --json
  dcpsim replay --from distca *.json --calibration my_cluster.json --plot scatter.png
"""

from __future__ import annotations

import argparse
from typing import Any

NAME = "replay"
HELP = "replay measured iterations with their exact placement; predicted vs measured time"
ORDER = 45

TERM_LABELS = {"gemm_peak_tflops": "GEMMs", "attention_scale": "attention", "nvlink_scale": "NVLink collectives",
               "network_scale": "network collectives", "layer_overhead_s": "per-layer fixed",
               "microbatch_overhead_s": "per-microbatch fixed"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("logs", nargs="+", metavar="LOG", help="run logs (or importer inputs with --from)")
    p.add_argument("--from", dest="source", default="runlog", metavar="runlog|distca|megatron",
                   help="what the files are: dcpsim run logs (default), DistCA e2e JSON, Megatron-LM golden values")
    p.add_argument("--cp", type=int, help="CP degree of DistCA wlbllm files (default: their config's cp_size, else 1)")
    p.add_argument("--calibration", metavar="FILE", help="calibration JSON (default: the GPU's shipped one)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="PNG", help="write predicted against measured (scatter) here")
    p.add_argument("--worst", type=int, default=5, metavar="N", help="worst iterations to break down (default 5)")


def run(args: argparse.Namespace) -> int:
    from dcpsim.experiments.output.write import Outputs

    inputs = {f"log {p}": p for p in args.logs} | {"--calibration": args.calibration}
    with Outputs({"--plot": args.plot}, inputs, images=("--plot",)) as outs:  # checked before the replay
        return _replay(args, outs)


def _replay(args: argparse.Namespace, outs: Any) -> int:
    from dcpsim.cost_models import Calibration
    from dcpsim.experiments.replay.replay import check_log, cost_model_of, replay_with
    from dcpsim.experiments.replay.sources import load_runs
    from dcpsim.experiments.replay.stats import error_stats

    logs = load_runs(args.logs, args.source, args.cp)
    cal = Calibration.load(args.calibration) if args.calibration else None
    rows = []
    for path, log in zip(args.logs, logs):
        cm = cost_model_of(log, cal, path)
        check_log(log, cm, path)
        rows += [(log.dataset or path, r) for r in replay_with(log, cm)]
    datasets = list(dict.fromkeys(ds for ds, _ in rows))
    per_ds = {ds: error_stats([r.predicted_s for d, r in rows if d == ds], [r.measured_s for d, r in rows if d == ds])
              for ds in datasets}
    overall = error_stats([r.predicted_s for _, r in rows], [r.measured_s for _, r in rows])
    worst = sorted(range(len(rows)), key=lambda i: -abs(rows[i][1].error))[:max(args.worst, 0)]
    terms = _terms(logs, rows, worst, cal)
    if args.plot:
        from dcpsim.experiments.replay.plot import write_scatter

        with outs.writing("--plot") as tmp:
            write_scatter(str(tmp), rows, overall)
    if args.json:
        out = overall.to_dict() | {
            "calibration": cost_model_of(logs[0], cal).cal.name,
            "datasets": {ds: s.to_dict() for ds, s in per_ds.items()},
            "iterations": [{"dataset": ds, "step": r.step, "measured_s": r.measured_s, "predicted_s": r.predicted_s,
                            "error": r.error, "tokens": r.tokens, "tp_comm_s": r.tp_comm_s, "cp_comm_s": r.cp_comm_s,
                            "dp_comm_s": r.dp_comm_s} for ds, r in rows],
            "worst": [{"dataset": rows[i][0], "step": rows[i][1].step, "error": rows[i][1].error, "terms_s": t}
                      for i, t in zip(worst, terms)]}
        from dcpsim.experiments.output.write import dumps_json, nulls_for_nonfinite

        print(dumps_json(nulls_for_nonfinite(out), "--json", sort_keys=True))
        return 0
    from dcpsim.experiments.output.tables import format_table

    print(format_table([[ds, str(r.step), f"{r.measured_s * 1e3:.1f}", f"{r.predicted_s * 1e3:.1f}", f"{r.error:+.1%}"]
                        for ds, r in rows], ["dataset", "step", "measured ms", "predicted ms", "error"]))
    print()
    print(format_table([[ds, str(s.n), f"{s.mape:.1%}", f"{s.mean_error:+.1%}", f"{s.corr:.3f}"]
                        for ds, s in list(per_ds.items()) + [("all", overall)]],
                       ["dataset", "n", "MAPE", "mean error", "corr"]))
    if worst:
        print("\nworst iterations (predicted time by cost term, ms):")
        for i, t in zip(worst, terms):
            ds, r = rows[i]
            parts = ", ".join(f"{k} {max(v, 0.0) * 1e3:.0f}" for k, v in sorted(t.items(), key=lambda kv: -kv[1]))
            print(f"  {ds} step {r.step}: {r.error:+.1%} (measured {r.measured_s * 1e3:.1f}, predicted "
                  f"{r.predicted_s * 1e3:.1f}): {parts}")
    if args.plot:
        print(f"wrote {args.plot}")
    return 0


def _terms(logs, rows, worst, cal) -> list[dict[str, float]]:
    """Per worst iteration, its predicted seconds split by cost term (slope x effect per knob; the rest
    'other': latencies, optimizer step, ...)."""
    from dcpsim.cost_models import default_calibration
    from dcpsim.experiments.replay.fit import KNOBS, decompose, effect
    from dcpsim.experiments.replay.replay import job_of

    out = []
    starts = [0]
    for log in logs:
        starts.append(starts[-1] + len(log.iterations))
    for i in worst:
        j = max(k for k in range(len(logs)) if starts[k] <= i)
        log = logs[j].with_iterations([logs[j].iterations[i - starts[j]]])
        base = cal or default_calibration(job_of(log).gpu)
        d = base.to_dict()
        values = {k: KNOBS[k].start(d) for k in KNOBS}
        t0, a = decompose([log], base, values)
        parts = {TERM_LABELS[k]: float(a[0, n] * effect(KNOBS[k], values[k])) for n, k in enumerate(values)}
        parts["other"] = float(t0[0] - sum(parts.values()))
        out.append(parts)
    return out
