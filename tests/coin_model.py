"""A policy whose GRPO groups differ in reward by construction: the tests that assert training moved the
weights (or a LoRA adapter) use it, so they do not hang on which tokens a sampler drew on this CPU.

``build_coin_model`` writes a tiny Qwen2 checkpoint (random weights plus two residual directions set by hand)
that answers every Scientist turn with one of ``COIN_REPLIES``, each with probability 1/5 whatever the prompt:

- every token's embedding gets +1 on residual dim 0, the five reply tokens (added tokens) +1 on dim 1 instead;
- the output head's rows of the five replies are one and the same vector on dim 0, the end of turn's row is on
  dim 1, ``COIN_MARGIN`` nats after the final RMSNorm.

So after any prompt the replies have equal logits (the same row times the same hidden state; the LoRA test
does not train the head), every other token is ~30 nats behind (< 1e-10 of the mass), and the end of turn
follows a reply.  The random layers (init std 0.02) barely move the residual; every weight stays trainable.

Why a group of episodes differs: against the scripted Lab Manager with ``rollout.max_rounds=COIN_ROUNDS`` (2)
an episode is two Scientist turns, and with no agreement it scores ``-2 - 0.5 x invalid turns - 0.25 x
questions beyond 4`` (``replicalab/judge/constants.py``).  The replies ask 0 (prose: an invalid turn), 1, 3, 6
and 9 questions, so a reply said twice scores -3, -2, -2.5, -4 or -5.5: five different rewards.  A
seat's two replies are independent draws (each model turn samples from its own stream,
``training.rollout.play.row_seed``), and so are the episodes of a group.  All ``G`` episodes of a group then
score alike with probability 0.0024 for G=4 (by enumerating the 25 pairs of replies), below 0.008, and ``k`` groups of 4 all have zero reward variance with probability at most
``0.008 ** k``: 4.1e-9 for the 4 groups of the weight and adapter tests.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

#: Questions of the replies (any text: without an agreement only their number counts).
_QUESTIONS = ("What is the budget?", "How many staff are there?", "How many days do we have?",
              "Which equipment is free?", "Which reagents are in stock?", "Is the centrifuge booked?",
              "Which safety rules apply?", "Is dmso in stock?", "What does one assay cost?")
#: Questions asked by each reply; 0 is prose, an unparseable (invalid) turn.
COIN_QUESTIONS = (0, 1, 3, 6, 9)
COIN_REPLIES = tuple(
    json.dumps({"action_type": "request_info", "questions": list(_QUESTIONS[:n])}, separators=(",", ":"))
    if n else "I am not sure what to propose yet." for n in COIN_QUESTIONS)
#: Logit lead (nats) of the replies over every other token, and of the end of turn right after a reply.
COIN_MARGIN = 30.0
#: Rounds per episode the bound above assumes.
COIN_ROUNDS = 2
#: Train-config overrides the bound assumes (the other sampling settings keep their defaults: top_k=0,
#: top_p=1; the temperature does not change equal logits).
COIN_OVERRIDES = (f"rollout.max_rounds={COIN_ROUNDS}",)


def build_coin_model(out: Path, texts: list[str]) -> Path:
    """Write the checkpoint into ``out`` (tokenizer trained on ``texts``) and check the construction on a
    real game prompt: equal reply probabilities, then the end of turn."""
    import torch

    from replicalab.env import ReplicaLabEnv
    from replicalab.prompts import RoleChat
    from training.config.model import ArchitectureConfig, DefaultModelConfig
    from training.model.default import make_model
    from training.model.tokenizer import save_and_verify, train_tokenizer

    from tiny_arch import POLICY_TINY_ARCH, POLICY_WIDE_CONTEXT

    tokenizer = train_tokenizer(texts, vocab_size=400, min_frequency=1)
    tokenizer.add_tokens(list(COIN_REPLIES))
    replies = tokenizer.convert_tokens_to_ids(list(COIN_REPLIES))
    end = tokenizer.eos_token_id
    arch = ArchitectureConfig(**{**POLICY_TINY_ARCH, "max_position_embeddings": POLICY_WIDE_CONTEXT,
                                 "tie_word_embeddings": False})
    model = make_model(DefaultModelConfig(architecture=arch), len(tokenizer), tokenizer.pad_token_id, end)
    lead = COIN_MARGIN / math.sqrt(arch.hidden_size)  # RMSNorm scales a unit direction to length sqrt(d)
    with torch.no_grad():
        embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
        embed[:, 0] += 1.0
        embed[replies, 0] -= 1.0
        embed[replies, 1] += 1.0
        head[replies] = 0.0
        head[replies, 0] = lead
        head[end] = 0.0
        head[end, 1] = lead
    chat = RoleChat()
    chat.next_prompt(ReplicaLabEnv().reset(seed=7, template="cell_biology", difficulty="hard").scientist)
    prompt = tokenizer.apply_chat_template(chat.messages, add_generation_prompt=True, tokenize=True,
                                           return_dict=False)
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([[*prompt, replies[-1]]])).logits[0, -2:], -1)
    share = 1 / len(replies)
    assert all(abs(float(probs[0, r]) - share) < 1e-6 for r in replies), probs[0, replies]
    assert float(probs[1, end]) > 1 - 1e-6, float(probs[1, end])
    model.save_pretrained(str(out))
    save_and_verify(tokenizer, out, probes=texts[:4])
    for reply, token in zip(COIN_REPLIES, replies):
        assert tokenizer.encode(reply, add_special_tokens=False) == [token] and tokenizer.decode([token]) == reply
    return out
