"""GPT-1's BPE text encoder as TensorFlow ops, for SavedModels with a raw-text signature.

`InGraphBpeEncoder` is a `tf.Module`: strings [batch] -> ids RaggedTensor [batch, (ids)], built
from ops TF Serving links (core string ops, RE2 `RegexReplace`, lookup tables, a `while_loop`)
plus tensorflow-text's classic `NormalizeUTF8` (NFC). Its steps mirror `TextEncoder.encode`:

1. **ftfy (approximated).** `\\r\\n` -> `\\n`; ANSI escape sequences removed; HTML entities
   unescaped in texts without `<` (ftfy's own entity table); then a per-character map that is
   exactly what `ftfy.fix_text` does to each character on its own (curly quotes, ligatures,
   full-width forms, C1 controls read as Windows-1252, control characters removed, line
   separators), computed from ftfy when the encoder is built; then NFC. ftfy's mojibake repair
   (`CafÃ©` -> `Café`) is a statistical, context-dependent heuristic and is NOT reproduced.
2. **text_standardize: exact** (the original regexes, with Python's Unicode `\\s` written out
   as an explicit RE2 class).
3. **spaCy: its algorithm, with its own data.** The standardized text is split on spaces
   into chunks (spaCy tokenizes each space-separated chunk on its own); each chunk goes
   through `gpt_spacy_in_graph.SpacyTokenizerOps`: spaCy 3.8's tokenizer algorithm (affix
   loop with its special-case checks, URL match, infixes, the special-case matcher) in TF ops,
   with the prefix/suffix/infix regexes, URL pattern and special-case table read from the
   installed spaCy when the encoder is built. An optional *chunk table* (`build_chunk_table`:
   chunks of a corpus on which the ops and spaCy still disagree) overrides whole chunks.
   The special-case matcher runs over a whole text's tokens, as spaCy's.
   Newline chunks become the original's newline token.
4. **Lower-casing** (`StringLower`, UTF-8: Python-like, `İ` -> `i̇`).
5. **BPE: exact.** The original merge loop, vectorized over all tokens of the batch: each step
   merges, in every token at once, all non-overlapping left-to-right occurrences of that token's
   lowest-ranked adjacent pair (overlaps only occur for pairs of two equal symbols; they are
   resolved by run parity). Then the original's `\\n  </w>` special case and `encoder.get(piece,
   0)`.

docs/gpt_tokenization.md gives the measured agreement with the Python encoder on the fixture
texts and the exact list of what differs.
"""
from __future__ import annotations

import functools
import html
import os
import sys
from typing import Iterable, Mapping, Sequence

import tensorflow as tf

from bert_tf.tokenization.gpt_bpe import END_OF_WORD, load_bpe_merges, load_encoder
from bert_tf.tokenization.gpt_spacy_in_graph import (SpacyEnglishRules, SpacyTokenizerOps,
                                                      re2_class_body)

__all__ = ["InGraphBpeEncoder", "build_chunk_table", "ftfy_char_map", "python_whitespace_class"]

_NEWLINE_TOKEN = "\n "  # what spaCy gives for the standardized " \n "
_INT_MAX = 2 ** 31 - 1


def _re2_class(codepoints: Iterable[int], negate: bool = False) -> str:
    """Codepoints -> an RE2 character class (`[\\x{..}-\\x{..}...]`)."""
    return f"[{'^' if negate else ''}{re2_class_body(codepoints)}]"


@functools.lru_cache(maxsize=None)
def python_whitespace_class(exclude_newline: bool = False) -> str:
    """RE2 class of the characters Python's `re` `\\s` matches in a `str` pattern."""
    cps = [cp for cp in range(sys.maxunicode + 1) if chr(cp).isspace()]
    if exclude_newline:
        cps = [cp for cp in cps if cp != 0x0A]
    return _re2_class(cps)


