"""The embedded default model, built locally with no download: a byte-level BPE tokenizer (``tokenizer``),
a tiny Qwen2-style LM whose first layers start as a copy circuit (``copy_circuit``), warm-started by
supervised fine-tuning (``sft``) on transcripts of the scripted agents (``sft_data``); ``default`` builds
and finds it, ``card`` writes its model card.  Any Hugging Face causal LM can replace it: ``model_path`` checks
any model name, ``snapshot`` resolves it to a local directory and ``validate`` checks its tokenizer and chat template.
"""
