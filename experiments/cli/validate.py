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
import sys

from dcpsim.experiments.cli.args import positive_int, typed
from dcpsim.experiments.validation.settings import ValidateSettings

NAME = "validate"
HELP = "run policies for real (torch.distributed) and compare with the simulator's predictions"
ORDER = 60
D = ValidateSettings()  # the defaults


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("execution")
    g.add_argument("--backend", choices=("gloo", "nccl"), default=D.backend, help="torch.distributed backend")
    g.add_argument("--nproc", type=positive_int, default=D.nproc, help="processes = pool ranks (default 4)")
    g.add_argument("--device", choices=("cpu", "cuda"), default=D.device)
    g.add_argument("--dtype", choices=("float32", "bfloat16"), help="default: float32 on cpu, bfloat16 on cuda")
    g.add_argument("--threads", type=positive_int, default=D.threads, help="torch threads per process (default 1)")
    g.add_argument("--timeout", type=typed(float, gt=0.0), default=D.timeout,
                   help="seconds before a hung run is stopped")
    w = p.add_argument_group("workload")
    w.add_argument("--policies", default=D.policies, metavar="A,B,...",
                   help="policies to compare (default static-cp,mcore-dcp,hydra; unregistered ones are skipped)")
    w.add_argument("--iterations", type=positive_int, default=D.iterations, help="global batches (default 2)")
    w.add_argument("--model", default=D.model, help="model preset (default tiny)")
    w.add_argument("--gpu", default=D.gpu, help="GPU preset for the parts of the job spec a profile does not "
                                                "measure: node size, peak FLOP/s (default h200)")
    w.add_argument("--context-len", type=typed(int, ge=2), default=D.context_len,
                   help="longest document (default 1024)")
    w.add_argument("--tokens", type=typed(int, ge=2), default=D.tokens, help="tokens per global batch (default 4096)")
    w.add_argument("--max-tokens-per-rank", type=positive_int, help="per-rank budget (default context-len / nproc)")
    w.add_argument("--median-len", type=typed(float, gt=0.0), default=D.median_len,
                   help="median document length (default 160)")
    w.add_argument("--sigma", type=typed(float, ge=0.0), default=D.sigma,
                   help="lognormal sigma of lengths (default 1.0)")
    w.add_argument("--seed", type=typed(int, ge=0), default=D.seed)
    w.add_argument("--warmup", type=typed(int, ge=0), default=D.warmup,
                   help="untimed passes before the first iteration (default 1)")
    w.add_argument("--repeats", type=positive_int, default=D.repeats,
                   help="run every policy's iterations this many times, in rounds over the policies, to measure "
                        "the run-to-run spread (default 2; 1 = no noise estimate)")
    c = p.add_argument_group("calibration")
    c.add_argument("--profile", metavar="CSV", help="use this profile table instead of profiling again")
    c.add_argument("--full-profile", action="store_true", help="more sizes and repeats (default: quick)")
    c.add_argument("--profile-layout", choices=("concurrent", "alone"), default=D.profile_layout,
                   help="compute profile on all --nproc processes at once (default: the run's contention for "
                        "the cores is measured) or on one process alone (the uncontended machine)")
    c.add_argument("--profile-window", type=typed(float, ge=0.0), metavar="S",
                   help="compute times are means of calls over at least S timed seconds each (default 0.1, "
                        "full profile 0.25); 0 = medians of a few calls")
    c.add_argument("--no-layer-overhead", action="store_true",
                   help="simulate without the fitted fixed per-layer overhead (kernel curves and links only), "
                        "to see what the overhead term contributes")
    o = p.add_argument_group("output")
    o.add_argument("--out", default=D.out, help="output directory (default validate_out)")
    o.add_argument("--plot", metavar="PNG", help="predicted vs measured plot (default OUT/validate.png)")
    o.add_argument("--json", action="store_true", help="print one JSON object instead of tables")


def run(args: argparse.Namespace) -> int:
    from dcpsim.experiments.validation.pipeline import document_json, run_validation
    from dcpsim.experiments.validation.report import report_text

    progress = sys.stderr if args.json else sys.stdout
    doc = run_validation(ValidateSettings.from_args(args),
                         say=lambda line: print(line, file=progress, flush=True))
    print(document_json(doc) if args.json else report_text(doc))
    return 0
