"""HyDra: load-driven dynamic context parallelism (docs/hydra.md). :class:`HyDra` is the policy
(``create_policy("hydra")``); :func:`rank_loads` prices any plan with HyDra's work model."""

from dcpsim.policies.hydra.policy import ANY_MAX_POOL, HyDra
from dcpsim.policies.hydra.pricing import rank_loads

__all__ = ["ANY_MAX_POOL", "HyDra", "rank_loads"]
