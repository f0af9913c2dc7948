"""Scripted Scientists used as baselines and test drivers."""

from replicalab.agents.scripted import (
    SCIENTIST_FACTORIES,
    AdaptiveScientist,
    NaiveScientist,
    OracleScientist,
    RandomScientist,
    ReaderScientist,
)

__all__ = ["SCIENTIST_FACTORIES", "AdaptiveScientist", "NaiveScientist", "OracleScientist", "RandomScientist",
           "ReaderScientist"]
