"""The fast in-graph mode: tensorflow-text's `FastBertTokenizer` on the texts it provably
tokenizes exactly like `FullTokenizer`, the exact in-graph ops on the rest.

`FastBertTokenizer` (`FastBertNormalize` + `FastWordpieceTokenizeWithOffsets`, both linear-time
C++ ops) differs from the original BERT tokenizer in a few systematic ways:

  * it lower-cases with full case folding plus compatibility (NFKC) folding: `ß` -> `ss`,
    `ﬁ` -> `fi`, `½` -> `1⁄2`, `¹` -> `1`, `ς` -> `σ`, `´` -> ` ́` ...;
  * it has no final-sigma rule (`Σ` is always `σ`);
  * it maps control and format characters (Cc/Cf) to a space instead of deleting them, and
    drops the Hangul fillers U+115F/U+1160;
  * its Unicode tables are newer than Python 3.11's (Unicode 14.0);
  * it limits words in bytes, the original in characters.

Everything else, i.e. per-code-point normalization, whitespace / punctuation / CJK splitting and
greedy longest-match-first WordPiece with whole-word [UNK], is the same. So a text whose every
character is in the *fast-path set* below gets the original's ids from `FastBertTokenizer`:

  * assigned in Unicode 3.2 with the same general category as in Python's tables (so both sides
    agree on what the character is), not C* / Z* (except " ", "\\t", "\\n", "\\r"), not U+FFFD,
    not the Hangul fillers U+115F / U+1160;
  * do_lower_case only: NFKC(c) == NFC(c) (no compatibility folding), `c.lower() == c.casefold()`
    (no case-folding difference), not `Σ` (final sigma), lower-case + NFD + dropping Mn gives at
    most one character (so word lengths in characters are unchanged) and leaves no combining
    character that canonical reordering could move.

Whether this rule describes the installed ops is not assumed: tests/tokenization sweeps all
1,112,064 code points (alone and inside a word) and checks that every fast-path character
gives `FullTokenizer`'s ids (in do_lower_case=True mode 91,500 characters are fast-path).

Per batch, `FastPathRouter.tokenize`:
  1. checks every text with one RE2 full match over the fast-path set;
  2. applies the original's cleaning to the texts that failed (invalid UTF-8 dropped,
     whitespace -> " ", NUL/U+FFFD/Cc/Cf deleted: e.g. the Windows-1252 control characters of
     scraped text, in 72 of the first 2,000 IMDb reviews) and checks them again; then one
     `FastBertTokenizer` call tokenizes the batch;
  3. word length: `FastBertTokenizer` runs with `max_bytes_per_word = max_input_chars_per_word`
     (200), so a word over the limit becomes [UNK] there as in the original; only a word of
     more bytes than characters can differ, so a non-ASCII text that got an [UNK] is re-done;
  4. texts that failed 2 or 3 (e.g. with `Σ`, `ß`, `½`, scripts newer than Unicode 3.2; 7 of
     those 2,000 reviews) are tokenized by the exact ops and their rows put back in place. A
     batch without such texts and without [UNK] runs none of this.

In a graph, the batch is cut into `num_shards` consecutive parts (2 by default, at most the
number of CPU cores) that go through steps 1-4 independently and are concatenated back in order:
the parts have no data dependence, so TensorFlow's inter-op thread pool runs them at the same
time (each `FastBertTokenizer` kernel call is single-threaded). The ids do not depend on the
cut. Profile on 2,000 IMDb reviews (CPU seconds, shared machine): FastWordpiece ~80% of
`FastBertTokenizer`, its normalizer ~20%, the fast-path check ~15% and the cleaning/re-doing
~15% on top, so one part alone stays at ~0.8x `FastBertTokenizer`; parts in parallel are what
makes this mode faster than it in wall time when cores are free.
"""
from __future__ import annotations

import functools
import os
import unicodedata
from typing import Callable

import tensorflow as tf
import tensorflow_text as tf_text

