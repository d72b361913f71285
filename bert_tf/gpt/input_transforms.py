"""The paper's traversal-style input transformations (Radford et al., 2018, §3.3, Figure 1).

Every task becomes one or more token sequences `[start] ... [extract]` of fixed length `n_ctx`
(padding id 0 after the end, mask 0 there), read by the classifier at the extract token:

- classification: `[start; text; extract]`                              -> [N, n_ctx]
- entailment:     `[start; premise; delim; hypothesis; extract]`         -> [N, n_ctx]
- similarity:     both orders `[start; a; delim; b; extract]` and
                  `[start; b; delim; a; extract]`                         -> [N, 2, n_ctx]
                  (the model sums the two representations)
- multiple choice: `[start; context; delim; choice_i; extract]` for every choice
                  (any number, the same for every row)                   -> [N, C, n_ctx]

Texts are lists of token ids (e.g. from the BPE `TextEncoder`). A sequence longer than n_ctx is
an error naming the row, unless `max_len` is given: then every text part is first cut to its
first `max_len` tokens, as train.py's `transform_roc` does with `max_len = n_ctx // 2 - 2`
(which `roc_max_len` returns). The mask covers every token of the sequence, start included (the
LM loss skips position 0 itself).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from bert_tf.errors import UserInputError
from bert_tf.gpt.config import GptConfig

Tokens = Sequence[int]


class InputTransformError(UserInputError):
    """A row that does not fit the transformation (too long, missing choice)."""


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
    """Ids of the special tokens `_start_`, `_delimiter_`, `_classify_` (the "extract" token)."""

    start: int
    delimiter: int
    classify: int

    @classmethod
    def for_config(cls, config: GptConfig) -> "SpecialTokens":
        """train.py's ids: the specials follow the vocabulary in the order start, delimiter,
        classify (n_vocab, n_vocab + 1, n_vocab + 2); needs n_special ≥ 3."""
        if config.n_special < 3:
            raise InputTransformError(f"GptConfig: n_special is {config.n_special}; the input "
                                      "transformations need 3 special tokens (start, delimiter, "
                                      "classify)")
        n = config.n_vocab
        return cls(n, n + 1, n + 2)


@dataclasses.dataclass
class TransformedInputs:
    """token_ids int32 and mask float32, both [N, n_ctx] or [N, C, n_ctx]."""

    token_ids: np.ndarray
    mask: np.ndarray

    def original_layout(self, config: GptConfig) -> np.ndarray:
        """train.py's X int32 [..., n_ctx, 2]: X[..., 0] tokens, X[..., 1] position ids
        n_vocab + n_special + pos (filled at padding too)."""
        positions = np.broadcast_to(config.first_position_id + np.arange(self.token_ids.shape[-1]),
                                    self.token_ids.shape)
        return np.stack([self.token_ids, positions], axis=-1).astype(np.int32)


def roc_max_len(n_ctx: int) -> int:
    """train.py's `max_len = n_ctx // 2 - 2` (two parts plus three specials fit n_ctx)."""
    return n_ctx // 2 - 2


def _cut(part: Tokens, max_len: int | None) -> list[int]:
    part = [int(t) for t in part]
    return part if max_len is None else part[:max_len]


def _sequence(parts: Sequence[Tokens], special: SpecialTokens, max_len: int | None) -> list[int]:
    out = [special.start]
    for i, part in enumerate(parts):
        if i:
            out.append(special.delimiter)
        out += _cut(part, max_len)
    return out + [special.classify]


def _pack(rows: list[list[list[int]]], n_ctx: int, what: str) -> TransformedInputs:
    """rows[i][c] token lists -> arrays [N, C, n_ctx]; errors name the row (and choice)."""
    n_choices = len(rows[0]) if rows else 0
    tokens = np.zeros([len(rows), n_choices, n_ctx], np.int32)
    mask = np.zeros([len(rows), n_choices, n_ctx], np.float32)
    for i, row in enumerate(rows):
        for c, seq in enumerate(row):
            if len(seq) > n_ctx:
                where = f"row {i}" + (f", choice {c}" if n_choices > 1 else "")
                raise InputTransformError(
                    f"{what}: {where}: the sequence has {len(seq)} tokens with its special tokens "
                    f"and exceeds n_ctx {n_ctx} (pass max_len to cut each text to its first "
                    "max_len tokens, as the original transform_roc does)")
            tokens[i, c, :len(seq)] = seq
            mask[i, c, :len(seq)] = 1
    return TransformedInputs(tokens, mask)


