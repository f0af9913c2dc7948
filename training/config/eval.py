"""``EvalConfig``: what ``replicalab eval`` plays (torch-free, so configs validate anywhere)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from replicalab import DIFFICULTIES, HELDOUT_SEEDS, TEMPLATES, TRAIN_SEEDS
from replicalab.scenarios import cells
from replicalab.seats import parse_seat
from training.config.loading import load_config
from training.config.train import WandbConfig

_STRICT = ConfigDict(extra="forbid", frozen=True)
SPLITS = {"heldout": HELDOUT_SEEDS, "train": TRAIN_SEEDS}


class EvalConfig(BaseModel):
    """Agents are played as the Scientist against a fixed Lab Manager on the same seeds of one split.

    ``agents``: Scientist seat specs (``replicalab.seats``): ``scripted:NAME`` (naive, adaptive, reader,
    oracle, random) or ``model:DIR`` (a checkpoint, a Hugging Face id, ``model:default``).  Each (template, difficulty) cell plays seeds ``split[seed_offset : seed_offset + episodes]``.
    """

    model_config = _STRICT
    agents: list[str] = Field(default_factory=lambda: ["scripted:naive", "scripted:adaptive", "scripted:oracle"])
    lab_manager: str = "scripted"
    split: Literal["heldout", "train"] = "heldout"
    episodes: int = Field(default=30, ge=2)
    seed_offset: int = Field(default=0, ge=0)
    templates: list[str] = Field(default_factory=lambda: list(TEMPLATES))
    difficulties: list[str] = Field(default_factory=lambda: list(DIFFICULTIES))
    backend: Literal["inprocess", "ray"] = "ray"
    num_workers: int = Field(default=2, ge=1)
    max_new_tokens: int = Field(default=128, ge=8)
    #: Decoding of model agents: None is greedy; a temperature samples (seeded by ``sampling_seed``),
    #: which evaluates the stochastic policy that training samples from.
    temperature: Optional[float] = Field(default=None, gt=0.0)
    sampling_seed: int = 0
    max_rounds: int = Field(default=6, ge=1)
    bootstrap_samples: int = Field(default=2000, ge=100)
    out: str = "runs/eval"
    run_name: str = "eval"
    wandb: WandbConfig = Field(default_factory=WandbConfig)

    @field_validator("agents")
    @classmethod
    def _agents(cls, agents: list[str]) -> list[str]:
        if not agents:
            raise ValueError("give at least one agent")
        for spec in agents:
            parse_seat("scientist", spec)
        if len(set(agents)) != len(agents):
            raise ValueError("each agent may be named once")
        return agents

    @model_validator(mode="after")
    def _check(self) -> "EvalConfig":
        for t in self.templates:
            if t not in TEMPLATES:
                raise ValueError(f"unknown template {t!r}; valid templates: {', '.join(TEMPLATES)}")
        for d in self.difficulties:
            if d not in DIFFICULTIES:
                raise ValueError(f"unknown difficulty {d!r}; valid difficulties: {', '.join(DIFFICULTIES)}")
        if self.seed_offset + self.episodes > len(SPLITS[self.split]):
            raise ValueError(f"split {self.split} has only {len(SPLITS[self.split])} seeds")
        parse_seat("lab_manager", self.lab_manager)
        return self

    @property
    def seeds(self) -> list[int]:
        split = SPLITS[self.split]
        return list(split[self.seed_offset: self.seed_offset + self.episodes])

    @property
    def cells(self) -> list[tuple[str, str]]:
        return cells(self.templates, self.difficulties)


def load_eval_config(path: Optional[str | Path], overrides: Sequence[str] = ()) -> EvalConfig:
    return load_config(EvalConfig, path, overrides)