@functools.lru_cache(maxsize=None)
def ftfy_char_map(max_codepoint: int = 0x2FFFF) -> dict[str, str]:
    """{character: ftfy.fix_text(character)} for every character that ftfy changes on its own
    (surrogates excluded: they cannot occur in UTF-8 strings). About 7 s, once per process."""
    import ftfy
    out = {}
    for cp in range(max_codepoint + 1):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        fixed = ftfy.fix_text(ch)
        if fixed != ch:
            out[ch] = fixed
    return out


def _html_entities() -> dict[str, str]:
    """ftfy's entity table (`&amp;` -> `&`, 3,501 names) plus decimal/hex character references
    for U+0000..U+FFFF as `html.unescape` reads them (ftfy's `_unescape_fixup`)."""
    from ftfy.chardata import HTML_ENTITIES
    out = dict(HTML_ENTITIES)
    for cp in range(0x10000):
        for ref in (f"&#{cp};", f"&#x{cp:x};", f"&#x{cp:X};"):
            if ref not in out:
                value = html.unescape(ref)
                if ";" not in value:
                    out[ref] = value
    return out


def _string_table(mapping: Mapping[str, str], default: str) -> tf.lookup.StaticHashTable:
    keys = list(mapping)
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(keys, tf.string),
                                            tf.constant([mapping[k] for k in keys], tf.string)),
        default_value=default)


