"""The tiny architecture of the synthetic test checkpoints, shared by tests/conftest.py's fixtures and the helper
modules that build models of their own (a plain module, so a helper imports it under any selection of tests)."""

#: Architecture of the synthetic test checkpoint (tiny: builds in well under a second).
POLICY_TINY_ARCH = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, max_position_embeddings=512, copy_circuit=False)
#: Context window of ``policy_wide_model_dir`` (game prompts run to ~1.5k tokens with the tiny tokenizer).
POLICY_WIDE_CONTEXT = 4096
