"""The lab: feasibility (the single source of lab truth) and the scripted Lab Managers."""

from replicalab.lab.feasibility import (
    DIMENSIONS,
    FeasibilityReport,
    check_feasibility,
    protocol_cost,
)
from replicalab.lab.manager import (
    DEFAULT_LAB_POLICY,
    LAB_MANAGER_FACTORIES,
    LAB_POLICIES,
    ScriptedLabManager,
)

__all__ = ["DEFAULT_LAB_POLICY", "DIMENSIONS", "LAB_MANAGER_FACTORIES", "LAB_POLICIES", "FeasibilityReport",
           "ScriptedLabManager", "check_feasibility", "protocol_cost"]
