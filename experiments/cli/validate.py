"""Check the simulator against real execution: profile → calibrate → plan → simulate → run → compare.

1. profile this machine (attention, GEMMs, whole decoder layers, collectives; real_runtime.profiler) on
   --nproc processes;
2. fit a calibration to the profile (cost_models.fitting), the fixed per-layer overhead included
   (--no-layer-overhead drops it, to see what it contributes);
3. plan a few small global batches (the tiny model, a pool of --nproc ranks, PP = 1, short lognormal
   documents) with every policy, and simulate each plan with the fitted calibration;
4. run the same plans for real (real_runtime.runner, torch.distributed with gloo or NCCL);
5. report the prediction error per rank-microbatch (compute time), per microbatch (the maximum over its ranks
   of compute + exposed CP communication) and per iteration (MAPE), and whether the policies rank the same
   by iteration time in simulation and in measurement (every pair ordered alike; pairs whose predicted
   times are within 2% are ties and may come in either order).

Writes to --out: profile.csv, calibration.json, the run (run/losses.csv, run/timeline.csv, ...),
simulated.csv, errors.csv (one row per microbatch), validate.json (what --json prints) and a PNG of predicted
against measured times.

Examples:
  dcpsim validate                                       # 4 gloo processes on this machine's CPUs
  dcpsim validate --policies static-cp,hydra --iterations 3 --json
  torchrun is not needed: validate spawns its processes; on one GPU node:
  dcpsim validate --backend nccl --device cuda --nproc 8 --context-len 32768 --tokens 262144 --model llama3-8b
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pandas loads in run(): 'dcpsim --help' stays fast
    import pandas as pd

from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.cli.args import positive_int, typed

NAME = "validate"
HELP = "run policies for real (torch.distributed) and compare with the simulator's predictions"
ORDER = 60


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("execution")
    g.add_argument("--backend", choices=("gloo", "nccl"), default="gloo", help="torch.distributed backend")
    g.add_argument("--nproc", type=positive_int, default=4, help="processes = pool ranks (default 4)")
    g.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    g.add_argument("--dtype", choices=("float32", "bfloat16"), help="default: float32 on cpu, bfloat16 on cuda")
    g.add_argument("--threads", type=positive_int, default=1, help="torch threads per process (default 1)")
    g.add_argument("--timeout", type=typed(float, gt=0.0), default=900.0, help="seconds before a hung run is stopped")
    w = p.add_argument_group("workload")
    w.add_argument("--policies", default="static-cp,mcore-dcp,hydra", metavar="A,B,...",
                   help="policies to compare (default static-cp,mcore-dcp,hydra; unregistered ones are skipped)")
    w.add_argument("--iterations", type=positive_int, default=2, help="global batches (default 2)")
    w.add_argument("--model", default="tiny", help="model preset (default tiny)")
    w.add_argument("--gpu", default="h200", help="GPU preset for the parts of the job spec a profile does not "
                                                "measure: node size, peak FLOP/s (default h200)")
    w.add_argument("--context-len", type=typed(int, ge=2), default=1024, help="longest document (default 1024)")
    w.add_argument("--tokens", type=typed(int, ge=2), default=4096, help="tokens per global batch (default 4096)")
    w.add_argument("--max-tokens-per-rank", type=positive_int, help="per-rank budget (default context-len / nproc)")
    w.add_argument("--median-len", type=typed(float, gt=0.0), default=160.0, help="median document length (default 160)")
    w.add_argument("--sigma", type=typed(float, ge=0.0), default=1.0, help="lognormal sigma of lengths (default 1.0)")
    w.add_argument("--seed", type=typed(int, ge=0), default=0)
    w.add_argument("--warmup", type=typed(int, ge=0), default=1, help="untimed passes before the first iteration (default 1)")
    w.add_argument("--repeats", type=positive_int, default=2,
                   help="run every policy's iterations this many times, in rounds over the policies, to measure "
                        "the run-to-run spread (default 2; 1 = no noise estimate)")
    c = p.add_argument_group("calibration")
    c.add_argument("--profile", metavar="CSV", help="use this profile table instead of profiling again")
    c.add_argument("--full-profile", action="store_true", help="more sizes and repeats (default: quick)")
    c.add_argument("--profile-layout", choices=("concurrent", "alone"), default="concurrent",
                   help="compute profile on all --nproc processes at once (default: the run's contention for "
                        "the cores is measured) or on one process alone (the uncontended machine)")
    c.add_argument("--profile-window", type=typed(float, ge=0.0), metavar="S",
                   help="compute times are means of calls over at least S timed seconds each (default 0.1, "
                        "full profile 0.25); 0 = medians of a few calls")
    c.add_argument("--no-layer-overhead", action="store_true",
                   help="simulate without the fitted fixed per-layer overhead (kernel curves and links only), "
                        "to see what the overhead term contributes")
    o = p.add_argument_group("output")
    o.add_argument("--out", default="validate_out", help="output directory (default validate_out)")
    o.add_argument("--plot", metavar="PNG", help="predicted vs measured plot (default OUT/validate.png)")
    o.add_argument("--json", action="store_true", help="print one JSON object instead of tables")


def _say(args: argparse.Namespace, text: str) -> None:
    print(text, file=sys.stderr if args.json else sys.stdout, flush=True)


def _geometric(lo: int, hi: int, n: int) -> tuple[int, ...]:
    hi = max(hi, lo)
    return tuple(sorted({round(float(x)) for x in np.geomspace(lo, hi, n)}))


def profile_settings(args: argparse.Namespace, budget: int):
    """Profile sizes spanning what the workload runs: attention blocks up to the context, GEMMs and whole
    decoder layers up to twice the per-rank budget, collectives from 16 KiB to 4 MiB; compute timed in the
    layout and over the window the arguments say."""
    from dcpsim.real_runtime.profiler import ProfileSettings

    n = 6 if args.full_profile else 4
    window = args.profile_window if args.profile_window is not None else (0.25 if args.full_profile else 0.1)
    return ProfileSettings(attention_lengths=_geometric(32, args.context_len, n),
                           gemm_tokens=_geometric(32, 2 * budget, n),
                           layer_tokens=_geometric(32, 2 * budget, n),
                           collective_bytes=_geometric(1 << 14, 1 << 22, n),
                           repeats=7 if args.full_profile else 3, warmup=1, window_s=window,
                           layout=args.profile_layout)


def calibrate(profile: pd.DataFrame, args: argparse.Namespace, dtype: str):
    """Fit the profile. The cost model counts communication in bf16 elements (2 bytes); a float32 run moves
    twice that, so collective bytes are rescaled to bf16-equivalent elements before fitting."""
    from dcpsim.cost_models import default_calibration, get_gpu
    from dcpsim.cost_models.fitting import fit_calibration
    from dcpsim.cost_models.profile_table import COMPUTE_OPS

    prof = profile.copy()
    if dtype == "float32":
        coll = ~prof["op"].isin(COMPUTE_OPS)
        prof.loc[coll, "bytes"] = (prof.loc[coll, "bytes"] // 2).astype("Int64")
    cal, report = fit_calibration(prof, default_calibration(get_gpu(args.gpu)), f"validate-{args.device}")
    if getattr(args, "no_layer_overhead", False):
        cal = replace(cal, name=f"{cal.name}-no-layer-overhead", layer_overhead_fwd_s=0.0,
                      layer_overhead_bwd_s=0.0)
    return cal, report


def _prepare(args: argparse.Namespace) -> None:
    """Check what the arguments name (argparse checked the numbers), then torch: a bad argument is reported
    as such even where torch is missing. Torch and the runtime are imported lazily."""
    from dcpsim.cost_models.presets import get_gpu, get_model
    from dcpsim.policies.registry import available_policies
    from dcpsim.policies.spec import parse_policy_specs

    get_model(args.model)
    get_gpu(args.gpu)
    have = set(available_policies())
    wanted = [t.strip() for t in args.policies.split(",") if t.strip()]
    if not any(p in have for p in wanted):
        raise ScenarioError(f"none of the policies {wanted} is registered; valid: {', '.join(sorted(have))}")
    for item in wanted:
        if item.split(":")[0] in have:  # unregistered ones are skipped later, with a note
            parse_policy_specs(item)
    if args.profile and not Path(args.profile).is_file():
        raise ScenarioError(f"--profile {args.profile}: no such file (a profile CSV from an earlier validate run)")
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ScenarioError("dcpsim validate runs policies for real and needs torch: "
                            "pip install -e '.[runtime]'") from None


def run(args: argparse.Namespace) -> int:
    _prepare(args)
    from dcpsim.real_runtime.launch import LaunchError

    try:
        return _run(args)
    except LaunchError as e:  # a worker's traceback: its first line and the exception at its end
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        raise ScenarioError(lines[0] + (f" ... {lines[-1].strip()}" if len(lines) > 1 else "")) from None


def _run(args: argparse.Namespace) -> int:
    from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
    from dcpsim.cost_models.profile_table import read_profile
    from dcpsim.policies import available_policies
    from dcpsim.real_runtime.compare import (
        compare_iteration,
        ranking,
        ranking_verdict,
        run_spread,
        same_ranking,
        summarise,
    )
    from dcpsim.real_runtime.launch import check_dist_backend
    from dcpsim.real_runtime.profile import profile_job, run_profile
    from dcpsim.real_runtime.run import run_workloads
    from dcpsim.real_runtime.runner import TrainConfig
    from dcpsim.real_runtime.workload import Workload, plan_workload, synthetic_batches
    from dcpsim.sim.simulate import simulate_plan

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    check_dist_backend(args.backend, args.device, args.nproc)
    budget = args.max_tokens_per_rank or math.ceil(args.context_len / args.nproc)
    job = JobSpec(model=get_model(args.model), gpu=get_gpu(args.gpu), tp=1, pp=1, pool=args.nproc,
                  context_len=args.context_len, global_batch_tokens=args.tokens, max_tokens_per_rank=budget)

    have = set(available_policies())
    wanted = [p.strip() for p in args.policies.split(",") if p.strip()]
    skipped = [p for p in wanted if p not in have]
    for p in skipped:
        _say(args, f"note: policy {p!r} is not registered; skipped")
    if len(skipped) == len(wanted):
        raise ScenarioError(f"none of the policies {wanted} is registered; valid: {', '.join(sorted(have))}")
    profile_path = Path(args.profile) if args.profile else out / "profile.csv"
    if not args.profile:
        _say(args, f"profiling on {args.nproc} {args.backend} process(es) ({args.device}, {dtype}) ...")
        pj = profile_job(str(profile_path), model=args.model, device=args.device, dtype=dtype,
                         backend=args.backend)
        pj["settings"] = profile_settings(args, budget).to_dict()
        run_profile(pj, args.nproc, args.threads, args.timeout)
    cal, report = calibrate(read_profile(profile_path), args, dtype)
    (out / "calibration.json").write_text(cal.to_json() + "\n")
    cm = AnalyticCostModel(job, cal)

    batches = synthetic_batches(args.iterations, args.tokens, args.context_len, median_len=args.median_len,
                                sigma=args.sigma, seed=args.seed)
    workloads = [plan_workload(p, batches, cm) for p in wanted if p in have]
    simulated = {w.label: [simulate_plan(s.plan, s.batch, cm).timeline.to_frame() for s in w.steps]
                 for w in workloads}

    _say(args, f"running {len(workloads)} policies x {args.iterations} iteration(s) x {args.repeats} round(s) "
               "for real ...")
    cfg = TrainConfig(model=args.model, seed=args.seed, dtype=dtype, warmup=args.warmup)
    rounds = [Workload(_round_label(w.label, j, args.repeats), w.steps) for j in range(args.repeats)
              for w in workloads]
    res = run_workloads(rounds, cfg, nproc=args.nproc, backend=args.backend, device=args.device,
                        out=out / "run", threads=args.threads, timeout_s=args.timeout)

    results: dict[str, Any] = {}
    for w in workloads:
        its, by_step = [], []
        for i in range(len(w.steps)):
            step_times = []
            for j in range(args.repeats):
                tl = res.timeline
                meas = tl[(tl.workload == _round_label(w.label, j, args.repeats)) & (tl.iteration == i)]
                its.append(compare_iteration(simulated[w.label][i], meas) | {"iteration": i, "round": j})
                step_times.append(its[-1]["measured_s"])
            by_step.append(step_times)
        results[w.label] = {"iterations": its, "summary": summarise(its) | {"spread": run_spread(by_step)}}
    write_files(out, workloads, simulated, results)
    predicted = {k: v["summary"]["predicted_iteration_s"] for k, v in results.items()}
    measured = {k: v["summary"]["measured_iteration_s"] for k, v in results.items()}
    spread = {k: v["summary"]["spread"] for k, v in results.items()}
    sim_rank, meas_rank = ranking(predicted), ranking(measured)
    verdict = ranking_verdict(predicted, measured, spread)
    plot = args.plot or str(out / "validate.png")
    write_plot(results, plot)
    fit_terms = {t.key: {"how": t.how, "mape": t.mape} for t in report.terms if ":" not in t.key}
    for key in ("layer_overhead_fwd_s", "layer_overhead_bwd_s"):
        fit_terms.setdefault(key, {"how": "base", "mape": math.nan})["seconds"] = getattr(cal, key)
    doc = {"settings": {k: v for k, v in vars(args).items() if not k.startswith("_")}, "calibration": cal.name,
           "fit": fit_terms, "skipped": skipped, "out": str(out), "plot": plot,
           "policies": {k: v["summary"] for k, v in results.items()},
           "microbatches": _microbatch_records(results),
           "ranking": {"simulated": sim_rank, "measured": meas_rank, "same": same_ranking(predicted, measured),
                       "spread": spread} | verdict}
    text = json.dumps(doc, sort_keys=True, default=float)
    (out / "validate.json").write_text(text + "\n")
    if args.json:
        print(text)
    else:
        print_report(doc)
    return 0


def _round_label(label: str, j: int, rounds: int) -> str:
    """The run's workload label of round ``j`` of a policy (the policy's own label with one round)."""
    return label if rounds == 1 else f"{label}#{j}"


def _microbatch_records(results: dict[str, Any]) -> list[dict[str, Any]]:
    recs = []
    for label, r in results.items():
        for it in r["iterations"]:
            for row in it["microbatch"].to_dict("records"):
                recs.append({"policy": label, "iteration": it["iteration"], "round": it["round"],
                             "microbatch": int(row["microbatch"]),
                             "ranks": int(row["ranks"]), "predicted_s": float(row["predicted_s"]),
                             "measured_s": float(row["measured_s"]), "ape": float(row["ape"])})
    return recs


def write_files(out: Path, workloads, simulated, results) -> None:
    import pandas as pd

    sim = pd.concat([df.assign(workload=w.label, iteration=i) for w in workloads
                     for i, df in enumerate(simulated[w.label])], ignore_index=True)
    sim.to_csv(out / "simulated.csv", index=False)
    pd.DataFrame(_microbatch_records(results)).to_csv(out / "errors.csv", index=False)


def print_ranking(rk: dict[str, Any]) -> None:
    """The ranking lines: both orders, the verdict, and each pair's measured difference beside the noise."""
    print(f"\nranking by iteration time: simulated {' < '.join(rk['simulated'])}; measured "
          f"{' < '.join(rk['measured'])}: {rk['verdict'].upper() if rk['verdict'] == 'different' else rk['verdict']}")
    for a, b, diff, noise, agrees, resolved in rk["pairs"]:
        noise_text = "not measured" if math.isnan(noise) else f"{noise:.1%}"
        print(f"  {a} vs {b}: {'agrees' if agrees else 'disagrees'}, measured difference {diff:.1%}, run-to-run "
              f"spread {noise_text}: {'resolved' if resolved else 'within noise'}")
    print("  (rule: predicted times within 2% are ties and not compared; a measured difference is resolved when "
          "it exceeds the larger run-to-run spread of the pair, spread = per iteration, (max - min) / mean over "
          "the --repeats rounds, averaged over iterations; 'same' = every pair agrees and is resolved, 'same "
          "within noise' = no resolved pair disagrees but some pair is within noise)")


