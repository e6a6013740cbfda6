"""Studies run as modules: ``python -m dcpsim.experiments.studies.sensitivity`` (the cost model's
sensitivity to its calibrated terms) and ``python -m dcpsim.experiments.studies.hydra_ablation`` (HyDra against
its own option settings)."""
