"""Per-rank tokens against per-rank compute time, per microbatch, on the first global batch of a scenario:
the load skew of each policy (:func:`policy_skews`, ``dcpsim skew``) and its scatter plot
(:func:`write_skew_plot`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas loads in the functions
    import pandas as pd

    from dcpsim.experiments.scenario.definition import Scenario
    from dcpsim.sim.metrics import Metrics


@dataclass(frozen=True)
class PolicySkew:
    """One policy on the first batch: its metrics, its stage-0 rank-microbatch rows (``policy`` column added),
    and the largest compute-time ratio between two rank-microbatches of about equal tokens with that pair
    (``sim.metrics.equal_tokens_time_ratio``)."""

    label: str
    metrics: Metrics
    stage0: pd.DataFrame
    ratio: float
    pair: dict[str, Any]


def policy_skews(sc: Scenario, policies: str) -> list[PolicySkew]:
    """Every policy of ``policies`` (``a,b:k=v,...``) on the scenario's first global batch."""
    from dcpsim.experiments.runner import parse_policy_specs, run_policy
    from dcpsim.sim.metrics import equal_tokens_time_ratio, rank_microbatch_table

    cost_model = sc.cost_model()
    batches = sc.batches()[:1]
    out = []
    for spec in parse_policy_specs(policies):
        res = run_policy(spec, batches, cost_model, sc.policy_options).iterations[0]
        t = rank_microbatch_table(res.timeline)
        ratio, pair = equal_tokens_time_ratio(t)
        stage0 = t[t["stage"] == 0].assign(policy=spec.label)
        out.append(PolicySkew(spec.label, res.metrics, stage0, ratio, pair))
    return out


def write_skew_plot(skews: list[PolicySkew], sc: Scenario, path: str) -> None:
    """The scatter of (tokens, compute time) per rank-microbatch, one panel per policy (figures.skew)."""
    import pandas as pd

    from dcpsim.experiments.figures.skew import plot

    fig = plot(pd.concat([s.stage0 for s in skews], ignore_index=True), sc, figure_label="")
    fig.savefig(path, dpi=130)
