"""GPT-1 text encoders with the original `text_utils.TextEncoder` API.

`TextEncoder` re-implements OpenAI's original GPT-1 encoder (`finetune-transformer-lm`,
`text_utils.py`) step for step::

    from bert_tf.tokenization.gpt_text_encoder import TextEncoder
    enc = TextEncoder("encoder_bpe_40000.json", "vocab_40000.bpe")
    enc.encode(["Hello, world!"], verbose=False)   # [[3570, 240, 1276, 267]]
    enc.decoder[3570]                              # 'hello</w>'

For each text: `ftfy.fix_text` -> `text_standardize` -> spaCy's English tokenizer
(`spacy.blank("en")`) -> `token.text.lower()` -> BPE (`</w>` marks a word end) -> ids
(`encoder.get(piece, 0)`: an unknown piece is id 0). No special tokens are added, nothing is
truncated. Every surprising behaviour of the original is kept (see
`../shared/fixtures/original_gpt/README_bpe.md` and docs/gpt_tokenization.md): numbers and
hyphenated words are split by `text_standardize`, backslashes are not (the original regex's
`\\\\+` is a second `\\+`), every newline run is one id (`\\n</w>`), the BPE cache grows without
bound. With ftfy 6.3.1 and spaCy 3.8.18 (the `[gpt]` extra) the ids equal the reference
encodings of the original on all of its fixture texts.

The original loaded `spacy.load('en', disable=[...])` (a spaCy 2 shortcut that spaCy 3 refuses);
the tokenizer rules of that pipeline are the English language defaults, which is what
`spacy.blank("en")` gives, as the reference fixture was produced.

`WordPieceTextEncoder` is the same `encode()` API over bert_tf's WordPiece `FullTokenizer`
(the BERT paper's left-to-right model used BERT's own vocabulary).

ftfy, spaCy and tqdm are imported when an encoder is built, not when this module is imported.
"""
from __future__ import annotations

import os
import re
from typing import Iterable, Sequence

from bert_tf.errors import UserInputError
from bert_tf.tokenization.gpt_bpe import BpeFileError, END_OF_WORD, bpe_merge, load_bpe_ranks, load_encoder

__all__ = ["GptEncoderDependencyError", "TextEncoder", "WordPieceTextEncoder", "text_standardize"]

# The original's pattern, character for character, as the string `re` receives: the source
# literal was non-raw, so its `\\+` (meant for backslashes) reached `re` as `\+`, a second
# plus-sign alternative. Backslashes are therefore NOT spaced out.
_PUNCT_RUNS = re.compile(
    '(-+|~+|!+|"+|;+|\\?+|\\++|,+|\\)+|\\(+|\\+|\\/+|\\*+|\\[+|\\]+|}+|{+|\\|+|_+)')
_NEWLINE_RUN = re.compile(r"\s*\n\s*")
_OTHER_SPACE_RUN = re.compile(r"[^\S\n]+")


class GptEncoderDependencyError(UserInputError):
    """ftfy or spaCy (the `[gpt]` extra) is not installed."""


def text_standardize(text: str) -> str:
    """The original `text_utils.text_standardize`: dashes/ellipsis/acute fixes, punctuation runs
    spaced out, whitespace runs with a newline -> ' \\n ', other whitespace runs -> ' ', strip."""
    text = text.replace("\u2014", "-")
    text = text.replace("\u2013", "-")
    text = text.replace("\u2015", "-")
    text = text.replace("\u2026", "...")
    text = text.replace("\u00b4", "'")
    text = _PUNCT_RUNS.sub(r" \1 ", text)
    text = _NEWLINE_RUN.sub(" \n ", text)
    text = _OTHER_SPACE_RUN.sub(" ", text)
    return text.strip()


def _import_gpt_dependencies():
    try:
        import ftfy  # pylint: disable=import-outside-toplevel
        import spacy  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise GptEncoderDependencyError(
            f"the GPT-1 BPE text encoder needs ftfy and spaCy ({e.name} is not installed): "
            "pip install 'bert_tf[gpt]' (ftfy==6.3.1, spacy==3.8.18)") from None
    return ftfy, spacy


def _progress(texts: Iterable, verbose: bool) -> Iterable:
    if not verbose:
        return texts
    from tqdm import tqdm  # pylint: disable=import-outside-toplevel
    return tqdm(texts, ncols=80, leave=False)


