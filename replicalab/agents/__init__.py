"""Scripted Scientists used as baselines and test drivers."""

from replicalab.agents.scripted import (
    AdaptiveScientist, NaiveScientist, OracleScientist, RandomScientist, ReaderScientist,
)

__all__ = ["AdaptiveScientist", "NaiveScientist", "OracleScientist", "RandomScientist", "ReaderScientist"]
