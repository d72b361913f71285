"""Masked-LM predictions: choose positions to predict and replace them (80% [MASK], 10% keep,
10% random word; other mixtures as options), with exactly the original's candidate order and RNG calls.

Everything works on token ids; the vocab facts the original read off token strings
("[CLS]"/"[SEP]" are skipped, "##" pieces continue a word) are tabulated per id in `VocabInfo`.
"""
from __future__ import annotations

import dataclasses
import random
import re
from typing import Mapping

from bert_tf.pretraining_data.options import PretrainingDataOptions, check_vocab

_SPECIAL_RE = re.compile(r"^\[[^\]]*\]$")


@dataclasses.dataclass(frozen=True)
class VocabInfo:
    """Per-id facts about the vocab that instance building needs.

    Attributes:
      cls_id, sep_id, mask_id: ids of [CLS], [SEP], [MASK].
      is_subword: tuple indexed by id: True for "##..." pieces.
      word_ids: ids of the vocab's tokens in vocab order (the original's `vocab_words`, the
        pool of random replacement words).
      non_special_word_ids: `word_ids` without "[...]" tokens (for the opt-in option).
      size: number of vocab entries.
    """

    cls_id: int
    sep_id: int
    mask_id: int
    is_subword: tuple
    word_ids: tuple
    non_special_word_ids: tuple
    size: int

    @classmethod
    def from_vocab(cls, vocab: Mapping[str, int], vocab_file: str = "<vocab>") -> "VocabInfo":
        """Builds it from an (ordered) token -> id mapping; checks [CLS]/[SEP]/[MASK] exist."""
        check_vocab(vocab, vocab_file)
        top = max(vocab.values()) + 1
        is_subword = [False] * top
        for token, i in vocab.items():
            is_subword[i] = token.startswith("##")
        word_ids = tuple(vocab[t] for t in vocab.keys())
        non_special = tuple(vocab[t] for t in vocab.keys() if not _SPECIAL_RE.match(t))
        return cls(vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"], tuple(is_subword), word_ids,
                   non_special or word_ids, len(vocab))


def num_to_predict(num_tokens: int, options: PretrainingDataOptions) -> int:
    """`min(max_predictions_per_seq, max(1, round(num_tokens * masked_lm_prob)))`, with Python 3's
    round-half-even (a 30-token sequence at 0.15 gets 4 predictions, not 5)."""
    return min(options.max_predictions_per_seq,
               max(1, int(round(num_tokens * options.masked_lm_prob))))


def _candidates(ids: list, cls_id: int, sep_id: int) -> list:
    """Positions of `ids` that are neither [CLS] nor [SEP], in order."""
    n = len(ids)
    if n >= 3 and ids[0] == cls_id and ids[-1] == sep_id and ids.count(cls_id) == 1:
        seps = ids.count(sep_id)
        if seps == 1:  # [CLS] A [SEP]
            return list(range(1, n - 1))
        if seps == 2:  # [CLS] A [SEP] B [SEP]
            mid = ids.index(sep_id)
            return list(range(1, mid)) + list(range(mid + 1, n - 1))
    return [i for i, t in enumerate(ids) if t != cls_id and t != sep_id]


def create_masked_lm_predictions(ids: list, options: PretrainingDataOptions, vocab: VocabInfo,
                                 rng: random.Random) -> tuple[list, list, list]:
    """Masks `ids` ([CLS] A [SEP] B [SEP] or [CLS] A [SEP]) as the original does.

    Candidates are all positions except [CLS]/[SEP] (with whole-word masking, a "##" piece joins
    the candidate before it, even across the first [SEP]). The candidate list is shuffled once;
    candidates are taken in that order until `num_to_predict` positions are chosen (a whole word
    that would overshoot is skipped). Each chosen WordPiece then draws: random() < 0.8 -> [MASK];
    else random() < 0.5 -> keep; else a random word from the whole vocab (randint).

    Args:
      ids: token ids, list[int] of length n (not modified).
      options: masked_lm_prob, max_predictions_per_seq, do_whole_word_mask and the extras.
      vocab: VocabInfo of the vocab.
      rng: the generator (its calls are part of the reproduced stream).

    Returns:
      (output_ids, positions, label_ids): output_ids is a new list[int] of length n with the
      replacements; positions (sorted ascending) and label_ids (the original ids there) are
      list[int] of the same length <= max_predictions_per_seq.
    """
    cls_id, sep_id = vocab.cls_id, vocab.sep_id
    n = len(ids)
    k = num_to_predict(n, options)
    output = list(ids)
    mask_id = vocab.mask_id
    pool = vocab.non_special_word_ids if options.random_replacement_excludes_special \
        else vocab.word_ids
    last = len(pool) - 1
    chosen: list = []

    rnd = rng.random
    # The original's thresholds (0.8, then 0.5) unless another mixture is asked for.
    p_mask = 0.8 if options.default_masking_mixture else options.mask_token_prob
    p_keep = 0.5 if options.default_masking_mixture else options.keep_given_not_masked()
    if not options.do_whole_word_mask:
        cand = _candidates(ids, cls_id, sep_id)
        rng.shuffle(cand)  # rng-site: mask.shuffle_cand_indexes
        chosen = cand[:k]
        for index in chosen:
            if rnd() < p_mask:  # rng-site: mask.mask_token_draw_0.8
                output[index] = mask_id
            elif rnd() < p_keep:  # rng-site: mask.keep_original_draw_0.5
                pass
            else:
                output[index] = pool[rng.randint(0, last)]  # rng-site: mask.random_word_index
    else:
        is_subword = vocab.is_subword
        groups: list = []
        for i, t in enumerate(ids):
            if t == cls_id or t == sep_id:
                continue
            if groups and is_subword[t]:
                groups[-1].append(i)
            else:
                groups.append([i])
        rng.shuffle(groups)  # rng-site: mask.shuffle_cand_indexes
        per_word = options.whole_word_mask_per_word
        for group in groups:
            if len(chosen) >= k:
                break
            if len(chosen) + len(group) > k:
                continue
            chosen.extend(group)
            if per_word:
                if rnd() < p_mask:  # rng-site: mask.mask_token_draw_0.8
                    for index in group:
                        output[index] = mask_id
                elif rnd() < p_keep:  # rng-site: mask.keep_original_draw_0.5
                    pass
                else:
                    for index in group:
                        word = rng.randint(0, last)  # rng-site: mask.random_word_index
                        output[index] = pool[word]
                continue
            for index in group:
                if rnd() < p_mask:  # rng-site: mask.mask_token_draw_0.8
                    output[index] = mask_id
                elif rnd() < p_keep:  # rng-site: mask.keep_original_draw_0.5
                    pass
                else:
                    output[index] = pool[rng.randint(0, last)]  # rng-site: mask.random_word_index
    positions = sorted(chosen)
    labels = [ids[i] for i in positions]
    return output, positions, labels

