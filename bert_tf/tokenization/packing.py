"""Packing tokenized text into BERT inputs as the original's `convert_single_example` does.

[CLS] A [SEP] (B [SEP]), segment ids 0 for [CLS]/A/first [SEP] and 1 for B and its [SEP], input mask
1 on real tokens, zero padding to `max_seq_length`. Pairs are truncated by popping from the end of
the longer segment (B on a tie) until they fit; single segments keep their first
`max_seq_length - 2` tokens.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence


@dataclasses.dataclass
class PackedInput:
    """One packed example (lists of length `max_seq_length`) and the tokens before padding."""

    tokens: list[str]
    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    truncated: bool = False


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_length: int) -> bool:
    """Truncates two token lists in place to a total of `max_length` (longer one first, B on tie).

    Returns True if anything was removed.
    """
    truncated = False
    while len(tokens_a) + len(tokens_b) > max_length:
        truncated = True
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()
    return truncated


def pack_tokens(tokens_a: Sequence[str], tokens_b: Sequence[str] | None, max_seq_length: int,
                vocab: dict[str, int]) -> PackedInput:
    """Packs one or two token sequences into fixed-length BERT inputs.

    Args:
      tokens_a: WordPiece tokens of the first segment.
      tokens_b: WordPiece tokens of the second segment, or None.
      max_seq_length: output length, including [CLS] and [SEP]s (>= 3 for pairs, >= 2 otherwise).
      vocab: token -> id (the tokenizer's `vocab`).

    Returns:
      A `PackedInput` whose id lists have length `max_seq_length`.
    """
    a, b = list(tokens_a), (list(tokens_b) if tokens_b is not None else None)
    if b is not None:
        if max_seq_length < 3:
            raise ValueError(f"max_seq_length must be >= 3 for a pair of segments, got {max_seq_length}")
        truncated = truncate_seq_pair(a, b, max_seq_length - 3)
    else:
        if max_seq_length < 2:
            raise ValueError(f"max_seq_length must be >= 2, got {max_seq_length}")
        truncated = len(a) > max_seq_length - 2
        a = a[: max_seq_length - 2]
    tokens = ["[CLS]", *a, "[SEP]"]
    segment_ids = [0] * len(tokens)
    if b is not None:
        tokens += [*b, "[SEP]"]
        segment_ids += [1] * (len(b) + 1)
    input_ids = [vocab[t] for t in tokens]
    input_mask = [1] * len(input_ids)
    pad = max_seq_length - len(input_ids)
    return PackedInput(tokens=tokens, input_ids=input_ids + [0] * pad,
                       input_mask=input_mask + [0] * pad, segment_ids=segment_ids + [0] * pad,
                       truncated=truncated)
