"""The replay's scatter: predicted against measured time per iteration, one colour per dataset."""

from __future__ import annotations

from collections.abc import Sequence

from dcpsim.experiments.replay.replay import Replayed
from dcpsim.experiments.replay.stats import ErrorStats


def write_scatter(path: str, rows: Sequence[tuple[str, Replayed]], overall: ErrorStats, log: bool = False) -> None:
    """Predicted against measured (ms), one colour per dataset, the y = x line (``log``: log-log axes, for
    datasets of different scales), saved to ``path`` (the caller makes it atomic: :mod:`experiments.output.write`)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 5.5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    datasets = list(dict.fromkeys(ds for ds, _ in rows))
    for k, ds in enumerate(datasets):
        pts = [(r.measured_s * 1e3, r.predicted_s * 1e3) for d, r in rows if d == ds]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", ms=3.5, color=f"C{k % 10}", label=ds)
    lo = min(min(r.measured_s, r.predicted_s) for _, r in rows) * 1e3 * 0.9
    hi = max(max(r.measured_s, r.predicted_s) for _, r in rows) * 1e3 * 1.1
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.set(xlabel="measured (ms)", ylabel="predicted (ms)", xlim=(lo, hi), ylim=(lo, hi),
           title=f"replay: n={overall.n}, MAPE {overall.mape:.1%}, mean error {overall.mean_error:+.1%}")
    if log:
        ax.set(xscale="log", yscale="log")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
