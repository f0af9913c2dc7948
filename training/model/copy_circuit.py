"""A hand-initialised copy (induction) circuit for the embedded default model.

The Scientist's first move copies the published protocol out of its prompt.  Transformers copy with
*induction heads* (Olsson et al., 2022): a previous-token head writes "the token before me" into each
position, and a head in a later layer attends from the current token to the position whose previous
token matches it and predicts what came there next.  A ~1M-parameter model trained from scratch on a
few thousand transcripts does not discover that circuit within a CPU budget of minutes, so
``wire_copy_circuit`` writes it into the freshly initialised weights; supervised fine-tuning then
only has to learn *when* to copy.  It is an ordinary initialisation: the result is a standard Qwen2
checkpoint and every weight stays trainable.

Layout (residual width ``d``, one head per layer used, ``head_dim`` >= 32):

- token embeddings live in the first ``d - code`` residual dims ("E"); the last ``code`` dims ("P")
  start empty and receive the previous token's code;
- layer 0, head 0 (previous-token head): query and key are constant biases whose RoPE phases make
  the score peak at relative offset 1; its value is a fixed projection ``C`` of the token embedding,
  written into P;
- layer 1, head 0 (induction head): query ``C`` x (current token, E dims) against key = P dims,
  both in the head's low-frequency RoPE dims (nearly unrotated over the context, which a large
  ``rope_theta`` makes plentiful), so the score is high where the previous token equals the current
  one; its value is the embedding of the attended token through every dim of the head (values are
  not rotated), written back into E at ``copy_scale`` times an embedding's size, so the tied
  unembedding predicts that token; a constant query and key in one free RoPE pair add a *recency*
  term ``-a sin(distance x frequency)`` to its scores (the pair's frequency chosen so that stays
  monotone over ``COPY_REACH``), so of several matches the latest weighs most: ``recency_score`` nats
  over ``COPY_REACH`` tokens;
- the previous-token head also scores ``self_match_score`` nats against a position holding the token
  at the query (content dims: query ``C`` x, key ``-C`` x), so after a repeated token (``a a``) the
  second ``a`` takes the code of the token before the first, not of ``a``.  Otherwise the induction
  key of a repeated token matches its own query (distance 0: its previous token is the current one)
  and copies it once more, and the recency term makes that the nearest match: a sampled repetition
  became a loop (``"a","a","a",...``).  The penalty sits in layer 0, where the offset-1 peak's
  softmax margin absorbs its noise (codes of different tokens are not orthogonal), so the
  induction head's match scores stay exact;
- every other head's output projection and every MLP's down projection start at zero (they learn
  from the first step), and the final norm's weight ``logit_gain`` makes the copy confident.
"""

from __future__ import annotations

import math

import torch
from transformers import Qwen2ForCausalLM

#: RoPE pairs (lowest index = highest frequency) the previous-token head uses.
PREV_TOKEN_PAIRS = 8
#: Largest relative distance (tokens) over which the content dims must stay nearly unrotated.
COPY_REACH = 1024
#: Largest rotation (radians) a content dim may accumulate over ``COPY_REACH`` tokens.
MAX_CONTENT_ROTATION = 0.5
#: Largest rotation (radians) of the recency pair over ``COPY_REACH`` tokens (below pi/2: monotone).
MAX_RECENCY_ROTATION = 1.0


def content_pairs(head_dim: int, rope_theta: float) -> list[int]:
    """RoPE pair indices whose rotation over ``COPY_REACH`` tokens stays under ``MAX_CONTENT_ROTATION``."""
    half = head_dim // 2
    return [j for j in range(half) if COPY_REACH * rope_theta ** (-2 * j / head_dim) <= MAX_CONTENT_ROTATION]


