"""Torch-free configs for policy sampling and the embedded default model.

These validate anywhere (no torch, transformers or trl import), so YAML configs that override them
can be checked on any machine.  The policy engines (``training/rollout/policy.py``,
``training/rollout/vllm_policy.py``) and the default-model build (``training/model/default.py``) consume them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, Field, model_validator

from replicalab.seats import AgentRole
from training.config.loading import STRICT

#: Special tokens of the embedded tokenizer.  ``<|endoftext|>`` pads; ``<|im_end|>`` ends a turn.
PAD_TOKEN = "<|endoftext|>"
IM_START_TOKEN = "<|im_start|>"
IM_END_TOKEN = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, IM_START_TOKEN, IM_END_TOKEN)

#: The repository's root directory (its ``artifacts/`` and the vLLM environment ``.venv-vllm`` live there).
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Default directory name (under ``<repo>/artifacts``) of the embedded model.
DEFAULT_MODEL_DIRNAME = "default-model"
#: Environment variable that overrides where the default model lives.
DEFAULT_MODEL_ENV = "REPLICALAB_DEFAULT_MODEL"


class SamplingConfig(BaseModel):
    """How a ``PolicyModel`` samples completions.

    ``do_sample=False`` is greedy decoding (temperature, top_p and top_k are then ignored).
    ``top_k=0`` disables top-k filtering; ``top_p=1.0`` disables nucleus filtering.
    ``seed`` seeds torch's generator once per ``generate`` call (None leaves it alone).
    ``constrained`` decodes each reply under its role's action grammar (``training.rollout.grammar``), bound to
    the names its view gave it for the roles in ``bound_roles`` (``training.rollout.binding``);
    ``kv_cache`` is the hf engine's cache (``static``: compiled decoding on a GPU).
    """

    model_config = STRICT

    temperature: float = Field(default=1.0, gt=0.0, description=(
        "Softmax temperature of sampling (ignored when do_sample is false)."))
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description=(
        "Nucleus sampling: keep the smallest token set with this much probability; 1.0 disables it."))
    top_k: int = Field(default=0, ge=0, description="Sample among the k most likely tokens only; 0 disables it.")
    max_new_tokens: int = Field(default=256, ge=1, description=(
        "New tokens per model turn (capped so the prompt still fits the model's context)."))
    do_sample: bool = Field(default=True, description="Sample (true) or decode greedily (false).")
    seed: Optional[int] = Field(default=None, description=(
        "Seeds torch's generator once per generate call; None leaves the generator alone."))
    kv_cache: Literal["dynamic", "static"] = Field(default="dynamic", description=(
        "The hf engine's KV cache: dynamic (grows with the batch) or static (preallocated for the batch's longest "
        "sequence; on a GPU transformers then compiles the decoding step, CUDA graphs through torch.compile). "
        "The same tokens and log-probs either way; vLLM keeps its own paged cache."))
    constrained: bool = Field(default=False, description=(
        "Decode each reply under its role's action grammar (one JSON action, canonical field order): tokens "
        "outside it get probability zero and the trainer scores under the same mask (hf engine only)."))
    bound_roles: list[AgentRole] = Field(default_factory=lambda: ["lab_manager"], description=(
        "With constrained: the roles whose grammar is bound to what their own view gave them, at each turn (a Lab "
        "Manager's to its lab's check of the plan as its flags and to what its lab can offer; a Scientist's to the "
        "names and numbers its brief and the dialogue so far have stated); the others decode under their role's "
        "plain grammar."))


class VLLMConfig(BaseModel):
    """The vLLM engine of each Ray rollout worker (``rollout.engine=vllm``)."""

    model_config = STRICT

    python: Optional[str] = Field(default=None, description=(
        "Python interpreter of the vLLM environment the rollout workers run in (bash launch/setup_vllm.sh "
        "makes .venv-vllm); None: the repository's .venv-vllm/bin/python when it exists, else this interpreter."))
    gpu_memory_utilization: float = Field(default=0.5, gt=0.0, le=1.0, description=(
        "Fraction of its GPU's memory a worker's engine may take for weights and KV cache; workers sharing a "
        "GPU must sum to less than 1."))
    cpu_kv_cache_gib: float = Field(default=1.0, gt=0.0, description=(
        "GiB of KV cache of an engine on CPU (vLLM's VLLM_CPU_KVCACHE_SPACE)."))
    enforce_eager: bool = Field(default=False, description=(
        "Run without CUDA graphs (slower decoding, faster start); always eager on CPU."))
    max_num_seqs: int = Field(default=256, ge=1, description="Sequences an engine decodes at once.")
    sleep_between_steps: bool = Field(default=False, description=(
        "One GPU for learner and engine: after each collect the policy's engine sleeps (vLLM's sleep level 1: "
        "weights offloaded to CPU, KV cache freed) while the learner trains, and wakes for the next weight load or "
        "generation. CUDA only (ignored on CPU); needs rollout.max_staleness=0."))


class ArchitectureConfig(BaseModel):
    """Qwen2-style decoder of the embedded default model (tied embeddings)."""

    model_config = STRICT

    hidden_size: int = Field(default=128, ge=16, description="Width of the residual stream (embedding size).")
    intermediate_size: int = Field(default=384, ge=16, description="Width of each MLP's hidden layer.")
    num_hidden_layers: int = Field(default=4, ge=1, description="Decoder layers.")
    num_attention_heads: int = Field(default=2, ge=1, description="Query heads per attention layer.")
    num_key_value_heads: int = Field(default=2, ge=1, description=(
        "Key/value heads (grouped-query attention); must divide num_attention_heads."))
    head_dim: Optional[int] = Field(default=None, ge=8, description=(
        "Width of one attention head; None: hidden_size / num_attention_heads."))
    max_position_embeddings: int = Field(default=4096, ge=64, description=(
        "Context length in tokens (prompt plus completion); must hold the longest SFT example plus 64."))
    rope_theta: float = Field(default=1e9, gt=0.0, description=(
        "Rotary embedding base. Huge by default: positions barely rotate, so attention matches tokens by "
        "content (the copy circuit needs that); the causal mask still orders the sequence."))
    tie_word_embeddings: bool = Field(default=True, description="Share the input embedding and output head weights.")
    copy_circuit: bool = Field(default=True, description=(
        "Initialise a copy (induction) circuit into layers 0-1 (training.model.copy_circuit), so the model "
        "can copy item names from the prompt before SFT."))
    copy_scale: float = Field(default=10.0, gt=0.0, description=(
        "Size of the circuit's copied embedding relative to an embedding: the larger, the more a copy "
        "outweighs what later layers add, so a rarely seen token is still copied as itself."))
    copy_recency: float = Field(default=24.0, ge=0.0, description=(
        "How much (nats) the circuit's induction head prefers, of two places to copy from, the one 1024 tokens "
        "nearer: the brief states the cross-check protocol and then the published one, with the same keys, and "
        "the opening copies the nearer, published one (at 0, 40% of greedy openings took the cross-check's "
        "technique or items; at 24, 15%); 0: no preference."))
    copy_self_match: float = Field(default=18.0, ge=0.0, description=(
        "How much (nats) the circuit's previous-token head disfavours a previous token that is the current one: "
        "above its 12-nat offset margin, a repeated token takes the code of the token before the repeat, so its "
        "own position (distance 0, the nearest match of all, which would copy it once more: a loop that "
        "copy_recency made likely) never matches it; 0: no penalty."))

    @model_validator(mode="after")
    def _check_heads(self) -> "ArchitectureConfig":
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be divisible by num_attention_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be divisible by num_key_value_heads")
        return self


class SFTHyperParams(BaseModel):
    """Supervised warm-start on transcripts of the scripted agents (TRL ``SFTTrainer``).

    Three phases over the same prompt/completion conversations: ``lm_steps`` optimizer steps with the
    loss on every token of the chats of ``lm_phase_roles`` (the model is built from scratch, so it
    first learns the transcripts' language: formats, item names, copying the published protocol) and
    on the assistant turns of the other chats, then ``completion_steps`` with TRL's completion-only
    loss on every chat (the actions), then ``lab_manager_steps`` with the same loss on the Lab Manager's chats,
    ``lab_manager_flag_drill`` copies of them with the loss on each reply's flags alone, and as many Scientist
    rows as those two together.  Each phase has its own warmup and schedule.

    The Lab Manager's chats stay out of the all-token loss by default: their user turns are the
    Scientist's protocols, and learning to continue those teaches the Lab Manager seat to copy them
    into its own replies.
    """

    model_config = STRICT

    learning_rate: float = Field(default=2e-3, gt=0.0, description="Peak AdamW learning rate of the all-token phase.")
    completion_learning_rate: Optional[float] = Field(default=1e-3, gt=0.0, description=(
        "Peak learning rate of the completion-only phase; None: learning_rate."))
    lm_steps: int = Field(default=800, ge=0, description=(
        "Optimizer steps of phase 1 (loss on every token of the lm_phase_roles chats); 0 skips the phase."))
    lm_phase_roles: tuple[AgentRole, ...] = Field(default=("scientist",), description=(
        "Roles whose chats get the all-token loss in phase 1 (the others: assistant turns only)."))
    completion_steps: int = Field(default=450, ge=1, description=(
        "Optimizer steps of phase 2 (loss on the assistant turns only: the actions)."))
    lab_manager_steps: int = Field(default=400, ge=0, description=(
        "Optimizer steps of phase 3: every Lab Manager chat and its flag drill beside as many Scientist rows, loss "
        "on the assistant turns, at completion_learning_rate (the Lab Manager seat writes long structured replies "
        "that must parse when sampled at the training temperature); 0 skips the phase."))
    lab_manager_flag_drill: int = Field(default=2, ge=0, description=(
        "Extra copies of every Lab Manager chat in phase 3 whose loss is on each reply's checks alone (the flags "
        "and feasible, up to its action_type), beside as many more Scientist rows: the seat copies the lab's "
        "check into its flags, which a sampled turn must state truly; 0: none."))
    per_device_train_batch_size: int = Field(default=4, ge=1, description="Chat examples per micro-batch.")
    gradient_accumulation_steps: int = Field(default=1, ge=1, description="Micro-batches per optimizer step.")
    warmup_ratio: float = Field(default=0.05, ge=0.0, le=1.0, description=(
        "Share of each phase's steps spent warming the learning rate up from 0."))
    weight_decay: float = Field(default=0.0, ge=0.0, description="AdamW decoupled weight decay.")
    lr_scheduler_type: Literal["linear", "cosine", "constant", "constant_with_warmup"] = Field(
        default="cosine", description="Learning-rate schedule of each phase after warm-up.")
    seed: int = Field(default=0, description=(
        "Seeds weight initialisation, which scripted Scientist plays each transcript episode, the transcript "
        "shuffle and SFT's data order."))
    logging_steps: int = Field(default=100, ge=1, description="Optimizer steps between SFT loss log lines.")


class DefaultModelConfig(BaseModel):
    """Everything that determines the embedded default model.

    Transcripts come from scripted episodes on ``n_train_seeds`` seeds taken from the start of
    ``TRAIN_SEEDS`` (never ``VALIDATION_SEEDS`` or ``TEST_SEEDS``), each played on every template x difficulty.  The
    Scientist seat decides per chance: at each turn where a skill's trigger shows it uses the skill with
    probability ``skill_rate`` (``replicalab.agents.skilled``); the Lab Manager seat (``ScriptedLabManager``)
    makes the thrifty move with probability ``lab_thrifty_rate`` at each turn, else the cooperative one.
    Both seats' turns become examples.

    Every coin is independent, so the warm start's probability of a skill at its chance does not depend on what
    the Scientist did earlier in the episode, and a group branched at a chance holds both answers.
    """

    model_config = STRICT

    vocab_size: int = Field(default=2048, ge=300, description=(
        "Size of the byte-level BPE vocabulary trained on the transcripts (added tokens come on top)."))
    tokenizer_min_frequency: int = Field(default=2, ge=1, description="Minimum count of a BPE merge.")
    json_token_min_frequency: int = Field(default=2, ge=0, description=(
        "Add whole JSON tokens (keys, item identifiers) seen at least this often as single tokens; "
        "0: BPE only (training.model.tokenizer)."))
    number_tokens: int = Field(default=256, ge=0, description=(
        "Add the integers 0 .. number_tokens - 1 as single tokens; 0: digits stay BPE pieces."))
    architecture: ArchitectureConfig = Field(default_factory=ArchitectureConfig, description="The model's shape.")
    sft: SFTHyperParams = Field(default_factory=SFTHyperParams, description="The supervised warm start.")
    n_train_seeds: int = Field(default=300, ge=1, description=(
        "Training seeds (from the start of TRAIN_SEEDS) whose scripted episodes, on every template x "
        "difficulty, make the transcripts."))
    skill_rate: float = Field(default=0.5, ge=0.0, le=1.0, description=(
        "The transcript Scientist uses a skill at each of its chances with this probability, a coin per chance "
        "(replicalab.agents.skilled), so the warm start's P(skill | chance) does not depend on the history."))
    lab_thrifty_rate: float = Field(default=0.5, ge=0.0, le=1.0, description=(
        "The transcript Lab Manager makes the thrifty move at each turn with this probability, else the "
        "cooperative one (per turn, not per episode)."))
    max_rounds: int = Field(default=6, ge=1, description="Rounds per transcript episode.")
    scientist_first_turn_repeats: int = Field(default=1, ge=0, description=(
        "Extra copies of each Scientist opening turn (the protocol proposal) among the SFT examples."))
    scientist_decision_turn_repeats: int = Field(default=2, ge=0, description=(
        "Extra copies of each Scientist turn at a skill's chance (both the turns that use the skill and those "
        "that do not), so the warm start learns the decisions as well as the copying around them."))
    max_new_tokens: int = Field(default=192, ge=16, description=(
        "max_new_tokens written into the checkpoint's generation config (used by greedy evaluation)."))
    torch_threads: int = Field(default=2, ge=1, description="Torch CPU threads during the build.")
