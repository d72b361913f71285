"""Tokenization of both model families: BERT's WordPiece (the original tokenizer API, its
in-graph twin, vocab building, `[CLS] A [SEP] B [SEP]` packing in `packing`) and GPT-1's BPE
(`gpt_text_encoder.TextEncoder`: ftfy + spaCy + BPE as the original's `text_utils`; `gpt_bpe`;
`gpt_bpe_in_graph.InGraphBpeEncoder` for exports).

* `FullTokenizer`, `BasicTokenizer`, `WordpieceTokenizer` and the original module's functions
  (`load_vocab`, `convert_to_unicode`, `printable_text`, `whitespace_tokenize`, ...): pure Python,
  the same output as google-research/bert's `tokenization.py`; switch with
  `from bert_tf import tokenization`.
* `InGraphTokenizer`: the same tokenization as TensorFlow ops (tensorflow-text), for
  `tf.function`, tf.data and SavedModels (imports TensorFlow on first use).
* `build_wordpiece_vocab`, `learn_wordpiece_vocab`, `write_vocab`: learn a vocab that fits
  `FullTokenizer` (imports TensorFlow/tensorflow-text on first use).
"""
from __future__ import annotations

import importlib
from typing import Any

from bert_tf.tokenization import full_tokenizer
from bert_tf.tokenization.full_tokenizer import (
    BasicTokenizer,
    FullTokenizer,
    VocabDict,
    WordpieceTokenizer,
    convert_by_vocab,
    convert_ids_to_tokens,
    convert_to_unicode,
    convert_tokens_to_ids,
    is_control as _is_control,  # the original module's names (some code imports them)
    is_punctuation as _is_punctuation,
    is_whitespace as _is_whitespace,
    load_vocab,
    printable_text,
    validate_case_matches_checkpoint,
    vocab_tokens_by_id,
    whitespace_tokenize,
)

# Names served lazily (PEP 562) so that the pure-Python tokenizer does not import TensorFlow.
_LAZY = {
    "InGraphTokenizer": "bert_tf.tokenization.in_graph",
    "build_wordpiece_vocab": "bert_tf.tokenization.vocab_builder",
    "learn_wordpiece_vocab": "bert_tf.tokenization.vocab_builder",
    "reserved_tokens": "bert_tf.tokenization.vocab_builder",
    "write_vocab": "bert_tf.tokenization.vocab_builder",
}

__all__ = [*full_tokenizer.__all__, *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
