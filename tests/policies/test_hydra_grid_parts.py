"""Parts of HyDra's work grid (policies/hydra_grid.py) that stand in for numpy routines give numpy's numbers bit
for bit: the grid's geometric spacing is np.geomspace's for the integer spans a batch can have."""

import numpy as np

from dcpsim.policies.hydra.work import geomspace


def test_geomspace_equals_numpy_bit_for_bit():
    rng = np.random.default_rng(0)
    cases = [(1, 1, 1), (1, 2, 2), (7, 7, 1), (512, 262144, 128), (1000, 1001, 3), (1, 10**7, 160)]
    for _ in range(3000):
        lo = int(rng.integers(1, 300_000))
        hi = lo + int(rng.integers(1, 3_000_000))
        cases.append((lo, hi, int(rng.integers(2, 200))))
    for lo, hi, n in cases:
        want = np.geomspace(lo, hi, n)
        got = geomspace(lo, hi, n)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (lo, hi, n)
