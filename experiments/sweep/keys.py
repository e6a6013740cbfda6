"""Sweep cache keys: what a stored task result depends on, hashed.

A task's result is a function of (1) the point's scenario fields and the policy label, (2) the code that
computes it and (3) the contents of the files the point names. The key hashes all three, so that a stored
result is reused only when none of them changed:

- **scenario and policy**: the parsed fields (not the scenario file's text: a comment or a reordering in a
  scenario file recomputes nothing, a changed value recomputes exactly the points it reaches);
- **code**: :func:`code_version` — ``dcpsim.__version__``, and when the package runs from a git checkout the
  commit of that checkout plus a hash of its uncommitted changes (tracked edits and untracked files) under the
  package's source folders; and the versions of numpy, scipy and simpy. Edits to tests, docs or other files
  of the checkout do not count; an edit to any module or shipped data file (the GPUs' default calibrations
  live in ``cost_models/data``) recomputes every task, since which tasks a code change affects cannot be
  known;
- **files**: :func:`point_files` — the sha256 of the trace file, the calibration file and the GPU file when
  the point names them (presets and the shipped calibrations are code, covered above). A file that cannot
  be read hashes as ``missing``; its task then records the read error, and reruns once the file exists.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

SCHEMA = 2  # bump when a stored record's meaning changes: old files then no longer match any key
SUBPACKAGES = ("sim", "policies", "cost_models", "traces", "real_runtime", "experiments")
DEPENDENCIES = ("numpy", "scipy", "simpy")  # the libraries a result's numbers go through


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes (hex), or ``missing`` when it cannot be read."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return "missing"
    return h.hexdigest()


def named_files(scenario: dict[str, Any]) -> dict[str, str]:
    """The files a scenario's fields name, by field: ``trace`` (a trace file, not a preset nor a distribution
    spec; ``trace[i]`` for the file components of a ``mix:`` spec), ``calibration`` (a calibration JSON), ``gpu`` (a
    GPU ``.toml`` file, not a preset), ``model`` (a
    Hugging Face ``config.json`` or a model ``.toml``, not a preset)."""
    from dcpsim.traces.spec import is_distribution_spec, mix_files

    named = {}
    trace = scenario.get("trace")
    if isinstance(trace, str) and not is_distribution_spec(trace) and Path(trace).suffix:
        named["trace"] = trace
    elif isinstance(trace, str):  # a mixture's file components: trace[0], trace[1], … in the spec's order
        for i, path in enumerate(mix_files(trace)):
            named[f"trace[{i}]"] = path
    if isinstance(scenario.get("calibration"), str) and scenario["calibration"]:
        named["calibration"] = scenario["calibration"]
    gpu = scenario.get("gpu")
    if isinstance(gpu, str) and gpu.endswith(".toml"):
        named["gpu"] = gpu
    model = scenario.get("model")  # a config.json / model TOML (cost_models.model_files), or a model folder
    if isinstance(model, str) and Path(model).suffix.lower() in (".json", ".toml"):
        named["model"] = model
    elif isinstance(model, str) and (Path(model) / "config.json").is_file():
        named["model"] = str(Path(model) / "config.json")
    return named


def point_files(scenario: dict[str, Any], cache: dict[str, str] | None = None) -> dict[str, str]:
    """The files a point's scenario names (:func:`named_files`), by field, as sha256 digests.

    Paths resolve as the scenario resolves them (relative to the working directory). ``cache`` (path →
    digest) lets one sweep hash each file once.
    """
    out = {}
    for role, path in named_files(scenario).items():
        resolved = str(Path(path).resolve())
        if cache is None:
            out[role] = file_digest(resolved)
        else:
            if resolved not in cache:
                cache[resolved] = file_digest(resolved)
            out[role] = cache[resolved]
    return out


def _git(root: Path, *args: str) -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.decode(errors="replace") if r.returncode == 0 else None


def source_folders() -> list[Path]:
    """The folders the installed ``dcpsim`` package's modules load from (found without importing them)."""
    import importlib.util

    import dcpsim

    dirs = [Path(dcpsim.__file__).resolve().parent]
    for name in SUBPACKAGES:
        spec = importlib.util.find_spec(f"dcpsim.{name}")
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(Path(p).resolve() for p in spec.submodule_search_locations)
    return dirs


def checkout_state(folders: list[Path]) -> tuple[str, str] | None:
    """(commit, digest of uncommitted changes, '' when clean) of the git checkout holding ``folders``.

    None when they are not tracked files of a checkout (an installed wheel, even one inside a checkout's
    ignored ``.venv``, or no git on the machine).
    """
    top = _git(folders[0], "rev-parse", "--show-toplevel")
    if not top:
        return None
    root = Path(top.strip())
    rel = []
    for d in folders:
        try:
            rel.append(str(d.relative_to(root)))
        except ValueError:
            return None
    if not (_git(root, "ls-files", "--", rel[0]) or "").strip():  # not tracked: not this checkout's code
        return None
    head = _git(root, "rev-parse", "HEAD")
    if head is None:
        return None
    diff = _git(root, "diff", "HEAD", "--binary", "--", *rel) or ""
    untracked = (_git(root, "ls-files", "--others", "--exclude-standard", "-z", "--", *rel) or "").split("\0")
    h = hashlib.sha256(diff.encode())
    for name in sorted(u for u in untracked if u):
        h.update(name.encode() + b"\0" + file_digest(root / name).encode())
    dirty = h.hexdigest()[:12] if diff or any(untracked) else ""
    return head.strip(), dirty


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:  # pragma: no cover - a dependency is always installed
        return "absent"


@functools.lru_cache(maxsize=1)
def dependency_versions() -> str:
    """``numpy X, scipy Y, simpy Z``: the libraries whose arithmetic and event order the results go through
    (numpy's reductions and random streams, scipy's fits of calibration tables, simpy's event queue)."""
    return ", ".join(f"{d} {_dist_version(d)}" for d in DEPENDENCIES)


def runtime_versions() -> str:
    """``dcpsim V, numpy X, scipy Y, simpy Z``: what a worker reports, compared with the driver's."""
    from dcpsim import __version__

    return f"dcpsim {__version__}, {dependency_versions()}"


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """The code computing results: ``0.1.0`` (installed) or ``0.1.0+g<commit>[.dirty<hash>]`` (a checkout),
    then the dependencies' versions: ``0.1.0+g1a2b3c4d5e6f (numpy 2.2.1, scipy 1.15.0, simpy 4.1.1)``.

    Computed once per process (the modules a process has imported do not change under it).
    """
    from dcpsim import __version__

    state = checkout_state(source_folders())
    if state is None:
        ours = __version__
    else:
        commit, dirty = state
        ours = f"{__version__}+g{commit[:12]}" + (f".dirty{dirty}" if dirty else "")
    return f"{ours} ({dependency_versions()})"


def task_key(scenario: dict[str, Any], policy: str, files: dict[str, str], code: str) -> str:
    """A stable 16-hex-digit key of a task: scenario content (not its name), policy, file digests, code."""
    content = {k: v for k, v in scenario.items() if k not in ("name", "description", "policies")}
    blob = json.dumps({"schema": SCHEMA, "scenario": content, "policy": policy, "files": files, "code": code},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
