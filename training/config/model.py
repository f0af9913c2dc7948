"""Torch-free configs for policy sampling and the embedded default model.

These validate anywhere (no torch, transformers or trl import), so YAML configs that override them
can be checked on any machine.  ``training/policy.py`` and ``training/default_model.py`` consume them.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

_STRICT = ConfigDict(extra="forbid", frozen=True)

#: Special tokens of the embedded tokenizer.  ``<|endoftext|>`` pads; ``<|im_end|>`` ends a turn.
PAD_TOKEN = "<|endoftext|>"
IM_START_TOKEN = "<|im_start|>"
IM_END_TOKEN = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, IM_START_TOKEN, IM_END_TOKEN)

#: Default directory name (under ``<repo>/artifacts``) of the embedded model.
DEFAULT_MODEL_DIRNAME = "default-model"
#: Environment variable that overrides where the default model lives.
DEFAULT_MODEL_ENV = "REPLICALAB_DEFAULT_MODEL"


class SamplingConfig(BaseModel):
    """How a ``PolicyModel`` samples completions.

    ``do_sample=False`` is greedy decoding (temperature, top_p and top_k are then ignored).
    ``top_k=0`` disables top-k filtering; ``top_p=1.0`` disables nucleus filtering.
    ``seed`` seeds torch's generator once per ``generate`` call (None leaves it alone).
    """

    model_config = _STRICT

    temperature: float = Field(default=1.0, gt=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    max_new_tokens: int = Field(default=256, ge=1)
    do_sample: bool = True
    seed: Optional[int] = None


class ArchitectureConfig(BaseModel):
    """Qwen2-style decoder of the embedded default model (tied embeddings)."""

    model_config = _STRICT

    hidden_size: int = Field(default=128, ge=16)
    intermediate_size: int = Field(default=384, ge=16)
    num_hidden_layers: int = Field(default=4, ge=1)
    num_attention_heads: int = Field(default=2, ge=1)
    num_key_value_heads: int = Field(default=2, ge=1)
    #: Width of one attention head (None: hidden_size / num_attention_heads).
    head_dim: Optional[int] = Field(default=None, ge=8)
    max_position_embeddings: int = Field(default=4096, ge=64)
    #: Huge by default: rotary positions barely rotate, so attention matches tokens by content (the copy
    #: head of ``training.model.copy_circuit`` needs that); the causal mask still orders the sequence.
    rope_theta: float = Field(default=1e9, gt=0.0)
    tie_word_embeddings: bool = True
    #: Initialise a copy (induction) circuit into layers 0-1 (``training.model.copy_circuit``).
    copy_circuit: bool = True
    #: Size of the circuit's copied embedding relative to an embedding: the larger, the more a copy
    #: outweighs what the later layers add, so a rarely seen token is still copied as itself.
    copy_scale: float = Field(default=10.0, gt=0.0)

    @model_validator(mode="after")
    def _check_heads(self) -> "ArchitectureConfig":
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be divisible by num_attention_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be divisible by num_key_value_heads")
        return self


class SFTHyperParams(BaseModel):
    """Supervised warm-start on transcripts of the scripted agents (TRL ``SFTTrainer``).

    Two phases over the same prompt/completion conversations: ``lm_steps`` optimizer steps with the
    loss on every token of the chats of ``lm_phase_roles`` (the model is built from scratch, so it
    first learns the transcripts' language: formats, item names, copying the published protocol) and
    on the assistant turns of the other chats, then ``completion_steps`` with TRL's completion-only
    loss on every chat (the actions).  Each phase has its own warmup and schedule.

    The Lab Manager's chats stay out of the all-token loss by default: their user turns are the
    Scientist's protocols, and learning to continue those teaches the Lab Manager seat to copy them
    into its own replies.
    """

    model_config = _STRICT

    learning_rate: float = Field(default=2e-3, gt=0.0)
    #: Learning rate of the completion-only phase (None: ``learning_rate``).
    completion_learning_rate: Optional[float] = Field(default=1e-3, gt=0.0)
    lm_steps: int = Field(default=800, ge=0)
    lm_phase_roles: tuple[Literal["scientist", "lab_manager"], ...] = ("scientist",)
    completion_steps: int = Field(default=450, ge=1)
    per_device_train_batch_size: int = Field(default=4, ge=1)
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    warmup_ratio: float = Field(default=0.05, ge=0.0, le=1.0)
    weight_decay: float = Field(default=0.0, ge=0.0)
    lr_scheduler_type: Literal["linear", "cosine", "constant", "constant_with_warmup"] = "cosine"
    seed: int = 0
    logging_steps: int = Field(default=100, ge=1)


class DefaultModelConfig(BaseModel):
    """Everything that determines the embedded default model.

    Transcripts come from scripted episodes on ``n_train_seeds`` seeds taken from the start of
    ``TRAIN_SEEDS`` (never ``HELDOUT_SEEDS``), each played on every template x difficulty.  The
    Scientist seat is ``AdaptiveScientist`` except for a ``naive_fraction`` of episodes played by
    ``NaiveScientist`` and a ``reader_fraction`` played by ``ReaderScientist``; the Lab Manager seat is
    ``ScriptedLabManager``.  Every episode's Lab Manager turns become examples; its Scientist turns do
    when that Scientist is in ``scientist_transcripts``.

    The adaptive and reader Scientists open identically and differ in one decision: when the Lab
    Manager moves a blocked technique to the lab's preferred one, the adaptive Scientist accepts and the
    reader proposes the method the paper cross-checked with.  The warm start can therefore take either
    move, and GRPO has a choice whose reward it can compare within a group.
    """

    model_config = _STRICT

    vocab_size: int = Field(default=2048, ge=300)
    tokenizer_min_frequency: int = Field(default=2, ge=1)
    #: Add whole JSON tokens seen at least this often (0: BPE only); see ``training.model.tokenizer``.
    json_token_min_frequency: int = Field(default=2, ge=0)
    #: Add the integers ``0 .. number_tokens - 1`` as single tokens (0: digits stay BPE pieces).
    number_tokens: int = Field(default=256, ge=0)
    architecture: ArchitectureConfig = Field(default_factory=ArchitectureConfig)
    sft: SFTHyperParams = Field(default_factory=SFTHyperParams)
    n_train_seeds: int = Field(default=300, ge=1)
    naive_fraction: float = Field(default=0.1, ge=0.0, le=1.0)
    #: With 0.6 (and naive 0.1) about half of the recorded answers to a technique move are the reader's
    #: revision (433 of 804 on 300 seeds); a 500 + 400-step build put probability 0.18 on revising there
    #: (0.10 with 0.35 and 4 repeats).
    reader_fraction: float = Field(default=0.6, ge=0.0, le=1.0)
    #: The scripted Scientists whose turns the Scientist seat learns from (every episode trains the Lab Manager).
    scientist_transcripts: tuple[Literal["adaptive", "naive", "reader"], ...] = Field(
        default=("adaptive", "reader"), min_length=1)
    max_rounds: int = Field(default=6, ge=1)
    scientist_first_turn_repeats: int = Field(default=1, ge=0)
    #: Extra copies of each Scientist turn that answers the Lab Manager moving the plan to another technique.
    #: With them the warm start sometimes revises after a suggestion where it would otherwise always accept,
    #: so GRPO's groups hold both answers to compare (0: it accepts, and every group agrees).
    scientist_decision_turn_repeats: int = Field(default=8, ge=0)
    max_new_tokens: int = Field(default=192, ge=16)
    torch_threads: int = Field(default=2, ge=1)
