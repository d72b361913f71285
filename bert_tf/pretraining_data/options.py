"""Settings of pretraining-data generation (the original's flags plus the opt-in extras) and their
validation, with errors that name the offending flag."""
from __future__ import annotations

from bert_tf.errors import UserInputError
import dataclasses

from absl import logging
from typing import Mapping


class PretrainingDataError(UserInputError):
    """Bad input, vocab or settings for pretraining-data generation.

    The message always names what was wrong and where: a flag (`--max_predictions_per_seq`), a
    file and line (`corpus.txt:17`), or the vocab file.
    """


# Tokens that must be in the vocab for the instances to be built at all.
REQUIRED_SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[MASK]")


@dataclasses.dataclass(frozen=True)
class PretrainingDataOptions:
    """What to generate. Field names and defaults are the original script's flags.

    Attributes:
      max_seq_length: length of `input_ids`/`input_mask`/`segment_ids` (the original's default 128).
      max_predictions_per_seq: length of the `masked_lm_*` features (default 20).
      masked_lm_prob: share of the tokens (including [CLS]/[SEP]) to predict (default 0.15).
      short_seq_prob: probability of a shorter target length per (dupe, document) (default 0.1).
      dupe_factor: passes over the documents, each with a new masking (default 10).
      random_seed: seed of the one `random.Random` (default 12345).
      do_whole_word_mask: mask all WordPieces of a word together (default False).
      whole_word_mask_per_word: (extra, off by default) with whole-word masking, draw the 80/10/10
        decision once per word instead of once per WordPiece as the original does.
      random_replacement_excludes_special: (extra, off by default) draw the random replacement
        word only from non-special tokens (not `[PAD]`, `[UNK]`, `[CLS]`, `[SEP]`, `[MASK]`,
        `[unusedN]`, i.e. no `[...]` token), instead of the whole vocab as the original does.
      next_sentence_prediction: (default True, the original) build `[CLS] A [SEP] B [SEP]` pairs
        with the IsNext/NotNext label. False gives single-segment examples `[CLS] A [SEP]` for the
        "No NSP" ablation: `segment_ids` all 0 and `next_sentence_labels` always 0 (ignore it).
      mask_token_prob, keep_token_prob, random_token_prob: (extras for the masking study, BERT
        paper Table 8) what a chosen position becomes: [MASK], itself, or a random word. They
        must sum to 1. The default 0.8/0.1/0.1 is the original exactly (same draws, same
        thresholds 0.8 and 0.5); other mixtures use the same two draws with the thresholds
        `mask_token_prob` and `keep_token_prob / (keep_token_prob + random_token_prob)`.
    """

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    random_seed: int = 12345
    do_whole_word_mask: bool = False
    whole_word_mask_per_word: bool = False
    random_replacement_excludes_special: bool = False
    next_sentence_prediction: bool = True
    mask_token_prob: float = 0.8
    keep_token_prob: float = 0.1
    random_token_prob: float = 0.1

    @property
    def default_masking_mixture(self) -> bool:
        """True for the original's 80% [MASK] / 10% same / 10% random."""
        return (self.mask_token_prob, self.keep_token_prob, self.random_token_prob) == \
            (0.8, 0.1, 0.1)

    def keep_given_not_masked(self) -> float:
        """Threshold of the second draw: P(keep | not [MASK]) (0.5 for the original)."""
        rest = self.keep_token_prob + self.random_token_prob
        return self.keep_token_prob / rest if rest > 0 else 0.0

    @property
    def max_num_tokens(self) -> int:
        """Tokens left for the text once [CLS] and the [SEP](s) are placed."""
        return self.max_seq_length - (3 if self.next_sentence_prediction else 2)

    @property
    def is_original_behaviour(self) -> bool:
        """True when none of the opt-in extras is switched on."""
        return (not self.whole_word_mask_per_word and not self.random_replacement_excludes_special
                and self.next_sentence_prediction and self.default_masking_mixture)

    def to_dict(self) -> dict:
        """Plain dict of the fields (JSON-serialisable). The masking mixture is left out when it
        is the original's, so fingerprints of earlier outputs stay valid."""
        out = dataclasses.asdict(self)
        if self.default_masking_mixture:
            for name in ("mask_token_prob", "keep_token_prob", "random_token_prob"):
                del out[name]
        return out

    def validate(self, allow_prediction_cap: bool = False) -> None:
        """Raises PretrainingDataError naming the flag for any unusable setting.

        `max_predictions_per_seq` below `round(masked_lm_prob * max_seq_length)` is accepted as
        the original accepts it: long sequences then silently get `max_predictions_per_seq`
        predictions (fewer than `masked_lm_prob` asks for); a warning says so.

        Args:
          allow_prediction_cap: deprecated, ignored (the cap is always allowed, as in the
            original); kept so that old calls and command lines still run.
        """
        del allow_prediction_cap  # deprecated no-op
        min_len = 5 if self.next_sentence_prediction else 4
        if self.max_seq_length < min_len:
            raise PretrainingDataError(
                f"--max_seq_length={self.max_seq_length} is too small: it must leave at least 2 "
                f"text tokens besides [CLS] and the [SEP]s (>= {min_len})")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise PretrainingDataError(
                f"--masked_lm_prob={self.masked_lm_prob} must be in (0, 1]")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise PretrainingDataError(
                f"--short_seq_prob={self.short_seq_prob} must be in [0, 1]")
        if self.dupe_factor < 1:
            raise PretrainingDataError(f"--dupe_factor={self.dupe_factor} must be >= 1")
        if self.max_predictions_per_seq < 1:
            raise PretrainingDataError(
                f"--max_predictions_per_seq={self.max_predictions_per_seq} must be >= 1")
        needed = max(1, int(round(self.max_seq_length * self.masked_lm_prob)))
        if self.max_predictions_per_seq < needed:
            logging.warning(
                "--max_predictions_per_seq=%d is below round(--masked_lm_prob=%s x "
                "--max_seq_length=%d) = %d: sequences longer than %d tokens get only %d "
                "predictions (the original's silent cap)", self.max_predictions_per_seq,
                self.masked_lm_prob, self.max_seq_length, needed,
                int(self.max_predictions_per_seq / self.masked_lm_prob),
                self.max_predictions_per_seq)
        mixture = (self.mask_token_prob, self.keep_token_prob, self.random_token_prob)
        if any(not 0.0 <= p <= 1.0 for p in mixture) or abs(sum(mixture) - 1.0) > 1e-6:
            raise PretrainingDataError(
                f"--mask_token_prob={self.mask_token_prob}, --keep_token_prob="
                f"{self.keep_token_prob}, --random_token_prob={self.random_token_prob}: expected "
                "three probabilities in [0, 1] that sum to 1")
        if self.whole_word_mask_per_word and not self.do_whole_word_mask:
            raise PretrainingDataError(
                "--whole_word_mask_per_word needs --do_whole_word_mask")


def check_vocab(vocab: Mapping[str, int], vocab_file: str = "<vocab>") -> None:
    """Raises PretrainingDataError if `vocab` lacks [CLS], [SEP] or [MASK] (names the file)."""
    missing = [t for t in REQUIRED_SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise PretrainingDataError(
            f"--vocab_file={vocab_file}: the vocab has no {', '.join(missing)}; pretraining "
            f"examples need {', '.join(REQUIRED_SPECIAL_TOKENS)} (one token per line, e.g. "
            "the BERT vocab's lines 102-104)")
    if len(vocab) < 2:
        raise PretrainingDataError(f"--vocab_file={vocab_file}: the vocab is (nearly) empty")
