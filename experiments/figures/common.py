"""What the figure modules share: the run cache, progress lines, policy colours, the trace seeds of the policy
comparisons and their spread, and writing PNG + PDF + CSV.

Every figure runs one iteration per point (the first global batch of a seed's trace), so a figure is a pure
function of its scenarios except for measured wall times (figure d). The policy comparisons (a, b, f, g, h)
run every point on ``SEEDS`` trace seeds (the scenario's seed and the next ones; ``--quick``: ``QUICK_SEEDS``)
and draw the mean with min–max whiskers; their CSVs have one row per seed plus, for each plotted column,
its ``_seed_mean``, ``_seed_min`` and ``_seed_max`` over the point's seeds (``with_spread``).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dcpsim.experiments.runner import PolicySpec, parse_policy_specs, run_policy
from dcpsim.experiments.scenario.definition import Scenario
from dcpsim.sim.bound import BoundCache
from dcpsim.sim.metrics import METRIC_NAMES
from dcpsim.sim.simulate import IterationResult

POLICY_COLOURS = {"static-cp": "#7f7f7f", "mcore-dcp": "#1f77b4", "mcore-dcp-legacy": "#9ecae1",
                  "hydra": "#d62728", "dp-balanced": "#6baed6", "wlb-llm": "#2ca02c", "flexsp": "#9467bd",
                  "distca": "#ff7f0e"}
# The literature's schedulers (docs/policies/): figure (g) runs them beside each scenario's own policies.
LITERATURE_POLICIES = ("dp-balanced", "wlb-llm", "flexsp", "distca")
EXTRA_COLOURS = ("#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
SEEDS, QUICK_SEEDS = 3, 2  # trace seeds per point of a policy comparison (the scenario's seed and the next
#                            ones): bars and lines are the mean, whiskers the min–max, so a gap between
#                            policies can be read against the spread of one policy over traces


def policy_colour(label: str, order: Sequence[str] = ()) -> str:
    """A stable colour per policy label: fixed for the built-in policies, cycling for the others."""
    if label in POLICY_COLOURS:
        return POLICY_COLOURS[label]
    others = [x for x in order if x not in POLICY_COLOURS] or [label]
    i = others.index(label) if label in others else len(others)
    return EXTRA_COLOURS[i % len(EXTRA_COLOURS)]


def scenario_key(sc: Scenario) -> str:
    """A string that identifies a scenario's content (not its name)."""
    d = sc.to_dict()
    d.pop("name", None)
    d.pop("description", None)
    return json.dumps(d, sort_keys=True, default=str)


def trace_seeds(ctx: FigureContext, sc: Scenario) -> list[int]:
    """The trace seeds each point of a policy comparison runs: the scenario's seed and the next ones."""
    return [sc.seed + k for k in range(QUICK_SEEDS if ctx.quick else SEEDS)]


def over_seeds(df: pd.DataFrame, keys: Sequence[str], column: str) -> pd.DataFrame:
    """Per ``keys`` (a plotted point): mean, min and max of ``column`` over its seeds, NaN where any seed failed."""
    g = df.groupby(list(keys), sort=False)[column]
    out = pd.DataFrame({"mean": g.mean(), "min": g.min(), "max": g.max()})
    return out.where(g.count() == g.size(), np.nan)


def with_spread(df: pd.DataFrame, keys: Sequence[str], columns: Sequence[str]) -> pd.DataFrame:
    """``df`` (one row per seed) with ``{column}_seed_mean``, ``_seed_min`` and ``_seed_max`` over each point's
    seeds on every row of the point, for each plotted column (NaN where any seed of the point failed). The
    ``seed`` infix keeps them apart from the metrics' own ``_max`` / ``_mean`` (``pipeline_bubble_max``)."""
    out = df.copy()
    index = pd.MultiIndex.from_frame(df[list(keys)])
    for col in columns:
        stats = over_seeds(df, keys, col)
        for stat in ("mean", "min", "max"):
            name = f"{col}_seed_{stat}"
            if name in df:
                raise ValueError(f"spread column {name!r} would overwrite a column of the figure's data")
            out[name] = stats[stat].reindex(index).to_numpy()
    return out


def seeds_note(df: pd.DataFrame) -> str:
    """The title's words for the seeds behind each point (empty for one seed)."""
    n = df.seed.nunique() if "seed" in df else 1
    return f"mean of {n} trace seeds; whiskers: min–max" if n > 1 else ""


