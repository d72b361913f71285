"""In-graph twin of `FullTokenizer`: strings -> WordPiece ids with TensorFlow ops only.

`InGraphTokenizer` is a `tf.Module`. It runs inside `tf.function`, `tf.data` pipelines and
SavedModels (the vocab is a tracked lookup table, the vocab file a tracked asset) and gives the
same ids as the Python `FullTokenizer` except for the cases listed in docs/tokenization.md.

It is composed from ops that TF Serving links: core TF string ops (`UnicodeTranscode`,
`RegexReplace` (RE2), `StringLower` (ICU, utf-8), `StringSplitV2`, `StringLength`, lookup tables)
plus two classic tensorflow-text ops, `NormalizeUTF8` (ICU NFD) and `WordpieceTokenizeWithOffsets`.
Loading a SavedModel that contains it needs `import tensorflow_text` first (to register those
ops). It does not use `text.BertTokenizer`, because that one differs from the original in ways
that matter: it lower-cases with ICU case folding plus NFKC (full-width letters, ligatures and
"ß" change), replaces control characters with spaces instead of deleting them, and limits words
in bytes rather than characters. Step by step, as the original:

  1. invalid UTF-8 bytes are dropped (Python's `decode("utf-8", "ignore")`);
  2. \\t \\n \\r, category Zs and U+2028/U+2029 become a space; NUL, U+FFFD and Cc/Cf are deleted;
  3. do_lower_case only: `StringLower` (Python-like `str.lower()`, final sigma included), NFD,
     delete category Mn;
  4. CJK ideographs and punctuation (ASCII non-alphanumerics and P*) get spaces around them;
  5. split on whitespace; words over `max_input_chars_per_word` (200) characters become [UNK];
  6. greedy longest-match-first WordPiece (a word with any piece missing becomes one [UNK]).

Two modes give these ids. `mode="exact"` runs the steps above as written. `mode="fast"` (the
default) sends each text whose characters tensorflow-text's `FastBertTokenizer` provably handles
like the original (`fast_in_graph.py`; nearly all English text) through that tokenizer's two
linear-time ops and only the rest through the exact steps; the ids are the same, and it is
faster (bench/bench_tokenizers.py). `tokenize_words` and `basic_tokenize` always run the exact
steps.
"""
from __future__ import annotations

import functools
import os
import unicodedata
from typing import Sequence

import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.tokenization.fast_in_graph import FastPathRouter
from bert_tf.tokenization.full_tokenizer import load_vocab, vocab_tokens_by_id

__all__ = ["InGraphTokenizer", "MODES"]

MODES = ("fast", "exact")

_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _re2_class(ranges: list[tuple[int, int]]) -> str:
    """[(first, last)] codepoint ranges -> the body of an RE2 character class."""
    return "".join(f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}"
                   for a, b in ranges)


