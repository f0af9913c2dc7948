"""TrainConfig's seats (the rules of a seat spec) and its training seeds (the train split only, roles and cells
cycled, the seed offset bounded)."""

from __future__ import annotations

import pytest

from replicalab import TEMPLATES, TEST_SEEDS, TRAIN_SEEDS, VALIDATION_SEEDS
from replicalab.seats import parse_seat
from training.config.train import TrainConfig, load_train_config
from training.trainer.build import data_stream


# ----- seats -------------------------------------------------------------------------------------
@pytest.mark.parametrize("seats,ok", [
    ({"scientist": "policy", "lab_manager": "scripted"}, True),
    ({"scientist": "scripted:naive", "lab_manager": "policy"}, True),
    ({"scientist": "scripted:random", "lab_manager": "policy"}, True),
    ({"scientist": "policy", "lab_manager": "model:runs/x/checkpoint-10"}, True),
    ({"scientist": "scripted", "lab_manager": "scripted"}, False),  # nobody trains
    ({"scientist": "model:a", "lab_manager": "model:b"}, False),
    ({"scientist": "policy", "lab_manager": "scripted:naive"}, False),  # scripted:* is scientist-only
    ({"scientist": "scripted:oracle", "lab_manager": "policy"}, False),
    ({"scientist": "policy", "lab_manager": "human"}, False),
    ({"scientist": "policy", "lab_manager": "model:"}, False),
])
def test_seat_rules(seats: dict, ok: bool) -> None:
    if ok:
        cfg = TrainConfig.model_validate({"seats": seats})
        assert cfg.seats.trained_roles == tuple(r for r in ("scientist", "lab_manager") if seats[r] == "policy")
    else:
        with pytest.raises(ValueError, match="seat"):
            TrainConfig.model_validate({"seats": seats})


def test_parse_seat() -> None:
    assert parse_seat("scientist", "scripted") == ("scripted", "naive")
    assert parse_seat("lab_manager", "scripted") == ("scripted", "thrifty")
    assert parse_seat("scientist", "scripted:naive") == ("scripted", "naive")
    assert parse_seat("lab_manager", "model:/ckpt") == ("model", "/ckpt")
    assert parse_seat("scientist", "policy", training=True) == ("policy", "")
    assert parse_seat("scientist", "model:default").spec == "model:default"
    for bad, training in (("policy", False), ("scripted:oracle", True), ("naive", False), ("model:", False)):
        with pytest.raises(ValueError, match="valid scientist seats"):
            parse_seat("scientist", bad, training=training)


# ----- training seeds ----------------------------------------------------------------------------
def test_train_rows_never_yield_test_seeds() -> None:
    cfg = load_train_config(None, ["seats.lab_manager=policy", "seed=7"])
    rows = data_stream(cfg)(20_000)
    seeds = [r["seed"] for r in rows]
    assert all(s in TRAIN_SEEDS and s not in TEST_SEEDS and s not in VALIDATION_SEEDS for s in seeds)
    assert len(set(seeds)) == len(seeds)
    assert rows == data_stream(cfg)(20_000)  # deterministic
    assert seeds != [r["seed"] for r in data_stream(cfg.model_copy(update={"seed": 8}))(20_000)]


def test_train_rows_cycle_roles_and_cells() -> None:
    cfg = load_train_config(None, ["seats.lab_manager=policy", "data.difficulties=[easy, hard]"])
    rows = data_stream(cfg)(24)
    assert [r["role"] for r in rows[:4]] == ["scientist", "lab_manager", "scientist", "lab_manager"]
    cells = [(r["template"], r["difficulty"]) for r in rows[::2]]
    expected = [(t, d) for t in TEMPLATES for d in ("easy", "hard")]
    assert cells == expected * 2
    assert {r["role"] for r in data_stream(load_train_config(None))(10)} == {"scientist"}


def test_role_weights_give_a_seat_more_groups_and_each_role_every_cell() -> None:
    over = ["seats.lab_manager=policy", "data.difficulties=[easy, hard]"]
    even = data_stream(load_train_config(None, over))(60)
    weighted = data_stream(load_train_config(None, [*over, "data.role_weights={scientist: 3}"]))(60)
    assert [r["role"] for r in weighted[:8]] == ["scientist", "scientist", "lab_manager", "scientist"] * 2
    assert [r["seed"] for r in weighted] == [r["seed"] for r in even]  # the seed stream does not move
    cells = [(t, d) for t in TEMPLATES for d in ("easy", "hard")]
    for role, count in (("scientist", 45), ("lab_manager", 15)):
        mine = [(r["template"], r["difficulty"]) for r in weighted if r["role"] == role]
        assert len(mine) == count and mine == (cells * 8)[:count]
    stream = data_stream(load_train_config(None, [*over, "data.role_weights={lab_manager: 0.5}"]))
    assert stream(30) == stream(90)[:30]  # a prefix of any longer run
    assert sum(r["role"] == "lab_manager" for r in stream(90)) == 30
    alone = load_train_config(None, ["data.role_weights={scientist: 3}"])  # one trained seat: nothing to weigh
    assert data_stream(alone)(12) == data_stream(load_train_config(None))(12)
    for bad, match in (("{judge: 1}", "role_weights names unknown keys"), ("{scientist: 0}", "must be positive")):
        with pytest.raises(ValueError, match=match):
            load_train_config(None, [*over, f"data.role_weights={bad}"])


def test_seed_offset_must_leave_room_in_train_seeds() -> None:
    n = len(TRAIN_SEEDS)
    with pytest.raises(ValueError, match="seed_offset"):
        load_train_config(None, [f"data.seed_offset={n}"])
    with pytest.raises(ValueError, match="training seeds"):  # room for fewer rows than the run consumes
        load_train_config(None, [f"data.seed_offset={n - 10}", "grpo.max_steps=3", "grpo.groups_per_step=4"])
    cfg = load_train_config(None, [f"data.seed_offset={n - 10}", "grpo.max_steps=2", "grpo.groups_per_step=4"])
    rows = data_stream(cfg)(10)
    assert sorted(r["seed"] for r in rows) == list(TRAIN_SEEDS[n - 10:])
    with pytest.raises(ValueError, match="distinct training seeds"):
        data_stream(cfg)(11)
