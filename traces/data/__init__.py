"""Public document-length samples shipped with dcpsim (origin and licence: ``SOURCES.md`` in this folder).

Each sample is stored as ``doclens_<name>.npz`` (``numpy.savez_compressed``) holding one array ``lengths``
(int32, tokens per document, in the order of the original dump). :func:`load_sample` returns it as a read-only
``int64`` array.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import numpy as np

from dcpsim.traces.errors import TraceError

SAMPLES: dict[str, str] = {
    "wlbllm": "doclens_wlbllm.npz",
    "prolong": "doclens_prolong.npz",
}


def available_samples() -> list[str]:
    """Names of the shipped length samples."""
    return sorted(SAMPLES)


@cache
def load_sample(name: str) -> np.ndarray:
    """The shipped sample ``name`` as a read-only ``int64`` array of document lengths (tokens).

    Raises:
        TraceError: unknown name (the message lists the valid ones).
    """
    if name not in SAMPLES:
        raise TraceError(
            f"unknown length sample {name!r}; expected one of {', '.join(available_samples())}",
            field="sample",
            value=name,
        )
    resource = resources.files(__name__).joinpath(SAMPLES[name])
    with resource.open("rb") as handle, np.load(handle) as archive:
        lengths = archive["lengths"].astype(np.int64)
    lengths.setflags(write=False)
    return lengths
