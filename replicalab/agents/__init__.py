"""Scripted Scientists used as baselines and test drivers."""

from replicalab.agents.scripted import (
    SCIENTIST_FACTORIES,
    NaiveScientist,
    OracleScientist,
    RandomScientist,
)
from replicalab.agents.skilled import SKILL_SCIENTISTS, SKILLS, SkilledScientist, skills_name

__all__ = ["SCIENTIST_FACTORIES", "SKILLS", "SKILL_SCIENTISTS", "NaiveScientist",
           "OracleScientist", "RandomScientist", "SkilledScientist", "skills_name"]
