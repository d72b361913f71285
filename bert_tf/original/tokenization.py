"""google-research/bert's `tokenization` module API: bert_tf's tokenizer, which is the original's.

The same objects as `bert_tf.tokenization` (one tokenizer per model family), gathered here so
that `from bert_tf.original import modeling, optimization, tokenization` gives all three of the
original's modules. The original's own `tokenization_test.py` passes against it; pure Python,
TensorFlow is not imported.

Differences from the original are bert_tf.tokenization's: see `bert_tf.tokenization.full_tokenizer`
(its module docstring) and docs/switching.md.
"""
from __future__ import annotations

from bert_tf.tokenization.full_tokenizer import (
    BasicTokenizer,
    FullTokenizer,
    WordpieceTokenizer,
    convert_by_vocab,
    convert_ids_to_tokens,
    convert_to_unicode,
    convert_tokens_to_ids,
    is_control as _is_control,  # the original module's (private) names, which code does import
    is_punctuation as _is_punctuation,
    is_whitespace as _is_whitespace,
    load_vocab,
    printable_text,
    validate_case_matches_checkpoint,
    whitespace_tokenize,
)

__all__ = [
    "BasicTokenizer",
    "FullTokenizer",
    "WordpieceTokenizer",
    "convert_by_vocab",
    "convert_ids_to_tokens",
    "convert_to_unicode",
    "convert_tokens_to_ids",
    "load_vocab",
    "printable_text",
    "validate_case_matches_checkpoint",
    "whitespace_tokenize",
]
