"""``rollout``: how a training run plays its episodes: backend, engine, sampling and weight sync (torch-free)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, Field, field_validator, model_validator

from training.config.kinds import BackendKind, Engine
from training.config.loading import STRICT_NUMBERS_AS_STR
from training.config.model import SamplingConfig, VLLMConfig

#: New tokens per model turn in rollouts (the longest scripted action is ~410 JSON characters).
ROLLOUT_MAX_NEW_TOKENS = 128


class RolloutConfig(BaseModel):
    """How episodes are played: in the driver process or on a pool of Ray actors."""

    model_config = STRICT_NUMBERS_AS_STR
    backend: BackendKind = Field(default="ray", description=(
        "Where episodes are played: inprocess (the driver, one policy copy) or ray (a pool of actor workers)."))
    num_workers: int = Field(default=2, ge=1, description=(
        "Ray rollout workers (actors), each with its own policy copy; a step's jobs are split between them. "
        "Ignored in-process."))
    torch_threads_per_worker: int = Field(default=1, ge=1, description=(
        "Torch CPU threads of each Ray worker; each worker also reserves this many Ray CPUs."))
    sampling: SamplingConfig = Field(
        default_factory=lambda: SamplingConfig(temperature=1.0, max_new_tokens=ROLLOUT_MAX_NEW_TOKENS),
        description=("How policy seats sample in rollouts (do_sample must stay true; max_new_tokens is per turn "
                     "and may not exceed grpo.max_completion_length)."))
    max_rounds: int = Field(default=6, ge=1, description=(
        "Negotiation rounds per episode (one Scientist and one Lab Manager turn each) before it times out."))
    ray_address: Optional[str] = Field(default=None, description=(
        "Ray cluster to join: None starts a local Ray; 'auto' or host:port joins a running cluster."))
    max_worker_restarts: int = Field(default=3, ge=0, description=(
        "Dead Ray workers replaced (and their shard re-run) within one collect before the step fails."))
    engine: Engine = Field(default="hf", description=(
        "What generates the policy's turns: hf (transformers generate on left-padded batches) or vllm (a vLLM "
        "engine in each Ray rollout worker: paged KV cache, prefix caching across a seat's turns, continuous "
        "batching; needs rollout.backend=ray and a vLLM environment, rollout.vllm.python)."))
    vllm: VLLMConfig = Field(default_factory=VLLMConfig, description="The vLLM engine (rollout.engine=vllm).")
    ready_timeout_s: Optional[float] = Field(default=None, gt=0.0, description=(
        "Seconds a new Ray rollout worker may take to load its models before the run fails; None: "
        "training.rollout.ready.READY_BASE_S plus READY_S_PER_GIB for every GiB of the policy's weight files."))
    weight_sync: Literal["collective", "object_store"] = Field(default="collective", description=(
        "How the learner's weights reach the Ray workers each step: collective (the model's dtype, in buckets, "
        "over a torch.distributed group of the learner's main process and every worker: NCCL on GPUs, gloo "
        "otherwise) or object_store (float32 numpy arrays through Ray's object store, also the fallback)."))
    weight_sync_bucket_mib: int = Field(default=256, ge=1, description=(
        "Bucket size (MiB) of the collective weight sync: each side holds one bucket beside the weights."))
    max_staleness: int = Field(default=0, ge=0, le=1, description=(
        "How many steps the rollouts may run ahead of the learner: 0 plays every step's episodes with the weights "
        "it trains (on-policy); 1 plays step t+1's episodes with step t's weights while the learner trains on step "
        "t (needs rollout.backend=ray and grpo.num_iterations=1; pair it with grpo.rollout_correction_clip)."))
    weight_sync_timeout_s: float = Field(default=120.0, gt=0.0, description=(
        "Seconds the weight-sync group may take to form or to pass one bucket before the sync falls back "
        "to the object store."))

    @field_validator("sampling")
    @classmethod
    def _must_sample(cls, v: SamplingConfig) -> SamplingConfig:
        if not v.do_sample:
            raise ValueError("rollout.sampling.do_sample must be true: greedy groups give zero GRPO advantages")
        return v

    @model_validator(mode="after")
    def _engine_needs_ray(self) -> "RolloutConfig":
        if self.engine == "vllm" and self.backend != "ray":
            raise ValueError("rollout.engine=vllm runs in Ray rollout workers: set rollout.backend=ray")
        if self.engine == "vllm" and self.sampling.constrained:
            raise ValueError("rollout.sampling.constrained decodes with the hf engine: set rollout.engine=hf")
        if self.engine == "vllm" and self.sampling.kv_cache != "dynamic":
            raise ValueError("rollout.sampling.kv_cache is the hf engine's (vLLM pages its own): set rollout.engine=hf "
                             "or leave kv_cache dynamic")
        if self.max_staleness and self.backend != "ray":
            raise ValueError("rollout.max_staleness>0 plays ahead on Ray rollout workers: set rollout.backend=ray "
                             "(the in-process backend plays on-policy only)")
        return self