class TextEncoder:
    """The original GPT-1 BPE text encoder (`text_utils.TextEncoder`).

    Attributes:
      encoder: dict symbol -> id, as read from `encoder_path` (callers such as the original
        `train.py` append `_start_`, `_delimiter_`, `_classify_` to it themselves).
      decoder: dict id -> symbol (built once here; not updated when `encoder` grows, as the
        original).
      bpe_ranks: dict (symbol, symbol) -> merge rank.
      cache: dict lower-cased token -> joined BPE symbols; never evicted, single characters are
        not stored (the original's cache).
      nlp: the spaCy English pipeline (`spacy.blank("en")`, tokenizer only).
    """

    def __init__(self, encoder_path: str | os.PathLike, bpe_path: str | os.PathLike):
        """Reads the two BPE files and builds the spaCy tokenizer.

        Raises:
          BpeFileError (a UserInputError): a missing or malformed file, naming it.
          GptEncoderDependencyError: ftfy or spaCy is not installed.
        """
        self.encoder = load_encoder(encoder_path)
        self.decoder = {v: k for k, v in self.encoder.items()}
        self.bpe_ranks = load_bpe_ranks(bpe_path)
        self.cache: dict[str, str] = {}
        self._ftfy, spacy = _import_gpt_dependencies()
        self.nlp = spacy.blank("en")

    def bpe(self, token: str) -> str:
        """One (lower-cased) token -> its BPE symbols joined by single spaces, via the cache.

        `bpe("")` raises IndexError, as the original (encode never passes an empty token).
        """
        last = token[-1]  # the original builds the symbol tuple before consulting the cache
        if token in self.cache:
            return self.cache[token]
        if len(token) == 1:
            return last + END_OF_WORD
        word = bpe_merge(token, self.bpe_ranks)
        self.cache[token] = word
        return word

    def tokenize(self, text: str) -> list[str]:
        """One text -> its spaCy token texts (after ftfy and `text_standardize`; not lower-cased).

        Raises what the original raises: `UnicodeError`/`TypeError` from ftfy for a non-`str`,
        spaCy's `ValueError` [E088] for a standardized text over `nlp.max_length` characters.
        """
        standardized = text_standardize(self._ftfy.fix_text(text))
        return [token.text for token in self.nlp(standardized)]

    def encode_text(self, text: str) -> list[int]:
        """One text -> ids (the loop body of the original `encode`)."""
        get = self.encoder.get
        ids: list[int] = []
        for token in self.tokenize(text):
            ids.extend(get(piece, 0) for piece in self.bpe(token.lower()).split(" "))
        return ids

    def encode(self, texts: Iterable[str], verbose: bool = True) -> list[list[int]]:
        """Texts -> one list of ids per text (no special tokens, no truncation or padding).

        Args:
          texts: an iterable of `str`.
          verbose: show a tqdm progress bar on stderr (the original's default).

        Returns:
          list (one per text) of lists of int ids; `[]` for an empty or whitespace-only text.
        """
        return [self.encode_text(text) for text in _progress(texts, verbose)]

    def decode(self, ids: Sequence[int]) -> str:
        """ids -> text (not in the original): symbols joined, `</w>` read as a word end.

        Lossy by construction (lower-casing, spaCy's splits, unknown pieces -> `<unk>`).
        """
        text = "".join(self.decoder.get(int(i), "<unk>") for i in ids)
        return text.replace(END_OF_WORD, " ").rstrip(" ")


class WordPieceTextEncoder:
    """The `TextEncoder` API over bert_tf's WordPiece tokenizer (`FullTokenizer`).

    The BERT paper's left-to-right ("LTR & No NSP") model used BERT's own WordPiece vocabulary;
    this encoder gives the same `encode(texts, verbose=...)`, `encoder` and `decoder`, so the
    GPT-1 data and fine-tuning code can take either vocabulary. No ftfy/spaCy/standardization:
    the text goes through `FullTokenizer` exactly as BERT's own pipeline does.

    Attributes:
      encoder: dict token -> id (the vocab file's order).
      decoder: dict id -> token.
      tokenizer: the underlying `bert_tf.tokenization.FullTokenizer`.
    """

    def __init__(self, vocab_file: str | os.PathLike, do_lower_case: bool = True):
        from bert_tf.tokenization import FullTokenizer  # pylint: disable=import-outside-toplevel
        vocab_file = os.fspath(vocab_file)
        if not os.path.isfile(vocab_file):
            raise BpeFileError(f"{vocab_file}: WordPiece vocab file not found")
        try:
            self.tokenizer = FullTokenizer(vocab_file, do_lower_case=do_lower_case)
        except (ValueError, FileNotFoundError) as e:
            if isinstance(e, UserInputError):
                raise
            raise UserInputError(str(e).splitlines()[0]) from None
        self.encoder = dict(self.tokenizer.vocab)
        self.decoder = {v: k for k, v in self.encoder.items()}

    def encode_text(self, text: str) -> list[int]:
        """One text -> WordPiece ids (`FullTokenizer.tokenize` + `convert_tokens_to_ids`)."""
        return self.tokenizer.convert_tokens_to_ids(self.tokenizer.tokenize(text))

    def encode(self, texts: Iterable[str], verbose: bool = True) -> list[list[int]]:
        """Texts -> one list of WordPiece ids per text (no [CLS]/[SEP], no truncation)."""
        return [self.encode_text(text) for text in _progress(texts, verbose)]

    def decode(self, ids: Sequence[int]) -> str:
        """ids -> text: WordPiece tokens joined, `##` continuations glued (lossy)."""
        text = " ".join(self.decoder.get(int(i), "[UNK]") for i in ids)
        return text.replace(" ##", "")
