"""pyproject.toml lists every package: each folder of the six that holds an ``__init__.py`` is in
``[tool.setuptools] packages`` (a missing one installs without its modules in a non-editable install, which
only CI's simulator-only install would notice), and nothing else is."""

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("sim", "policies", "cost_models", "traces", "real_runtime", "experiments")


def test_every_package_folder_is_listed():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"dcpsim"} | {"dcpsim." + ".".join(init.parent.relative_to(ROOT).parts)
                          for folder in FOLDERS for init in (ROOT / folder).rglob("__init__.py")}
    assert listed == found
