"""The auxiliary LM loss at the mask's positions only (`gpt.losses.masked_lm_losses`, what a
fine-tuning step of `GptClassifier` and `GptTextClassifier` computes) equals the LM head over
every position followed by the masked mean: values (NaN for a one-token sequence, as the
original), gradients, every input rank."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.gpt import losses as gpt_losses
from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.heads import tied_lm_logits
from bert_tf.gpt.task_model import GptClassifier

CONFIG = dict(n_vocab=40, n_special=3, n_ctx=12, n_embd=16, n_head=2, n_layer=2)


def _inputs(lengths, width, clf_token, rng, choices=None):
    lengths = np.asarray(lengths)
    shape = (len(lengths), width) if choices is None else (len(lengths), choices, width)
    tokens = rng.integers(0, CONFIG["n_vocab"], size=shape).astype(np.int32)
    real = np.arange(width) < (lengths[:, None] if choices is None else lengths[:, None, None])
    tokens = np.where(real, tokens, 0).astype(np.int32)
    index = np.clip(lengths - 1, 0, width - 1)
    if choices is None:
        tokens[np.arange(len(lengths)), index] = clf_token
    else:
        tokens[np.arange(len(lengths)), :, index] = clf_token
    return tokens, np.broadcast_to(real, shape).astype(np.float32)


def _full_head(hidden, table, tokens, mask):
    logits = tied_lm_logits(hidden[..., :-1, :], table)
    return gpt_losses.lm_losses(gpt_losses.lm_token_losses(logits, tokens), mask)


@pytest.mark.parametrize("choices", [None, 3])
def test_masked_head_equals_the_full_head(choices):
    rng = np.random.default_rng(0)
    tokens, mask = _inputs([12, 5, 1, 9], 12, 42, rng, choices)
    mask[0, ..., 3] = 0.5  # a weighted position keeps its weight
    hidden = tf.constant(rng.normal(size=tokens.shape + (16,)).astype(np.float32))
    table = tf.constant(rng.normal(size=(40 + 3 + 12, 16)).astype(np.float32))
    full = _full_head(hidden, table, tokens, mask)
    masked = gpt_losses.masked_lm_losses(hidden, table, tokens, mask)
    assert masked.shape == full.shape == mask.shape[:-1]
    np.testing.assert_allclose(masked.numpy(), full.numpy(), rtol=1e-6, atol=1e-6)
    assert np.isnan(masked.numpy()[2]).all()  # one real token: 0/0, as the original
    # Gradients without that sequence (its NaN loss makes the original's NaN everywhere).
    keep = [0, 1, 3]
    hidden, tokens, mask = tf.gather(hidden, keep), tokens[keep], mask[keep]
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([hidden, table])
        full_mean = tf.reduce_mean(_full_head(hidden, table, tokens, mask))
        masked_mean = tf.reduce_mean(gpt_losses.masked_lm_losses(hidden, table, tokens, mask))
    for a, b in zip(tape.gradient(masked_mean, [hidden, table]),
                    tape.gradient(full_mean, [hidden, table])):
        assert np.isfinite(b.numpy()).all()
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)


def test_a_training_call_gives_the_table_and_the_same_losses_without_the_full_head():
    """GptClassifier: a training call's outputs carry `lm_table`, and `compute_losses` needs
    no `lm_logits` (the step never computes the head over the padding); with dropout off the
    losses equal the inference call's, which go through the full head."""
    config = GptConfig(**CONFIG, embd_pdrop=0.0, attn_pdrop=0.0, resid_pdrop=0.0, clf_pdrop=0.0)
    model = GptClassifier(config, task="classification", num_classes=2, lm_coef=0.5)
    rng = np.random.default_rng(1)
    tokens, mask = _inputs([10, 4, 7], 10, model.clf_token, rng)
    labels = np.array([0, 1, 1])
    train_out = model({"token_ids": tokens}, training=True, with_lm_logits=False)
    assert "lm_table" in train_out and "lm_logits" not in train_out
    eval_out = model({"token_ids": tokens}, training=False)
    assert "lm_table" not in eval_out
    ours = model.compute_losses(train_out, tokens, mask, labels)
    reference = model.compute_losses(eval_out, tokens, mask, labels)
    for key in ("lm_losses", "clf_losses", "train_loss"):
        np.testing.assert_allclose(ours[key].numpy(), reference[key].numpy(), rtol=1e-6,
                                   atol=1e-6, err_msg=key)


def test_xla_compiles_the_dynamic_row_selection():
    rng = np.random.default_rng(2)
    tokens, mask = _inputs([8, 3], 8, 42, rng)
    hidden = tf.constant(rng.normal(size=tokens.shape + (16,)).astype(np.float32))
    table = tf.constant(rng.normal(size=(55, 16)).astype(np.float32))
    compiled = tf.function(gpt_losses.masked_lm_losses, jit_compile=True)
    np.testing.assert_allclose(compiled(hidden, table, tokens, mask).numpy(),
                               _full_head(hidden, table, tokens, mask).numpy(), rtol=1e-5)