@functools.lru_cache(maxsize=None)
def _character_classes(unidata_version: str) -> dict[str, str]:
    """RE2 patterns for the tokenizer's character classes, built from Python's `unicodedata`.

    Building them from the same tables as `FullTokenizer` (rather than using RE2's own
    `\\p{..}` tables, which follow a newer Unicode version) keeps both tokenizers in agreement
    for characters that a newer Unicode version assigned or re-categorised. Computed once per
    process (about half a second); `unidata_version` is the cache key.

    Returns:
      {"whitespace", "delete", "mn", "isolate"} -> RE2 character class (with brackets).
    """
    del unidata_version  # Only the cache key; the tables are those of the running Python.
    names = ("whitespace", "delete", "mn", "isolate")
    ranges: dict[str, list[list[int]]] = {name: [] for name in names}

    def add(name: str, cp: int) -> None:
        r = ranges[name]
        if r and r[-1][1] == cp - 1:
            r[-1][1] = cp
        else:
            r.append([cp, cp])

    category = unicodedata.category
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:  # Surrogates cannot occur in valid UTF-8.
            continue
        char = chr(cp)
        cat = category(char)
        if cat == "Cn" or cat == "Lo" or cat == "Ll" or cat == "Lu" or cat == "Nd":
            continue  # None of the classes below (CJK ideographs are added as ranges).
        if char == " ":
            continue  # Already a space; leaving it out of the class keeps RE2 from rewriting it.
        if char in "\t\n\r" or cat == "Zs" or (char.isspace() and cat not in ("Cc", "Cf")):
            add("whitespace", cp)  # Zs, \t \n \r, and U+2028/U+2029 that str.split() splits on.
        elif cp == 0 or cp == 0xFFFD or cat in ("Cc", "Cf"):
            add("delete", cp)
        elif cat == "Mn":
            add("mn", cp)
        elif cat.startswith("P") or 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or (
                123 <= cp <= 126):
            add("isolate", cp)
    isolate = sorted([tuple(r) for r in ranges["isolate"]] + list(_CJK_RANGES))
    return {
        "whitespace": "[" + _re2_class([tuple(r) for r in ranges["whitespace"]]) + "]",
        "delete": "[" + _re2_class([tuple(r) for r in ranges["delete"]]) + "]",
        "mn": "[" + _re2_class([tuple(r) for r in ranges["mn"]]) + "]",
        "isolate": "[" + _re2_class(isolate) + "]",
    }


