"""register_policy checks a policy's options whenever it is built (policies.registry), and the opening every
policy's plan() shares (policies.opening)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import pytest

from dcpsim.cost_models import ConstantCostModel
from dcpsim.policies import PolicyError, create_policy
from dcpsim.policies.opening import fixed_degree, plan_inputs
from dcpsim.policies.registry import (
    _REGISTRY,
    _TYPES,
    available_policies,
    check_options,
    option,
    register_policy,
)
from dcpsim.traces.batching import GlobalBatch
from tests.conftest import small_job


@pytest.fixture
def scratch_names() -> Iterator[list[str]]:
    """Names registered by a test, removed after it (the registry stays as shipped for the other tests)."""
    names: list[str] = []
    yield names
    for n in names:
        _REGISTRY.pop(n, None)
        _TYPES.pop(n, None)


def test_a_policy_without_post_init_checks_its_options_when_built(scratch_names) -> None:
    scratch_names.append("t-plain")

    @register_policy("t-plain")
    @dataclass(frozen=True)
    class Plain:
        rounds: int = option(3, ge=1)
        name: ClassVar[str]

    assert Plain().rounds == 3 and Plain(rounds=5).rounds == 5
    with pytest.raises(PolicyError, match="'t-plain': option rounds = 0 is invalid: expected an integer ≥ 1"):
        Plain(rounds=0)
    with pytest.raises(PolicyError, match="option rounds = 'x' is invalid"):
        Plain("x")  # type: ignore[arg-type]  # positional arguments pass through the wrapped __init__
    with pytest.raises(PolicyError, match="option rounds = -2 is invalid"):
        dataclasses.replace(Plain(), rounds=-2)
    with pytest.raises(PolicyError, match="option rounds = 0 is invalid"):
        create_policy("t-plain", rounds=0)


def test_the_option_check_runs_before_a_policys_own_post_init(scratch_names) -> None:
    scratch_names.append("t-extra")
    seen: list[int] = []

    @register_policy("t-extra")
    @dataclass(frozen=True)
    class Extra:
        low: int = option(1, ge=0)
        high: int = option(2, ge=0)
        name: ClassVar[str]

        def __post_init__(self) -> None:
            """Checks that span two options."""
            seen.append(self.low)
            if self.low > self.high:
                raise PolicyError(f"{self.name}: low = {self.low} is over high = {self.high}")

    assert Extra.__post_init__.__doc__ == "Checks that span two options."
    Extra(low=1, high=1)
    assert seen == [1]
    with pytest.raises(PolicyError, match="low = 3 is over high = 2"):
        Extra(low=3)
    with pytest.raises(PolicyError, match="option low = -1 is invalid"):  # the typed check, first
        Extra(low=-1)
    assert seen == [1, 3]  # the own __post_init__ never saw the invalid value


def test_a_policy_that_still_calls_check_options_keeps_working(scratch_names) -> None:
    scratch_names.append("t-old")
    calls: list[str] = []

    @register_policy("t-old")
    @dataclass(frozen=True)
    class Old:
        rate: float = option(0.5, gt=0.0)
        name: ClassVar[str]

        def __post_init__(self) -> None:
            calls.append("own")
            check_options(self)

    assert Old(rate=2.0).rate == 2.0 and calls == ["own"]
    with pytest.raises(PolicyError, match="option rate = 0.0 is invalid"):
        Old(rate=0.0)
    assert calls == ["own"]  # stopped by the registration's check before its own


def test_a_registered_subclass_is_checked_once_with_its_own_name(scratch_names) -> None:
    scratch_names += ["t-base", "t-child"]

    @dataclass(frozen=True)
    class Base:
        size: int = option(1, ge=1)
        name: ClassVar[str]

        def __post_init__(self) -> None:
            pass

    Base(size=0)  # not registered: no check
    B = register_policy("t-base")(dataclass(frozen=True)(type("B", (Base,), {})))
    C = register_policy("t-child")(dataclass(frozen=True)(type("C", (B,), {})))
    assert C.__post_init__ is B.__post_init__  # inherited, already checking: not wrapped again
    with pytest.raises(PolicyError, match="policy 't-child': option size = 0"):
        C(size=0)
    with pytest.raises(PolicyError, match="policy 't-base': option size = 0"):
        B(size=0)


def test_every_shipped_policy_checks_its_options_when_built_directly() -> None:
    shipped = [n for n in available_policies() if _REGISTRY[n].__module__.startswith("dcpsim.policies.")]
    assert {"static-cp", "mcore-dcp", "mcore-dcp-legacy", "hydra", "dp-balanced", "wlb-llm", "flexsp",
            "distca"} <= set(shipped)
    for name in shipped:
        cls = _REGISTRY[name]
        field = next(f for f in dataclasses.fields(cls) if f.name in _TYPES[name])
        with pytest.raises(PolicyError, match=f"option {field.name} = "):
            cls(**{field.name: object()})


def test_plan_inputs_and_fixed_degree() -> None:
    job = small_job(pool=8, context_len=1000)
    cm = ConstantCostModel(job, budget_tokens=300)
    batch = GlobalBatch.of([500, 200, 50], ids=[9, 4, 7])
    inp = plan_inputs("p", batch, cm)
    assert inp.ids.tolist() == [9, 4, 7] and inp.lengths.tolist() == [500, 200, 50] and inp.budget == 300
    assert inp.ids.dtype == inp.lengths.dtype == "int64"
    assert plan_inputs("p", batch, cm, budget=128).budget == 128  # a policy's own budget option wins
    with pytest.raises(PolicyError, match="^p: sequence id 9 has 500 tokens, too long here$"):
        inp.check_fit(499, "too long here")
    inp.check_fit(500, "fits")
    assert fixed_degree("p", "cp_degree", None, job, 300) == 4  # smallest divisor of 8 with 1000 / c ≤ 300
    assert fixed_degree("p", "cp_degree", 2, job, 300) == 2
    with pytest.raises(PolicyError, match="^p: cp_size = 3 must divide the pool size 8$"):
        fixed_degree("p", "cp_size", 3, job, 300)
