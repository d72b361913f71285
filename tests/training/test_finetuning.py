"""The shared fine-tuning loop: learning, checkpoints (written, rotated, reloaded), prediction
order with a partial last batch, initialisation from a TF1 checkpoint or an encoder SavedModel,
and the errors a user meets (wrong model size, NaN loss)."""
from __future__ import annotations

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.checkpoints import CheckpointError, read_checkpoint, save_original_checkpoint
from bert_tf.modeling import BertClassifier, BertConfig, BertEncoder
from bert_tf.training import finetuning
from bert_tf.training.finetuning import (FinetuneOptions, init_model, latest_checkpoint,
                                         num_train_and_warmup_steps, predict_arrays, train_model)

SEQ = 8


def tiny_config(hidden: int = 32, vocab: int = 50) -> BertConfig:
    return BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=2 * hidden,
                      max_position_embeddings=16, type_vocab_size=2,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def toy_arrays(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A learnable problem: label 1 iff token id 7 occurs in the sequence."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(10, 50, size=(n, SEQ)).astype(np.int32)
    labels = (np.arange(n) % 2).astype(np.int32)
    ids[labels == 1, rng.integers(1, SEQ)] = 7
    ids[:, 0] = 2  # a [CLS]-like first token
    return {"input_word_ids": ids, "input_mask": np.ones_like(ids),
            "input_type_ids": np.zeros_like(ids), "label_ids": labels}


def classification_loss(outputs, batch):
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
        batch["label_ids"], outputs["logits"], from_logits=True))


def make_classifier(config: BertConfig | None = None, seed: int = 1) -> BertClassifier:
    keras.utils.set_random_seed(seed)
    return BertClassifier(config or tiny_config(), num_labels=2).build_from_config_shapes()


def weights(model) -> dict[str, np.ndarray]:
    return {name: np.array(var) for name, var in finetuning.checkpoint_variable_map(model).items()}


def test_step_counts_as_the_original():
    assert num_train_and_warmup_steps(3668, 32, 3.0, 0.1) == (343, 34)
    assert num_train_and_warmup_steps(10, 4, 1.0, 0.5) == (2, 1)
    with pytest.raises(ValueError, match="--train_batch_size=32"):
        num_train_and_warmup_steps(10, 32, 1.0, 0.1)


def test_loss_falls_checkpoints_rotate_and_reload(tmp_path):
    model = make_classifier()
    arrays = toy_arrays(64)
    out = str(tmp_path / "run")
    options = FinetuneOptions(output_dir=out, learning_rate=1e-3, num_train_steps=60,
                              num_warmup_steps=6, train_batch_size=16, save_checkpoints_steps=25,
                              keep_checkpoint_max=2)
    result = train_model(model, arrays, classification_loss, options)
    assert result["global_step"] == 60
    assert result["loss"] < 0.5 * result["first_loss"], result
    # Checkpoints at 25, 50 and the end (60); only the last two are kept.
    assert result["checkpoint"] == os.path.join(out, "model.ckpt-60")
    assert latest_checkpoint(out) == result["checkpoint"]
    assert not os.path.exists(os.path.join(out, "model.ckpt-25.index"))
    assert os.path.exists(os.path.join(out, "model.ckpt-50.index"))
    state = open(os.path.join(out, "checkpoint")).read()
    assert 'model_checkpoint_path: "model.ckpt-60"' in state
    assert 'all_model_checkpoint_paths: "model.ckpt-50"' in state
    # Original names, plus global_step; reloaded weights equal the trained ones.
    saved = read_checkpoint(result["checkpoint"])
    assert int(saved["global_step"]) == 60
    assert "bert/encoder/layer_1/output/dense/kernel" in saved and "output_weights" in saved
    trained = weights(model)
    fresh = make_classifier(seed=99)
    init_model(fresh, latest_checkpoint(out))
    reloaded = weights(fresh)
    assert trained.keys() == reloaded.keys()
    for name in trained:
        np.testing.assert_array_equal(trained[name], reloaded[name], err_msg=name)
    # The trained model has learned the toy rule on its own training data.
    logits = predict_arrays(model, arrays, 16, ["logits"])["logits"]
    assert (logits.argmax(-1) == arrays["label_ids"]).mean() > 0.9


def test_predict_keeps_order_and_last_partial_batch():
    model = make_classifier()
    arrays = toy_arrays(11)
    out = predict_arrays(model, arrays, batch_size=4, output_keys=["logits", "pooled_output"])
    assert out["logits"].shape == (11, 2) and out["pooled_output"].shape == (11, 32)
    for i in (0, 5, 10):  # rows match one-by-one prediction, in order
        single = model({k: arrays[k][i:i + 1] for k in finetuning.ENCODER_INPUT_KEYS},
                       training=False)
        np.testing.assert_allclose(out["logits"][i], np.array(single["logits"])[0],
                                   rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="input arrays lack"):
        predict_arrays(model, {"input_word_ids": arrays["input_word_ids"]}, 4, ["logits"])


