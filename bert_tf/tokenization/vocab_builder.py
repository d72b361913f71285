"""Learning a WordPiece vocab that fits `FullTokenizer`.

The text is pre-tokenised with this package's `BasicTokenizer` (the original's word splitting,
so the vocab matches how `FullTokenizer` will cut words), the words are counted, and the pieces
are learned with tensorflow-text's WordPiece learner
(`tensorflow_text.tools.wordpiece_vocab.wordpiece_tokenizer_learner_lib.learn`, the algorithm
behind `bert_vocab_from_dataset`; that wrapper is not used because it splits words with
tensorflow-text's ICU-based BasicTokenizer, which differs from the original's).

Layout of the result, like Google's vocabs: "[PAD]" (id 0), optionally "[unused0]" ...
"[unused{N-1}]", then "[UNK]", "[CLS]", "[SEP]", "[MASK]", then every single character and its
"##" form, then the learned pieces by decreasing count.
"""
from __future__ import annotations

import collections
import importlib.util
import os
import sys
import types
from typing import Iterable, Sequence

from bert_tf import io_utils
from bert_tf.io_utils import atomic_output_path
from bert_tf.tokenization.full_tokenizer import BasicTokenizer, convert_to_unicode

__all__ = ["build_wordpiece_vocab", "learn_wordpiece_vocab", "reserved_tokens", "write_vocab"]


_LEARNER = "tensorflow_text.tools.wordpiece_vocab.wordpiece_tokenizer_learner_lib"


