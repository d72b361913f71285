"""Activation recomputation (`--recompute_activations`, bert_tf.modeling.recompute): per block,
the same gradients (within 1e-6) with dropout ON (the recomputed pass draws the forward pass's
masks), the dropout streams left where the plain step leaves them, and the loops' option.

Tolerance: recomputation evaluates the same ops on the same inputs again; the gradients differ
only by the float rounding of a differently fused backward graph (2e-8 observed on these sizes,
the brief's bound is 1e-6)."""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.model import GptModel
from bert_tf.modeling import BertConfig
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.recompute import enable_recompute
from bert_tf.training.random_state import seed_generators

GRADIENT_TOLERANCE = 1e-6


def _gradients(model, inputs, loss_of):
    """(loss, gradients, dropout stream states after the step); the streams are then put back."""
    before = {n: g.state.numpy().copy() for n, g in seed_generators(model).items()}

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_of(model(inputs, training=True))
        return loss, tape.gradient(loss, model.trainable_variables)

    loss, grads = step()
    after = {n: g.state.numpy().copy() for n, g in seed_generators(model).items()}
    for name, generator in seed_generators(model).items():
        generator.state.assign(before[name])
    return float(loss), [tf.convert_to_tensor(g).numpy() for g in grads], after


def _assert_same(model, inputs, loss_of):
    plain = _gradients(model, inputs, loss_of)
    assert enable_recompute(model) >= 1
    recomputed = _gradients(model, inputs, loss_of)
    assert recomputed[0] == pytest.approx(plain[0], abs=1e-6)
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(plain[1], recomputed[1]))
    assert worst <= GRADIENT_TOLERANCE, worst
    assert sorted(plain[2]) == sorted(recomputed[2])
    for name in plain[2]:  # the streams advanced once per step, as without recomputation
        np.testing.assert_array_equal(plain[2][name], recomputed[2][name], err_msg=name)


def test_bert_encoder_same_gradients_with_dropout():
    keras.utils.set_random_seed(1)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16,
                        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    encoder = BertEncoder(config).build_from_config_shapes()
    ids = tf.constant(np.random.default_rng(0).integers(0, 50, (3, 8)), tf.int32)
    mask = tf.constant([[1] * 8, [1] * 5 + [0] * 3, [1] * 3 + [0] * 5], tf.int32)
    inputs = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": tf.zeros_like(ids)}
    _assert_same(encoder, inputs, lambda out: tf.reduce_mean(out["sequence_output"] ** 2)
                 + tf.reduce_mean(out["pooled_output"]))


def test_gpt_model_same_gradients_with_dropout():
    keras.utils.set_random_seed(2)
    config = GptConfig(n_vocab=40, n_special=3, n_ctx=8, n_embd=16, n_head=2, n_layer=2,
                       embd_pdrop=0.1, attn_pdrop=0.1, resid_pdrop=0.1, clf_pdrop=0.1)
    model = GptModel(config, classifier=False, name="gpt")
    ids = tf.constant(np.random.default_rng(1).integers(0, 40, (3, 8)), tf.int32)
    _assert_same(model, {"token_ids": ids},
                 lambda out: tf.reduce_mean(tf.nn.log_softmax(out["lm_logits"])[..., 0]))


def test_off_by_default_and_not_in_inference():
    config = BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=8)
    encoder = BertEncoder(config).build_from_config_shapes()
    assert encoder.recompute_activations is False
    enable_recompute(encoder)
    ids = tf.ones([1, 4], tf.int32)
    out = encoder({"input_word_ids": ids, "input_mask": ids, "input_type_ids": ids * 0},
                  return_attention_probs=True)  # inference: the plain path, probs available
    assert len(out["attention_probs"]) == 1
    assert "recompute_activations" not in encoder.get_config()


@pytest.mark.long
def test_finetuning_loop_option_same_weights_with_dropout(tmp_path):
    """`FinetuneOptions.recompute_activations` in `train_model`, with accumulation (k=2) and
    dropout 0.1: the weights after 3 steps equal the plain run's within 1e-6 (same masks)."""
    from bert_tf.modeling import BertClassifier
    from bert_tf.training import finetuning
    from bert_tf.training.finetuning import FinetuneOptions, train_model

    rng = np.random.default_rng(0)
    ids = rng.integers(5, 50, size=(32, 8)).astype(np.int32)
    arrays = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
              "input_type_ids": np.zeros_like(ids), "label_ids": (np.arange(32) % 2).astype(np.int32)}
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16)

    def run(recompute):
        keras.utils.set_random_seed(3)
        model = BertClassifier(config, num_labels=2).build_from_config_shapes()
        options = FinetuneOptions(output_dir=str(tmp_path / str(recompute)), learning_rate=1e-3,
                                  num_train_steps=3, num_warmup_steps=1, train_batch_size=8,
                                  progress=False, plot_curves=False, gradient_accumulation_steps=2,
                                  recompute_activations=recompute)
        train_model(model, arrays, lambda out, b: tf.reduce_mean(
            keras.losses.sparse_categorical_crossentropy(b["label_ids"], out["logits"],
                                                         from_logits=True)), options)
        return {n: np.array(v) for n, v in finetuning.checkpoint_variable_map(model).items()}

    plain, recomputed = run(False), run(True)
    worst = max(float(np.max(np.abs(plain[n] - recomputed[n]))) for n in plain)
    assert worst <= 1e-6, worst
