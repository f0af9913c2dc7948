"""Constrained decoding (``rollout.sampling.constrained``): every model reply is decoded under its role's action
grammar, so it is one JSON object of the role's action, in the canonical field order.

The grammar is the role's action model as a JSON schema (``_schema_json``: properties in
``replicalab.parsing.field_order``, no other keys, defaults optional), compiled by llguidance for the model's
tokenizer.  A seat's grammar is bound to the names its own view gives it (``training.rollout.binding``): a Lab
Manager's to what its lab can offer, a Scientist's to what its brief and the dialogue so far have named; each is
named by its key (``grammar_key``), and a trajectory's replies each keep theirs (``trajectory_key``).  At each step
the tokens the grammar does not allow get probability zero (``GrammarMask``, first in the logits-processor chain,
before temperature, top-k and top-p); a stop token is allowed only where the object is complete.  Sampling is
therefore exactly from the policy's distribution renormalised over the allowed tokens, and the trainer scores each
model token under the same mask (``completion_masks``, from the tokens before it in its reply), so the recorded and
the trained log-probs are the same number.

The grammar fixes the form and the names a seat can write (a bound Scientist's numbers: the ones its view stated; a
bound Lab Manager's flags: its lab's check of the plan); which action, whether to suggest or revise, and which of
the names and numbers are the model's.  The rules a schema cannot state (accept needs feasible, ...) are still the
parser's and the environment's; a reply cut by ``max_new_tokens`` before its object closes still fails to parse.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Optional, Sequence

import torch
from transformers import LogitsProcessor

from replicalab.parsing import ACTION_MODELS, field_order
from training.rollout.binding import bound_schema, key_parts
from training.errors import UserInputError

#: The longest string the grammar lets a reply write (characters; the scripted seats' longest, a Lab Manager's
#: explanation, is under 250): a reply cannot spend its token budget on one string and be cut before it closes.
MAX_TEXT_CHARS = 256
#: llguidance's JSON options: the separators ``format_action`` writes and at most one space between values.  Not
#: none: with no whitespace allowed llguidance 1.9's mask drops some multi-lexeme tokens the grammar accepts (the
#: embedded tokenizer's ``"feasible":true,``); not any: a reply could then pad with whitespace until its budget
#: runs out instead of closing the object.
JSON_OPTIONS = {"item_separator": ",", "key_separator": ":", "whitespace_pattern": "[ ]?"}


#: The most grammars kept compiled (one per binding seen: a run's scenarios repeat).
GRAMMAR_CACHE = 4096


def trajectory_key(keys: Sequence[str]) -> str:
    """The grammar key of a trajectory whose replies were decoded under ``keys`` (one per reply, in order): the key
    they share, or the JSON list of them (``reply_keys`` reads either back)."""
    distinct = list(dict.fromkeys(keys))
    if not distinct:
        raise ValueError("a trajectory's grammar key needs the key of at least one reply")
    return distinct[0] if len(distinct) == 1 else json.dumps(list(keys), separators=(",", ":"))


def reply_keys(key: str) -> list[str]:
    """The grammar key of each reply of a trajectory with ``trajectory_key`` ``key`` (one key: every reply's)."""
    return json.loads(key) if key.startswith("[") else [key]


def _schema_json(key: str) -> str:
    """The JSON schema the replies of grammar ``key`` are decoded under: the role's action model, properties in
    canonical order, no other keys, strings capped; bound to the key's binding (``bound_schema``) when it has one."""
    role, binding = key_parts(key)
    model = ACTION_MODELS[role]
    schema = model.model_json_schema()
    schema["properties"] = {name: _capped(schema["properties"][name]) for name in field_order(model)}
    schema["additionalProperties"] = False
    return json.dumps(bound_schema(schema, binding) if binding is not None else schema)


@lru_cache(maxsize=GRAMMAR_CACHE)
def _grammar_text(key: str) -> str:
    """Grammar ``key`` as llguidance's grammar text (the same for every tokenizer)."""
    import llguidance

    return llguidance.LLMatcher.grammar_from_json_schema(_schema_json(key), overrides=JSON_OPTIONS)


def _capped(prop: dict[str, Any]) -> dict[str, Any]:
    """``prop`` with ``MAX_TEXT_CHARS`` on its strings (a string, or an array's string items)."""
    if prop.get("type") == "string":
        return {**prop, "maxLength": MAX_TEXT_CHARS}
    if prop.get("type") == "array" and prop.get("items", {}).get("type") == "string":
        return {**prop, "items": {**prop["items"], "maxLength": MAX_TEXT_CHARS}}
    return prop


class ActionGrammar:
    """The action grammars (``grammar_key``: a role's, or a Lab Manager's bound to its lab's catalog) for one
    tokenizer, each compiled on first use.

    ``stop_token_ids``: the tokens that end a reply (``PolicyModel.stop_token_ids``); allowed only where the object
    is complete.  ``vocab_size``: the width of the model's logits (at least the tokenizer's length); ids the
    tokenizer does not have are never allowed.  Other special tokens are never allowed."""

    def __init__(self, tokenizer: Any, stop_token_ids: Sequence[int], vocab_size: int):
        import llguidance
        import llguidance.hf

        if not getattr(tokenizer, "is_fast", False):
            raise UserInputError("rollout.sampling.constrained needs a fast (tokenizers-backed) tokenizer; "
                                 f"{type(tokenizer).__name__} is not one")
        self.stop = torch.tensor(sorted(set(int(t) for t in stop_token_ids)), dtype=torch.long)
        self.vocab_size = int(vocab_size)
        self.llg = llguidance.hf.from_tokenizer(tokenizer, n_vocab=max(self.vocab_size, len(tokenizer)),
                                                eos_token=list(self.stop.tolist()))
        banned = [int(t) for t in getattr(tokenizer, "all_special_ids", []) if int(t) not in set(self.stop.tolist())]
        self.banned = torch.tensor(banned, dtype=torch.long)
        self._words = (self.llg.vocab_size + 31) // 32
        self._bits = torch.arange(32, dtype=torch.int32)

    def matcher(self, key: str) -> Any:
        """A fresh matcher at the start of a reply under grammar ``key`` (``grammar_key``)."""
        import llguidance

        found = llguidance.LLMatcher(self.llg, _grammar_text(key), log_level=0)
        if found.is_error():
            raise ValueError(f"the action grammar {key[:80]!r} does not compile: {found.get_error()}")
        return found

    def allowed(self, matcher: Any) -> torch.Tensor:
        """``[vocab_size]`` bool: the tokens ``matcher`` allows next (a stop token only where the object is
        complete).  A matcher in error (a reply that left the grammar) allows every token: nothing to enforce."""
        if matcher.is_error():
            return torch.ones(self.vocab_size, dtype=torch.bool)
        words = torch.frombuffer(bytearray(matcher.compute_bitmask()), dtype=torch.int32)[: self._words]
        bits = ((words.unsqueeze(1) >> self._bits) & 1).flatten().bool()
        out = torch.zeros(self.vocab_size, dtype=torch.bool)
        n = min(self.vocab_size, bits.numel())
        out[:n] = bits[:n]
        ends = bool(out[self.stop].any())
        out[self.banned] = False
        out[self.stop] = ends
        return out

    def completion_masks(self, grammars: Sequence[str], completion_ids: torch.Tensor,
                         model_tokens: torch.Tensor) -> torch.Tensor:
        """``[B, K, vocab_size]`` bool: for each model token of each row's completion, the tokens its reply's grammar
        (``grammars``: one ``trajectory_key`` per row) allowed there (replayed from the tokens before it in its reply;
        a reply is a run of model tokens up to its stop token); every token at the other positions (the
        environment's tokens, padding)."""
        rows, width = completion_ids.shape
        masks = torch.ones((rows, width, self.vocab_size), dtype=torch.bool)
        ids, model = completion_ids.tolist(), model_tokens.bool().tolist()
        stops = set(self.stop.tolist())
        for row in range(rows):
            keys, replies = reply_keys(grammars[row]), 0
            matcher: Optional[Any] = None
            for t in range(width):
                if not model[row][t]:
                    matcher = None
                    continue
                if matcher is None:
                    replies += 1
                    if replies > len(keys) > 1:
                        raise ValueError(f"row {row} holds more replies than its grammar key names ({len(keys)})")
                    matcher = self.matcher(keys[min(replies, len(keys)) - 1])
                masks[row, t] = self.allowed(matcher)
                token = ids[row][t]
                if token in stops:
                    matcher = None  # the reply ended; what follows belongs to the next one
                else:
                    matcher.consume_token(token)
        return masks


class GrammarMask(LogitsProcessor):
    """First processor of the chain: each row's tokens outside its grammar (``grammars``: one key per row) get
    ``-inf``.

    ``prompt_width``: the (left-padded) prompt length of the batch; the token drawn at each step is the last
    column of ``input_ids`` on the next call.  A row that has drawn a stop token is finished (``generate`` pads
    it); it is left unmasked."""

    def __init__(self, grammar: ActionGrammar, grammars: Sequence[str], prompt_width: int):
        self.grammar = grammar
        self.matchers = [grammar.matcher(key) for key in grammars]
        self.done = [False] * len(self.matchers)
        self.prompt_width = prompt_width
        self.stops = set(grammar.stop.tolist())

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[1] > self.prompt_width:
            for row, token in enumerate(input_ids[:, -1].tolist()):
                if self.done[row]:
                    continue
                if token in self.stops:
                    self.done[row] = True
                else:
                    self.matchers[row].consume_token(token)
        allowed = torch.ones(scores.shape, dtype=torch.bool)
        for row, matcher in enumerate(self.matchers):
            if not self.done[row]:
                allowed[row, : self.grammar.vocab_size] = self.grammar.allowed(matcher)[: scores.shape[1]]
        return scores.masked_fill(~allowed.to(scores.device), float("-inf"))


def vocab_width(model: Any) -> int:
    """The width of ``model``'s logits (its output embedding's rows; may exceed the tokenizer's length)."""
    return int(model.get_output_embeddings().weight.shape[0])
