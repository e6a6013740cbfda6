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


def calibrate_profiles(profiles: list[str | Path], output: str | Path, gpu: str = "h100",
                       base: str = "shipped", name: str | None = None, kernel: str | None = None,
                       head_dim: int | None = None,
                       device: str | None = None) -> CalibrationFit:
    """Fit a calibration to the profile tables ``profiles`` (only ``device``'s rows when given) over
    :func:`base_calibration`, and write it to ``output`` as JSON."""
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
    out = Path(output)
    try:
        out.write_text(cal.to_json() + "\n")
    except OSError as e:
        raise CalibrationError(f"cannot write calibration file {out}: {e.strerror}") from None
    return CalibrationFit(profile, kept, cal, report, out)
