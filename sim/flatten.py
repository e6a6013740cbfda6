"""The simulator's view of a Plan as flat numpy arrays: :mod:`dcpsim.policies.flatten`, the one home of
flattening a plan against its batch (policies and the real runtime use it too), re-exported here so that
``sim.engine`` and ``sim.simulate`` keep importing it from ``sim``."""

from dcpsim.policies.flatten import FlatPlan, flatten

__all__ = ["FlatPlan", "flatten"]
