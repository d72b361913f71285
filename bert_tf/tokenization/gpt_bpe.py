"""The original GPT-1 byte-pair encoding: its two files and its merge loop (pure Python).

OpenAI's `finetune-transformer-lm` ships two files that define the BPE:

* `encoder_bpe_40000.json`: a JSON object mapping each symbol (`"th"`, `"the</w>"`, `"\\n</w>"`)
  to its id (0..40477, `<unk>` = 0);
* `vocab_40000.bpe`: a header line `#version: 0.2`, then one merge per line (two symbols
  separated by whitespace), in rank order, then a final newline. The original reads it as
  `read().split('\\n')[1:-1]`: the header and the (empty) last element are dropped.

`bpe_merge` is the original `TextEncoder.bpe` merge loop (symbols are code points, `</w>` glued
to the last one; repeatedly merge every non-overlapping occurrence, left to right, of the adjacent
pair with the lowest rank). It is used by `bert_tf.tokenization.gpt_text_encoder.TextEncoder` (which adds the
original's cache) and to check the in-graph BPE (`bert_tf.tokenization.gpt_bpe_in_graph`).
"""
from __future__ import annotations

import json
import os
from typing import Mapping

from bert_tf.errors import UserInputError

__all__ = ["BpeFileError", "bpe_merge", "get_pairs", "load_bpe_merges", "load_bpe_ranks",
           "load_encoder"]

END_OF_WORD = "</w>"


class BpeFileError(UserInputError):
    """A BPE encoder (.json) or merges (.bpe) file is missing or malformed (one line: file, what)."""


def _read_text(path: str | os.PathLike, what: str) -> str:
    path = os.fspath(path)
    if not path:
        raise BpeFileError(f"no {what} file given (expected a path)")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise BpeFileError(f"{path}: {what} file not found") from None
    except IsADirectoryError:
        raise BpeFileError(f"{path}: is a folder, expected the {what} file") from None
    except UnicodeDecodeError as e:
        raise BpeFileError(f"{path}: {what} file is not valid UTF-8 (byte {e.start})") from None
    except OSError as e:
        raise BpeFileError(f"{path}: cannot read the {what} file ({e.strerror})") from None


def load_encoder(encoder_path: str | os.PathLike) -> dict[str, int]:
    """Reads `encoder_bpe_40000.json`: symbol -> id.

    Raises:
      BpeFileError: missing/unreadable file, invalid JSON, not an object of string -> int.
    """
    text = _read_text(encoder_path, "BPE encoder (.json)")
    try:
        encoder = json.loads(text)
    except json.JSONDecodeError as e:
        raise BpeFileError(f"{os.fspath(encoder_path)}: line {e.lineno}: not valid JSON "
                           f"({e.msg}); expected the BPE encoder, e.g. encoder_bpe_40000.json") \
            from None
    if not isinstance(encoder, dict) or not encoder:
        raise BpeFileError(f"{os.fspath(encoder_path)}: expected a non-empty JSON object "
                           "mapping BPE symbols to ids")
    for key, value in encoder.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise BpeFileError(f"{os.fspath(encoder_path)}: symbol {key!r} maps to {value!r}; "
                               "expected an integer id")
    return encoder


def load_bpe_merges(bpe_path: str | os.PathLike) -> list[tuple[str, str]]:
    """Reads `vocab_40000.bpe` as the original does: the merges, in rank order.

    Raises:
      BpeFileError: missing/unreadable file, or a merge line without exactly two symbols.
    """
    text = _read_text(bpe_path, "BPE merges (.bpe)")
    lines = text.split("\n")[1:-1]
    merges = []
    for line_no, line in enumerate(lines, start=2):
        parts = tuple(line.split())
        if len(parts) != 2:
            raise BpeFileError(f"{os.fspath(bpe_path)}: line {line_no}: expected a merge of two "
                               f"symbols separated by a space, got {line!r}")
        merges.append(parts)
    return merges


def load_bpe_ranks(bpe_path: str | os.PathLike) -> dict[tuple[str, str], int]:
    """Merge pair -> rank (0 = merged first). A repeated pair keeps its last rank (as the
    original's `dict(zip(merges, range(len(merges))))`)."""
    merges = load_bpe_merges(bpe_path)
    return dict(zip(merges, range(len(merges))))


def get_pairs(word: tuple[str, ...]) -> set[tuple[str, str]]:
    """The set of adjacent symbol pairs of `word` (a tuple of symbols)."""
    pairs = set()
    prev_char = word[0]
    for char in word[1:]:
        pairs.add((prev_char, char))
        prev_char = char
    return pairs


def bpe_merge(token: str, bpe_ranks: Mapping[tuple[str, str], int]) -> str:
    """The original merge loop on one token: its BPE symbols joined by single spaces.

    Args:
      token: a non-empty string (already lower-cased by the caller, as `encode` does).
      bpe_ranks: pair -> rank, from `load_bpe_ranks`.

    Returns:
      e.g. `"unic o de</w>"`; a single character `c` gives `"c</w>"`; the token `"\\n "` gives
      `"\\n</w>"` (the original's special case).

    Raises:
      IndexError: for `token == ""`, as the original.
    """
    word = tuple(token[:-1]) + (token[-1] + END_OF_WORD,)
    pairs = get_pairs(word)
    if not pairs:
        return token + END_OF_WORD
    inf = float("inf")
    while True:
        bigram = min(pairs, key=lambda pair: bpe_ranks.get(pair, inf))
        if bigram not in bpe_ranks:
            break
        first, second = bigram
        new_word: list[str] = []
        i = 0
        while i < len(word):
            try:
                j = word.index(first, i)
            except ValueError:
                new_word.extend(word[i:])
                break
            new_word.extend(word[i:j])
            i = j
            if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                new_word.append(first + second)
                i += 2
            else:
                new_word.append(word[i])
                i += 1
        word = tuple(new_word)
        if len(word) == 1:
            break
        pairs = get_pairs(word)
    joined = " ".join(word)
    if joined == "\n  </w>":
        joined = "\n</w>"
    return joined
