"""The validation pipeline: profile this machine, fit a calibration, plan and simulate a few small batches
with every policy, run the same plans for real and compare (:func:`run_validation`; the steps are described in
``dcpsim validate --help``, experiments/cli/validate.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.output.write import atomic_path, dumps_json, nulls_for_nonfinite, write_text
from dcpsim.experiments.validation.settings import ValidateSettings

if TYPE_CHECKING:  # pandas loads in the functions: 'dcpsim --help' stays fast
    import pandas as pd

Say = Callable[[str], None]


def _geometric(lo: int, hi: int, n: int) -> tuple[int, ...]:
    hi = max(hi, lo)
    return tuple(sorted({round(float(x)) for x in np.geomspace(lo, hi, n)}))


def profile_settings(settings: ValidateSettings, budget: int):
    """Profile sizes spanning what the workload runs: attention blocks up to the context, GEMMs and whole
    decoder layers up to twice the per-rank budget, collectives from 4 KiB to 16 MiB (the largest a loaded
    CPU host still times well above the wait a busy scheduler adds to every call, so that the bandwidth is
    resolved; 6 sizes, full profile 8); compute timed in the layout and over the window the settings say."""
    from dcpsim.real_runtime.profiler import ProfileSettings

    n = 6 if settings.full_profile else 4
    window = settings.profile_window
    if window is None:
        window = 0.25 if settings.full_profile else 0.1
    return ProfileSettings(attention_lengths=_geometric(32, settings.context_len, n),
                           gemm_tokens=_geometric(32, 2 * budget, n),
                           layer_tokens=_geometric(32, 2 * budget, n),
                           collective_bytes=_geometric(1 << 12, 1 << 24, n + 2),
                           repeats=7 if settings.full_profile else 3, warmup=1, window_s=window,
                           layout=settings.profile_layout)


def calibrate(profile: pd.DataFrame, settings: ValidateSettings, dtype: str):
    """Fit the profile. The cost model counts communication in bf16 elements (2 bytes); a float32 run moves
    twice that, so collective bytes are rescaled to bf16-equivalent elements before fitting."""
    from dcpsim.cost_models import default_calibration, get_gpu
    from dcpsim.cost_models.fitting import fit_calibration
    from dcpsim.cost_models.profile_table import COMPUTE_OPS

    prof = profile.copy()
    if dtype == "float32":
        coll = ~prof["op"].isin(COMPUTE_OPS)
        prof.loc[coll, "bytes"] = (prof.loc[coll, "bytes"] // 2).astype("Int64")
    base = default_calibration(get_gpu(settings.gpu))
    cal, report = fit_calibration(prof, base, f"validate-{settings.device}")
    if settings.no_layer_overhead:
        cal = replace(cal, name=f"{cal.name}-no-layer-overhead", layer_overhead_fwd_s=0.0,
                      layer_overhead_bwd_s=0.0)
    return cal, report


def check_settings(settings: ValidateSettings) -> None:
    """Check what the settings name (model, GPU, policies, profile file; the command line checked the
    numbers), then torch: a bad setting is reported as such even where torch is missing. Torch and the runtime
    are imported lazily."""
    from dcpsim.cost_models.presets import get_gpu, get_model
    from dcpsim.policies.registry import available_policies
    from dcpsim.policies.spec import parse_policy_specs

    get_model(settings.model)
    get_gpu(settings.gpu)
    have = set(available_policies())
    wanted = [t.strip() for t in settings.policies.split(",") if t.strip()]
    if not any(p in have for p in wanted):
        raise ScenarioError(f"none of the policies {wanted} is registered; valid: {', '.join(sorted(have))}")
    for item in wanted:
        if item.split(":")[0] in have:  # unregistered ones are skipped later, with a note
            parse_policy_specs(item)
    if settings.profile:  # read and checked whole here, so a broken table is named before torch is asked for
        from dcpsim.cost_models.profile_table import read_profile

        read_profile(settings.profile)
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ScenarioError("dcpsim validate runs policies for real and needs torch: "
                            "pip install -e '.[runtime]'") from None


def run_validation(settings: ValidateSettings, say: Say = print) -> dict[str, Any]:
    """Profile, calibrate, plan, simulate, run and compare as ``settings`` say; write the files into
    ``settings.out`` (profile.csv, calibration.json, run/, simulated.csv, errors.csv, validate.json, the plot) and
    return the
    document validate.json holds. ``say`` receives the progress lines. What the settings name is checked
    first, then torch (a bad setting is reported as such even where torch is missing); every problem a user
    can cause, a worker's failure included, is a :class:`ScenarioError`."""
    check_settings(settings)
    from dcpsim.real_runtime.launch import LaunchError

    try:
        return _run(settings, say)
    except LaunchError as e:  # a worker's traceback: its first line and the exception at its end
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        raise ScenarioError(lines[0] + (f" ... {lines[-1].strip()}" if len(lines) > 1 else "")) from None