__all__ = ["FastPathRouter", "fast_path_class"]

ExactTokenize = Callable[[tf.Tensor], tf.RaggedTensor]

# Default-ignorable letters (category Lo) that the fast normalizer drops and Python keeps.
_HANGUL_FILLERS = ("\u115f", "\u1160")


def _is_fast_path_character(char: str, do_lower_case: bool) -> bool:
    """The fast-path rule (see the module docstring) for one character."""
    if char in " \t\n\r":
        return True
    category = unicodedata.category(char)
    if category[0] in "CZ" or char in _HANGUL_FILLERS or char == "\ufffd":
        return False  # C*, Z* and U+FFFD (deleted): cleaned first or left to the exact path.
    if unicodedata.ucd_3_2_0.category(char) != category:
        return False  # Assigned (or re-categorised) after Unicode 3.2.
    if not do_lower_case:
        return True
    if char == "\u03a3" or char.lower() != char.casefold():
        return False
    if unicodedata.normalize("NFKC", char) != unicodedata.normalize("NFC", char):
        return False
    decomposed = unicodedata.normalize("NFD", char.lower())
    kept = [c for c in decomposed if unicodedata.category(c) != "Mn"]
    return len(kept) <= 1 and all(unicodedata.combining(c) == 0 for c in kept)


@functools.lru_cache(maxsize=None)
def fast_path_class(do_lower_case: bool, unidata_version: str) -> str:
    """RE2 character class (with brackets) of the fast-path characters.

    Built from Python's `unicodedata` (about 0.3 s, cached per process); `unidata_version` is
    only the cache key.
    """
    del unidata_version
    ranges: list[list[int]] = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or not _is_fast_path_character(chr(cp), do_lower_case):
            continue
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    body = "".join(f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}"
                   for a, b in ranges)
    return "[" + body + "]"


