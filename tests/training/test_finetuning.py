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


@pytest.mark.long
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


@pytest.mark.long
def test_predict_keeps_order_and_last_partial_batch():
    model = make_classifier()
    arrays = toy_arrays(11)
    out = predict_arrays(model, arrays, batch_size=4, output_keys=["logits"])
    assert out["logits"].shape == (11, 2)
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


@pytest.mark.long
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


@pytest.mark.long
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


def dropout_config() -> BertConfig:
    config = tiny_config()
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.1
    return config


def _checkpoint_tensors(prefix: str) -> dict[str, np.ndarray]:
    return read_checkpoint(prefix)


@pytest.mark.long
def test_interrupted_run_resumes_bit_identical(tmp_path):
    """Dropout 0.1: a run stopped after its step-3 checkpoint (here by a NaN at step 5) and
    started again with the same output_dir continues exactly: the final checkpoint (weights,
    adam slots, dropout streams, step) and the losses of steps 4..8 equal the uninterrupted
    run's, bit for bit."""
    arrays = toy_arrays(40)

    def options(out):
        return FinetuneOptions(output_dir=str(out), learning_rate=1e-3, num_train_steps=8,
                               num_warmup_steps=2, train_batch_size=4, save_checkpoints_steps=3,
                               progress=False)

    full = train_model(make_classifier(dropout_config()), arrays, classification_loss,
                       options(tmp_path / "full"))
    calls = tf.Variable(0)

    def fails_at_step_5(outputs, batch):
        calls.assign_add(1)
        poison = tf.where(tf.equal(calls, 5), np.float32(np.nan), np.float32(1.0))
        return classification_loss(outputs, batch) * poison

    out = tmp_path / "resumed"
    with pytest.raises(FloatingPointError, match="at step 5.*model.ckpt-3"):
        train_model(make_classifier(dropout_config()), arrays, fails_at_step_5, options(out))
    assert latest_checkpoint(str(out)) == str(out / "model.ckpt-3")
    # (same seed: tf.data's shuffle order depends on the global seed, as the tools set it)
    again = train_model(make_classifier(dropout_config()), arrays, classification_loss,
                        options(out))
    assert again["start_step"] == 3
    assert [r["step"] for r in again["history"]] == [4, 5, 6, 7, 8]
    assert [r["loss"] for r in again["history"]] == [r["loss"] for r in full["history"][3:]]
    a = _checkpoint_tensors(full["checkpoint"])
    b = _checkpoint_tensors(again["checkpoint"])
    assert sorted(a) == sorted(b)
    assert "output_weights/adam_m" in a and "bert/encoder/layer_0/output/dense/kernel/adam_v" in a
    assert any(n.startswith(finetuning.RANDOM_STATE_SCOPE) for n in a)
    assert int(a["global_step"]) == 8
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    # Dropout is really on: the streams advanced, and the curves of both runs were drawn.
    assert os.path.exists(out / "curves.png") and os.path.exists(tmp_path / "full" / "curves.png")
    # A finished run is not trained again: its weights are loaded.
    done = train_model(make_classifier(dropout_config(), seed=9), arrays, classification_loss,
                       options(out))
    assert done["start_step"] == 8 and done["history"] == []


def test_init_from_dropout_savedmodel(tmp_path):
    """Every published config has dropout 0.1: its encoder SavedModel (which also holds the
    dropout layers' seed states) initialises a classifier as the TF1 checkpoint does."""
    from bert_tf.export.encoder import export_encoder_savedmodel

    keras.utils.set_random_seed(5)
    encoder = BertEncoder(dropout_config()).build_from_config_shapes()
    ckpt = save_original_checkpoint(encoder, str(tmp_path / "bert_model.ckpt"))
    export_dir = export_encoder_savedmodel(encoder, str(tmp_path / "encoder_savedmodel"))
    from_ckpt = make_classifier(dropout_config(), seed=1)
    from_savedmodel = make_classifier(dropout_config(), seed=1)
    init_model(from_ckpt, ckpt)
    init_model(from_savedmodel, export_dir)
    a, b = weights(from_ckpt), weights(from_savedmodel)
    for name, value in finetuning.encoder_variable_map(encoder).items():
        np.testing.assert_array_equal(b[name], np.array(value), err_msg=name)
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_curves_from_events_keep_the_resumed_values(tmp_path):
    from bert_tf.plotting import plot_training_curves, read_scalars

    logdir = tmp_path / "train"
    for run, values in enumerate(([1.0, 2.0, 3.0], [20.0, 30.0])):  # second run resumes at 2
        writer = tf.summary.create_file_writer(str(logdir))
        with writer.as_default():
            for i, v in enumerate(values):
                tf.summary.scalar("loss", v, step=i + 1 + run)
        writer.close()
    assert read_scalars(tmp_path)["loss"] == [(1, 1.0), (2, 20.0), (3, 30.0)]
    png = plot_training_curves(tmp_path, tmp_path / "curves.png")
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    history = [{"step": 1, "loss": 0.7, "learning_rate": 0.0}, {"step": 2, "loss": 0.5,
                                                                 "learning_rate": 1e-4}]
    assert os.path.getsize(plot_training_curves(history, tmp_path / "h.png")) > 1000
    with pytest.raises(FileNotFoundError, match="no TensorBoard events"):
        read_scalars(tmp_path / "nothing")
