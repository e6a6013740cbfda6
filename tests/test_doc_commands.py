"""Every command line of README.md and docs/**/*.md runs as written.

The commands are read from the documents themselves, so a new example is tested without editing this file:

- **fenced code blocks** (no language, ``sh``, ``bash``, ``console``): a line that starts with ``dcpsim``,
  ``python``/``python3``, ``.venv/bin/...``, ``time``, ``torchrun``, ``ray`` or ``pip`` (after an optional
  ``$ ``) is a command; a trailing ``\\`` joins the next line. In a block whose commands carry ``$ ``, the
  other lines are the commands' output: a ``dcpsim X: error: ...`` line there is the exact stderr line the
  command before it must print, with exit 2.
- **inline code** that runs a script or module (``python experiments/bench/sim.py``, ``python -m
  dcpsim.x.y``) or a ``dcpsim`` command with arguments. A bare ``dcpsim compare`` in a sentence names the
  command; it is not an example to run.

A line with a placeholder (an upper-case word such as ``LOG`` or ``FILE``, ``[...]`` optional parts, ``...``,
``|`` alternatives) is a synopsis, not a command, and is skipped (``dcpsim COMMAND --help`` runs as every
command's ``--help``). Each command runs in a fresh temporary directory holding copies of the repository's
folders it reads (``cost_models/data``, ``tests/data``, ``experiments``, ``docs``), the user files the examples
name (``FILES``: a trace, a GPU file, a profile table, a run log, ...) and ``.venv/bin`` pointing at this
interpreter's ``bin``, so that nothing in the checkout is written. Commands that take minutes as written run
with the substitution in ``SUBSTITUTE`` (each entry says why); ``EXCLUDE`` lists the few that cannot run here
(installs, a cluster), each with its reason; ``NEEDS`` marks those that need torch, Ray or a GPU, which skip
cleanly without them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PROGRAMS = ("dcpsim", "python", "python3", "time", "torchrun", "ray", "pip")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*([.:=/].*)?$|\$[A-Z]|\[|\.\.\.|…|\|")   # one word of a synopsis
COPIED = ("cost_models/data", "tests/data", "experiments", "docs")


@dataclass(frozen=True)
class DocCommand:
    where: str        # README.md:46
    line: str         # as written, comment stripped
    error: str = ""   # the stderr line the document shows for it ("" = it succeeds)


def _program(line: str) -> str:
    words = [w.removeprefix(".venv/bin/") for w in line.split()]
    if words[:1] == ["time"]:   # 'time dcpsim ...' times a command; 'time of each ...' is prose
        return "time" if words[1:2] and words[1] in PROGRAMS else ""
    return words[0] if words else ""


def _is_command(line: str) -> bool:
    words = line.split()
    if not words or _program(line) not in PROGRAMS:
        return False
    return not (len(words) > 1 and words[1].endswith(":"))   # "dcpsim compare: error: ..." is output


def _strip_comment(line: str) -> str:
    return re.sub(r"\s+#\s.*$", "", line).strip()


def _fenced(path: Path) -> list[DocCommand]:
    out: list[DocCommand] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        lang, start = lines[i][3:].strip(), i + 1
        end = next(j for j in range(start, len(lines)) if lines[j].startswith("```"))
        i = end + 1
        if lang not in ("", "sh", "bash", "console"):
            continue
        body = lines[start:end]
        prompted = any(b.startswith("$ ") for b in body)
        k = 0
        while k < len(body):
            text, lineno = body[k], start + k + 1
            k += 1
            if prompted:
                if not text.startswith("$ "):
                    continue
                text = text[2:]
            while text.rstrip().endswith("\\") and k < len(body):
                text = text.rstrip()[:-1] + " " + body[k].strip()
                k += 1
            text = " ".join(_strip_comment(text).split())
            if not _is_command(text):
                continue
            error = ""
            if prompted and k < len(body) and re.match(r"dcpsim( \S+)?: error: ", body[k]):
                error = body[k]
            out.append(DocCommand(f"{path.relative_to(ROOT)}:{lineno}", text, error))
    return out


def _inline(path: Path) -> list[DocCommand]:
    text = path.read_text()
    out: list[DocCommand] = []
    lines = text.splitlines()
    fence = False
    for n, line in enumerate(lines, 1):
        if line.startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        joined = line + " " + (lines[n] if n < len(lines) else "")   # a span may wrap onto the next line
        for m in re.finditer(r"`([^`]+)`", joined):
            if m.start() >= len(line):
                break
            span = " ".join(m.group(1).split())
            words = span.split()
            if not _is_command(span):
                continue
            if not words[-1].endswith(".py") and (len(words) < 3 or (len(words) == 3 and words[2][0] == "-")
                                                  or (len(words) == 3 and words[1] == "-m")):
                continue   # 'dcpsim compare', 'dcpsim calibrate --runs', 'python -m dcpsim.x' name things
            out.append(DocCommand(f"{path.relative_to(ROOT)}:{n}", span))
    return out


def doc_commands() -> list[DocCommand]:
    seen: dict[str, DocCommand] = {}
    for path in DOCS:
        for cmd in _fenced(path) + _inline(path):
            seen.setdefault(cmd.line, cmd)   # one run per distinct command line
    return list(seen.values())


# ---------------------------------------------------------------------------------------------------------
# What the examples read that a checkout does not hold: small files of the kind each example names.

_GPU_FILE = '# h100-4nic.toml: H100 nodes with four 400 Gb/s NICs instead of eight (docs/models.md)\n' \
            'base = "h100"\nname = "h100-4nic"\nnics_per_node = 4\n'


def _runlog() -> str:
    job = {"kind": "job", "format": "dcpsim-runlog/1", "dataset": "docs/run-7", "covers": "train_step",
           "job": {"model": "llama3-8b", "layers": 8, "gpu": "h200", "tp": 8, "pp": 1, "dp": 2, "cp": 1}}
    docs = [[[12786, 28848, 785], [65536]], [[32768, 16384], [8192, 8192, 8192]], [[4096] * 8, [49152]]]
    its = [{"kind": "iteration", "step": s, "measured_s": 0.9 + 0.05 * s,
            "microbatches": [{"groups": [{"ranks": [r], "docs": d, "engine": "ring"} for r, d in enumerate(g)]}]}
           for s, g in enumerate(docs)]
    return "\n".join(json.dumps(r) for r in [job, *its]) + "\n"


def _trace() -> str:
    lengths = [(i * 7919) % 30000 + 512 for i in range(400)]
    return "length\n" + "".join(f"{n}\n" for n in lengths)


FILES: dict[str, object] = {
    "lengths.csv": _trace,
    "my_cluster.toml": lambda: _GPU_FILE,
    "h100-4nic.toml": lambda: _GPU_FILE,
    "path/to/config.json": ROOT / "tests/data/models/Qwen2.5-72B/config.json",
    "my_profile.csv": ROOT / "cost_models/data/profile_h100.csv",
    "prof.csv": ROOT / "cost_models/data/profile_h100.csv",
    "h200.csv": ROOT / "cost_models/data/profile_h100.csv",
    "my_steps.jsonl": _runlog,
    "my.toml": lambda: 'description = "a small scenario"\npp = 2\npool = 8\ncontext_len = 32768\n'
                       'trace = "32k"\nglobal_batch_tokens = 524288\niterations = 1\n',
    "tiny.toml": lambda: 'description = "docs/experiments.md: the 16-GPU straggler example"\n'
                         'model = "llama3-8b"\ngpu = "h200"\npp = 2\npool = 8\ncontext_len = 32768\n'
                         'trace = "32k"\nglobal_batch_tokens = 524288\niterations = 1\n',
    "grid.toml": ROOT / "experiments/sweeps/example.toml",
}
# Files whose content differs by example (the document says what it holds in the command's comment).
FILES_FOR = {
    "dcpsim compare --scenario my.toml": {"my.toml": lambda: 'max_tokens_per_rank = "abc"\n'},
    "dcpsim cost --calibration my_cluster.json --model llama3-8b --seq-len 131072 --cp 8 --cp-engine hybrid "
    "--ulysses 4": {"my_cluster.json": ROOT / "cost_models/data/calibration_h100.json"},
}

# Runs that take minutes as written: what runs instead, and why.
FIGS = ("all eight figures take 1-2 min (three seeds per comparison; --quick alone ~40 s); one on the small "
        "grid checks the command line (tests/experiments/test_figures.py checks the figures)")
SUBSTITUTE = {
    "dcpsim figures -o figures": ("dcpsim figures --quick --only a -o figures", FIGS),
    "dcpsim figures -o figs/": ("dcpsim figures --quick --only a -o figs/", FIGS),
    "time dcpsim figures -o figs": ("time dcpsim figures --quick --only a -o figs", FIGS),
    "dcpsim figures --quick -o figs": ("dcpsim figures --quick --only a -o figs", FIGS),
    "dcpsim figures --scenario my.toml -o figs": ("dcpsim figures --scenario my.toml --quick --only a -o figs",
                                                  FIGS),
    "dcpsim figures --policies mcore-dcp,mcore-dcp:cp_engine=hybrid,hydra -o figs": (
        "dcpsim figures --policies mcore-dcp,mcore-dcp:cp_engine=hybrid,hydra --quick --only a,b -o figs",
        FIGS),
    "dcpsim compare --global-batch-seqs 200000": ("dcpsim compare --global-batch-seqs 20000",
                                                  "the long-run example runs about 9 min as written"),
    "dcpsim figures --only h": ("dcpsim figures --only h --quick", "figure h's full grid"),
    "python experiments/bench/scheduler.py": ("python experiments/bench/scheduler.py --quick",
                                              "the default grid runs to n = 32768, W = 4096: minutes"),
    ".venv/bin/python experiments/bench/scheduler.py": (".venv/bin/python experiments/bench/scheduler.py --quick",
                                                        "the default grid runs to n = 32768, W = 4096: minutes"),
    "python experiments/bench/sim.py": ("python experiments/bench/sim.py --scenarios h100-512-256k --repeats 1",
                                        "three repeats up to 11,264 GPUs"),
    "python experiments/bench/startup.py": ("python experiments/bench/startup.py --runs 3",
                                            "15 runs of three commands: ~15 s"),
    "python experiments/bench/replay.py": ("python experiments/bench/replay.py --iterations 100",
                                           "1,000 iterations"),
    "python -m dcpsim.experiments.studies.sensitivity --scenario default --scenario h100-512-32k --scenario "
    "h100-512-256k --scenario gb200-nvl72-qwen72b-256k --scenario h100-qwen3-moe-ep8-128k --scenario "
    "prod-2048-256k": ("python -m dcpsim.experiments.studies.sensitivity --scenario default",
                       "132 cells, 31 s"),
    "python -m dcpsim.experiments.studies.sensitivity": (
        "python -m dcpsim.experiments.studies.sensitivity --scenario default", "every scenario: two minutes"),
}

EXCLUDE = {
    "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/dcpsim compare":
        "the install itself: .ci/run installs and runs dcpsim compare",
    'python3 -m venv .venv && .venv/bin/pip install -q -e ".[test,runtime,ray,fast]" "torch==2.13.0" && '
    ".venv/bin/python -m pytest -q": "the README's test command: .ci/run runs it",
    'pip install "dcpsim[ray]"': "an install",
    "ray start --head --port 6379": "starts a Ray cluster's head node",
    "dcpsim compare --policies static-cp,my-policy": "needs the README's example policy module, a sketch",
    "python -m tests.policies.hydra_pin --write": "rewrites the pin; tests/policies/test_hydra_pin*.py check it",
    "python -m dcpsim.cost_models.data.build_defaults":
        "rewrites the package's shipped calibration; tests/cost_models check it byte for byte",
}

# Commands that need an optional dependency or hardware: they skip without it.
NEEDS = [
    (re.compile(r"\bvalidate\b|run-real|real_runtime|torchrun"), "torch"),
    (re.compile(r"--backend ray|^ray "), "ray"),
    (re.compile(r"--device cuda|--backend nccl|torchrun"), "cuda"),
    (re.compile(r"--address|^ray (start|job)"), "ray-cluster"),  # a running Ray cluster (RAY_ADDRESS)
]


def _has(need: str) -> bool:
    if need == "cuda":
        if importlib.util.find_spec("torch") is None:
            return False
        import torch
        return bool(torch.cuda.is_available())
    if need == "ray-cluster":
        return bool(os.environ.get("RAY_ADDRESS"))
    return importlib.util.find_spec(need) is not None


def _runnable(cmd: DocCommand) -> str:
    """The command line to run, after SUBSTITUTE; '' for a synopsis."""
    line = SUBSTITUTE.get(cmd.line, (cmd.line, ""))[0]
    if line == "dcpsim COMMAND --help":
        return line
    return "" if any(PLACEHOLDER.search(word) for word in line.split()) else line


COMMANDS = doc_commands()


def _setup(tmp: Path, line: str) -> None:
    for rel in COPIED:
        shutil.copytree(ROOT / rel, tmp / rel, ignore=shutil.ignore_patterns("__pycache__", "output"))
    (tmp / ".venv").symlink_to(sys.prefix)   # this interpreter's environment, as '.venv/bin/...' names it
    files = {**FILES, **FILES_FOR.get(line, {})}
    for name, source in files.items():
        dest = tmp / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(source, Path):
            shutil.copyfile(source, dest)
        else:
            dest.write_text(source())  # type: ignore[operator]


def _shell(line: str) -> str:
    if line == "dcpsim COMMAND --help":
        return "set -e; for c in $(dcpsim --help | sed -n 's/^    \\([a-z-]*\\) .*/\\1/p'); do dcpsim $c --help; done"
    return line


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.where for c in COMMANDS])
def test_documented_command_runs(cmd: DocCommand, tmp_path: Path) -> None:
    if cmd.line in EXCLUDE:
        pytest.skip(EXCLUDE[cmd.line])
    line = _runnable(cmd)
    if not line:
        pytest.skip("a synopsis (placeholders), not a command")
    for pattern, need in NEEDS:
        if pattern.search(line) and not _has(need):
            pytest.skip(f"needs {need}")
    _setup(tmp_path, cmd.line)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "MPLBACKEND": "Agg", "PYTHONPATH": ""}
    r = subprocess.run(["bash", "-c", _shell(line)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    if cmd.error:
        assert (r.returncode, r.stderr.strip()) == (2, cmd.error), f"{cmd.where}: {line}\n{r.stderr}"
        return
    assert r.returncode == 0, f"{cmd.where}: {line}\nexit {r.returncode}\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr, r.stderr


def test_the_extraction_finds_the_examples() -> None:
    """The parser sees the README's examples and the error examples with their output lines."""
    lines = {c.line for c in COMMANDS}
    assert "dcpsim compare --json --seed 3" in lines
    assert "dcpsim model mixtral-8x7b" in lines
    errors = {c.line: c.error for c in COMMANDS if c.error}
    assert errors["dcpsim compare --seed -1"].startswith("dcpsim compare: error: argument --seed")
    assert not any(line.startswith("dcpsim calibrate: error") for line in lines)
    for table in (SUBSTITUTE, EXCLUDE, FILES_FOR):
        stale = set(table) - lines
        assert not stale, f"entries for commands no document holds any more: {sorted(stale)}"
