"""The feature-based NER tagger (paper section 5.3): layer choices, the learned scalar mix, and
training through the shared fine-tuning loop with BERT frozen (its weights stay bit-identical,
the tagger's change and the loss falls); checkpoint names and reload; padding."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling import BertConfig, BertEncoder
from bert_tf.tasks import feature_based as fb
from bert_tf.tasks.ner import IGNORE_LABEL, ner_loss_fn
from bert_tf.training import finetuning

CONFIG = BertConfig.from_dict(dict(hidden_size=16, num_hidden_layers=4, num_attention_heads=2,
                                   intermediate_size=32, vocab_size=50,
                                   max_position_embeddings=32))


def _inputs(batch=3, seq=6, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 50, size=(batch, seq)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[0, 4:] = 0
    ids[mask == 0] = 0
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids)}


def test_layer_choices_match_the_encoder_outputs():
    encoder = BertEncoder(CONFIG)
    inputs = _inputs()
    out = encoder(inputs, training=False)
    layers = out["encoder_outputs"]
    expected = {
        "embeddings": out["embedding_output"], "last": layers[-1], "second_to_last": layers[-2],
        "sum_last_four": layers[0] + layers[1] + layers[2] + layers[3],
        "concat_last_four": tf.concat(layers, -1), "sum_all": tf.add_n(layers),
        "weighted_sum_last_four": tf.add_n(layers) / 4.0,  # zero weights: a plain average
        "weighted_sum_all": tf.add_n(layers) / 4.0,
        "concat_embeddings_and_all": tf.concat([out["embedding_output"], *layers], -1),
    }
    assert set(expected) == set(fb.FEATURE_LAYERS)
    for mode, want in expected.items():
        mix = fb.ScalarMix(4) if mode.startswith("weighted") else None
        got = fb.select_features(out, mode, mix)
        assert got.shape[-1] == fb.feature_size(mode, CONFIG.hidden_size, len(layers)), mode
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=mode)
    mix = fb.ScalarMix(2)
    mix.build()
    mix.layer_weights.assign([np.log(3.0), 0.0])
    mix.gamma.assign(2.0)
    a, b = tf.ones([1, 2, 3]), tf.zeros([1, 2, 3]) + 5.0
    np.testing.assert_allclose(mix([a, b]).numpy(), 2.0 * (0.75 * 1.0 + 0.25 * 5.0), rtol=1e-6)
    with pytest.raises(ValueError, match="unknown feature layers 'top'"):
        fb.feature_size("top", 16)
    shallow = BertConfig.from_dict({**CONFIG.to_dict(), "num_hidden_layers": 2})
    with pytest.raises(ValueError, match="need at least 4 transformer layers"):
        fb.FeatureBasedTagger(shallow, 3, "concat_last_four")
    # What the studies concatenate instead when there are fewer than four layers: every hidden
    # state the model has (embeddings + 2 blocks = 3·H).
    tagger = fb.FeatureBasedTagger(shallow, 3, "concat_embeddings_and_all", lstm_units=4,
                                   lstm_layers=1)
    assert fb.feature_size("concat_embeddings_and_all", 16, 2) == 48
    assert tagger(_inputs())["logits"].shape == (3, 6, 3)


@pytest.mark.long
def test_training_keeps_bert_frozen_and_the_loss_falls(tmp_path):
    tf.keras.utils.set_random_seed(1)
    model = fb.FeatureBasedTagger(CONFIG, num_labels=3, feature_layers="weighted_sum_all",
                                  lstm_units=8, lstm_layers=2)
    model.build_from_config_shapes()
    encoder_before = [v.numpy().copy() for v in model.encoder.weights]
    tagger_before = [v.numpy().copy() for v in model.trainable_variables]
    assert not any(v is w for v in model.trainable_variables for w in model.encoder.weights)
    assert {v.path.split("/")[-1] for v in model.trainable_variables} >= {
        "layer_weights", "gamma", "kernel", "recurrent_kernel", "bias"}
    # Labels a function of the token ids, first sub-token style (every other position ignored).
    inputs = _inputs(batch=16, seq=8, seed=2)
    labels = inputs["input_word_ids"] % 3
    labels[:, 1::2] = IGNORE_LABEL
    labels[inputs["input_mask"] == 0] = IGNORE_LABEL
    arrays = {**inputs, "label_ids": labels.astype(np.int32)}
    options = finetuning.FinetuneOptions(output_dir=str(tmp_path), learning_rate=1e-2,
                                         num_train_steps=30, num_warmup_steps=0,
                                         train_batch_size=8, save_checkpoints_steps=30)
    result = finetuning.train_model(model, arrays, ner_loss_fn, options)
    assert result["loss"] < 0.6 * result["first_loss"], result
    for before, v in zip(encoder_before, model.encoder.weights):
        np.testing.assert_array_equal(before, v.numpy(), err_msg=v.path)
    changed = [not np.array_equal(b, v.numpy())
               for b, v in zip(tagger_before, model.trainable_variables)]
    assert all(changed), [v.path for c, v in zip(changed, model.trainable_variables) if not c]
    # The checkpoint holds BERT under the original names and the tagger under its own.
    names = set(tf.train.load_checkpoint(result["checkpoint"]).get_variable_to_shape_map())
    assert "bert/encoder/layer_3/output/dense/kernel" in names
    assert "feature_based_tagger/classifier/kernel" in names
    assert "feature_based_tagger/scalar_mix/layer_weights" in names
    assert "feature_based_tagger/bilstm_1/backward_lstm_1/lstm_cell/recurrent_kernel" in names


def test_checkpoint_reloads_into_a_second_model_in_the_same_process(tmp_path):
    tf.keras.utils.set_random_seed(1)
    model = fb.FeatureBasedTagger(CONFIG, num_labels=3, feature_layers="last", lstm_units=4,
                                  lstm_layers=1).build_from_config_shapes()
    prefix = finetuning.write_checkpoint(model, str(tmp_path), 1, [], 1)
    again = fb.FeatureBasedTagger(CONFIG, num_labels=3, feature_layers="last", lstm_units=4,
                                  lstm_layers=1).build_from_config_shapes()
    finetuning.load_checkpoint(again, prefix, heads="required")
    feed = {k: tf.constant(v) for k, v in _inputs().items()}
    np.testing.assert_allclose(again(feed, training=False)["logits"].numpy(),
                               model(feed, training=False)["logits"].numpy(), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.long
def test_padding_does_not_change_real_positions():
    model = fb.FeatureBasedTagger(CONFIG, num_labels=3, feature_layers="last", lstm_units=4,
                                  lstm_layers=1).build_from_config_shapes()
    inputs = _inputs(batch=1, seq=4)
    padded = {k: np.pad(v, [(0, 0), (0, 3)]) for k, v in inputs.items()}
    padded["input_word_ids"][0, 4:] = 7  # garbage under the padding mask
    short = model(inputs, training=False)["logits"].numpy()
    long = model(padded, training=False)["logits"].numpy()
    np.testing.assert_allclose(long[:, :4], short, rtol=1e-5, atol=1e-6)
