"""The Lab Manager's flag-copy check: its views, its teacher-forced scores, and what the build reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replicalab import VALIDATION_SEEDS
from replicalab.models import LabManagerObservation
from training.config.model import REPO_ROOT
from training.eval.flag_copy import FlagCopy, flag_probabilities, flags, lab_manager_views, uncopied
from training.model.card import BUILD_INFO_FILE, model_card


@pytest.fixture
def built_info() -> dict:
    """The committed default model's build record, without a flag-copy check."""
    info = json.loads((REPO_ROOT / "artifacts" / "default-model" / BUILD_INFO_FILE).read_text())
    info.pop("flag_copy", None)
    return info


def test_views_are_the_lab_managers_with_a_check_of_the_plan() -> None:
    views = lab_manager_views(VALIDATION_SEEDS[:1])
    assert views and all(isinstance(v, LabManagerObservation) and v.plan_check for v in views)
    # both values of every flag occur, so both are scored
    assert all({not v.plan_check[flag] for v in views} == {True, False} for flag in flags())


def test_each_flag_is_scored_at_the_labs_value_in_every_view(policy_tiny_model_dir: Path) -> None:
    views = lab_manager_views(VALIDATION_SEEDS[:1])[:4]
    probs = flag_probabilities(str(policy_tiny_model_dir), views)
    for flag in flags():
        scored = {value: len(probs.get((flag, value), [])) for value in (True, False)}
        assert scored == {value: sum((not v.plan_check[flag]) is value for v in views) for value in (True, False)}
    assert all(0.0 <= p <= 1.0 for ps in probs.values() for p in ps)


def test_the_report_names_each_flag_written_from_a_prior() -> None:
    rows = [FlagCopy(flag="budget_ok", value=True, views=74, mean_probability=0.88, wrong=0),
            FlagCopy(flag="budget_ok", value=False, views=14, mean_probability=0.12, wrong=14),
            FlagCopy(flag="staff_ok", value=True, views=86, mean_probability=1.0, wrong=0)]
    assert uncopied(rows) == ["budget_ok where the lab's is false (wrong in 14 of 14 views, P 0.12)"]
    assert uncopied([rows[0], rows[2]]) == []


def test_the_model_card_shows_the_flag_copy(built_info: dict) -> None:
    rows = [FlagCopy(flag="budget_ok", value=v, views=n, mean_probability=p, wrong=w).model_dump()
            for v, n, p, w in ((True, 74, 1.0, 0), (False, 14, 0.12, 14))]
    card = model_card({**built_info, "flag_copy": rows})
    assert "Lab Manager flag copy" in card and "budget_ok false 0.12 (wrong in 14 of 14)" in card
    assert "flag copy" not in model_card(built_info)
