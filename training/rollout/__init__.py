"""Playing episodes with model seats: ``policy`` (a Hugging Face causal LM that samples and records
log-probabilities), ``play`` (many episodes in lockstep, one batched generation per model per step),
``agent`` (a model as a one-episode agent for ``run_episode``), ``backends`` (in-process or a pool of Ray
``worker`` actors) and ``records`` (the typed, picklable jobs and results that cross process boundaries).
"""
