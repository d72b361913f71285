"""The cloze probe (bert_tf/studies/cloze.py) on synthetic text and stand-in models: items hide
a whole word with context on both sides among k candidates; BERT's choice is the candidate
with the highest masked-LM logit at the [MASK], the left-to-right model's the likeliest
sentence (the candidate and every later token). No training: a few seconds."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from bert_tf.studies import cloze

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
VOCAB = {t: i for i, t in enumerate(["[PAD]", "[CLS]", "[SEP]", "[MASK]", "x", *WORDS])}


def _lines(n=60):
    rng = np.random.default_rng(0)
    return [" ".join(["x"] * 4 + [WORDS[rng.integers(len(WORDS))]] + ["x"] * 4)
            for _ in range(n)]


def test_items_hide_a_whole_word_between_contexts():
    items = cloze.make_items(_lines(), str.split, max_tokens=14, k=4, max_items=50)
    assert 0 < len(items) <= 50
    for item in items:
        assert item.position == 4 and len(item.candidates) == 4
        assert len(set(item.candidates)) == 4
        assert item.tokens[item.position] == item.candidates[item.answer]
    base = cloze.baselines(items)
    assert base["baselines"]["chance"] == 25.0 and base["value"] >= 25.0


class _FavourBert:
    """masked_lm_logits [B, 1, V] that favour one word."""

    def __init__(self, word):
        self.word = word

    def __call__(self, inputs, training=False):
        b = inputs["input_word_ids"].shape[0]
        logits = np.zeros((b, 1, len(VOCAB)), np.float32)
        logits[:, :, VOCAB[self.word]] = 5.0
        return {"masked_lm_logits": tf.constant(logits)}


class _FavourLtr:
    """lm_logits [B, S-1, V]: the word is likely at every position."""

    def __init__(self, word):
        self.word = word

    def __call__(self, inputs, training=False):
        ids = inputs["token_ids"]
        logits = np.zeros((ids.shape[0], ids.shape[1] - 1, len(VOCAB) + 3), np.float32)
        logits[:, :, VOCAB[self.word]] = 5.0
        return {"lm_logits": tf.constant(logits)}


def test_each_model_chooses_the_candidate_it_finds_likeliest():
    items = cloze.make_items(_lines(), str.split, max_tokens=14, k=4, max_items=20)
    for model, score in ((_FavourBert("golf"), cloze.score_bert),
                         (_FavourLtr("golf"), cloze.score_ltr)):
        choices = score(model, VOCAB, items, seq=16, batch=7)
        for item, c in zip(items, choices):
            if "golf" in item.candidates:
                assert item.candidates[c] == "golf"
    got = cloze.result(items, np.array([i.answer for i in items]))
    assert got["value"] == 100.0 and got["k"] == 4 and got["items"] == len(items)
    assert got["per_example"]["values"] == [1] * len(items)