def baseline_of(labels: Sequence[str]) -> str:
    """The policy speedups are relative to: mcore-dcp (the production baseline) if present, else the first."""
    return "mcore-dcp" if "mcore-dcp" in labels else labels[0]


@dataclass
class FigureContext:
    """Inputs shared by all figures, the progress log, and a cache of simulated (scenario, policy) runs."""

    out_dir: Path
    quick: bool = False
    stream: TextIO | None = None
    _cache: dict[tuple[str, str], IterationResult | Exception] = field(default_factory=dict)
    _bounds: BoundCache = field(default_factory=BoundCache)  # one lower bound per (batch, cost model)
    _t0: float = field(default_factory=time.perf_counter)

    def log(self, msg: str) -> None:
        """A progress line on stderr, with the elapsed time since the command started."""
        stream = self.stream or sys.stderr
        stream.write(f"[figures {time.perf_counter() - self._t0:6.1f}s] {msg}\n")
        stream.flush()

    def specs(self, sc: Scenario) -> list[PolicySpec]:
        return parse_policy_specs(",".join(sc.policies))

    def run(self, sc: Scenario, spec: PolicySpec) -> IterationResult:
        """One iteration of ``spec`` on the first global batch of ``sc`` (cached; an error is re-raised)."""
        sc = sc.with_(iterations=1)
        key = (scenario_key(sc), spec.label)
        if key not in self._cache:
            from dcpsim.experiments.runtime_estimate import long_run_warning

            t0 = time.perf_counter()
            try:
                batches = sc.batches()
                message = long_run_warning([len(b.lengths) for b in batches], [spec.label], f"{sc.name} {spec.label}")
                if message:
                    self.log(message)
                pr = run_policy(spec, batches, sc.cost_model(), sc.policy_options, bound_cache=self._bounds)
                self._cache[key] = pr.iterations[0]
                self.log(f"  {sc.name} {spec.label}: {time.perf_counter() - t0:.1f}s")
            except Exception as e:  # noqa: BLE001 — a failed point is a gap in the figure, not a failed command
                self._cache[key] = e
                self.log(f"  {sc.name} {spec.label}: FAILED ({type(e).__name__}: {e})")
        res = self._cache[key]
        if isinstance(res, Exception):
            raise res
        return res

    def try_run(self, sc: Scenario, spec: PolicySpec) -> IterationResult | None:
        try:
            return self.run(sc, spec)
        except Exception:  # noqa: BLE001 — run() logged it; the caller draws a gap
            return None


def metrics_row(res: IterationResult | None, num_gpus: int) -> dict[str, Any]:
    """Every declared metric of one run (``sim.metrics.Metrics``) as a flat dict (NaNs when the run failed)."""
    if res is None:
        return dict.fromkeys(METRIC_NAMES, float("nan")) | {"ok": False}
    return res.metrics.to_dict() | {"ok": True}


def save_figure(ctx: FigureContext, fig: Figure, stem: str, data: pd.DataFrame) -> list[Path]:
    """Write ``stem``.png, ``stem``.pdf and ``stem``.csv (the data behind the figure) into the output dir."""
    from dcpsim.experiments.output.write import Outputs

    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    paths = [ctx.out_dir / f"{stem}.{ext}" for ext in ("png", "pdf", "csv")]
    with Outputs({p.name: p for p in paths}) as outs:  # the three land together or not at all
        with outs.writing(paths[0].name) as tmp:
            fig.savefig(tmp, dpi=150, bbox_inches="tight")
        with outs.writing(paths[1].name) as tmp:
            fig.savefig(tmp, bbox_inches="tight")
        with outs.writing(paths[2].name) as tmp:
            data.to_csv(tmp, index=False)
    ctx.log(f"wrote {', '.join(str(p) for p in paths)}")
    return paths


def new_figure(**kwargs: Any) -> Figure:
    """A figure drawn by the Agg canvas, through matplotlib's object API: no pyplot state, and the global
    backend of the importing program is left alone (``kwargs`` go to :class:`matplotlib.figure.Figure`)."""
    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def human_tokens(n: int) -> str:
    """32768 → '32K', 1048576 → '1M'."""
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10}K"
    return f"{n:,}"
