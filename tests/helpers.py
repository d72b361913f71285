"""Helpers shared by test files (import them as `from tests.helpers import ...`; fixtures belong in
conftest.py)."""
from __future__ import annotations

# A tiny random BERT's bert_config.json (2 layers of width 32, the English uncased vocab size, no
# dropout): the model the end-to-end tool tests fine-tune for a few steps. A test that needs
# other values writes them as explicit overrides, e.g. `{**TINY_CONFIG, "hidden_dropout_prob": 0.1}`.
TINY_CONFIG = {"attention_probs_dropout_prob": 0.0, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.0, "hidden_size": 32, "initializer_range": 0.02,
               "intermediate_size": 64, "max_position_embeddings": 64,
               "num_attention_heads": 2, "num_hidden_layers": 2, "type_vocab_size": 2,
               "vocab_size": 30522}
