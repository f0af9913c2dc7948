"""Playing episodes with model seats: ``contract`` (``RolloutSpec``: what a collect needs, the only stored
sampling; the ``Backend`` protocol; sharding and seeding rules), ``policy`` (a Hugging Face causal LM that
samples and records log-probabilities; ``vllm_policy`` the same on a vLLM engine, chosen by ``engines``),
``play`` (many episodes in lockstep, one batched generation per model per step), ``agent`` (a model as a
one-episode agent for ``run_episode``), ``inprocess`` and ``ray_backend`` (the two backends: this process, or
a pool of Ray ``worker`` actors placed per ``training.cluster``), ``backends`` (``make_backend``) and
``records`` (the typed, picklable jobs and results that cross process boundaries).
"""
