"""The lab: feasibility (the single source of lab truth) and the scripted Lab Manager."""

from replicalab.lab.feasibility import (
    DIMENSIONS,
    FeasibilityReport,
    check_feasibility,
    protocol_cost,
)
from replicalab.lab.manager import ScriptedLabManager

__all__ = ["DIMENSIONS", "FeasibilityReport", "ScriptedLabManager", "check_feasibility", "protocol_cost"]
