"""Policy options typed from their annotations (policies.registry): parsing, ranges, choices, registration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import pytest

from dcpsim.policies import PolicyError, create_policy
from dcpsim.policies.registry import (
    _REGISTRY,
    _TYPES,
    OptionType,
    check_options,
    option,
    option_types,
    parse_options,
    policy_option_types,
    register_policy,
)


@dataclass(frozen=True)
class Toy:
    """Every kind of option the registry parses (not registered: the registry stays as shipped)."""

    rounds: int = option(3, ge=1, le=64)
    rate: float = option(0.5, gt=0.0)
    fast: bool = False
    label: str | None = None
    mode: Literal["a", "b"] = "a"
    engine: str = option("ring", choices=("ring", "ulysses"))
    limit: int | None = option(None, ge=1)


def test_types_come_from_the_annotations_and_metadata():
    t = option_types(Toy)
    assert t["rounds"] == OptionType(int, ge=1, le=64)
    assert t["rate"] == OptionType(float, gt=0.0)
    assert t["fast"] == OptionType(bool)
    assert t["label"] == OptionType(str, optional=True)
    assert t["mode"] == OptionType(str, choices=("a", "b"))
    assert t["engine"] == OptionType(str, choices=("ring", "ulysses"))
    assert t["limit"] == OptionType(int, optional=True, ge=1)
    assert t["limit"].describe() == "an integer ≥ 1, or None"
    assert t["rounds"].describe() == "an integer ≥ 1 and ≤ 64"
    assert t["rate"].describe() == "a number > 0"


@pytest.mark.parametrize("key,text,value", [
    ("rounds", "64", 64), ("rate", "1e-3", 1e-3), ("rate", "2", 2.0), ("fast", "true", True), ("fast", "0", False),
    ("fast", "No", False), ("label", "none", None), ("label", "None-ish", "None-ish"), ("mode", "b", "b"),
    ("limit", "null", None), ("limit", "7", 7),
])
def test_text_is_parsed_by_the_type(key, text, value):
    got = option_types(Toy)[key].parse(text, from_text=True)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("key,text", [
    ("rounds", "2.5"), ("rounds", "0"), ("rounds", "65"), ("rounds", "none"), ("rate", "0"), ("rate", "inf"),
    ("rate", "nan"), ("fast", "maybe"), ("mode", "c"), ("engine", "torus"), ("limit", "0"),
])
def test_bad_text_says_what_is_valid(key, text):
    t = option_types(Toy)[key]
    with pytest.raises(ValueError, match=f"expected {t.describe()}"):
        t.parse(text, from_text=True)


@pytest.mark.parametrize("key,value", [
    ("rounds", True), ("rounds", 2.0), ("rounds", "3"), ("rate", True), ("fast", 1), ("fast", "true"),
    ("label", 5), ("mode", None),
])
def test_typed_values_must_already_have_the_type(key, value):
    """From Python or TOML (not text): '3' is not an int, 1 is not a bool, True is not a number."""
    with pytest.raises(ValueError):
        option_types(Toy)[key].parse(value)


def test_an_int_is_a_valid_float_and_becomes_one():
    got = option_types(Toy)["rate"].parse(2)
    assert got == 2.0 and isinstance(got, float)


def test_registration_sets_the_name_and_refuses_unparseable_annotations():
    try:
        @register_policy("toy-test-only")
        @dataclass(frozen=True)
        class Registered:
            level: int = option(1, ge=1)
            name: ClassVar[str]

            def __post_init__(self) -> None:
                check_options(self)

        assert Registered.name == "toy-test-only"
        assert policy_option_types("toy-test-only") == {"level": OptionType(int, ge=1)}
        assert parse_options("toy-test-only", {"level": "4"}, from_text=True) == {"level": 4}
        with pytest.raises(PolicyError, match="policy 'toy-test-only': option level = 0 is invalid"):
            Registered(level=0)  # built directly: the same check
        with pytest.raises(PolicyError, match="has no option 'lvl'; valid: level"):
            create_policy("toy-test-only", lvl=2)
    finally:
        _REGISTRY.pop("toy-test-only", None)
        _TYPES.pop("toy-test-only", None)
    with pytest.raises(PolicyError, match="unsupported option annotation"):
        @register_policy("toy-bad-test-only")
        @dataclass(frozen=True)
        class Bad:
            sizes: tuple[int, ...] = (1, 2)
    assert "toy-bad-test-only" not in _REGISTRY
    with pytest.raises(PolicyError, match="option limit may be None, so its default must be None"):
        @register_policy("toy-bad2-test-only")
        @dataclass(frozen=True)
        class Bad2:
            limit: int | None = 4
    assert "toy-bad2-test-only" not in _REGISTRY and "toy-bad2-test-only" not in _TYPES


def test_registered_policies_get_their_name_only_from_the_registration():
    """No registered class assigns ``name`` in its body (an annotation alone is fine): the decorator's string is
    the one place. Checked on the source of every module in the policies package."""
    import ast
    import pathlib

    from dcpsim import policies
    from dcpsim.policies.registry import available_policies

    offenders, registered = [], 0
    for path in sorted(pathlib.Path(policies.__path__[0]).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            decorated = any(isinstance(d, ast.Call) and getattr(d.func, "id", "") == "register_policy"
                            for d in node.decorator_list)
            registered += decorated
            for stmt in node.body:
                target = stmt.targets[0] if isinstance(stmt, ast.Assign) else getattr(stmt, "target", None)
                has_value = isinstance(stmt, ast.Assign) or getattr(stmt, "value", None) is not None
                if decorated and isinstance(target, ast.Name) and target.id == "name" and has_value:
                    offenders.append(f"{path.name}:{stmt.lineno} {node.name}")
    assert offenders == []
    assert registered >= 4
    for name in available_policies():
        assert type(create_policy(name)).name == name


def test_create_policy_checks_before_planning():
    with pytest.raises(PolicyError, match="option tolerance = -1 is invalid: expected a number ≥ 0 and ≤ 10"):
        create_policy("hydra", tolerance=-1)
    assert create_policy("hydra", tolerance=1).tolerance == 1.0


def test_dcpsim_policies_lists_each_option_with_what_it_accepts(capsys):
    from dcpsim.experiments.cli import main

    assert main(["policies"]) == 0
    out = capsys.readouterr().out.splitlines()
    hydra = out[out.index("hydra") + 1:]
    assert any(ln.split() == ["tolerance", "default", "0.05", "a", "number", "≥", "0", "and", "≤", "10"]
               for ln in hydra[:6])
    assert any(ln.split()[:3] == ["num_microbatches", "default", "None"] and ln.endswith("an integer ≥ 1, or None")
               for ln in hydra[:6])
