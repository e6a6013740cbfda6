"""Start-up stays light: 'dcpsim --help' and 'dcpsim policies' load none of the heavy libraries, and the figure
modules never touch pyplot or the global matplotlib backend. (Times are measured by
experiments/bench/startup.py; these tests check what is imported, which is what makes it fast.)"""

import subprocess
import sys

HEAVY = ("pandas", "scipy", "matplotlib", "simpy", "pyarrow", "torch", "tqdm")


def loaded_after(code: str) -> list[str]:
    probe = (f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return out.split("\n")[-2].split()


def test_help_and_policies_import_no_heavy_library():
    assert loaded_after("from dcpsim.experiments.cli import build_parser\nbuild_parser().format_help()") == []
    policies = ("import contextlib, io\nfrom dcpsim.experiments.cli import main\n"
                "with contextlib.redirect_stdout(io.StringIO()):\n    main(['policies'])")
    assert loaded_after(policies) == []


def test_figures_use_the_object_api_and_leave_the_backend_alone():
    code = ("import matplotlib\nmatplotlib.use('svg')\nimport dcpsim.experiments.figures\n"
            "import dcpsim.experiments.calibration.report, dcpsim.experiments.validation.plot\n"
            "import sys\nassert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'\n"
            "assert matplotlib.get_backend() == 'svg', matplotlib.get_backend()")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cost_models_names_load_on_first_use():
    """``dcpsim.cost_models`` exports its names lazily: a light submodule does not pull in the analytic model
    (and scipy), and every exported name still resolves to the object of its home module."""
    assert loaded_after("import dcpsim.cost_models.errors, dcpsim.cost_models.specs") == []
    import dcpsim.cost_models as cm
    from dcpsim.cost_models import analytic, specs

    assert sorted(cm.__all__) == sorted(cm._HOME) and set(cm.__all__) <= set(dir(cm))
    assert cm.AnalyticCostModel is analytic.AnalyticCostModel and cm.JobSpec is specs.JobSpec
    for name in cm.__all__:
        assert getattr(cm, name).__module__.startswith("dcpsim.cost_models."), name


def test_benchmarks_run_by_a_python_without_dcpsim_say_which_python_in_one_line():
    """``python experiments/bench/X.py`` with an interpreter that lacks dcpsim (here: site-packages off, -S)
    is one line naming the venv's Python and exit 2, not a ModuleNotFoundError traceback."""
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "experiments" / "bench"
    for script in ("startup.py", "sim.py", "scheduler.py", "replay.py", "sweep.py", "estimate.py"):
        r = subprocess.run([sys.executable, "-S", "-I", str(bench / script), "--help"], capture_output=True,
                           text=True, cwd=bench.parent.parent)
        assert r.returncode == 2 and r.stdout == "", (script, r.stderr)
        line, = r.stderr.strip().splitlines()
        assert "dcpsim is not installed for" in line and f".venv/bin/python {bench / script}" in line
