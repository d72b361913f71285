"""The original BERT tokenizer API (google-research/bert `tokenization.py`), re-implemented.

A user of the original switches by changing only the import::

    from bert_tf import tokenization            # instead of `import tokenization`
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    tokens = tokenizer.tokenize("Hello, World!")    # ['hello', ',', 'world', '!']
    ids = tokenizer.convert_tokens_to_ids(tokens)   # [7592, 1010, 2088, 999]

The output is the original's, character for character, including its less obvious behaviour:
control and format characters (Cc/Cf), NUL and U+FFFD are deleted (gluing words together), not
replaced by a space; accents are stripped (NFD, then category Mn dropped) only when lower-casing;
lower-casing is Python's `str.lower()` (no NFKC); punctuation is ASCII non-alphanumerics plus
Unicode P*; only CJK ideographs are split per character; a word longer than 200 characters, or
with any piece missing from the vocab, becomes one `[UNK]`; `bytes` input is decoded as UTF-8
with invalid bytes dropped. Results depend on Python's `unicodedata` tables (the reference
outputs were produced with Unicode 14.0.0, i.e. Python 3.11).

What differs from the original, on purpose:
  * `load_vocab` loads what the original loads, with the original's ids, but says so when a file
    has lines whose ids are surprising: a blank or whitespace-only line (the empty token gets that
    line's id) and a token listed twice (the last line's id wins, the earlier id is unreachable)
    are one `UserWarning` naming the file and the lines. Invalid UTF-8 (the original's reader
    fails too) and a missing file raise `ValueError` / `FileNotFoundError` naming the file (and
    line).
  * It is faster (per-character classes are cached per tokenizer, the text is transformed with
    `str.translate` in a few passes instead of per-character Python calls, and the splits of
    out-of-vocab words are cached); the output is the same. The split cache is kept only for a
    vocab that reports its edits (`VocabDict`, what `load_vocab` returns): editing
    `tokenizer.vocab` in place drops it, so no split of an older vocab is ever returned; a plain
    dict given to `WordpieceTokenizer` is never cached.
"""
from __future__ import annotations

import collections
import os
import re
import unicodedata
import warnings
from typing import Iterable, Mapping, Sequence

__all__ = [
    "BasicTokenizer",
    "FullTokenizer",
    "VocabDict",
    "WordpieceTokenizer",
    "convert_by_vocab",
    "convert_ids_to_tokens",
    "convert_to_unicode",
    "convert_tokens_to_ids",
    "load_vocab",
    "printable_text",
    "validate_case_matches_checkpoint",
    "vocab_tokens_by_id",
    "whitespace_tokenize",
]

# Published Google checkpoints whose tokenizer must (not) lower-case, as the original lists them.
_UNCASED_MODELS = ("uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
                   "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12")
_CASED_MODELS = ("cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16",
                 "multi_cased_L-12_H-768_A-12")
_MODEL_NAME_RE = re.compile(r"^.*?([A-Za-z0-9_-]+)/bert_model.ckpt")


def validate_case_matches_checkpoint(do_lower_case: bool, init_checkpoint: str | None) -> None:
    """Raises ValueError if `do_lower_case` contradicts a known Google checkpoint's casing.

    Args:
      do_lower_case: the tokenizer setting the user chose.
      init_checkpoint: checkpoint path such as `.../uncased_L-12_H-768_A-12/bert_model.ckpt`.
        The check only applies when the folder holding `bert_model.ckpt` has the name of one of
        the published BERT-Base/Large, multilingual or Chinese models; anything else (including
        None or "") passes silently, as in the original.

    Returns:
      None.
    """
    if not init_checkpoint:
        return
    match = _MODEL_NAME_RE.match(init_checkpoint)
    if match is None:
        return
    model_name = match.group(1)
    if model_name in _UNCASED_MODELS and not do_lower_case:
        kind, wanted = "lower-cased (uncased)", True
    elif model_name in _CASED_MODELS and do_lower_case:
        kind, wanted = "cased", False
    else:
        return
    raise ValueError(
        f"do_lower_case={do_lower_case} was given with init_checkpoint={init_checkpoint}, but "
        f"`{model_name}` is a {kind} model, so fine-tuning should use do_lower_case={wanted} to "
        "tokenize the way the model was pre-trained. If this check is wrong for your checkpoint, "
        "rename its folder or skip this call.")


