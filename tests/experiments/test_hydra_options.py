"""experiments/studies/hydra_ablation.py: HyDra's default against its own option settings (docs/hydra.md §13)."""

from __future__ import annotations

from dcpsim.experiments.studies.hydra_ablation import main, measure


def test_flat_profile_is_slower_than_the_default_at_32k() -> None:
    # docs/hydra.md §13: at h100-512-32k seed 0 flat heights (profile=False) take 5.2% longer than the
    # default (3.4% before the stage-scaled score let the default pick 22 microbatches instead of 43).
    r = measure("h100-512-32k", 0, ["profile=False"])
    ratio = r["hydra:profile=False"]["iteration_time_s"] / r["hydra"]["iteration_time_s"]
    assert 1.04 < ratio < 1.07
    assert 0.88 <= r["hydra"]["efficiency"] <= 1.0


def test_bad_seeds_and_infeasible_settings_are_one_line(capsys) -> None:
    assert main(["--scenarios", "h100-512-32k", "--seeds", "zero"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--seeds" in err[0] and "0,1,2" in err[0]
    assert main(["--scenarios", "nope", "--seeds", "0", "--settings", "profile=False"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0]