class InGraphBpeEncoder(tf.Module):
    """strings -> GPT-1 BPE ids with TensorFlow ops (see the module docstring).

    Args:
      encoder_path, bpe_path: the original `encoder_bpe_40000.json` and `vocab_40000.bpe`.
      chunk_table: {chunk: [spaCy token texts]} (from `build_chunk_table`): whole chunks whose
        tokens override the spaCy ops; None = the ops alone.
      spacy_rules: spaCy's English tokenizer data (`SpacyEnglishRules`); default: read from the
        installed spaCy (`SpacyEnglishRules.from_spacy()`, needs spaCy when the encoder is built).
      char_map: {character: replacement} applied per character (default: `ftfy_char_map()`,
        which needs ftfy when the encoder is built; `{}` to skip).
      html_entities: {entity: text} unescaped in texts without `<` (default: ftfy's table plus
        numeric references; `{}` to skip).
    """

    def __init__(self, encoder_path: str | os.PathLike, bpe_path: str | os.PathLike,
                 chunk_table: Mapping[str, Sequence[str]] | None = None,
                 char_map: Mapping[str, str] | None = None,
                 html_entities: Mapping[str, str] | None = None,
                 spacy_rules: SpacyEnglishRules | None = None, name: str | None = None):
        super().__init__(name=name)
        encoder = load_encoder(encoder_path)
        merges = load_bpe_merges(bpe_path)
        self.vocab_size = max(encoder.values()) + 1
        self._encoder = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(encoder), tf.string),
                tf.constant(list(encoder.values()), tf.int32)), default_value=0)
        ranks: dict[str, int] = {}
        for rank, (first, second) in enumerate(merges):
            ranks[first + " " + second] = rank
        self._ranks = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(list(ranks), tf.string),
                                                tf.constant(list(ranks.values()), tf.int32)),
            default_value=_INT_MAX)
        char_map = ftfy_char_map() if char_map is None else dict(char_map)
        self._char_map = _string_table(char_map, "\uffff\uffff") if char_map else None
        self._char_map_class = _re2_class(ord(c) for c in char_map) if char_map else None
        entities = _html_entities() if html_entities is None else dict(html_entities)
        self._entities = _string_table(entities, "") if entities else None
        table = {k: " ".join(v) for k, v in (chunk_table or {}).items()}
        self._chunks = _string_table(table, "") if table else None
        if spacy_rules is None:
            try:
                spacy_rules = SpacyEnglishRules.from_spacy()
            except ImportError as e:
                raise ImportError(
                    "InGraphBpeEncoder reads spaCy's English tokenizer rules when it is built: "
                    "pip install 'bert_tf[gpt]' (spacy==3.8.18)") from e
        self._spacy = SpacyTokenizerOps(spacy_rules)
        self._ws = python_whitespace_class()
        self._ws_not_newline = python_whitespace_class(exclude_newline=True)

    @classmethod
    def from_text_encoder(cls, encoder_path: str | os.PathLike, bpe_path: str | os.PathLike,
                          corpus: Iterable[str] = (), text_encoder=None,
                          name: str | None = None) -> "InGraphBpeEncoder":
        """The recommended build (needs the `[gpt]` extra at build time only): ftfy's character
        map and entity table, spaCy's tokenizer rules (from `text_encoder.nlp`), and a chunk
        table of every chunk of `corpus` (texts like the ones the export will serve) and every
        spaCy exception on which the ops and spaCy disagree (none of the exceptions, measured)."""
        if text_encoder is None:
            from bert_tf.tokenization.gpt_text_encoder import TextEncoder
            text_encoder = TextEncoder(encoder_path, bpe_path)
        rules = SpacyEnglishRules.from_spacy(text_encoder.nlp)
        table = build_chunk_table(corpus, text_encoder, spacy_rules=rules)
        return cls(encoder_path, bpe_path, chunk_table=table, spacy_rules=rules, name=name)

    # -- 1. ftfy (approximated) ----------------------------------------------------------------
    def fix_text(self, texts: tf.Tensor) -> tf.Tensor:
        """[B] strings -> [B] strings: the ftfy approximation of step 1."""
        import tensorflow_text as tf_text
        t = tf.strings.regex_replace(texts, "\r\n", "\n")
        t = tf.strings.regex_replace(t, "\x1b\\[[0-9;]*[a-zA-Z]", "")
        if self._entities is not None:
            has_entity = tf.strings.regex_full_match(t, "(?s)[^<]*&#?[0-9A-Za-z]{1,24};[^<]*")
            t = tf.where(has_entity, self._unescape(t), t)
        if self._char_map is not None:
            needs = tf.strings.regex_full_match(t, f"(?s).*{self._char_map_class}.*")
            t = tf.where(needs, self._map_chars(t), t)
        return tf_text.normalize_utf8(t, "NFC")

    def _unescape(self, texts: tf.Tensor) -> tf.Tensor:
        # Entity matches are fenced with the noncharacter U+FDD0, split out (core StringSplitV2,
        # which, unlike tensorflow-text's RegexSplit, keeps NUL characters), looked up, joined.
        fenced = tf.strings.regex_replace(texts, "(&#?[0-9A-Za-z]{1,24};)",
                                          "\ufdd0\\1\ufdd0")
        pieces = tf.strings.split(fenced, "\ufdd0")
        replaced = self._entities.lookup(pieces.flat_values)
        values = tf.where(tf.strings.length(replaced) > 0, replaced, pieces.flat_values)
        return tf.strings.reduce_join(pieces.with_flat_values(values), axis=-1)

    def _map_chars(self, texts: tf.Tensor) -> tf.Tensor:
        chars = tf.strings.unicode_split(texts, "UTF-8")
        mapped = self._char_map.lookup(chars.flat_values)
        values = tf.where(mapped == "\uffff\uffff", chars.flat_values, mapped)
        return tf.strings.reduce_join(chars.with_flat_values(values), axis=-1)

    # -- 2. text_standardize (exact) -----------------------------------------------------------
    def standardize(self, texts: tf.Tensor) -> tf.Tensor:
        """[B] strings -> [B] strings: the original `text_standardize`."""
        t = tf.strings.regex_replace(texts, "[\u2014\u2013\u2015]", "-")
        t = tf.strings.regex_replace(t, "\u2026", "...")
        t = tf.strings.regex_replace(t, "\u00b4", "'")
        t = tf.strings.regex_replace(
            t, "(-+|~+|!+|\"+|;+|\\?+|\\++|,+|\\)+|\\(+|\\+|/+|\\*+|\\[+|\\]+|\\}+|\\{+|\\|+|_+)",
            " \\1 ")
        t = tf.strings.regex_replace(t, f"{self._ws}*\n{self._ws}*", " \n ")
        t = tf.strings.regex_replace(t, f"{self._ws_not_newline}+", " ")
        return tf.strings.regex_replace(t, f"^{self._ws}+|{self._ws}+$", "")

    # -- 3. spaCy (its algorithm and data) ---------------------------------------------------
    def split_chunks(self, chunks: tf.Tensor, text_ids: tf.Tensor | None = None
                     ) -> tf.RaggedTensor:
        """[N] chunks (no spaces) -> [N, (tokens)]: the spaCy ops, then the chunk table.

        `text_ids` (int64 [N], non-decreasing): the text of each chunk; spaCy's special-case
        matcher runs over a whole text's tokens (a candidate across a space blocks others).
        None: each chunk is a text of its own."""
        tokens = self._spacy(chunks, text_ids)
        if self._chunks is not None:
            known = self._chunks.lookup(chunks)
            joined = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
            joined = tf.where(tf.strings.length(known) > 0, known, joined)
            tokens = tf.strings.split(joined, " ")
        values = tf.where(tokens.flat_values == "\n", _NEWLINE_TOKEN, tokens.flat_values)
        return tokens.with_flat_values(values)

    def tokenize_chunks(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """[B] strings -> [B, (chunks), (tokens)]: the standardized text's space-separated
        chunks and their spaCy-like token texts (not lower-cased)."""
        standardized = self.standardize(self.fix_text(texts))
        chunks = tf.strings.split(standardized, " ")
        chunks = tf.ragged.boolean_mask(chunks, tf.strings.length(chunks) > 0)
        tokens = self.split_chunks(chunks.flat_values, chunks.value_rowids())
        tokens = tf.ragged.boolean_mask(tokens, tf.strings.length(tokens) > 0)
        return chunks.with_flat_values(tokens)

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """[B] strings -> [B, (tokens)] spaCy-like token texts (not lower-cased)."""
        return self.tokenize_chunks(texts).merge_dims(1, 2)

    # -- 5. BPE (exact) ------------------------------------------------------------------------
    def bpe(self, tokens: tf.Tensor) -> tf.RaggedTensor:
        """[N] non-empty lower-cased tokens -> [N, (pieces)] BPE symbols (the original's)."""
        chars = tf.strings.unicode_split(tokens, "UTF-8")
        values, splits = chars.flat_values, chars.row_splits
        last = splits[1:] - 1
        values = tf.tensor_scatter_nd_update(
            values, last[:, None], tf.gather(values, last) + END_OF_WORD)

        def merge_step(values, splits, _):
            rows = tf.ragged.row_splits_to_segment_ids(splits, out_type=tf.int32)
            nrows = tf.shape(splits)[0] - 1
            pair_rows = rows[:-1]
            same_row = tf.equal(pair_rows, rows[1:])
            keys = values[:-1] + " " + values[1:]
            ranks = tf.where(same_row, self._ranks.lookup(keys), _INT_MAX)
            best = tf.math.unsorted_segment_min(ranks, pair_rows, nrows)
            match = tf.logical_and(tf.equal(ranks, tf.gather(best, pair_rows)), ranks < _INT_MAX)
            # Non-overlapping, left to right: in a run of consecutive matching pairs (only
            # possible for a pair of two equal symbols) every other one, from the first.
            m = tf.cast(match, tf.int32)
            count = tf.cumsum(m)
            run = tf.cumsum(1 - m)
            base = tf.math.segment_min(count - m, run)
            offset = count - tf.gather(base, run)
            select = tf.logical_and(match, tf.equal(offset % 2, 1))
            select_first = tf.concat([select, [False]], 0)
            drop_second = tf.concat([[False], select], 0)
            merged = tf.where(select_first, values + tf.concat([values[1:], [""]], 0), values)
            keep = tf.logical_not(drop_second)
            new_values = tf.boolean_mask(merged, keep)
            lengths = tf.math.unsorted_segment_sum(tf.cast(keep, tf.int64), rows, nrows)
            new_splits = tf.concat([[0], tf.cumsum(lengths)], 0)
            return new_values, new_splits, tf.reduce_any(select)

        values, splits, _ = tf.while_loop(
            # no symbols at all (every text empty): no step (its shapes assume one symbol)
            lambda v, s, changed: changed, merge_step, (values, splits, tf.size(values) > 0),
            shape_invariants=(tf.TensorShape([None]), tf.TensorShape([None]),
                              tf.TensorShape([])))
        words = tf.strings.reduce_join(tf.RaggedTensor.from_row_splits(values, splits), axis=-1,
                                       separator=" ")
        words = tf.where(words == "\n  " + END_OF_WORD, "\n" + END_OF_WORD, words)
        return tf.strings.split(words, " ")

    def encode(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """[B] strings -> [B, (ids)] int32 ragged (no special tokens, no truncation)."""
        texts = tf.convert_to_tensor(texts, tf.string)
        tokens = self.tokenize(texts)
        lowered = tf.strings.lower(tokens.flat_values, encoding="utf-8")
        pieces = self.bpe(lowered)
        ids = self._encoder.lookup(pieces.flat_values)
        return tokens.with_flat_values(pieces.with_flat_values(ids)).merge_dims(1, 2)

    def encode_padded(self, texts: tf.Tensor, max_length: int) -> tuple[tf.Tensor, tf.Tensor]:
        """[B] strings -> (ids int32 [B, max_length], zero-padded and truncated; lengths int32
        [B], before truncation): dense outputs for a serving signature."""
        ids = self.encode(texts)
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        return ids.to_tensor(default_value=0, shape=[None, max_length]), lengths


def build_chunk_table(texts: Iterable[str], encoder, *, include_spacy_exceptions: bool = True,
                      batch_size: int = 4096,
                      spacy_rules: SpacyEnglishRules | None = None) -> dict[str, list[str]]:
    """{chunk: spaCy tokens} for every chunk (space-separated piece of a standardized text) of
    `texts` on which the in-graph spaCy ops disagree with spaCy, plus spaCy's tokenizer
    exceptions on which they disagree.

    Args:
      texts: a corpus like the one the export will serve (raw text, as given to `encode`).
      encoder: a `bert_tf.tokenization.gpt_text_encoder.TextEncoder` (its ftfy, standardize and spaCy).
      include_spacy_exceptions: also check every key of spaCy's tokenizer exceptions.
      batch_size: chunks per in-graph batch.
      spacy_rules: the rules the ops use (default: read from `encoder.nlp`).

    Returns:
      the table for `InGraphBpeEncoder(chunk_table=...)`.
    """
    from bert_tf.tokenization.gpt_text_encoder import text_standardize
    chunks: set[str] = set()
    for text in texts:
        standardized = text_standardize(encoder._ftfy.fix_text(text))  # pylint: disable=protected-access
        chunks.update(c for c in standardized.split(" ") if c and c != "\n")
    if include_spacy_exceptions:
        chunks.update(k for k in encoder.nlp.tokenizer.rules
                      if k and not any(ch.isspace() for ch in k))
    chunks_sorted = sorted(c for c in chunks if _is_utf8_encodable(c))
    ops = _OpsOnly(spacy_rules or SpacyEnglishRules.from_spacy(encoder.nlp))
    table = {}
    for start in range(0, len(chunks_sorted), batch_size):
        batch = chunks_sorted[start:start + batch_size]
        got = ops(tf.constant(batch)).to_list()
        for chunk, ruled in zip(batch, got):
            spacy_tokens = [t.text for t in encoder.nlp.tokenizer(chunk)]
            if [r.decode("utf-8") for r in ruled] != spacy_tokens:
                table[chunk] = spacy_tokens
    return table


def _is_utf8_encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: not representable in a tf.string
        return False
    return True


class _OpsOnly(tf.Module):
    """The spaCy ops of `InGraphBpeEncoder.split_chunks` alone (no chunk table)."""

    def __init__(self, rules: SpacyEnglishRules):
        super().__init__()
        self._spacy = SpacyTokenizerOps(rules)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def __call__(self, chunks):
        return self._spacy(chunks)