def convert_to_unicode(text: str | bytes) -> str:
    """Returns `text` as `str`: `str` unchanged, `bytes` decoded as UTF-8 dropping invalid bytes.

    Raises:
      ValueError: for any other type.
    """
    if isinstance(text, str):
        return text
    if isinstance(text, bytes):
        return text.decode("utf-8", "ignore")
    raise ValueError(f"Unsupported string type: {type(text)} (expected str or bytes)")


def printable_text(text: str | bytes) -> str:
    """Returns `text` as a `str` suitable for printing or logging (same conversion as
    `convert_to_unicode` under Python 3)."""
    return convert_to_unicode(text)


def _open_vocab_bytes(vocab_file: str) -> bytes:
    """Reads the whole vocab file through bert_tf.io_utils (any TensorFlow file system)."""
    from bert_tf import io_utils

    if not io_utils.isfile(vocab_file):
        raise FileNotFoundError(f"vocab file {vocab_file} does not exist (or is not a file)")
    return io_utils.read_bytes(vocab_file)


class VocabDict(collections.OrderedDict):
    """The `collections.OrderedDict` token -> id that `load_vocab` returns (the original's type),
    counting its edits: `version` changes whenever a token is added, removed or given another id
    through the dict's methods, so that `WordpieceTokenizer` can cache the splits of
    out-of-vocab words and drop them when the vocab changes in place."""

    def __init__(self, *args, **kwargs):
        self.version = 0
        super().__init__(*args, **kwargs)

    def _edited(self) -> None:
        self.version = getattr(self, "version", 0) + 1

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self._edited()

    def __delitem__(self, key):
        super().__delitem__(key)
        self._edited()

    def pop(self, *args):
        self._edited()
        return super().pop(*args)

    def popitem(self, last: bool = True):
        self._edited()
        return super().popitem(last)

    def clear(self):
        super().clear()
        self._edited()

    def setdefault(self, key, default=None):
        self._edited()
        return super().setdefault(key, default)

    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        self._edited()

    def __ior__(self, other):
        result = super().__ior__(other)
        self._edited()
        return result


_MAX_LISTED_VOCAB_LINES = 5


def load_vocab(vocab_file: str | os.PathLike) -> "collections.OrderedDict[str, int]":
    """Loads a WordPiece vocab file: one token per line, id = line number counted from 0.

    Lines are split on "\\n" only and stripped of surrounding whitespace (`str.strip()`), as in
    the original, and the dict is the original's for every file the original reads:
      * a blank or whitespace-only line is the empty token "" with that line's id (a blank line
        at the end of the file too; the newline that ends the last line starts no token);
      * a token on several lines keeps its first place in the dict and the id of its last line
        (the ids of its earlier lines are no token's).
    Both are legal but rarely meant (the ids after them are still line numbers, so a model
    trained with the file keeps working), so they are reported in one `UserWarning` naming the
    file and the lines.

    Args:
      vocab_file: path of a UTF-8 text file (local, or any `tf.io.gfile` URL such as gs://).

    Returns:
      `VocabDict` (an OrderedDict) token (str) -> id (int), in file order.

    Raises:
      FileNotFoundError: the file does not exist.
      ValueError: a line that is not valid UTF-8 (the message names the file and the line).
    """
    vocab_file = os.fspath(vocab_file)
    data = _open_vocab_bytes(vocab_file)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":  # The newline that ends the last line starts no new token.
        lines.pop()
    vocab = VocabDict()
    first_line: dict[str, int] = {}
    notes: list[str] = []
    for index, raw in enumerate(lines):
        line_no = index + 1
        try:
            token = raw.decode("utf-8").strip()
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{vocab_file}, line {line_no}: not valid UTF-8 ({e.reason} at byte {e.start} of "
                "the line); a vocab file must be UTF-8 text with one token per line") from None
        if token in first_line:
            what = "blank" if not token else f"{token!r}"
            notes.append(f"line {line_no} repeats the {what} token of line {first_line[token]}")
        elif not token:
            notes.append(f"line {line_no} is blank")
        first_line.setdefault(token, line_no)
        vocab[token] = index
    if notes:
        more = len(notes) - _MAX_LISTED_VOCAB_LINES
        listed = "; ".join(notes[:_MAX_LISTED_VOCAB_LINES]) + (f"; and {more} more" if more > 0
                                                                 else "")
        warnings.warn(
            f"{vocab_file}: {listed}. Loaded as the original loads it: ids are line numbers, a "
            "repeated token gets the id of its last line (its earlier ids are no token's), a "
            "blank line is the empty token", UserWarning, stacklevel=2)
    vocab.version = 0
    return vocab