class FastPathRouter(tf.Module):
    """`FastBertTokenizer` where its ids are provably the original's, exact ops elsewhere.

    Attributes:
      fast_bert: the `tf_text.FastBertTokenizer` (int32 ids, vocab order = ids).
    """

    def __init__(self, tokens: list[str], do_lower_case: bool, unk_token: str,
                 max_input_chars_per_word: int, whitespace_class: str, delete_class: str,
                 name: str | None = None, num_shards: int | None = None):
        """Args:
          tokens: the vocab, token i has id i.
          do_lower_case: as `FullTokenizer`.
          unk_token: the unknown token (in `tokens`).
          max_input_chars_per_word: longer words (in characters) are [UNK] (the original's 200).
          whitespace_class, delete_class: RE2 classes of the characters the original's cleaning
            maps to a space / deletes (from `in_graph._character_classes`).
          name: tf.Module name.
          num_shards: parts of a batch tokenized concurrently (see the module docstring);
            None: min(2, number of CPU cores).
        """
        super().__init__(name=name)
        self._plain = fast_path_class(bool(do_lower_case), unicodedata.unidata_version) + "*"
        self._whitespace_class = whitespace_class
        self._delete_class = delete_class
        self._unk_id = tokens.index(unk_token)
        if num_shards is None:
            num_shards = min(2, os.cpu_count() or 1)
        if num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {num_shards}")
        self._num_shards = int(num_shards)
        self.fast_bert = tf_text.FastBertTokenizer(
            vocab=tokens, suffix_indicator="##",
            # In bytes: the same limit as the original's for ASCII words; other words that hit
            # it are re-done by the exact ops (step 3 of the module docstring).
            max_bytes_per_word=max_input_chars_per_word, token_out_type=tf.int32,
            unknown_token=unk_token, no_pretokenization=False,
            lower_case_nfd_strip_accents=bool(do_lower_case))

    def is_plain(self, texts: tf.Tensor) -> tf.Tensor:
        """bool [batch]: every character (valid UTF-8 and) in the fast-path set."""
        return tf.strings.regex_full_match(texts, self._plain)

    def clean(self, texts: tf.Tensor) -> tf.Tensor:
        """The original's `_clean_text` (+ dropping invalid UTF-8) as ops: [n] -> [n]."""
        texts = tf.strings.unicode_transcode(texts, input_encoding="UTF-8",
                                             output_encoding="UTF-8", errors="ignore")
        texts = tf.strings.regex_replace(texts, self._whitespace_class, " ")
        return tf.strings.regex_replace(texts, self._delete_class, "")

    def tokenize(self, texts: tf.Tensor, exact: ExactTokenize) -> tf.RaggedTensor:
        """Texts [batch] -> int32 [batch, (pieces)], the original's ids.

        Args:
          texts: tf.string [batch].
          exact: the exact tokenization, tf.string [n] -> int32 [n, (pieces)], for the texts
            the fast path cannot take.
        """
        if self._num_shards == 1:
            return self._tokenize_part(texts, exact)
        size = tf.shape(texts, out_type=tf.int64)[0]
        bounds = [size * i // self._num_shards for i in range(self._num_shards + 1)]
        return tf.concat([self._tokenize_part(texts[bounds[i]:bounds[i + 1]], exact)
                          for i in range(self._num_shards)], axis=0)

    def _tokenize_part(self, texts: tf.Tensor, exact: ExactTokenize) -> tf.RaggedTensor:
        """`tokenize` of one part of a batch (steps 1-4 of the module docstring)."""
        plain = self.is_plain(texts)
        texts_in, plain = tf.cond(tf.reduce_all(plain), lambda: (texts, plain),
                                  lambda: self._clean_others(texts, plain))
        ids = self.fast_bert.tokenize(texts_in)  # [batch, (pieces)]
        # Rare: a text the fast path cannot take, or an [UNK] (maybe a word over
        # max_bytes_per_word that is within the limit in characters). Checked per batch first.
        suspect = tf.logical_or(tf.logical_not(tf.reduce_all(plain)),
                                tf.reduce_any(tf.equal(ids.flat_values, self._unk_id)))
        return tf.cond(suspect, lambda: self._redo_rows(texts, texts_in, plain, ids, exact),
                       lambda: ids)

    def _clean_others(self, texts: tf.Tensor, plain: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Cleans the non-plain texts and checks them again: (texts, plain) [batch]."""
        others = tf.where(~plain)
        cleaned = self.clean(tf.gather_nd(texts, others))
        return (tf.tensor_scatter_nd_update(texts, others, cleaned),
                tf.tensor_scatter_nd_update(plain, others, self.is_plain(cleaned)))

    def _redo_rows(self, texts: tf.Tensor, texts_in: tf.Tensor, plain: tf.Tensor,
                   ids: tf.RaggedTensor, exact: ExactTokenize) -> tf.RaggedTensor:
        """Rows that are not plain, or non-ASCII with an [UNK], replaced by `exact` of the
        original texts."""
        unk_rows = tf.where(tf.reduce_any(tf.equal(ids, self._unk_id), axis=1))
        unk_texts = tf.gather_nd(texts_in, unk_rows)
        non_ascii = tf.strings.length(unk_texts) != tf.strings.length(unk_texts, unit="UTF8_CHAR")
        redo = tf.tensor_scatter_nd_update(~plain, unk_rows,
                                           tf.gather_nd(~plain, unk_rows) | non_ascii)
        keep_index, redo_index = tf.where(~redo)[:, 0], tf.where(redo)[:, 0]
        redone = exact(tf.gather(texts, redo_index))
        merged = tf.concat([tf.gather(ids, keep_index), redone], axis=0)
        order = tf.concat([keep_index, redo_index], axis=0)
        return tf.gather(merged, tf.math.invert_permutation(order))

    def split(self, texts: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(fast bool [batch], texts after cleaning) as `tokenize` decides them before running
        FastBertTokenizer (for tests and statistics; step 3 may move more texts)."""
        plain = self.is_plain(texts)
        texts_in, plain = self._clean_others(texts, plain)
        return plain, texts_in