def print_report(doc: dict[str, Any]) -> None:
    """The per-microbatch table, the per-policy summary, the ranking line, the fit and what was written."""
    from dcpsim.experiments.output.tables import format_table

    def pct(v: float) -> str:
        return "-" if math.isnan(v) else f"{v:.1%}"

    rows = [[r["policy"], str(r["iteration"]), str(r["round"]), str(r["microbatch"]), str(r["ranks"]),
             f"{r['predicted_s'] * 1e3:.1f}", f"{r['measured_s'] * 1e3:.1f}", pct(r["ape"])]
            for r in doc["microbatches"]]
    print("per-microbatch prediction error (max over ranks of compute + exposed CP comm, F + B):")
    print(format_table(rows, ["policy", "iter", "round", "mb", "ranks", "sim ms", "real ms", "error"]))
    rows = [[k, str(s["microbatches"]), pct(s["rank_microbatch_mape"]), f"{s['compute_ratio_median']:.2f}",
             pct(s["microbatch_mape"]), f"{s['predicted_iteration_s']:.3f}", f"{s['measured_iteration_s']:.3f}",
             pct(s["spread"]), pct(s["iteration_mape"])] for k, s in doc["policies"].items()]
    print()
    print(format_table(rows, ["policy", "mbs", "rank-mb MAPE", "sim/real", "mb MAPE", "sim iter s",
                              "real iter s", "real spread", "iter MAPE"]))
    print_ranking(doc["ranking"])
    def term(k: str, v: dict[str, Any]) -> str:
        value = f" {v['seconds'] * 1e6:.0f} us" if "seconds" in v else ""
        return f"{k}{value} {v['how']} (MAPE {pct(v['mape'])})"

    fit = ", ".join(term(k, v) for k, v in doc["fit"].items())
    print(f"calibration {doc['calibration']}: {fit}")
    for p in doc["skipped"]:
        print(f"skipped {p}: not registered")
    print(f"wrote {doc['out']}/ (profile.csv, calibration.json, run/, simulated.csv, errors.csv, validate.json) "
          f"and {doc['plot']}")


