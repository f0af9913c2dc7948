"""``ReplicaLabGRPOTrainer``: TRL's ``GRPOTrainer`` scoring exactly what the rollouts sampled.

Exact scoring: TRL 1.16 scores completions without position ids, which shifts an absolute-position model's
positions in a left-padded batch; the subclass passes position ids from the attention mask (``disable_dropout``
in ``grpo_config`` keeps dropout off), and every generation batch logs how far the trainer's log-probs of the
sampled tokens are from the rollout's (``mismatch/<role>/abs_diff``, ``mismatch/<role>/kl``).  Every scoring
without gradients (old, reference and mismatch log-probs) runs in chunks of ``grpo.rescore_batch_size`` sequences.
With ``grpo.advantage: role_baseline`` the advantage is the reward minus a running baseline of its role
(``training.trainer.advantages``) instead of the group mean.
With ``grpo.rollout_correction_clip`` each model token's term of the loss is reweighted by its truncated
importance weight ``min(clip, exp(trainer - rollout log-prob))`` (per-token advantages, which TRL's loss
accepts; ``rollout_correction/mean`` over model tokens and the share clipped, ``rollout_correction/clipped``):
about 1 for an exact engine on-policy, the correction of a batch played with older weights
(``rollout.max_staleness``, ``training.trainer.rollouts_ahead``) or by an engine that drifts.
With ``rollout.sampling.constrained`` (``grammar``: the rollouts' ``ActionGrammar``) every model token is scored
under the mask its reply was sampled with (``_masked_logps``: the tokens its role's grammar did not allow there
get ``-inf`` before the log-softmax), so sampling stays exactly on-policy; each row's grammar key (its role's, or a
Lab Manager's bound to its lab's catalog) travels with the batch as an index into the trainer's table of keys
(``GRAMMAR_KEY``).
The arithmetic is ``training.trainer.grpo_maths``.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

import torch
from trl import GRPOTrainer

from training.rollout.grammar import ActionGrammar
from training.trainer.advantages import RoleBaseline
from training.trainer.distributed import gather_to_main
from training.trainer.grpo_maths import (correction_metrics, correction_sums, corrected_advantages,
                                         mismatch_metrics, mismatch_sums, process_share, role_scaled,
                                         rollout_correction)
from training.trainer.rollouts import REWARD_KEY

#: The column of a generation batch that holds each row's grammar key (an index into
#: ``ReplicaLabGRPOTrainer.grammar_keys``), for the grammar's masks.
GRAMMAR_KEY = "grammar"
#: Generation batches whose rows' grammar keys stay indexed: the batch TRL trains on and the one being made (a
#: Scientist's key is its turns' bindings, new each episode: older ones are dropped, not kept for the whole run).
GRAMMAR_BATCHES_KEPT = 2
#: Mean absolute rollout-vs-trainer log-prob difference (nats per model token) above which a step warns.
MISMATCH_WARN_NATS = 1e-2

logger = logging.getLogger(__name__)


def env_columns(env: Any, rows: int, width: int) -> torch.Tensor:
    """``[rows, width]`` bool: which completion columns are model tokens by the environment mask ``env`` (a
    tensor; or the rollout's lists, right-padded; None: every column)."""
    if env is None:
        return torch.ones((rows, width), dtype=torch.bool)
    if isinstance(env, torch.Tensor):
        return env.bool().cpu()
    out = torch.zeros((rows, width), dtype=torch.bool)
    for row, values in enumerate(env):
        out[row, :len(values)] = torch.tensor(values[:width], dtype=torch.bool)
    return out


class _WithPositionIds:
    """Calls ``model`` with position ids counted over the attention mask (left padding gets position 0,
    the first real token too), as ``generate`` does; everything else passes through."""

    def __init__(self, model: Any):
        self.model = model

    def __call__(self, *args: Any, attention_mask: torch.Tensor, **kwargs: Any) -> Any:
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        return self.model(*args, attention_mask=attention_mask, position_ids=position_ids, **kwargs)


class ReplicaLabGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that scores with position ids from the attention mask and logs the rollout-vs-trainer
    log-prob mismatch of every generation batch (through ``metric_sink(step, metrics)``).

    Beside ``GRPOTrainer``'s own arguments: ``metric_sink`` (None: the metrics are not logged);
    ``rollout_correction_clip`` (``grpo.rollout_correction_clip``; None: advantages are not reweighted);
    ``role_baseline`` (``grpo.advantage: role_baseline``: the running baseline per role; None: GRPO's group
    advantage); ``max_staleness`` (``rollout.max_staleness``: the batches may come from older weights, so no
    mismatch warning); ``rescore_batch_size`` (sequences per forward pass when re-scoring without gradients,
    ``grpo.rescore_batch_size``; None: TRL's per-process micro-batch); ``grammar`` (``rollout.sampling.constrained``:
    the action grammars the rollouts decoded under; None: unconstrained); ``scale_by_role`` (``grpo.scale_rewards:
    role``: each advantage over the root mean square of its role's in the step)."""

    def __init__(self, *args: Any, metric_sink: Optional[Callable[[int, dict], None]] = None,
                 rollout_correction_clip: Optional[float] = None, role_baseline: Optional[RoleBaseline] = None,
                 max_staleness: int = 0, rescore_batch_size: Optional[int] = None,
                 grammar: Optional[ActionGrammar] = None, scale_by_role: bool = False, **kwargs: Any):
        self.metric_sink = metric_sink
        self.grammar = grammar
        #: While a constrained batch is scored: where its rows' grammar keys and environment masks are.
        self._scored_rows: Optional[tuple[Callable[[], list[str]], Callable[[], Any]]] = None
        #: The grammar keys of the last ``GRAMMAR_BATCHES_KEPT`` generation batches by index (``GRAMMAR_KEY``).
        self.grammar_keys: dict[int, str] = {}
        self._grammar_batches: list[list[int]] = []
        self.rollout_correction_clip = rollout_correction_clip
        self.role_baseline = role_baseline
        self.scale_by_role = scale_by_role
        self.max_staleness = max_staleness
        self.rescore_batch_size = rescore_batch_size
        super().__init__(*args, **kwargs)

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, *args, **kwargs):
        if not torch.is_grad_enabled():  # re-scoring (old, reference, mismatch log-probs): chunked
            kwargs["batch_size"] = self.rescore_batch_size or kwargs.get("batch_size") or \
                self.args.per_device_train_batch_size
        if self.grammar is not None:
            if self._scored_rows is None:
                raise RuntimeError("a constrained batch scored without its rows' grammar keys")
            logits_to_keep = args[0] if args else kwargs["logits_to_keep"]
            chunk = kwargs.get("batch_size") or input_ids.size(0)
            return self._masked_logps(model, input_ids, attention_mask, logits_to_keep, chunk,
                                      kwargs.get("compute_entropy", False))
        return super()._get_per_token_logps_and_entropies(
            _WithPositionIds(model), input_ids, attention_mask, *args, **kwargs)

    def _masked_logps(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                      batch_size: int, compute_entropy: bool) -> tuple[torch.Tensor, Optional[torch.Tensor], None]:
        """Per-token log-probs (and entropies) of the completion columns with each model token's grammar mask
        applied to the temperature-scaled logits: the distribution the rollout sampled it from."""
        grammar_source, env_source = self._scored_rows
        grammars = grammar_source()
        model_tokens = attention_mask[:, -logits_to_keep:].bool() & env_columns(env_source(), input_ids.size(0),
                                                                                 logits_to_keep).to(input_ids.device)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, att = input_ids[start:start + batch_size], attention_mask[start:start + batch_size]
            with self.accelerator.autocast():
                logits = _WithPositionIds(model)(input_ids=ids, attention_mask=att,
                                                 logits_to_keep=logits_to_keep + 1).logits
            logits = logits[:, -logits_to_keep - 1:-1].float() / self.temperature
            completion = ids[:, -logits_to_keep:]
            allowed = self.grammar.completion_masks(grammars[start:start + batch_size], completion.cpu(),
                                                    model_tokens[start:start + batch_size].cpu())
            allowed = allowed[..., :logits.size(-1)].to(logits.device)
            logp = logits.masked_fill(~allowed, float("-inf")).log_softmax(-1)
            logps.append(logp.gather(-1, completion.unsqueeze(-1)).squeeze(-1))
            if compute_entropy:
                entropies.append(-(logp.exp() * logp.masked_fill(~allowed, 0.0)).sum(-1))
        return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None

    def _compute_loss(self, model, inputs):
        if self.grammar is None:
            return super()._compute_loss(model, inputs)
        grammars = [self.grammar_keys[int(i)] for i in inputs[GRAMMAR_KEY]]
        self._scored_rows = (lambda: grammars, lambda: inputs.get("tool_mask"))
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._scored_rows = None

    def _generate_and_score_completions(self, inputs):
        if self.grammar is None:
            return self._score_generation(inputs)
        rollouts = self.rollout_func
        self._scored_rows = (lambda: rollouts.last_grammars, lambda: rollouts.last_env_mask)  # once played
        try:
            output = self._score_generation(inputs)
        finally:
            self._scored_rows = None
        output[GRAMMAR_KEY] = torch.tensor(self._index_grammars(rollouts.last_grammars),
                                           device=output["completion_ids"].device)
        return output

    def _index_grammars(self, keys: list[str]) -> list[int]:
        """A new batch's rows' indices into ``grammar_keys`` (the keys of batches before the kept ones dropped)."""
        start = max(self.grammar_keys, default=-1) + 1
        batch = list(range(start, start + len(keys)))
        self.grammar_keys.update(zip(batch, keys))
        self._grammar_batches.append(batch)
        for old in self._grammar_batches[:-GRAMMAR_BATCHES_KEPT]:
            for index in old:
                del self.grammar_keys[index]
        self._grammar_batches = self._grammar_batches[-GRAMMAR_BATCHES_KEPT:]
        return batch

    def _score_generation(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.role_baseline is not None:
            rewards = [float(row[REWARD_KEY]) for row in inputs]
            output["advantages"] = self._across_the_step(self.role_baseline.advantages, rewards, inputs) \
                .to(output["advantages"])
        if self.scale_by_role:
            output["advantages"] = self._role_scaled(output["advantages"], inputs)
        rollout = output.get("sampling_per_token_logps")
        if rollout is None:
            return output
        mask = output["completion_mask"] * output.get("tool_mask", 1)
        trainer = output.get("old_per_token_logps")
        if trainer is None:
            trainer = self._rescore(output)
        sums = mismatch_sums(rollout, trainer, mask, [row["role"] for row in inputs])
        clip, weights = self.rollout_correction_clip, None
        if clip is not None:  # per-token advantages (B, T): TRL's loss multiplies each token's term by its own
            ratio = rollout_correction(rollout, trainer, mask, clip)
            output["advantages"] = corrected_advantages(output["advantages"], ratio)
            weights = correction_sums(ratio, mask, clip)
        per_process = gather_to_main((sums, weights))  # each learner process scored its own share of the batch
        if per_process is None:
            return output
        metrics = mismatch_metrics([part_sums for part_sums, _ in per_process])
        if clip is not None:
            metrics.update(correction_metrics([part for _, part in per_process]))
        worst = max(v for k, v in metrics.items() if k.endswith("/abs_diff"))
        if worst > MISMATCH_WARN_NATS and not self.max_staleness:  # older weights differ by design
            logger.warning("rollout and trainer log-probs differ by %.3g nats per token (threshold %g): %s",
                           worst, MISMATCH_WARN_NATS, metrics)
        if self.metric_sink is not None:
            self.metric_sink(self.state.global_step, metrics)
        return output

    def _rescore(self, output: dict[str, Any]) -> torch.Tensor:
        """The trainer's log-probs of the sampled completion tokens under the current weights."""
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        with torch.no_grad():
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model, ids, attention, output["completion_ids"].size(1))
        return logps

    def _role_scaled(self, advantages: torch.Tensor, inputs) -> torch.Tensor:
        """This process's share of the step's advantages, each over the root mean square of its role's in the
        whole step."""
        scaled = self._across_the_step(role_scaled, advantages.tolist(), inputs)
        return scaled.to(dtype=advantages.dtype, device=advantages.device)

    def _across_the_step(self, per_role: Callable[[list[float], list[str]], list[float]], values: list[float],
                         inputs) -> torch.Tensor:
        """This process's share of ``per_role(values, roles)`` over the whole step: every process gathers the
        step's values and roles (in process order), so a step-wide quantity (the role baselines, which every
        process updates alike; a role's root mean square) is the same on each."""
        from accelerate.utils import gather_object

        local = [(float(v), row["role"]) for v, row in zip(values, inputs)]
        everyone = gather_object(local) if self.accelerator.num_processes > 1 else local
        out = per_role([v for v, _ in everyone], [role for _, role in everyone])
        return torch.tensor(process_share(out, self.accelerator.process_index, len(local)), dtype=torch.float64)
