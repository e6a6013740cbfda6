"""Where run logs come from: dcpsim run logs (JSON Lines) or a public benchmark's files through its importer."""

from __future__ import annotations

from collections.abc import Sequence

from dcpsim.experiments.replay.runlog import LogError, RunLog, read_log

SOURCES = ("runlog", "distca", "megatron")


def load_runs(paths: Sequence[str], source: str = "runlog", cp: int | None = None) -> list[RunLog]:
    """One RunLog per path, read as ``source`` (``runlog``: dcpsim's format; ``distca``: DistCA's e2e JSON;
    ``megatron``: a Megatron-LM functional test's golden values, its model_config.yaml next to it)."""
    if source not in SOURCES:
        raise LogError(f"--from {source!r} is unknown; valid: {', '.join(SOURCES)}")
    if source == "distca":
        from dcpsim.experiments.replay.distca import import_distca

        return [import_distca(p, cp=cp) for p in paths]
    if source == "megatron":
        from dcpsim.experiments.replay.megatron import import_megatron

        return [import_megatron(p) for p in paths]
    return [read_log(p) for p in paths]
