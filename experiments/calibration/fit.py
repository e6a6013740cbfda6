"""Fitting a calibration to profile tables (:func:`calibrate_profiles`): read, select the device's rows, fit
over a base calibration (cost_models.fitting), write the JSON."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dcpsim.cost_models.calibration import Calibration, default_calibration, published_calibration
from dcpsim.cost_models.errors import CalibrationError
from dcpsim.cost_models.presets import get_gpu

if TYPE_CHECKING:  # pandas and the fitting (scipy) load in the functions: 'dcpsim --help' stays fast
    import pandas as pd

    from dcpsim.cost_models.fitting import FitReport


@dataclass(frozen=True)
class CalibrationFit:
    """What :func:`calibrate_profiles` did: the rows it fitted, the base it kept, the result, its report."""

    profile: pd.DataFrame
    base: Calibration
    calibration: Calibration
    report: FitReport
    path: Path  # where the calibration was written


def base_calibration(gpu: str, base: str) -> Calibration:
    """The calibration kept for terms the profiles do not measure: ``shipped`` (the GPU's default),
    ``published`` (its published figures) or a calibration JSON file."""
    spec = get_gpu(gpu)
    if base == "shipped":
        return default_calibration(spec)
    if base == "published":
        return published_calibration(spec)
    return Calibration.load(base)


def fit_profiles(profiles: list[str | Path], output: str | Path, gpu: str = "h100", base: str = "shipped",
                 name: str | None = None, kernel: str | None = None, head_dim: int | None = None,
                 device: str | None = None) -> CalibrationFit:
    """Fit a calibration to the profile tables ``profiles`` (only ``device``'s rows when given) over
    :func:`base_calibration`; ``output`` is where the caller writes it (:func:`calibration_json`)."""
    from dcpsim.cost_models.fitting import fit_calibration
    from dcpsim.cost_models.profile_table import read_profiles

    profile = read_profiles(profiles)
    if device is not None:
        profile = profile[profile["device"] == device].reset_index(drop=True)
        if profile.empty:
            raise CalibrationError(f"no profile rows of device {device!r} in {', '.join(map(str, profiles))}")
    kept = base_calibration(gpu, base)
    cal, report = fit_calibration(profile, kept, name or f"{gpu}-calibrated", kernel=kernel,
                                  head_dim=head_dim)
    return CalibrationFit(profile, kept, cal, report, Path(output))


def calibration_json(cal: Calibration, option: str = "-o") -> str:
    """The calibration file's text (``Calibration.to_json`` plus a newline), refused when a number is not
    finite (:func:`experiments.output.write.dumps_json`)."""
    from dcpsim.experiments.output.write import dumps_json

    return dumps_json(cal.to_dict(), option, indent=2, sort_keys=True) + "\n"


def calibration_inputs(profiles: list[str] | list[str | Path], base: str) -> dict[str, str | Path | None]:
    """The files a calibration fit reads, by what they are (an output may be none of them)."""
    inputs: dict[str, str | Path | None] = {f"profile {p}": p for p in profiles}
    if base not in ("shipped", "published"):
        inputs["--base"] = base
    return inputs


def calibrate_profiles(profiles: list[str | Path], output: str | Path, gpu: str = "h100",
                       base: str = "shipped", name: str | None = None, kernel: str | None = None,
                       head_dim: int | None = None,
                       device: str | None = None) -> CalibrationFit:
    """:func:`fit_profiles`, then write the calibration to ``output`` as JSON (atomically; never onto one of
    the profiles or the base calibration)."""
    from dcpsim.experiments.output.write import Outputs

    with Outputs({"-o": output}, calibration_inputs(list(profiles), base)) as outs:
        fit = fit_profiles(profiles, output, gpu, base, name, kernel, head_dim, device)
        outs.write_text("-o", calibration_json(fit.calibration))
    return fit
