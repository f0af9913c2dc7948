"""Playing episodes with model seats: ``policy`` (a Hugging Face causal LM that samples and records
log-probabilities; ``vllm_policy`` the same on a vLLM engine, chosen by ``engines``), ``play`` (many episodes
in lockstep, one batched generation per model per step), ``agent`` (a model as a one-episode agent for
``run_episode``), ``backends`` (the interface, in-process) and ``ray_backend`` (a pool of Ray ``worker``
actors, placed by ``placement`` / ``placement_group`` after the ``preflight`` plan) and ``records`` (the
typed, picklable jobs and results that cross process boundaries).
"""
