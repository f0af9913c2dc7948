"""argparse types shared by the command line and the benchmarks: an integer with a lower bound, or a usage
error naming the value."""

from __future__ import annotations

import argparse
from typing import Callable


def int_at_least(low: int, what: str = "value") -> Callable[[str], int]:
    """An argparse type: an integer of at least ``low``; anything else is an ``ArgumentTypeError`` that says
    what ``what`` must be and what it got."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, got {text!r}") from None
        if value < low:
            bound = "non-negative" if low == 0 else f"at least {low}"
            raise argparse.ArgumentTypeError(f"{what} must be {bound}, got {value}")
        return value

    return parse


#: An integer of at least 1 (episodes, rounds, repeats, workers).
positive_int = int_at_least(1)
#: A scenario seed: a non-negative integer.
seed_int = int_at_least(0, "seed")


def positive_float(text: str) -> float:
    """An argparse type: a number above 0 (a temperature); anything else is an ``ArgumentTypeError``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"value must be a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"value must be above 0, got {value}")
    return value
