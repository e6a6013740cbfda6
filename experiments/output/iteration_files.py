"""The files ``dcpsim simulate`` writes of an iteration: its plan (JSON), its timeline (CSV or Parquet) and
its Chrome trace."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dcpsim.sim.simulate import IterationResult


def write_iteration_files(result: IterationResult, label: str, plan: str | None = None,
                          timeline: str | None = None, chrome_trace: str | None = None,
                          metadata: dict[str, Any] | None = None) -> None:
    """Write what is asked of one iteration: ``plan`` as JSON, ``timeline`` as .parquet (by its suffix) or
    CSV, ``chrome_trace`` as a Chrome trace named ``label`` carrying ``metadata``."""
    if plan:
        Path(plan).write_text(result.plan.to_json())
    if timeline:
        df = result.timeline.to_frame()
        (df.to_parquet if timeline.endswith(".parquet") else df.to_csv)(timeline, index=False)
    if chrome_trace:
        from dcpsim.experiments.output.chrome_trace import write_chrome_trace

        write_chrome_trace(chrome_trace, result.timeline, label=label, metadata=metadata)