def write_plot(results: dict[str, Any], path: str) -> None:
    """Two panels, log-log: rank-microbatch compute and microbatch / iteration times, predicted vs measured."""
    import pandas as pd
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.6))  # object API: the global backend is left alone
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    lo, hi = np.inf, 0.0
    for i, (label, r) in enumerate(results.items()):
        color = f"C{i % 10}"
        rm = pd.concat([it["rank_microbatch"] for it in r["iterations"]])
        mb = pd.concat([it["microbatch"] for it in r["iterations"]])
        axes[0].scatter(rm["compute_s_meas"] * 1e3, rm["compute_s_pred"] * 1e3, s=12, color=color, label=label)
        axes[1].scatter(mb["measured_s"] * 1e3, mb["predicted_s"] * 1e3, s=14, color=color, marker="o",
                        label=f"{label} microbatch")
        it_m = np.array([it["measured_s"] for it in r["iterations"]]) * 1e3
        it_p = np.array([it["predicted_s"] for it in r["iterations"]]) * 1e3
        axes[1].scatter(it_m, it_p, s=60, color=color, marker="*", label=f"{label} iteration")
        vals = np.concatenate([rm["compute_s_meas"] * 1e3, rm["compute_s_pred"] * 1e3, it_m, it_p])
        vals = vals[vals > 0]
        if vals.size:
            lo, hi = min(lo, vals.min()), max(hi, vals.max())
    for ax, title in zip(axes, ("rank-microbatch compute (F + B)", "microbatch max and iteration time")):
        if hi > 0:
            ax.plot([lo / 2, hi * 2], [lo / 2, hi * 2], "k--", lw=0.8, label="simulated = measured")
        ax.set(xscale="log", yscale="log", xlabel="measured (ms)", ylabel="simulated (ms)", title=title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