def vocab_tokens_by_id(vocab: Mapping[str, int]) -> list[str]:
    """The list whose item i is the token with id i (what in-graph lookup tables and
    `tf_text.FastBertTokenizer` take): ids no token has (the earlier lines of a repeated token,
    see `load_vocab`) get a distinct placeholder with spaces in it, which no word piece can
    match.

    Raises:
      ValueError: an id that is not an integer >= 0.
    """
    size = 0
    for token, index in vocab.items():
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"vocab: token {token!r} has id {index!r}; expected an integer >= 0")
        size = max(size, index + 1)
    tokens = [f"[ no token has id {i} ]" for i in range(size)]
    for token, index in vocab.items():
        tokens[index] = token
    return tokens


def convert_by_vocab(vocab: Mapping, items: Iterable) -> list:
    """Maps each item through `vocab` (tokens -> ids or ids -> tokens).

    Raises:
      KeyError: for an item that is not in `vocab` (as the original).
    """
    return [vocab[item] for item in items]


def convert_tokens_to_ids(vocab: Mapping[str, int], tokens: Iterable[str]) -> list[int]:
    """Token strings -> ids with `vocab` (token -> id)."""
    return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab: Mapping[int, str], ids: Iterable[int]) -> list[str]:
    """Ids -> token strings with `inv_vocab` (id -> token)."""
    return convert_by_vocab(inv_vocab, ids)


def whitespace_tokenize(text: str) -> list[str]:
    """Splits on whitespace as Python's `str.split()` does (after stripping); [] for blank text."""
    return text.split()


class FullTokenizer:
    """End-to-end tokenization: `BasicTokenizer` then `WordpieceTokenizer`.

    Attributes:
      vocab: OrderedDict token -> id.
      inv_vocab: dict id -> token.
      basic_tokenizer: the `BasicTokenizer(do_lower_case)`.
      wordpiece_tokenizer: the `WordpieceTokenizer(vocab)` (unk "[UNK]", 200 chars per word).
    """

    def __init__(self, vocab_file: str | os.PathLike, do_lower_case: bool = True):
        """Loads `vocab_file` (see `load_vocab`) and builds both tokenizers."""
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)

    def tokenize(self, text: str | bytes) -> list[str]:
        """Text (str, or UTF-8 bytes) -> list of WordPiece token strings."""
        words = self.basic_tokenizer.tokenize(text)
        wordpiece = self.wordpiece_tokenizer
        tokenize_words = getattr(wordpiece, "tokenize_words", None)
        if tokenize_words is not None:
            return tokenize_words(words)
        split_tokens = []  # A user-supplied wordpiece tokenizer with only `.tokenize`.
        for word in words:
            split_tokens.extend(wordpiece.tokenize(word))
        return split_tokens

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        """Token strings -> ids; KeyError for a token not in the vocab."""
        return convert_by_vocab(self.vocab, tokens)

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        """Ids -> token strings; KeyError for an id not in the vocab."""
        return convert_by_vocab(self.inv_vocab, ids)


