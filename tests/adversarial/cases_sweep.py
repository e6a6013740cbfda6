"""Sweep files (``dcpsim sweep FILE.toml``), the input side: the grid's values are checked as scenario fields
(type, finiteness, int64, range), seeds as integers ≥ 0 within int64, the base through the scenario reader,
and a grid past the runs limit is refused up front with the limit named."""

from __future__ import annotations

from tests.adversarial.corpus import DIRECTORY, FIFO, Case


def sweep(name: str, content: object, expect: str, *, extra: dict | None = None, sub: bool = False) -> Case:
    return Case(f"sweep-{name}", ("sweep", name, "-o", "out"), expect, files={name: content, **(extra or {})},
                subprocess=sub)


MANY = ("seeds = [" + ", ".join(map(str, range(1000))) + "]\n[grid]\npool = ["
        + ", ".join(map(str, range(16, 216))) + "]\n")
CASES = [
    sweep("seed_int64.toml", "seeds = [100000000000000000000]\n[grid]\npool = [16]\n",
          "seeds[0] = 100000000000000000000 is invalid: expected an integer ≥ 0 (outside the int64 range"),
    sweep("seed_bool.toml", "seeds = [true]\n[grid]\npool = [16]\n", "seeds[0] = True is invalid"),
    sweep("seed_negative.toml", "seeds = [-1]\n[grid]\npool = [16]\n", "seeds[0] = -1 is invalid"),
    sweep("seed_float.toml", "seeds = [1.5]\n[grid]\npool = [16]\n", "seeds[0] = 1.5 is invalid"),
    sweep("grid_int64.toml", "[grid]\npool = [100000000000000000000]\n", "outside the int64 range"),
    sweep("grid_nan.toml", "[grid]\nmemory_reserve_gb = [nan]\n", "memory_reserve_gb = nan is invalid"),
    sweep("grid_typo.toml", "[grid]\npol = [1]\n", "unknown key 'pol'"),
    sweep("grid_scalar.toml", "[grid]\npool = 16\n", "[grid] pool must be a non-empty list of values"),
    sweep("grid_list.toml", "grid = [1, 2]\n", "a [grid] table of field = [values] is required"),
    sweep("set_inf.toml", "[set]\ntp_comm_overlap = inf\n[grid]\npool = [16]\n", "tp_comm_overlap = inf"),
    sweep("too_many.toml", MANY, "200,000 points x 3 policies = 600,000 tasks is above the limit of 100,000"),
    sweep("base_missing.toml", 'base = "nope.toml"\n[grid]\npool = [16]\n', "nope.toml: file not found"),
    sweep("base_fifo.toml", 'base = "b.toml"\n[grid]\npool = [16]\n', "b.toml: is a FIFO (named pipe)",
          extra={"b.toml": FIFO}, sub=True),
    sweep("base_dir.toml", 'base = "b.toml"\n[grid]\npool = [16]\n', "b.toml: is a directory",
          extra={"b.toml": DIRECTORY}),
    sweep("latin1.toml", b"[grid]\npool = [16]\n# \xff\n", "byte b'\\xff' is not UTF-8"),
    sweep("deep.toml", "a = " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
    sweep("dir.toml", DIRECTORY, "is a directory, not a regular file; expected a sweep file"),
    sweep("pipe.toml", FIFO, "is a FIFO (named pipe), not a regular file; expected a sweep file", sub=True),
]
