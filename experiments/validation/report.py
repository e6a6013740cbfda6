"""A validation document (:func:`~experiments.validation.pipeline.run_validation`) as terminal text."""

from __future__ import annotations

import math
from typing import Any


def _pct(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.1%}"


def ranking_text(rk: dict[str, Any]) -> str:
    """The ranking lines: both orders, the verdict, and each pair's measured difference beside the noise."""
    verdict = rk["verdict"].upper() if rk["verdict"] == "different" else rk["verdict"]
    lines = [f"ranking by iteration time: simulated {' < '.join(rk['simulated'])}; measured "
             f"{' < '.join(rk['measured'])}: {verdict}"]
    for a, b, diff, noise, agrees, resolved in rk["pairs"]:
        noise_text = "not measured" if math.isnan(noise) else f"{noise:.1%}"
        lines.append(f"  {a} vs {b}: {'agrees' if agrees else 'disagrees'}, measured difference {diff:.1%}, "
                     f"run-to-run spread {noise_text}: {'resolved' if resolved else 'within noise'}")
    lines.append("  (rule: predicted times within 2% are ties and not compared; a measured difference is "
                 "resolved when it exceeds the larger run-to-run spread of the pair, spread = per iteration, "
                 "(max - min) / mean over the --repeats rounds, averaged over iterations; 'same' = every pair "
                 "agrees and is resolved, 'same within noise' = no resolved pair disagrees but some pair is "
                 "within noise)")
    return "\n".join(lines)


def _fit_term(k: str, v: dict[str, Any]) -> str:
    value = f" {v['seconds'] * 1e6:.0f} us" if "seconds" in v else ""
    return f"{k}{value} {v['how']} (MAPE {_pct(v['mape'])})"


def report_text(doc: dict[str, Any]) -> str:
    """The per-microbatch table, the per-policy summary, the ranking lines, the fit and what was written."""
    from dcpsim.experiments.output.tables import format_table

    mbs = [[r["policy"], str(r["iteration"]), str(r["round"]), str(r["microbatch"]), str(r["ranks"]),
            f"{r['predicted_s'] * 1e3:.1f}", f"{r['measured_s'] * 1e3:.1f}", _pct(r["ape"])]
           for r in doc["microbatches"]]
    policies = [[k, str(s["microbatches"]), _pct(s["rank_microbatch_mape"]),
                 f"{s['compute_ratio_median']:.2f}", _pct(s["microbatch_mape"]), f"{s['predicted_iteration_s']:.3f}",
                 f"{s['measured_iteration_s']:.3f}", _pct(s["spread"]), _pct(s["iteration_mape"])]
                for k, s in doc["policies"].items()]
    lines = ["per-microbatch prediction error (max over ranks of compute + exposed CP comm, F + B):",
             format_table(mbs, ["policy", "iter", "round", "mb", "ranks", "sim ms", "real ms", "error"]),
             "",
             format_table(policies, ["policy", "mbs", "rank-mb MAPE", "sim/real", "mb MAPE", "sim iter s",
                                     "real iter s", "real spread", "iter MAPE"]),
             "",
             ranking_text(doc["ranking"]),
             f"calibration {doc['calibration']}: {', '.join(_fit_term(k, v) for k, v in doc['fit'].items())}"]
    lines += [f"skipped {p}: not registered" for p in doc["skipped"]]
    lines.append(f"wrote {doc['out']}/ (profile.csv, calibration.json, run/, simulated.csv, errors.csv, "
                 f"validate.json) and {doc['plot']}")
    return "\n".join(lines)