def _learner_lib() -> types.ModuleType:
    """tensorflow-text's pure-Python WordPiece learner module.

    Importing it normally first runs `tensorflow_text/__init__.py`, which imports TensorFlow and
    loads every tensorflow-text op library (seconds). The learner itself only needs NumPy, so
    unless tensorflow_text is already imported, the module file is loaded on its own.
    """
    if "tensorflow_text" in sys.modules:
        return importlib.import_module(_LEARNER)
    spec = importlib.util.find_spec("tensorflow_text")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("tensorflow-text is not installed; it provides the WordPiece learner")
    path = os.path.join(list(spec.submodule_search_locations)[0], "tools", "wordpiece_vocab",
                        "wordpiece_tokenizer_learner_lib.py")
    if not os.path.isfile(path):
        return importlib.import_module(_LEARNER)
    module_spec = importlib.util.spec_from_file_location("_bert_tf_wordpiece_learner", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def reserved_tokens(num_unused: int = 0) -> list[str]:
    """The reserved tokens in Google's order: ["[PAD]", "[unused0]", ...,
    "[unused{num_unused-1}]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]."""
    if num_unused < 0:
        raise ValueError(f"num_unused must be >= 0, got {num_unused}")
    return (["[PAD]"] + [f"[unused{i}]" for i in range(num_unused)]
            + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"])


def count_words(texts: Iterable[str | bytes], do_lower_case: bool = True,
                max_lines: int | None = None) -> collections.Counter:
    """Counts the `BasicTokenizer(do_lower_case)` words of each text.

    Args:
      texts: strings (or UTF-8 bytes), e.g. the lines of a corpus.
      do_lower_case: as for `FullTokenizer`.
      max_lines: stop after this many texts (None: all).

    Returns:
      Counter word (str) -> number of occurrences.
    """
    basic = BasicTokenizer(do_lower_case=do_lower_case)
    counts: collections.Counter = collections.Counter()
    for i, text in enumerate(texts):
        if max_lines is not None and i >= max_lines:
            break
        counts.update(basic.tokenize(convert_to_unicode(text)))
    return counts


def learn_wordpiece_vocab(texts: Iterable[str | bytes], vocab_size: int,
                          do_lower_case: bool = True, num_reserved_unused: int = 0,
                          extra_reserved_tokens: Sequence[str] = (),
                          max_lines: int | None = None, lower_thresh: int = 1,
                          num_iterations: int = 4, max_token_length: int = 50,
                          max_unique_chars: int = 1000, slack_ratio: float = 0.05) -> list[str]:
    """Learns a WordPiece vocab (a list of tokens; index = id) from texts.

    Args:
      texts: strings (or UTF-8 bytes), e.g. corpus lines.
      vocab_size: the maximum number of tokens, reserved ones included. The learner aims for
        `vocab_size * (1 - slack_ratio)` to `vocab_size`; a small corpus may give fewer.
      do_lower_case: pre-tokenise as `FullTokenizer(do_lower_case=...)` will.
      num_reserved_unused: number of "[unusedN]" tokens between "[PAD]" and "[UNK]".
      extra_reserved_tokens: more tokens to reserve right after "[MASK]".
      max_lines: read at most this many texts.
      lower_thresh: smallest word-piece count the learner's threshold search may use (the
        learner's own default, 10, suits large corpora; 1 lets small ones reach `vocab_size`).
      num_iterations, max_token_length, max_unique_chars, slack_ratio: passed to the learner
        (see tensorflow-text's `wordpiece_tokenizer_learner_lib.learn`).

    Returns:
      list of str tokens, reserved tokens first.

    Raises:
      ValueError: no words in `texts`, or `vocab_size` smaller than the reserved tokens.
    """
    learner = _learner_lib()
    reserved = reserved_tokens(num_reserved_unused) + list(extra_reserved_tokens)
    if vocab_size <= len(reserved):
        raise ValueError(f"vocab_size={vocab_size} leaves no room after the {len(reserved)} "
                         "reserved tokens")
    counts = count_words(texts, do_lower_case=do_lower_case, max_lines=max_lines)
    if not counts:
        raise ValueError("no words found in the input texts; expected non-empty text")
    params = learner.Params(
        upper_thresh=None, lower_thresh=lower_thresh, num_iterations=num_iterations,
        max_input_tokens=-1, max_token_length=max_token_length,
        max_unique_chars=max_unique_chars, vocab_size=vocab_size, slack_ratio=slack_ratio,
        include_joiner_token=True, joiner="##", reserved_tokens=reserved)
    # The learner's own preprocessing (what its `learn` does before searching).
    words = learner.get_input_words(sorted(counts.items()), reserved, max_token_length)
    allowed_chars = learner.get_allowed_chars(words, max_unique_chars)
    words = learner.filter_input_words(words, allowed_chars, -1)
    vocab = _search_threshold(lambda thresh: learner.learn_with_thresh(words, thresh, params),
                              vocab_size, slack_ratio, max(1, lower_thresh),
                              max(count for _, count in words) + 1)
    return list(vocab)


def write_vocab(vocab: Sequence[str], output_file: str | os.PathLike) -> None:
    """Writes one token per line (UTF-8, "\\n" after each) atomically (temp file + os.replace),
    readable by all (0644).

    Raises:
      ValueError: a token is empty, contains whitespace at its ends or a newline, or repeats,
        since `load_vocab` could not read such a file back with the same ids.
    """
    seen: dict[str, int] = {}
    for i, token in enumerate(vocab):
        if not token or token != token.strip() or "\n" in token:
            raise ValueError(f"token {i} ({token!r}) cannot be written as a vocab line; expected "
                             "a non-empty token without surrounding whitespace or newlines")
        if token in seen:
            raise ValueError(f"token {i} ({token!r}) repeats token {seen[token]}")
        seen[token] = i
    with atomic_output_path(output_file) as tmp:
        with io_utils.open_file(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write("".join(f"{t}\n" for t in vocab))
        os.chmod(tmp, 0o644)  # The temporary file is created 0600; a vocab is for sharing.


def _search_threshold(learn_at, vocab_size: int, slack_ratio: float, lowest: int,
                      highest: int) -> list[str]:
    """Finds the smallest count threshold whose vocab fits in `vocab_size`.

    Replaces the learner's binary search over [lower_thresh, max count] (about 15 full learning
    passes on any corpus) by a galloping search from the low end, where the thresholds for
    vocabs of a few thousand to a few tens of thousands of tokens lie: one pass when even the
    lowest threshold fits, a handful otherwise. Stops early once the size is within
    `slack_ratio` of `vocab_size`, as the learner does.
    """
    good_enough = vocab_size - max(0.0, slack_ratio * vocab_size)
    cache: dict[int, list[str]] = {}

    def size_at(thresh: int) -> int:
        if thresh not in cache:
            cache[thresh] = learn_at(thresh)
        return len(cache[thresh])

    if size_at(lowest) <= vocab_size:
        return cache[lowest]
    low, high = lowest, lowest  # Invariant: size_at(low) > vocab_size.
    while True:
        high = min(2 * high, highest)
        size = size_at(high)
        if size <= vocab_size:
            break
        if high == highest:
            raise ValueError(
                f"even with a count threshold above every word's count the vocab has {size} "
                f"tokens (reserved tokens and single characters), more than vocab_size="
                f"{vocab_size}; raise vocab_size or lower max_unique_chars")
        low = high
    while high - low > 1 and size_at(high) < good_enough:
        mid = (low + high) // 2
        if size_at(mid) <= vocab_size:
            high = mid
        else:
            low = mid
    return cache[high]


def _expand_inputs(input_files: str | Sequence[str]) -> list[str]:
    """Comma-separated names/globs (or a list of them) -> sorted, existing file paths."""
    return io_utils.expand_file_patterns(input_files, "--input_file")


def _read_lines(paths: Sequence[str]) -> Iterable[str]:
    for path in paths:
        with io_utils.open_file(path, "rb") as f:
            for raw in f:
                yield convert_to_unicode(raw)


def build_wordpiece_vocab(input_files: str | Sequence[str],
                          output_file: str | os.PathLike | None = None, vocab_size: int = 30522,
                          do_lower_case: bool = True, num_reserved_unused: int = 0,
                          max_lines: int | None = None, **learn_kwargs) -> list[str]:
    """Learns a vocab from text files (one text per line) and optionally writes it.

    Args:
      input_files: a path, comma-separated paths/globs, or a list of them. Lines are decoded
        as UTF-8 with invalid bytes dropped, as `FullTokenizer` treats bytes.
      output_file: where to write the vocab (atomically); None to only return it.
      vocab_size, do_lower_case, num_reserved_unused, max_lines, **learn_kwargs: see
        `learn_wordpiece_vocab`.

    Returns:
      the vocab, a list of str tokens (index = id).
    """
    paths = _expand_inputs(input_files)
    vocab = learn_wordpiece_vocab(_read_lines(paths), vocab_size, do_lower_case=do_lower_case,
                                  num_reserved_unused=num_reserved_unused, max_lines=max_lines,
                                  **learn_kwargs)
    if output_file is not None:
        write_vocab(vocab, output_file)
    return vocab
