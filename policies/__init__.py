"""Scheduling policies: the Plan types, their validator, the Policy protocol and registry, and the policies.

Data flows traces → policies → sim; this package imports only ``cost_models``.
"""

from dcpsim.policies.errors import PlanError, PolicyError
from dcpsim.policies.plan import CPGroup, Engine, Microbatch, Plan, make_plan
from dcpsim.policies.registry import Policy, available_policies, create_policy, register_policy
from dcpsim.policies.validate import validate_plan

__all__ = ["CPGroup", "Engine", "Microbatch", "Plan", "PlanError", "Policy", "PolicyError",
           "available_policies", "create_policy", "make_plan", "register_policy", "validate_plan"]
