"""Length traces for dcpsim: reading/writing, synthetic generators, named presets and global batches.

Lengths are in tokens throughout. This package imports nothing from the rest of the project.

    >>> from traces import get_preset, sample_batches
    >>> batches = sample_batches("256k", iterations=4, global_batch_tokens=4 * 262144)
"""

from __future__ import annotations

from dcpsim.traces.batching import GlobalBatch, form_batches, sample_batches
from dcpsim.traces.data import available_samples, load_sample
from dcpsim.traces.errors import TraceError
from dcpsim.traces.generators import empirical, lognormal, lognormal_pareto, mixture
from dcpsim.traces.io import read_trace, write_trace
from dcpsim.traces.presets import TracePreset, available_presets, get_preset, register_preset
from dcpsim.traces.splitting import split_long, split_pieces
from dcpsim.traces.trace import Trace

__all__ = [
    "GlobalBatch",
    "Trace",
    "TraceError",
    "TracePreset",
    "available_presets",
    "available_samples",
    "empirical",
    "form_batches",
    "get_preset",
    "load_sample",
    "lognormal",
    "lognormal_pareto",
    "mixture",
    "read_trace",
    "register_preset",
    "sample_batches",
    "split_long",
    "split_pieces",
    "write_trace",
]