# ---------------------------------------------------------------------------------------------
# Character classes. The `is_*` helpers are the original module-level `_is_*` functions (some
# code imports them from `bert_tf.tokenization` under those names); the tokenizers use cached
# per-codepoint translation tables built from them.


def is_whitespace(char: str) -> bool:
    """Space, \\t, \\n, \\r, or Unicode category Zs."""
    if char in " \t\n\r":
        return True
    return unicodedata.category(char) == "Zs"


def is_control(char: str) -> bool:
    """Unicode category Cc or Cf, except \\t, \\n and \\r (which count as whitespace)."""
    if char in "\t\n\r":
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def is_punctuation(char: str) -> bool:
    """ASCII non-alphanumeric printable characters, or Unicode category P*."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_chinese_codepoint(cp: int) -> bool:
    """The CJK Unified/Compatibility Ideograph blocks (not kana, hangul or U+3007)."""
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def _is_deleted(char: str) -> bool:
    """Characters the original's `_clean_text` drops: NUL, U+FFFD, and controls."""
    return char == "\x00" or char == "\ufffd" or is_control(char)


class _LazyTable(dict):
    """`str.translate` table codepoint -> replacement, filled on first use of each codepoint.

    `str.translate` looks entries up with `__getitem__`, so `__missing__` computes an entry once
    per tokenizer and character; later texts hit the plain dict (C speed).
    """

    __slots__ = ("_classify",)

    def __init__(self, classify):
        super().__init__()
        self._classify = classify

    def __missing__(self, cp: int):
        value = self._classify(chr(cp))
        self[cp] = value
        return value


def _clean_value(char: str):
    """Replacement for the original's `_clean_text` + `_tokenize_chinese_chars` (pass 1)."""
    if _is_deleted(char):
        return None
    if is_whitespace(char):
        return " "
    if _is_chinese_codepoint(ord(char)):
        return f" {char} "
    return char


def _split_value(char: str):
    """After lower-casing and NFD: drop Mn (accent stripping) and isolate punctuation (pass 2)."""
    if unicodedata.category(char) == "Mn":
        return None
    if is_punctuation(char):
        return f" {char} "
    return char


def _cased_value(char: str):
    """do_lower_case=False: cleaning, CJK isolation and punctuation isolation in one pass."""
    value = _clean_value(char)
    if value is not None and value == char and is_punctuation(char):
        return f" {char} "
    return value


class BasicTokenizer:
    """Splits on whitespace and punctuation, isolates CJK ideographs, optionally lower-cases and
    strips accents. Same output as the original's `BasicTokenizer`."""

    def __init__(self, do_lower_case: bool = True):
        """Args: do_lower_case: lower-case (`str.lower()`) and strip accents (NFD, drop Mn)."""
        self.do_lower_case = do_lower_case
        self._clean_table = _LazyTable(_clean_value)
        self._split_table = _LazyTable(_split_value)
        self._cased_table = _LazyTable(_cased_value)

    def tokenize(self, text: str | bytes) -> list[str]:
        """Text (str, or UTF-8 bytes) -> list of basic tokens (words and punctuation)."""
        text = convert_to_unicode(text)
        # Equivalent to the original's per-word steps: the words are separated by whitespace,
        # which lower() (Final_Sigma context), NFD (canonical reordering stops at starters) and
        # the per-character tables leave as it is, so whole-text passes give the same words.
        if not self.do_lower_case:
            return text.translate(self._cased_table).split()
        if text.isascii():
            return text.translate(self._cased_table).lower().split()
        text = text.translate(self._clean_table).lower()
        text = unicodedata.normalize("NFD", text)
        return text.translate(self._split_table).split()

    # The original's helper methods, kept for code that calls them directly.
    def _run_strip_accents(self, text: str) -> str:
        """NFD, then drop category Mn."""
        text = unicodedata.normalize("NFD", text)
        return "".join(c for c in text if unicodedata.category(c) != "Mn")

    def _run_split_on_punc(self, text: str) -> list[str]:
        """Splits `text` into runs of non-punctuation and single punctuation characters."""
        output: list[list[str]] = []
        start_new_word = True
        for char in text:
            if is_punctuation(char):
                output.append([char])
                start_new_word = True
            else:
                if start_new_word:
                    output.append([])
                start_new_word = False
                output[-1].append(char)
        return ["".join(x) for x in output]

    def _tokenize_chinese_chars(self, text: str) -> str:
        """Surrounds every CJK ideograph with spaces."""
        return "".join(f" {c} " if _is_chinese_codepoint(ord(c)) else c for c in text)

    def _is_chinese_char(self, cp: int) -> bool:
        """True for a codepoint in the CJK ideograph blocks."""
        return _is_chinese_codepoint(cp)

    def _clean_text(self, text: str) -> str:
        """Deletes NUL, U+FFFD and controls; maps whitespace to a space."""
        return "".join(" " if is_whitespace(c) else c for c in text if not _is_deleted(c))