def _check_same_length(what: str, **columns: Sequence) -> int:
    lengths = {name: len(col) for name, col in columns.items()}
    if len(set(lengths.values())) > 1:
        raise InputTransformError(f"{what}: the columns have different numbers of rows "
                                  f"{lengths}")
    return next(iter(lengths.values()))


def classification_inputs(texts: Sequence[Tokens], n_ctx: int, special: SpecialTokens,
                          max_len: int | None = None) -> TransformedInputs:
    """`[start; text; extract]` -> token_ids, mask [N, n_ctx]."""
    rows = [[_sequence([t], special, max_len)] for t in texts]
    out = _pack(rows, n_ctx, "classification_inputs")
    return TransformedInputs(out.token_ids[:, 0], out.mask[:, 0])


def entailment_inputs(premises: Sequence[Tokens], hypotheses: Sequence[Tokens], n_ctx: int,
                      special: SpecialTokens, max_len: int | None = None) -> TransformedInputs:
    """`[start; premise; delim; hypothesis; extract]` -> token_ids, mask [N, n_ctx]."""
    _check_same_length("entailment_inputs", premises=premises, hypotheses=hypotheses)
    rows = [[_sequence([p, h], special, max_len)] for p, h in zip(premises, hypotheses)]
    out = _pack(rows, n_ctx, "entailment_inputs")
    return TransformedInputs(out.token_ids[:, 0], out.mask[:, 0])


def similarity_inputs(texts_a: Sequence[Tokens], texts_b: Sequence[Tokens], n_ctx: int,
                      special: SpecialTokens, max_len: int | None = None) -> TransformedInputs:
    """Both orders `[start; a; delim; b; extract]`, `[start; b; delim; a; extract]` ->
    token_ids, mask [N, 2, n_ctx]."""
    _check_same_length("similarity_inputs", texts_a=texts_a, texts_b=texts_b)
    rows = [[_sequence([a, b], special, max_len), _sequence([b, a], special, max_len)]
            for a, b in zip(texts_a, texts_b)]
    return _pack(rows, n_ctx, "similarity_inputs")


def multiple_choice_inputs(contexts: Sequence[Tokens], choices: Sequence[Sequence[Tokens]],
                           n_ctx: int, special: SpecialTokens,
                           max_len: int | None = None) -> TransformedInputs:
    """`[start; context; delim; choice_c; extract]` for each of the C choices of every row ->
    token_ids, mask [N, C, n_ctx]. Every row must have the same number C ≥ 1 of choices and no
    choice may be None (a missing choice is an error naming the row)."""
    _check_same_length("multiple_choice_inputs", contexts=contexts, choices=choices)
    n_choices = None
    rows = []
    for i, (context, row_choices) in enumerate(zip(contexts, choices)):
        if row_choices is None or len(row_choices) == 0:
            raise InputTransformError(f"multiple_choice_inputs: row {i} has no choices")
        missing = [c for c, choice in enumerate(row_choices) if choice is None]
        if missing:
            raise InputTransformError(f"multiple_choice_inputs: row {i}: choice {missing[0]} is "
                                      "missing (None)")
        if n_choices is None:
            n_choices = len(row_choices)
        elif len(row_choices) != n_choices:
            raise InputTransformError(
                f"multiple_choice_inputs: row {i} has {len(row_choices)} choices, expected "
                f"{n_choices} (as row 0); every row needs the same number of choices")
        rows.append([_sequence([context, choice], special, max_len) for choice in row_choices])
    return _pack(rows, n_ctx, "multiple_choice_inputs")
