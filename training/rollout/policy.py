"""A Hugging Face causal LM as a batched, log-prob-reporting policy.

``PolicyModel`` loads any model id or local checkpoint directory offline-friendly (whatever
``from_pretrained`` resolves; set ``HF_HUB_OFFLINE=1`` to forbid the hub), chat-templates a batch of
conversations, left-pads them and answers them with ONE ``model.generate`` call.  Each answer is a
``Generation`` record carrying the prompt ids, the completion ids and the log-probability of every
completion token -- what GRPO needs later.

Exact sampling (``training.rollout.generation``): only the ``SamplingConfig``'s parameters shape the
distribution; the checkpoint's own sampling extras (repetition penalty, min-p, ...) are neutralised and
listed once in the log.  Log-prob convention: the log-probability of each sampled token under the
distribution it was actually sampled from (``log_softmax`` of the processed scores: temperature, top-k,
top-p), recorded step by step without a full-vocabulary buffer.  With top_k=0 and top_p=1 (the defaults)
this equals TRL's ``log_softmax(logits / T)``.  Greedy decoding uses temperature 1.

Stop tokens: the generation config's eos ids, the tokenizer's eos and the chat template's end-of-turn
token.  A tokenizer without a pad token pads with the first stop token (in memory; files are untouched).
``chat_template`` (a Jinja string) serves a tokenizer without a template of its own, in memory only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from training.config.model import SamplingConfig
from training.rollout.device import default_dtype, resolve_device
from training.rollout.grammar import ActionGrammar, GrammarMask, vocab_width
from training.rollout.generation import (
    StepLogprobs,
    bare_generation_config,
    end_of_turn_id,
    explicit_generation_config,
    neutralised_extras,
    replaced_settings,
    sampling_processors,
)
from training.rollout.policy_weights import check_all_loaded, load_lora_weights, state_tensors, with_lora

logger = logging.getLogger(__name__)

Messages = list[dict[str, str]]
#: Key of an adapter payload's LoRA config (JSON text) in a weights dict: such a payload holds only the
#: LoRA adapter's weights (``get_peft_model_state_dict`` keys); the base weights stay the checkpoint's.
LORA_CONFIG_KEY = "__lora_config__"
#: Fallback context length when a config does not declare ``max_position_embeddings``.
DEFAULT_MAX_POSITIONS = 2048


@dataclass(frozen=True)
class Generation:
    """One sampled completion.

    ``completion_ids`` ends with the stop token when ``finished`` (the stop token is kept so a trainer
    learns to stop) and never contains padding; ``logprobs[i]`` belongs to ``completion_ids[i]``.
    ``text`` is the decoded completion without the stop token or special tokens.
    ``prompt_truncated`` says the prompt was cut from the left to fit the context window.
    """

    text: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finished: bool = True
    prompt_truncated: bool = False


def stop_tokens(generation_config: Any, tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    """Generation-config eos ids, then the tokenizer's eos, then the template's end-of-turn token."""
    found: list[int] = []
    eos = getattr(generation_config, "eos_token_id", None)
    for candidate in [*(eos if isinstance(eos, (list, tuple)) else [eos]), tokenizer.eos_token_id,
                      end_of_turn_id(tokenizer)]:
        if candidate is not None and int(candidate) not in found:
            found.append(int(candidate))
    if not found:
        raise ValueError("the model declares no stop token (no eos and no end-of-turn token)")
    return tuple(found)


def generation_record(tokenizer: PreTrainedTokenizerBase, stop_token_ids: Sequence[int], prompt: list[int],
                      tokens: list[int], logprobs: list[float], cut: bool) -> Generation:
    """The ``Generation`` of sampled ``tokens``: cut after the first stop token (kept in the ids, not the text)."""
    stops = [i for i, tok in enumerate(tokens) if tok in stop_token_ids]
    end = stops[0] + 1 if stops else len(tokens)
    completion = tokens[:end]
    body = completion[:-1] if stops else completion
    return Generation(
        text=tokenizer.decode(body, skip_special_tokens=True),
        prompt_ids=prompt,
        completion_ids=completion,
        logprobs=[float(x) for x in logprobs[:end]],
        finished=bool(stops),
        prompt_truncated=cut,
    )


class PolicyModel:
    """A causal LM + tokenizer that generates batched, role-agnostic chat completions.

    Build it from a path or hub id (``PolicyModel("artifacts/default-model")``) or wrap objects
    already in memory (``PolicyModel(model=m, tokenizer=t)``).  ``weights_version`` counts
    ``load_state`` calls so rollout workers can tag what produced each trajectory.
    """

    def __init__(
        self,
        name_or_path: Optional[str] = None,
        *,
        device: str = "auto",
        model: Optional[PreTrainedModel] = None,
        tokenizer: Optional[PreTrainedTokenizerBase] = None,
        chat_template: Optional[str] = None,
    ) -> None:
        if name_or_path is None and (model is None or tokenizer is None):
            raise ValueError("give name_or_path, or both model and tokenizer")
        self.device = resolve_device(device)
        self.name_or_path = name_or_path or getattr(model, "name_or_path", "in-memory")
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=default_dtype(self.device))
        self.model = model.to(self.device).eval()
        self._set_up_generation(tokenizer, self.model.generation_config, self.model.config, chat_template)
        self.model.generation_config = bare_generation_config(
            self.stop_token_ids, self.pad_token_id, getattr(self.checkpoint_generation_config, "bos_token_id", None))

    def _set_up_generation(self, tokenizer: PreTrainedTokenizerBase, checkpoint_generation_config: Any,
                           model_config: Any, chat_template: Optional[str]) -> None:
        """Tokenizer, stop and pad tokens, the checkpoint's sampling extras (logged, never used) and the
        context window: what every generation engine needs from the checkpoint."""
        if chat_template is not None and not tokenizer.chat_template:
            tokenizer.chat_template = chat_template
            logger.info("%s: no chat template of its own; using the configured one", self.name_or_path)
        self.tokenizer = tokenizer
        self._grammar: Optional[ActionGrammar] = None
        self.weights_version = 0
        #: The checkpoint's own generation config, as loaded (read ``max_new_tokens`` from here).
        self.checkpoint_generation_config = checkpoint_generation_config
        self.stop_token_ids: tuple[int, ...] = stop_tokens(checkpoint_generation_config, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_token_id: int = pad if pad is not None else self.stop_token_ids[0]
        if pad is None:
            logger.info("%s: tokenizer has no pad token; padding with stop token %d (in memory only)",
                        self.name_or_path, self.pad_token_id)
        self.neutralised = neutralised_extras(checkpoint_generation_config)
        replaced = replaced_settings(checkpoint_generation_config)
        if replaced:
            logger.info("%s: generation_config sampling settings replaced by the configured sampling: %s",
                        self.name_or_path, replaced)
        if self.neutralised:
            logger.warning("%s: generation_config sampling extras not used (only the configured sampling "
                           "applies): %s", self.name_or_path, self.neutralised)
        self.max_positions: int = int(getattr(model_config, "max_position_embeddings", None) or DEFAULT_MAX_POSITIONS)

    # -- prompts ---------------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        """Number of tokens ``text`` encodes to (no special tokens added)."""
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def max_new_tokens(self, sampling: SamplingConfig) -> int:
        """The completion length actually used: the configured one, capped to leave room for a prompt."""
        return max(1, min(sampling.max_new_tokens, self.max_positions // 2))

    def prompt_budget(self, sampling: SamplingConfig) -> int:
        """Most prompt tokens (chat template included) that still leave room for the completion."""
        return self.max_positions - self.max_new_tokens(sampling)

    def encode_chat(self, messages: Messages) -> list[int]:
        """Chat-template ``messages`` with the generation prompt and return the token ids."""
        ids = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        return list(ids)

    # -- generation ------------------------------------------------------------------------------
    def generate(self, batch: Sequence[Messages], sampling: SamplingConfig,
                 grammars: Optional[Sequence[str]] = None) -> list[Generation]:
        """Answer every conversation of ``batch`` with one batched ``model.generate`` call.

        Prompts longer than the budget keep their last ``prompt_budget`` tokens (logged)."""
        budget = self.prompt_budget(sampling)
        prompts, truncated = [], []
        for messages in batch:
            ids = self.encode_chat(messages)
            truncated.append(len(ids) > budget)
            if truncated[-1]:
                logger.warning("prompt of %d tokens cut to the last %d", len(ids), budget)
                ids = ids[-budget:]
            prompts.append(ids)
        return self.generate_ids(prompts, sampling, truncated=truncated, grammars=grammars)

    @torch.no_grad()
    def generate_ids(
        self, prompts: Sequence[list[int]], sampling: SamplingConfig,
        *, truncated: Optional[Sequence[bool]] = None, row_seeds: Optional[Sequence[int]] = None,
        grammars: Optional[Sequence[str]] = None,
    ) -> list[Generation]:
        """Continue every token-id prompt with one batched, left-padded ``model.generate`` call.

        ``row_seeds``: one seed per prompt; each row then samples from a generator of its own
        (``training.rollout.generation.RowSampler``) and ``sampling.seed`` is not used.  Without them a seeded
        ``sampling`` seeds torch's global generator once for the call.  ``grammars``: each prompt's grammar key
        (``training.rollout.grammar.grammar_key``; a role's name for its plain grammar), needed by
        ``sampling.constrained`` (each reply decoded under its action grammar)."""
        if not prompts:
            return []
        if row_seeds is not None and len(row_seeds) != len(prompts):
            raise ValueError("row_seeds needs one seed per prompt")
        if sampling.constrained and (grammars is None or len(grammars) != len(prompts)):
            raise ValueError("constrained sampling needs one grammar key per prompt")
        truncated = truncated or [False] * len(prompts)
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            attention[row, width - len(ids):] = 1
        config = self.generation_config(sampling)
        if row_seeds is not None and sampling.do_sample:
            config.do_sample = False  # RowSampler has drawn the token: generate takes the only finite one
        elif sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        recorder = StepLogprobs()
        out = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention.to(self.device),
            generation_config=config,
            logits_processor=sampling_processors(
                sampling, recorder, row_seeds if sampling.do_sample else None,
                GrammarMask(self.grammar, grammars, width) if sampling.constrained else None),
        )
        new_tokens = out.sequences[:, width:]
        logprobs = recorder.finish(new_tokens).cpu().tolist()
        tokens = new_tokens.cpu().tolist()
        return [
            self._record(list(p), t, lp, cut) for p, t, lp, cut in zip(prompts, tokens, logprobs, truncated)
        ]

    @property
    def grammar(self) -> ActionGrammar:
        """The action grammars of this model's tokenizer (built on first use: ``sampling.constrained``)."""
        if self._grammar is None:
            self._grammar = ActionGrammar(self.tokenizer, self.stop_token_ids, vocab_width(self.model))
        return self._grammar

    def generation_config(self, sampling: SamplingConfig):
        """The complete explicit ``GenerationConfig`` of one call (nothing inherited from the checkpoint)."""
        return explicit_generation_config(sampling, max_new_tokens=self.max_new_tokens(sampling),
                                          eos=self.stop_token_ids, pad=self.pad_token_id)

    def _record(self, prompt: list[int], tokens: list[int], logprobs: list[float], cut: bool) -> Generation:
        return generation_record(self.tokenizer, self.stop_token_ids, prompt, tokens, logprobs, cut)

    # -- weights ---------------------------------------------------------------------------------
    def state_numpy(self) -> dict[str, np.ndarray]:
        """The weights as float32 numpy arrays (cheap to ship through Ray's object store)."""
        return {k: v.detach().float().cpu().numpy() for k, v in self.model.state_dict().items()}

    def load_state(self, state: Mapping[str, Any], version: Optional[int] = None) -> None:
        """Load new weights from a state dict of tensors or numpy arrays (e.g. from ``state_numpy``).

        Tied parameters may be missing from ``state``; any other missing or unexpected key raises.
        A payload carrying ``LORA_CONFIG_KEY`` is a LoRA adapter (``load_adapter``).
        """
        if LORA_CONFIG_KEY in state:
            self.load_adapter(state, version)
            return
        own = self.model.state_dict()
        tensors = state_tensors(own, state)
        check_all_loaded(own, tensors)
        self.model.load_state_dict(tensors, strict=False)
        self._loaded(version)

    @torch.no_grad()
    def load_stream(self, tensors: Iterable[tuple[str, torch.Tensor]], version: Optional[int] = None,
                    extras: Mapping[str, str] = MappingProxyType({})) -> None:
        """Load weights as they arrive (a weight sync's ``(name, tensor)`` pairs, each valid until the next):
        each is copied in place into its parameter.  Tied parameters may be missing; any other missing or
        unexpected name raises.  With ``LORA_CONFIG_KEY`` in ``extras`` the tensors are a LoRA adapter."""
        if LORA_CONFIG_KEY in extras:
            self.load_adapter({**{k: t.clone() for k, t in tensors}, **extras}, version)
            return
        own = self.model.state_dict()
        done: set[str] = set()
        for name, tensor in tensors:
            if name not in own:
                raise KeyError(f"unexpected weight {name!r}")
            own[name].copy_(tensor)
            done.add(name)
        check_all_loaded(own, done)
        self._loaded(version)

    def _loaded(self, version: Optional[int]) -> None:
        """Record the weights just loaded: ``version``, else the next one."""
        self.weights_version = version if version is not None else self.weights_version + 1

    def load_adapter(self, state: Mapping[str, Any], version: Optional[int] = None) -> None:
        """Load a LoRA adapter payload (``LORA_CONFIG_KEY`` + adapter weights) onto the base checkpoint: the
        model is wrapped with PEFT on the first one; an adapter key this model lacks raises."""
        self.model = with_lora(self.model, state.get(LORA_CONFIG_KEY))
        load_lora_weights(self.model, {k: v for k, v in state.items() if k != LORA_CONFIG_KEY})
        self._loaded(version)
