"""What a validation run is asked to do: :class:`ValidateSettings`, whose defaults are the command's."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class ValidateSettings:
    """The options of ``dcpsim validate`` (docs/real_runtime.md); the defaults are the command's."""

    # execution
    backend: str = "gloo"  # torch.distributed backend: gloo or nccl
    nproc: int = 4  # processes = pool ranks
    device: str = "cpu"
    dtype: str | None = None  # default: float32 on cpu, bfloat16 on cuda
    threads: int = 1  # torch threads per process
    timeout: float = 900.0  # seconds before a hung run is stopped
    # workload
    policies: str = "static-cp,mcore-dcp,hydra"  # unregistered ones are skipped
    iterations: int = 2
    model: str = "tiny"
    gpu: str = "h200"  # the parts of the job spec a profile does not measure: node size, peak FLOP/s
    context_len: int = 1024
    tokens: int = 4096
    max_tokens_per_rank: int | None = None  # default: context_len / nproc
    median_len: float = 160.0
    sigma: float = 1.0
    seed: int = 0
    warmup: int = 1
    repeats: int = 2  # rounds over the policies, for the run-to-run spread (1: no noise estimate)
    # calibration
    profile: str | None = None  # a profile CSV to use instead of profiling again
    full_profile: bool = False
    profile_layout: str = "concurrent"  # or "alone"
    profile_window: float | None = None  # default 0.1 s, full profile 0.25 s; 0: medians of a few calls
    no_layer_overhead: bool = False
    # output
    out: str = "validate_out"
    plot: str | None = None  # default OUT/validate.png

    @property
    def run_dtype(self) -> str:
        """The dtype of the run: ``dtype``, else bfloat16 on cuda and float32 on cpu."""
        return self.dtype or ("bfloat16" if self.device == "cuda" else "float32")

    @staticmethod
    def from_args(args: argparse.Namespace) -> ValidateSettings:
        """The settings of a parsed ``dcpsim validate`` command line."""
        return ValidateSettings(**{f.name: getattr(args, f.name) for f in fields(ValidateSettings)})
