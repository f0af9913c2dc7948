"""``EvalConfig``: what ``replicalab eval`` plays (torch-free, so configs validate anywhere)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional, Sequence

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from replicalab import DIFFICULTIES, TEMPLATES
from replicalab.scenarios import cells
from replicalab.seats import parse_seat
from replicalab.seeds import SPLITS, split_seeds
from training.config.kinds import BackendKind, Engine
from training.config.loading import STRICT, ConfigError, load_config, one_line
from training.config.model import SamplingConfig, VLLMConfig
from training.config.tracking import WandbConfig

#: The largest split (no count or offset of any split can exceed it).
MAX_SPLIT_SEEDS = max(len(s) for s in SPLITS.values())


def _seat_list(role: str, specs: list[str], noun: str) -> list[str]:
    """``specs`` if it names at least one valid seat of ``role``, each once (compared by canonical spelling)."""
    if not specs:
        raise ValueError(f"give at least one {noun}")
    canonical = [parse_seat(role, spec).spec for spec in specs]
    if len(set(canonical)) != len(canonical):
        raise ValueError(f"each {noun} may be named once")
    return specs


class EvalConfig(BaseModel):
    """Agents are played as the Scientist against each fixed Lab Manager seat on the same seeds of one split.

    ``agents``: Scientist seat specs (``replicalab.seats``): ``scripted:NAME`` (naive, a skill combination,
    oracle, random) or ``model:DIR`` (a checkpoint, a Hugging Face id, ``model:default``).  Each
    (template, difficulty) cell plays seeds ``split[seed_offset : seed_offset + episodes]``.  ``split``
    defaults to ``test`` (``TEST_SEEDS``, the only place test seeds are played); ``validation`` is what
    selection uses, ``train`` the training seeds.  The report states its split and seed range.
    """

    model_config = STRICT
    agents: list[str] = Field(
        default_factory=lambda: ["scripted:naive", "scripted:reader", "scripted:oracle"], description=(
            "Scientist seat specs to evaluate, each once: scripted:NAME (naive, a skill combination such as "
            "reader or reader+defender+asker, oracle, random) or model:DIR (a checkpoint, a Hugging Face "
            "id, model:default)."))
    lab_managers: list[str] = Field(default_factory=lambda: ["scripted"], description=(
        "The Lab Manager seats every agent plays against, each once: scripted (scripted:thrifty), "
        "scripted:cooperative, scripted:thrifty or model:DIR. The first is the one of the per-cell report; "
        "with several, report.json, report.md and cross_play.png add the cross-play matrix of every pairing. "
        "Each role with two seats or more gets a league table (league.png)."))
    baseline: Optional[str] = Field(default=None, description=(
        "A seat among agents or lab_managers, spelled as there (a warm start, say): the report adds, in each role "
        "it plays, every other non-scripted seat's paired gain over it against each opponent both played "
        "(gains in report.json and report.md)."))
    split: Literal["validation", "test", "train"] = Field(default="test", description=(
        "Seed split played: test (TEST_SEEDS, never trained on or selected with; the final report), "
        "validation (VALIDATION_SEEDS, what selection uses) or train (TRAIN_SEEDS)."))
    episodes: int = Field(default=30, ge=2, le=MAX_SPLIT_SEEDS, description=(
        "Seeds per template x difficulty cell (the same seeds in every cell and for every agent); "
        "seed_offset + episodes may not exceed the split's size."))
    seed_offset: int = Field(default=0, ge=0, lt=MAX_SPLIT_SEEDS, description=(
        "Seeds skipped at the start of the split (non-negative; seed_offset + episodes within the split)."))
    templates: list[str] = Field(default_factory=lambda: list(TEMPLATES), description="Scenario templates played.")
    difficulties: list[str] = Field(default_factory=lambda: list(DIFFICULTIES), description="Difficulties played.")
    backend: BackendKind = Field(default="ray", description=(
        "Where model agents play: inprocess or a pool of Ray workers (scripted agents always play in-process)."))
    num_workers: int = Field(default=2, ge=1, description="Ray workers for model agents (backend=ray).")
    engine: Engine = Field(default="hf", description=(
        "What generates model agents' turns: hf (transformers generate) or vllm (vLLM in each Ray worker, in the "
        "vLLM environment of launch/setup_vllm.sh; needs backend=ray)."))
    vllm: VLLMConfig = Field(default_factory=VLLMConfig, description="The vLLM engine (engine=vllm).")
    chat_template: Optional[str] = Field(default=None, description=(
        "Chat template for model agents whose tokenizer has none (a base model): a Jinja file path or a "
        "built-in name (chatml). Used in memory; a tokenizer's own template always wins."))
    sampling: SamplingConfig = Field(default_factory=lambda: SamplingConfig(do_sample=False, max_new_tokens=128),
                                     description=(
        "How model agents decode, spelled as in training (rollout.sampling): greedy by default "
        "(do_sample: false); do_sample: true with a temperature evaluates the stochastic policy training samples "
        "from, seeded by sampling_seed."))
    sampling_seed: int = Field(default=0, description="Seed of model agents' sampling (used with do_sample).")
    max_rounds: int = Field(default=6, ge=1, description="Negotiation rounds per episode before it times out.")
    bootstrap_samples: int = Field(default=2000, ge=100, description=(
        "Bootstrap resamples behind each 95% confidence interval (stratified by cell)."))
    out: str = Field(default="runs/eval", description=(
        "Output directory: report.json, report.md, PNG plots, metrics.jsonl, episodes.jsonl, and pairings/ (each "
        "pairing as it finishes: an evaluation into the same out plays only the pairings it lacks)."))
    run_name: str = Field(default="eval", description="W&B run name of the evaluation.")
    wandb: WandbConfig = Field(default_factory=WandbConfig, description="Weights & Biases logging.")

    @field_validator("agents")
    @classmethod
    def _agents(cls, agents: list[str]) -> list[str]:
        return _seat_list("scientist", agents, "agent")

    @field_validator("lab_managers")
    @classmethod
    def _lab_managers(cls, labs: list[str]) -> list[str]:
        return _seat_list("lab_manager", labs, "Lab Manager")

    @model_validator(mode="after")
    def _check(self) -> "EvalConfig":
        for t in self.templates:
            if t not in TEMPLATES:
                raise ValueError(f"unknown template {t!r}; valid templates: {', '.join(TEMPLATES)}")
        for d in self.difficulties:
            if d not in DIFFICULTIES:
                raise ValueError(f"unknown difficulty {d!r}; valid difficulties: {', '.join(DIFFICULTIES)}")
        split_seeds(self.split, self.episodes, self.seed_offset)  # one-line error naming the valid range
        if self.baseline is not None and self.baseline not in (*self.agents, *self.lab_managers):
            raise ValueError(f"baseline {self.baseline!r} is not among the agents or lab_managers; name one of those "
                             "seats as spelled there, or set baseline=null")
        if self.engine == "vllm" and self.backend != "ray":
            raise ValueError("engine=vllm runs in Ray workers: set backend=ray")
        return self

    @property
    def seeds(self) -> list[int]:
        return list(split_seeds(self.split, self.episodes, self.seed_offset))

    @property
    def seed_range(self) -> str:
        """The seeds played, as ``first..last`` (what reports state next to the split)."""
        seeds = self.seeds
        return f"{seeds[0]}..{seeds[-1]}"

    @property
    def cells(self) -> list[tuple[str, str]]:
        return cells(self.templates, self.difficulties)


def load_eval_config(path: Optional[str | Path], overrides: Sequence[str] = ()) -> EvalConfig:
    """The config of a YAML file plus overrides; an invalid one raises a one-line ``ConfigError``."""
    try:
        return load_config(EvalConfig, path, overrides)
    except ValidationError as exc:
        raise ConfigError(one_line(exc)) from None
