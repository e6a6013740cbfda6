"""The 1F1B order (``policies.pipeline_order``), the one definition the simulator and HyDra's ordering model
share: hand-written orders, the position function as the order's inverse, and both users wired to it."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.policies.pipeline_order import num_warmup, one_f_one_b_position, rank_position, stage_order


def ops(stage: int, p: int, m: int) -> str:
    phase, mb = stage_order(stage, p, m)
    return " ".join(f"{'FB'[int(ph)]}{int(k)}" for ph, k in zip(phase, mb))


def test_hand_written_orders() -> None:
    # p = 4, m = 6. Stage 0 warms up with p - 1 = 3 forwards; the last stage alternates from the start.
    assert ops(0, 4, 6) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5"
    assert ops(2, 4, 6) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5"
    assert ops(3, 4, 6) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5"
    # Fewer microbatches than warm-up slots: all forwards, then all backwards.
    assert ops(0, 4, 2) == "F0 F1 B0 B1"
    assert ops(0, 1, 3) == "F0 B0 F1 B1 F2 B2"
    assert num_warmup(0, 4, 6) == 3 and num_warmup(0, 4, 2) == 2 and num_warmup(3, 4, 6) == 0


@pytest.mark.parametrize("p", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("m", [0, 1, 3, 8, 13])
def test_position_is_the_inverse_of_the_order(p: int, m: int) -> None:
    for s in range(p):
        phase, mb = stage_order(s, p, m)
        assert one_f_one_b_position(s, p, m, phase, mb).tolist() == list(range(2 * m))
        pos = np.concatenate([one_f_one_b_position(s, p, m, np.zeros(m), np.arange(m)),
                              one_f_one_b_position(s, p, m, np.ones(m), np.arange(m))])
        assert sorted(pos.tolist()) == list(range(2 * m))
        assert np.all(pos[m:] > pos[:m])  # every backward after its own forward
        # In-flight forwards never exceed the warm-up depth + 1 (what bounds 1F1B's activation memory).
        in_flight = np.cumsum(np.where(phase == 0, 1, -1))
        assert in_flight.max(initial=0) <= num_warmup(s, p, m) + 1


def test_simulator_and_hydra_use_this_definition() -> None:
    import dcpsim.policies.hydra.order as hydra_order
    import dcpsim.sim.engine as engine
    import dcpsim.sim.simulate as simulate

    # The simulator reaches one_f_one_b_position through rank_position (V = 1), the interleaved order above.
    assert engine.rank_position is rank_position
    assert simulate.rank_position is rank_position
    assert rank_position(1, 4, 6, 1, np.zeros(6), np.arange(6), np.zeros(6)).tolist() == \
        one_f_one_b_position(1, 4, 6, np.zeros(6), np.arange(6)).tolist()
    assert hydra_order.one_f_one_b_position is one_f_one_b_position