_MAX_CACHED_WORDS = 1 << 17


class WordpieceTokenizer:
    """Greedy longest-match-first WordPiece, as the original's `WordpieceTokenizer`."""

    def __init__(self, vocab: Mapping[str, int], unk_token: str = "[UNK]",
                 max_input_chars_per_word: int = 200):
        """Args:
          vocab: token -> id mapping (only membership is used). Read at every call, so edits
            show at once; the splits of out-of-vocab words are cached only for a `VocabDict`
            (`load_vocab`'s), which reports its edits.
          unk_token: emitted for a word that cannot be split into vocab pieces.
          max_input_chars_per_word: longer words (in characters) become one `unk_token`.
        """
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word
        # Splits of out-of-vocab words, per instance, for a `VocabDict` only (it reports its
        # edits); dropped whenever `vocab` is another object or was edited, `unk_token` or the
        # length limit change, and when it grows past _MAX_CACHED_WORDS.
        self._split_cache: dict[str, list[str]] = {}
        self._split_cache_vocab: Mapping[str, int] | None = None
        self._split_cache_key: tuple = ()

    def tokenize(self, text: str | bytes) -> list[str]:
        """Whitespace-split `text` (normally already basic-tokenized) -> WordPiece tokens.

        Example: "unaffable" -> ["un", "##aff", "##able"] with a vocab holding those pieces.
        """
        return self.tokenize_words(convert_to_unicode(text).split())

    def tokenize_words(self, words: Sequence[str]) -> list[str]:
        """Words without whitespace -> the concatenated WordPiece tokens of each word."""
        vocab = self.vocab
        max_chars = self.max_input_chars_per_word
        output: list[str] = []
        if not isinstance(vocab, VocabDict):
            # A mapping that does not report its edits: no cache can be known to be current.
            for word in words:
                if word in vocab and len(word) <= max_chars:
                    output.append(word)
                else:
                    output.extend(self._split_word(word))
            return output
        key = (vocab.version, self.unk_token, max_chars)
        cache = self._split_cache
        if (vocab is not self._split_cache_vocab or key != self._split_cache_key
                or len(cache) > _MAX_CACHED_WORDS):
            cache.clear()
            self._split_cache_vocab = vocab
            self._split_cache_key = key
        for word in words:
            if word in vocab and len(word) <= max_chars:  # Most words: one lookup.
                output.append(word)
                continue
            pieces = cache.get(word)
            if pieces is None:
                pieces = cache[word] = self._split_word(word)
            output.extend(pieces)
        return output

    def _split_word(self, word: str) -> list[str]:
        """One word -> its pieces, or [unk_token] if too long or any piece is missing."""
        n = len(word)
        if n > self.max_input_chars_per_word:
            return [self.unk_token]
        vocab = self.vocab
        pieces = []
        start = 0
        while start < n:
            end = n
            piece = None
            while start < end:
                candidate = word[start:end] if start == 0 else "##" + word[start:end]
                if candidate in vocab:
                    piece = candidate
                    break
                end -= 1
            if piece is None:
                return [self.unk_token]
            pieces.append(piece)
            start = end
        return pieces
