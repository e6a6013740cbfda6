"""Output paths: every output is checked before any work and refused with one line naming the option and the
path (a missing or non-directory parent, a directory or a FIFO in its place, an input of the command or another
output of the same command, also through a symbolic or hard link, an image extension matplotlib cannot write);
an earlier file at the path survives the refusal unchanged."""

from __future__ import annotations

import os
from pathlib import Path

from tests.adversarial.corpus import DIRECTORY, FIFO, Case

PROFILE = (Path(__file__).resolve().parents[2] / "cost_models" / "data" / "profile_h100.csv").read_bytes()
SIM = ("simulate", "--policy", "static-cp", "--global-batch-tokens", "1048576", "--no-progress")
TRACE = b"length\n1000\n2000\n3000\n"
OLD = b"an earlier output\n"
SWEEP = 'base = "default"\nseeds = [0]\n[grid]\npool = [64]\n'
OTHER_SWEEP = b'{"source": "old.toml", "points": 4, "definition": "0123abcd"}'
HUGE = ('base = "default"\nseeds = ' + str(list(range(1000))) + "\n[grid]\npool = " + str(list(range(1, 101)))
        + "\nmax_tokens_per_rank = " + str(list(range(1024, 1124))) + "\n")


def _symlink(target: str) -> object:
    def make(path: Path) -> None:
        path.symlink_to(target)
    return make


def _hardlink(target: str) -> object:
    def make(path: Path) -> None:
        os.link(path.with_name(target), path)
    return make


CASES = [
    Case("out-plan-and-chrome-trace-same-file", (*SIM, "--plan-out", "x.json", "--chrome-trace", "x.json"),
         "--chrome-trace x.json: the same file as --plan-out", keep={"x.json": OLD}),
    Case("out-timeline-and-chrome-trace-same-file-via-dot", (*SIM, "--timeline-out", "x.csv",
                                                             "--chrome-trace", "./x.csv"),
         "the same file as --timeline-out", keep={"x.csv": OLD}),
    Case("out-plan-onto-the-trace", (*SIM, "--trace", "t.csv", "--plan-out", "t.csv"),
         "--plan-out t.csv: that is the command's input (trace)", keep={"t.csv": TRACE}),
    Case("out-timeline-onto-the-trace-via-symlink", (*SIM, "--trace", "t.csv", "--timeline-out", "link.csv"),
         "that is the command's input (trace)", files={"link.csv": _symlink("t.csv")}, keep={"t.csv": TRACE}),
    Case("out-plan-and-chrome-trace-hard-links", (*SIM, "--plan-out", "a.json", "--chrome-trace", "b.json"),
         "--chrome-trace b.json: the same file as --plan-out",
         files={"a.json": OLD.decode(), "b.json": _hardlink("a.json")}),
    Case("out-chrome-trace-onto-the-calibration", (*SIM, "--calibration", "cal.json", "--chrome-trace", "cal.json"),
         "that is the command's input (calibration)", keep={"cal.json": b"{}"}),
    Case("out-missing-parent", (*SIM, "--plan-out", "nope/plan.json"), "--plan-out nope/plan.json: directory nope "
         "does not exist"),
    Case("out-parent-is-a-file", (*SIM, "--timeline-out", "f/tl.csv"), "f/tl.csv: f is not a directory",
         keep={"f": OLD}),
    Case("out-is-a-directory", (*SIM, "--timeline-out", "d"), "--timeline-out d: is a directory",
         files={"d": DIRECTORY}),
    Case("out-is-a-fifo", (*SIM, "--chrome-trace", "p.fifo"), "--chrome-trace p.fifo: exists and is not a regular "
         "file", files={"p.fifo": FIFO}),
    Case("out-second-output-bad-first-kept", (*SIM, "--plan-out", "plan.json", "--timeline-out", "nope/tl.csv"),
         "--timeline-out nope/tl.csv: directory nope does not exist", keep={"plan.json": OLD}),
    Case("out-calibrate-onto-its-profile", ("calibrate", "p.csv", "-o", "p.csv"),
         "-o p.csv: that is the command's input (profile p.csv)", keep={"p.csv": PROFILE}),
    Case("out-calibrate-onto-its-base", ("calibrate", "p.csv", "--base", "b.json", "-o", "b.json"),
         "that is the command's input (--base)", files={"p.csv": PROFILE}, keep={"b.json": b"{}"}),
    Case("out-calibrate-plot-onto-output", ("calibrate", "p.csv", "-o", "c.png", "--plot", "c.png"),
         "--plot c.png: the same file as -o", files={"p.csv": PROFILE}, keep={"c.png": OLD}),
    Case("out-calibrate-plot-unknown-extension", ("calibrate", "p.csv", "-o", "c.json", "--plot", "fit.gif"),
         "--plot fit.gif: unknown image extension '.gif'; valid: .png", files={"p.csv": PROFILE},
         keep={"c.json": OLD}),
    Case("out-calibrate-runs-onto-its-log", ("calibrate", "--runs", "r.jsonl", "-o", "r.jsonl"),
         "that is the command's input (--runs r.jsonl)", keep={"r.jsonl": b"{}\n"}),
    Case("out-calibrate-report-plot-is-a-directory", ("calibrate", "p.csv", "-o", "c.json", "--report"),
         "--plot c_fit.png: is a directory", files={"p.csv": PROFILE, "c_fit.png": DIRECTORY},
         keep={"c.json": OLD}),
    Case("out-skew-unknown-extension", ("skew", "--policies", "static-cp", "-o", "skew.txt"),
         "-o skew.txt: unknown image extension '.txt'"),
    Case("out-trace-plot-no-extension", ("trace", "t.csv", "--plot", "hist"),
         "--plot hist: unknown image extension none", files={"t.csv": TRACE.decode()}),
    Case("out-trace-plot-onto-the-trace", ("trace", "t.png", "--plot", "t.png"),
         "--plot t.png: that is the command's input (trace)", keep={"t.png": TRACE}),
    Case("out-sweep-into-another-sweeps-directory", ("sweep", "g.toml", "-o", "out", "--no-progress"),
         "-o out: holds the results of another sweep (old.toml, 4 points)",
         files={"g.toml": SWEEP, "out/sweep.json": OTHER_SWEEP.decode()},
         keep={"out/sweep.json": OTHER_SWEEP}),
    Case("out-sweep-directory-is-a-file", ("sweep", "g.toml", "-o", "out", "--no-progress"),
         "-o out: is a file, not a directory", files={"g.toml": SWEEP}, keep={"out": OLD}),
    Case("out-figures-directory-is-a-file", ("figures", "-o", "figs", "--only", "a", "--quick"),
         "-o figs: exists and is not a directory; give a directory name", keep={"figs": OLD}),
    Case("out-figures-directory-under-a-file", ("figures", "-o", "f/figs", "--only", "a", "--quick"),
         "-o f/figs: cannot create the directory: Not a directory", keep={"f": OLD}),
    Case("out-figures-directory-checked-after-the-scenario", ("figures", "-o", "figs", "--scenario", "nosuch"),
         "unknown scenario 'nosuch'", keep={"figs": OLD}),
    Case("out-sweep-directory-under-a-file", ("sweep", "g.toml", "-o", "f/out", "--no-progress"),
         "-o f/out: cannot create the store there: Not a directory", files={"g.toml": SWEEP}, keep={"f": OLD}),
    Case("out-sweep-huge-grid", ("sweep", "g.toml", "-o", "out", "--no-progress"),
         "10,000,000 points x 3 policies = 30,000,000 tasks is above the limit of 100,000 tasks",
         files={"g.toml": HUGE}),
]