class InGraphTokenizer(tf.Module):
    """BERT's `FullTokenizer` as TensorFlow ops (usable in tf.function, tf.data, SavedModels).

    Attributes:
      vocab_file: `tf.saved_model.Asset` of the vocab file (exported with a SavedModel).
      do_lower_case: whether text is lower-cased and accent-stripped.
      mode: "fast" (FastBertTokenizer where it provably agrees, see `fast_in_graph`) or
        "exact" (the step-by-step ops only); both give the same ids.
      vocab_size: number of ids, the vocab file's number of lines (Python int).
      pad_id, unk_id, cls_id, sep_id, mask_id: ids of "[PAD]", "[UNK]", "[CLS]", "[SEP]" and
        "[MASK]" (Python ints; None for a token the vocab lacks, except [UNK], which is required).
    """

    def __init__(self, vocab_file: str | os.PathLike, do_lower_case: bool = True,
                 unk_token: str = "[UNK]", max_input_chars_per_word: int = 200,
                 mode: str = "fast", name: str | None = None, num_shards: int | None = None):
        """Args:
          vocab_file: WordPiece vocab, one token per line (read and validated by `load_vocab`).
          do_lower_case: lower-case and strip accents, as `FullTokenizer(do_lower_case=...)`.
          unk_token: token for words that cannot be split; must be in the vocab.
          max_input_chars_per_word: longer words (in characters) become one `unk_token`.
          mode: "fast" or "exact" (same ids; "fast" is faster on typical text and puts the
            tensorflow-text ops FastBertNormalize and FastWordpieceTokenizeWithOffsets in the
            graph besides the classic ones).
          name: tf.Module name.
          num_shards: fast mode only: parts of each batch tokenized at the same time (None:
            min(2, CPU cores); 1: one thread; see `fast_in_graph`). The ids do not depend on it.

        Raises:
          FileNotFoundError / ValueError: see `load_vocab`; ValueError if `unk_token` is missing
          or `mode` is unknown.
        """
        super().__init__(name=name)
        if mode not in MODES:
            raise ValueError(f"InGraphTokenizer: mode={mode!r}; expected one of {MODES}")
        vocab_file = os.fspath(vocab_file)
        vocab = load_vocab(vocab_file)
        if unk_token not in vocab:
            raise ValueError(f"{vocab_file}: the unknown token {unk_token!r} is not in the vocab; "
                             "expected it on one of the lines")
        # Item i is the token with id i. In a regular vocab that is the file's token list; a
        # token on several lines (which `load_vocab` reports) has the id of its last line, as
        # in the original, and its earlier ids get placeholders no word piece can match.
        tokens = vocab_tokens_by_id(vocab)
        self.vocab_file = tf.saved_model.Asset(vocab_file)
        self.do_lower_case = bool(do_lower_case)
        self.mode = mode
        self.unk_token = unk_token
        self.max_input_chars_per_word = int(max_input_chars_per_word)
        self.vocab_size = len(tokens)
        self.unk_id = vocab[unk_token]
        self.pad_id = vocab.get("[PAD]")
        self.cls_id = vocab.get("[CLS]")
        self.sep_id = vocab.get("[SEP]")
        self.mask_id = vocab.get("[MASK]")
        self._classes = _character_classes(unicodedata.unidata_version)
        self._vocab_table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                keys=tf.constant(tokens, dtype=tf.string),
                values=tf.range(len(tokens), dtype=tf.int64)),
            default_value=-1)  # The WordPiece op treats -1 as "not in the vocab".
        self._id_to_token = tf.constant(tokens, dtype=tf.string)
        self._wordpiece = tf_text.WordpieceTokenizer(
            self._vocab_table, suffix_indicator="##",
            # Words are limited in characters below; every word that passes fits in 4 bytes/char.
            max_bytes_per_word=4 * self.max_input_chars_per_word,
            token_out_type=tf.int32, unknown_token=unk_token, split_unknown_characters=False)
        self._fast = None
        if mode == "fast":
            self._fast = FastPathRouter(
                tokens, self.do_lower_case, unk_token, self.max_input_chars_per_word,
                whitespace_class=self._classes["whitespace"],
                delete_class=self._classes["delete"], num_shards=num_shards)

    def basic_tokenize(self, texts: tf.Tensor | Sequence[str]) -> tf.RaggedTensor | tf.Tensor:
        """Like `BasicTokenizer.tokenize`: words and punctuation before WordPiece.

        Args:
          texts: tf.string of shape [batch] (or a scalar), UTF-8 (invalid bytes are dropped).

        Returns:
          tf.string RaggedTensor [batch, (words)] (for a scalar input: a 1-D tf.string Tensor).
        """
        texts, scalar = self._as_batch(texts)
        words = self._basic_tokenize(texts)
        return words[0] if scalar else words

    def tokenize_words(self, texts: tf.Tensor | Sequence[str]) -> tf.RaggedTensor:
        """Word pieces grouped per word (useful for whole-word masking).

        Args:
          texts: tf.string of shape [batch] (or a scalar).

        Returns:
          int32 RaggedTensor [batch, (words), (pieces)] (scalar input: [(words), (pieces)]).
        """
        texts, scalar = self._as_batch(texts)
        ids = self._tokenize_words(texts)
        return ids[0] if scalar else ids

    def tokenize(self, texts: tf.Tensor | Sequence[str]) -> tf.RaggedTensor | tf.Tensor:
        """Like `FullTokenizer.tokenize` + `convert_tokens_to_ids`: the pieces of each text.

        Args:
          texts: tf.string of shape [batch] (or a scalar).

        Returns:
          int32 RaggedTensor [batch, (pieces)] (for a scalar input: a 1-D int32 Tensor).
        """
        texts, scalar = self._as_batch(texts)
        if self._fast is None:
            ids = self._tokenize_words(texts).merge_dims(1, 2)
        else:
            ids = self._tokenize_routed(texts)
        return ids[0] if scalar else ids

    __call__ = tokenize

    def convert_ids_to_tokens(self, ids: tf.Tensor | tf.RaggedTensor
                              ) -> tf.Tensor | tf.RaggedTensor:
        """Ids (any int Tensor or RaggedTensor) -> tf.string token(s) of the same shape."""
        if isinstance(ids, tf.RaggedTensor):
            return ids.with_flat_values(self.convert_ids_to_tokens(ids.flat_values))
        return tf.gather(self._id_to_token, ids)

    # -- internals ---------------------------------------------------------------------------

    @staticmethod
    def _as_batch(texts) -> tuple[tf.Tensor, bool]:
        texts = tf.convert_to_tensor(texts, dtype=tf.string)
        rank = texts.shape.rank
        if rank == 0:
            return tf.expand_dims(texts, 0), True
        if rank != 1:
            raise ValueError(f"InGraphTokenizer expects a tf.string scalar or vector [batch]; got "
                             f"shape {texts.shape}")
        return texts, False

    def _basic_tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """[batch] tf.string -> [batch, (words)] tf.string."""
        classes = self._classes
        # Steps that only matter for non-ASCII text run on those strings only (UTF-8 repair via
        # ICU is slow); RE2 in UTF-8 mode matches no invalid byte, so this also catches those.
        non_ascii = tf.where(~tf.strings.regex_full_match(texts, r"[\x00-\x7F]*"))
        texts = tf.tensor_scatter_nd_update(
            texts, non_ascii, self._unicode_steps(tf.gather_nd(texts, non_ascii)))
        texts = tf.strings.regex_replace(texts, classes["whitespace"], " ")
        texts = tf.strings.regex_replace(texts, classes["delete"], "")
        if self.do_lower_case:
            texts = tf.strings.lower(texts)  # ASCII only; the rest was lowered above.
        texts = tf.strings.regex_replace(texts, classes["isolate"], r" \0 ")
        return tf.strings.split(texts)

    def _unicode_steps(self, texts: tf.Tensor) -> tf.Tensor:
        """Non-ASCII strings [n]: drop invalid UTF-8; clean, lower-case, NFD and drop Mn."""
        texts = tf.strings.unicode_transcode(texts, input_encoding="UTF-8",
                                             output_encoding="UTF-8", errors="ignore")
        if not self.do_lower_case:
            return texts
        # Cleaning comes before lower-casing in the original (it affects Final_Sigma context).
        texts = tf.strings.regex_replace(texts, self._classes["whitespace"], " ")
        texts = tf.strings.regex_replace(texts, self._classes["delete"], "")
        texts = tf.strings.lower(texts, encoding="utf-8")
        texts = tf_text.normalize_utf8(texts, "NFD")
        return tf.strings.regex_replace(texts, self._classes["mn"], "")

    def _tokenize_routed(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Fast mode: [batch] tf.string -> int32 [batch, (pieces)] (see `FastPathRouter`)."""
        return self._fast.tokenize(
            texts, lambda some: self._tokenize_words(some).merge_dims(1, 2))

    def _tokenize_words(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """[batch] tf.string -> int32 [batch, (words), (pieces)]."""
        words = self._basic_tokenize(texts)
        # Each distinct word is split once: [num_words] -> [num_distinct] + index.
        distinct, index = tf.unique(words.flat_values, out_idx=tf.int64)
        pieces = tf.gather(self._wordpiece_distinct(distinct), index)  # [num_words, (pieces)]
        return words.with_flat_values(pieces)

    def _wordpiece_distinct(self, words: tf.Tensor) -> tf.RaggedTensor:
        """[n] distinct words -> int32 [n, (pieces)], as `WordpieceTokenizer.tokenize_words`."""
        too_long = tf.strings.length(words, unit="UTF8_CHAR") > self.max_input_chars_per_word
        words = tf.where(too_long, tf.constant(self.unk_token), words)
        # Most words are vocab entries (WordPiece keeps them whole): one batched table lookup.
        # Only the others go through the (much slower) WordPiece op.
        whole_ids = self._vocab_table.lookup(words)
        in_vocab = whole_ids >= 0
        oov_index = tf.where(~in_vocab)
        oov_pieces = self._wordpiece.tokenize(tf.gather_nd(words, oov_index))  # [m, (pieces)]
        num_words = tf.shape(words, out_type=tf.int64)[0]
        whole = tf.RaggedTensor.from_row_lengths(
            tf.cast(tf.boolean_mask(whole_ids, in_vocab), tf.int32),
            tf.cast(in_vocab, tf.int64), validate=False)
        split = tf.RaggedTensor.from_row_lengths(
            oov_pieces.flat_values,
            tf.scatter_nd(oov_index, tf.cast(oov_pieces.row_lengths(), tf.int64), [num_words]),
            validate=False)
        return tf.concat([whole, split], axis=1)  # Each word's row is in exactly one of them.