def test_init_from_savedmodel_equals_init_from_checkpoint(tmp_path):
    from bert_tf.export.encoder import export_encoder_savedmodel

    keras.utils.set_random_seed(5)
    encoder = BertEncoder(tiny_config()).build_from_config_shapes()
    ckpt = save_original_checkpoint(encoder, str(tmp_path / "bert_model.ckpt"))
    export_dir = export_encoder_savedmodel(encoder, str(tmp_path / "encoder_savedmodel"))
    from_ckpt, from_savedmodel = make_classifier(seed=1), make_classifier(seed=1)
    init_model(from_ckpt, ckpt)
    init_model(from_savedmodel, export_dir)
    a, b = weights(from_ckpt), weights(from_savedmodel)
    expected = {name: np.array(v) for name, v in
                finetuning.encoder_variable_map(encoder).items()}
    for name in expected:
        np.testing.assert_array_equal(a[name], expected[name], err_msg=name)
        np.testing.assert_array_equal(b[name], expected[name], err_msg=name)
    np.testing.assert_array_equal(a["output_weights"], b["output_weights"])  # head untouched


def test_wrong_size_init_names_file_and_variable(tmp_path):
    from bert_tf.export.encoder import export_encoder_savedmodel

    encoder = BertEncoder(tiny_config(hidden=64)).build_from_config_shapes()
    ckpt = save_original_checkpoint(encoder, str(tmp_path / "bert_model.ckpt"))
    with pytest.raises(CheckpointError, match=r"bert_model\.ckpt.*'bert/embeddings/word_emb"
                                              r"eddings' has shape \(50, 64\).*\(50, 32\)"):
        init_model(make_classifier(), ckpt)
    export_dir = export_encoder_savedmodel(encoder, str(tmp_path / "sm"))
    with pytest.raises(CheckpointError, match=r"sm: variable 'bert/embeddings/word_embeddings' "
                                              r"has shape \(50, 64\)"):
        init_model(make_classifier(), export_dir)
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        init_model(make_classifier(), str(tmp_path / "missing.ckpt"))


def test_nan_loss_names_the_step(tmp_path):
    model = make_classifier()

    def nan_loss(outputs, batch):
        return classification_loss(outputs, batch) * np.nan

    options = FinetuneOptions(output_dir=str(tmp_path), learning_rate=1e-4, num_train_steps=5,
                              num_warmup_steps=0, train_batch_size=4)
    with pytest.raises(FloatingPointError, match="training loss is nan at step 1"):
        train_model(model, toy_arrays(8), nan_loss, options)
    assert latest_checkpoint(str(tmp_path)) is None  # nothing written for a failed run


class _EncoderPlusDense(keras.Model):
    """A task model outside bert_tf.modeling: a BertEncoder as `.encoder` and a head of its own."""

    def __init__(self, config, **kwargs):
        kwargs.setdefault("name", "encoder_plus_dense")
        super().__init__(**kwargs)
        self.encoder = BertEncoder(config)
        self.head = keras.layers.Dense(2, name="my_head")

    def call(self, inputs, training=None):
        pooled = self.encoder(inputs, training=training)["pooled_output"]
        return {"logits": self.head(pooled)}

    def build_from_config_shapes(self):
        ids = tf.ones([1, 2], tf.int32)
        self({"input_word_ids": ids, "input_mask": ids, "input_type_ids": ids * 0})
        return self


def test_other_task_models_get_original_encoder_names(tmp_path):
    keras.utils.set_random_seed(3)
    encoder = BertEncoder(tiny_config()).build_from_config_shapes()
    ckpt = save_original_checkpoint(encoder, str(tmp_path / "bert_model.ckpt"))
    model = _EncoderPlusDense(tiny_config())
    init_model(model, ckpt)  # builds it; encoder from the checkpoint, the head stays fresh
    np.testing.assert_array_equal(np.array(model.encoder.embeddings.word_embeddings),
                                  np.array(encoder.embeddings.word_embeddings))
    names = finetuning.checkpoint_variable_map(model)
    assert "bert/encoder/layer_0/attention/self/query/kernel" in names
    head_names = [n for n in names if not n.startswith("bert/")]
    assert len(head_names) == 2 and all("my_head" in n for n in head_names)
    options = FinetuneOptions(output_dir=str(tmp_path / "run"), learning_rate=1e-3,
                              num_train_steps=3, num_warmup_steps=0, train_batch_size=4)
    result = train_model(model, toy_arrays(8), classification_loss, options)
    fresh = _EncoderPlusDense(tiny_config()).build_from_config_shapes()
    finetuning.load_checkpoint(fresh, result["checkpoint"])
    for name, value in weights(model).items():
        np.testing.assert_array_equal(value, weights(fresh)[name], err_msg=name)
    with pytest.raises(CheckpointError, match="has no variable .*my_head"):
        finetuning.load_checkpoint(_EncoderPlusDense(tiny_config()), ckpt)  # head required
