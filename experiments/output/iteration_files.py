"""The files ``dcpsim simulate`` writes of an iteration: its plan (JSON), its timeline (CSV or Parquet) and
its Chrome trace, through one :class:`experiments.output.write.Outputs` (checked up front, all or none)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dcpsim.experiments.output.write import Outputs
    from dcpsim.sim.simulate import IterationResult

PLAN, TIMELINE, CHROME = "--plan-out", "--timeline-out", "--chrome-trace"


def write_iteration_files(result: IterationResult, label: str, outs: Outputs,
                          metadata: dict[str, Any] | None = None) -> None:
    """Write what ``outs`` holds of one iteration: ``--plan-out`` as JSON, ``--timeline-out`` as .parquet (by
    its suffix) or CSV, ``--chrome-trace`` as a Chrome trace named ``label`` carrying ``metadata``."""
    from dcpsim.experiments.output.write import dumps_json

    if PLAN in outs:
        outs.write_text(PLAN, dumps_json(result.plan.to_dict(), PLAN, sort_keys=True))
    if TIMELINE in outs:
        df = result.timeline.to_frame()
        with outs.writing(TIMELINE) as tmp:
            if outs.final(TIMELINE).suffix == ".parquet":
                df.to_parquet(tmp, index=False)
            else:
                df.to_csv(tmp, index=False)
    if CHROME in outs:
        from dcpsim.experiments.output.chrome_trace import chrome_trace_json

        outs.write_text(CHROME, chrome_trace_json(result.timeline, label=label, metadata=metadata))