def recency_pair(head_dim: int, rope_theta: float) -> int | None:
    """The fastest RoPE pair outside the previous-token and content pairs that rotates at most
    ``MAX_RECENCY_ROTATION`` over ``COPY_REACH`` tokens (None if there is none)."""
    content = set(content_pairs(head_dim, rope_theta))
    free = [j for j in range(PREV_TOKEN_PAIRS, head_dim // 2) if j not in content
            and COPY_REACH * rope_theta ** (-2 * j / head_dim) <= MAX_RECENCY_ROTATION]
    return free[0] if free else None


def circuit_sizes(config) -> dict[str, int]:
    """The sizes ``wire_copy_circuit`` uses for a Qwen2 config: code dims and RoPE pairs."""
    hd = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    pairs = content_pairs(hd, float(config.rope_parameters["rope_theta"]))
    return {"code_dims": 2 * len(pairs), "content_pairs": len(pairs), "prev_token_pairs": PREV_TOKEN_PAIRS}


def _semi_orthogonal(rows: int, cols: int, generator: torch.Generator) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(cols, rows, generator=generator))
    return q.T.contiguous()  # rows x cols with orthonormal rows


@torch.no_grad()
def wire_copy_circuit(model: Qwen2ForCausalLM, *, seed: int = 0, embedding_std: float = 0.1,
                      prev_score: float = 12.0, match_score: float = 30.0, copy_scale: float = 3.0,
                      logit_gain: float = 3.0, recency_score: float = 0.0,
                      self_match_score: float = 0.0) -> dict[str, int]:
    """Write the copy circuit into ``model`` (freshly initialised; at least 2 layers).

    ``prev_score``: softmax margin of the previous-token head's offset-1 peak over its neighbours;
    ``match_score``: induction score of an exact match; ``copy_scale``: size of the copied embedding
    relative to an embedding; ``logit_gain``: final-norm weight; ``recency_score``: how much (nats) the
    induction head prefers a match ``COPY_REACH`` tokens nearer (0: no preference); ``self_match_score``: how
    much (nats) the previous-token head's score drops at a position holding the current token (above
    ``prev_score``, a repeated token takes the code of the token before the repeat; 0: nothing).  Returns the
    sizes used.
    """
    cfg = model.config
    d, hd = cfg.hidden_size, getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    half = hd // 2
    theta = float(cfg.rope_parameters["rope_theta"])
    pairs = content_pairs(hd, theta)
    code = 2 * len(pairs)
    if cfg.num_hidden_layers < 2 or code < 16 or PREV_TOKEN_PAIRS > half - len(pairs):
        raise ValueError(f"copy circuit needs >= 2 layers and >= 8 low-frequency RoPE pairs; got {len(pairs)} "
                         f"(head_dim {hd}, rope_theta {theta:g}): raise rope_theta or head_dim")
    if d - code < code:
        raise ValueError("hidden_size too small for the copy circuit's code dims")
    gen = torch.Generator().manual_seed(seed)
    content = torch.tensor(pairs + [j + half for j in pairs])  # head dims carrying the token code
    e_dims, p_dims = torch.arange(0, d - code), torch.arange(d - code, d)
    layers = model.model.layers

    # embeddings only in E; all output projections start silent
    emb = model.model.embed_tokens.weight
    emb.zero_()
    emb[:, e_dims] = torch.randn(emb.shape[0], len(e_dims), generator=gen) * embedding_std
    for layer in layers:
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    model.model.norm.weight.fill_(logit_gain)

    # typical sizes after RMSNorm (unit weights): a vector of norm sqrt(d)
    code_matrix = _semi_orthogonal(code, len(e_dims), gen)      # C: token code
    # C': the copied token, through every dim of the head (unlike the query and key, values need not
    # sit in the low-frequency RoPE dims): the wider the copy, the less two tokens' copies overlap, so
    # training that moves the embeddings rarely makes one copy read as another
    value_rank = min(hd, len(e_dims))
    value_matrix = torch.zeros(hd, len(e_dims))
    value_matrix[:value_rank] = _semi_orthogonal(value_rank, len(e_dims), gen)
    norm_after = math.sqrt(d)                                   # |RMSNorm(x)|
    code_norm = norm_after * math.sqrt(code / len(e_dims))      # |C RMSNorm(e)| (e alone in layer 0)
    emb_norm = embedding_std * math.sqrt(len(e_dims))

    # layer 0, head 0: previous-token head
    attn0 = layers[0].self_attn
    q_bias, k_bias = torch.zeros(hd), torch.zeros(hd)
    inv_freq = theta ** (-2 * torch.arange(PREV_TOKEN_PAIRS, dtype=torch.float64) / hd)
    # score(delta) = a * sum_j cos((delta - 1) * theta_j); margin over delta = 0 or 2 is a * sum(1 - cos theta_j)
    a = prev_score * math.sqrt(hd) / float((1 - torch.cos(inv_freq)).sum())
    for j in range(PREV_TOKEN_PAIRS):
        k_bias[j] = 1.0
        q_bias[j], q_bias[j + half] = a * math.cos(inv_freq[j]), -a * math.sin(inv_freq[j])
    attn0.q_proj.weight[:hd].zero_()
    attn0.q_proj.bias[:hd] = q_bias
    attn0.k_proj.weight[:hd].zero_()
    attn0.k_proj.bias[:hd] = k_bias
    if self_match_score:
        # query C x, key -C x in the content dims (nearly unrotated, disjoint from the offset pairs): equal
        # tokens score -self_match_score; in layer 0 the residual is the embedding alone, so |C x| ~ code_norm
        same = math.sqrt(self_match_score * math.sqrt(hd)) / code_norm
        attn0.q_proj.weight[content[:, None], e_dims[None, :]] = same * code_matrix
        attn0.k_proj.weight[content[:, None], e_dims[None, :]] = -same * code_matrix
    attn0.v_proj.weight[:hd].zero_()
    attn0.v_proj.weight[content[:, None], e_dims[None, :]] = code_matrix
    gamma = emb_norm / code_norm  # the previous token's code as large as an embedding
    attn0.o_proj.weight[p_dims[:, None], content[None, :]] = gamma * torch.eye(code)

    # layer 1, head 0: induction head
    attn1 = layers[1].self_attn
    mixed_norm = norm_after / math.sqrt(2.0)  # E and P parts of RMSNorm(x), each about this large
    q_len = mixed_norm * math.sqrt(code / len(e_dims))
    k_len = mixed_norm
    scale = math.sqrt(match_score * math.sqrt(hd) / (q_len * k_len))
    attn1.q_proj.weight[:hd].zero_()
    attn1.q_proj.weight[content[:, None], e_dims[None, :]] = scale * code_matrix
    attn1.k_proj.weight[:hd].zero_()
    attn1.k_proj.weight[content[:, None], p_dims[None, :]] = scale * torch.eye(code)
    pair = recency_pair(hd, theta)
    if recency_score and pair is None:
        raise ValueError(f"no free RoPE pair for the copy circuit's recency term (head_dim {hd}, rope_theta {theta:g})")
    if recency_score:
        freq = theta ** (-2 * pair / hd)
        attn1.q_proj.bias[:hd].zero_()
        attn1.k_proj.bias[:hd].zero_()
        # score(delta) = q . R(delta) k with q = (0, b), k = (1, 0): -b sin(delta * freq)
        attn1.q_proj.bias[pair + half] = recency_score * math.sqrt(hd) / math.sin(COPY_REACH * freq)
        attn1.k_proj.bias[pair] = 1.0
    attn1.v_proj.weight[:hd].zero_()
    attn1.v_proj.weight[:hd, e_dims] = value_matrix
    delta = copy_scale * emb_norm / (mixed_norm * math.sqrt(value_rank / len(e_dims)))
    attn1.o_proj.weight[e_dims, :hd] = delta * value_matrix.T
    return circuit_sizes(cfg)
