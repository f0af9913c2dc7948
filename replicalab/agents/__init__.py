"""Scripted Scientists used as baselines and test drivers."""

from replicalab.agents.scripted import (
    SCRIPTED_SCIENTISTS,
    AdaptiveScientist,
    NaiveScientist,
    OracleScientist,
    RandomScientist,
    ReaderScientist,
)

__all__ = ["SCRIPTED_SCIENTISTS", "AdaptiveScientist", "NaiveScientist", "OracleScientist", "RandomScientist",
           "ReaderScientist"]