def _run(settings: ValidateSettings, say: Say) -> dict[str, Any]:
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

    out = Path(settings.out)
    out.mkdir(parents=True, exist_ok=True)
    dtype = settings.run_dtype
    check_dist_backend(settings.backend, settings.device, settings.nproc)
    budget = settings.max_tokens_per_rank or math.ceil(settings.context_len / settings.nproc)
    job = JobSpec(model=get_model(settings.model), gpu=get_gpu(settings.gpu), tp=1, pp=1, pool=settings.nproc,
                  context_len=settings.context_len, global_batch_tokens=settings.tokens, max_tokens_per_rank=budget)

    have = set(available_policies())
    wanted = [p.strip() for p in settings.policies.split(",") if p.strip()]
    skipped = [p for p in wanted if p not in have]
    for p in skipped:
        say(f"note: policy {p!r} is not registered; skipped")
    if len(skipped) == len(wanted):
        raise ScenarioError(f"none of the policies {wanted} is registered; valid: {', '.join(sorted(have))}")
    profile_path = Path(settings.profile) if settings.profile else out / "profile.csv"
    if not settings.profile:
        say(f"profiling on {settings.nproc} {settings.backend} process(es) ({settings.device}, {dtype}) ...")
        pj = profile_job(str(profile_path), model=settings.model, device=settings.device, dtype=dtype,
                         backend=settings.backend)
        pj["settings"] = profile_settings(settings, budget).to_dict()
        run_profile(pj, settings.nproc, settings.threads, settings.timeout)
    cal, report = calibrate(read_profile(profile_path), settings, dtype)
    for w in report.warnings:
        say(f"warning: {w}")
    write_text(out / "calibration.json", cal.to_json() + "\n", "calibration.json")
    cm = AnalyticCostModel(job, cal)

    batches = synthetic_batches(settings.iterations, settings.tokens, settings.context_len,
                                median_len=settings.median_len,
                                sigma=settings.sigma, seed=settings.seed)
    workloads = [plan_workload(p, batches, cm) for p in wanted if p in have]
    simulated = {w.label: [simulate_plan(s.plan, s.batch, cm).timeline.to_frame() for s in w.steps]
                 for w in workloads}

    say(f"running {len(workloads)} policies x {settings.iterations} iteration(s) x {settings.repeats} round(s) "
               "for real ...")
    cfg = TrainConfig(model=settings.model, seed=settings.seed, dtype=dtype, warmup=settings.warmup)
    rounds = [Workload(_round_label(w.label, j, settings.repeats), w.steps) for j in range(settings.repeats)
              for w in workloads]
    res = run_workloads(rounds, cfg, nproc=settings.nproc, backend=settings.backend, device=settings.device,
                        out=out / "run", threads=settings.threads, timeout_s=settings.timeout)

    results: dict[str, Any] = {}
    for w in workloads:
        its, by_step = [], []
        for i in range(len(w.steps)):
            step_times = []
            for j in range(settings.repeats):
                tl = res.timeline
                meas = tl[(tl.workload == _round_label(w.label, j, settings.repeats)) & (tl.iteration == i)]
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
    plot = settings.plot or str(out / "validate.png")
    from dcpsim.experiments.validation.plot import write_plot

    with atomic_path(plot, "--plot", image=True) as tmp:
        write_plot(results, str(tmp))
    fit_terms = {t.key: {"how": t.how, "mape": t.mape} for t in report.terms if ":" not in t.key}
    for key in ("layer_overhead_fwd_s", "layer_overhead_bwd_s"):
        fit_terms.setdefault(key, {"how": "base", "mape": math.nan})["seconds"] = getattr(cal, key)
    doc = {"settings": asdict(settings), "calibration": cal.name,
           "fit": fit_terms, "skipped": skipped, "out": str(out), "plot": plot,
           "policies": {k: v["summary"] for k, v in results.items()},
           "microbatches": _microbatch_records(results),
           "ranking": {"simulated": sim_rank, "measured": meas_rank, "same": same_ranking(predicted, measured),
                       "spread": spread} | verdict}
    write_text(out / "validate.json", document_json(doc) + "\n", "validate.json")
    return doc


def document_json(doc: dict[str, Any]) -> str:
    """The document as one line of JSON (what validate.json holds and --json prints); a NaN in the document
    (no noise estimate from one round, no error of an unfitted term) is ``null``: JSON has no NaN."""
    return dumps_json(nulls_for_nonfinite(doc), "validate.json", sort_keys=True, default=float)


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
    with atomic_path(out / "simulated.csv", "simulated.csv") as tmp:
        sim.to_csv(tmp, index=False)
    with atomic_path(out / "errors.csv", "errors.csv") as tmp:
        pd.DataFrame(_microbatch_records(results)).to_csv(tmp, index=False)
