"""HyDra's whole plans are pinned (tests/policies/hydra_pin.py says which cases and how to regenerate)."""

import json

import pytest

from tests.policies import hydra_pin

PINNED = json.loads(hydra_pin.PIN.read_text())


def test_the_pin_covers_every_case():
    assert sorted(PINNED) == sorted(hydra_pin.all_cases())
    assert len(PINNED) >= 30


@pytest.mark.parametrize("case", hydra_pin.all_cases())
def test_plans_match_the_pin(case):
    assert hydra_pin.fingerprint(case) == PINNED[case], (
        f"HyDra's plans changed for {case}; if intended, regenerate with "
        "`python -m tests.policies.hydra_pin --write` and show the efficiency check in the commit")
