"""The encoder SavedModel is reusable for fine-tuning: TF Hub API (callable with training=,
variables, trainable_variables, serving_default with the Hub names and int32 inputs), loadable
into a Keras 3 model whose fine-tuning changes its variables and equals fine-tuning the same
weights from the checkpoint (same data, no dropout) to 1e-5."""
from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.export import SavedModelEncoderLayer, export_encoder_savedmodel
from bert_tf.modeling import BertConfig, BertEncoder
from bert_tf.checkpoints import load_original_checkpoint


def _inputs(batch: int = 4, seq: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 5000, size=(batch, seq)).astype(np.int32)
    ids[:, 0] = 101
    mask = np.ones_like(ids)
    mask[1, 5:] = 0
    types = np.zeros_like(ids)
    types[:, 4:] = 1
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def test_tf_hub_interface(exports):
    obj = tf.saved_model.load(str(exports["encoder"]))
    assert len(obj.trainable_variables) > 0 and len(obj.variables) >= len(obj.trainable_variables)
    sig = obj.signatures["serving_default"]
    specs = sig.structured_input_signature[1]
    assert {k: v.dtype for k, v in specs.items()} == {
        "input_word_ids": tf.int32, "input_mask": tf.int32, "input_type_ids": tf.int32}
    assert set(sig.structured_outputs) == {"pooled_output", "sequence_output", "encoder_outputs"}
    inputs = {k: tf.constant(v) for k, v in _inputs().items()}
    out = sig(**inputs)
    assert out["pooled_output"].shape == (4, 128)
    assert out["sequence_output"].shape == (4, 8, 128)
    assert out["encoder_outputs"].shape == (4, 2, 8, 128)  # batch first, then layers
    eval_out = obj(inputs, training=False)
    np.testing.assert_allclose(eval_out["pooled_output"], out["pooled_output"], atol=1e-6)
    assert len(eval_out["encoder_outputs"]) == 2
    np.testing.assert_allclose(eval_out["encoder_outputs"][1], out["encoder_outputs"][:, 1],
                               atol=1e-6)
    train_out = obj(inputs, training=True)  # Dropout (0.1 in the fixture config) is active.
    assert not np.allclose(train_out["sequence_output"], eval_out["sequence_output"])


class PooledClassifier(keras.Model):
    """A Keras 3 classifier on any encoder that returns `pooled_output`."""

    def __init__(self, encoder, num_labels: int = 2, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.head = keras.layers.Dense(num_labels, kernel_initializer=keras.initializers.
                                       RandomNormal(stddev=0.02, seed=1), name="head")

    def call(self, inputs, training=False):
        return self.head(self.encoder(inputs, training=training)["pooled_output"])


def _fine_tune(model: keras.Model, steps: int = 3) -> list[float]:
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=False)
    x = _inputs()
    y = np.array([0, 1, 1, 0], np.int32)
    history = model.fit(x, y, batch_size=4, epochs=steps, shuffle=False, verbose=0)
    return history.history["loss"]


@pytest.mark.long
def test_fine_tuning_the_savedmodel_equals_fine_tuning_the_checkpoint(fixture_model, tmp_path):
    with open(fixture_model["bert_config_file"], encoding="utf-8") as f:
        config_dict = json.load(f)
    config_dict.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config = BertConfig.from_dict(config_dict)

    def encoder_from_checkpoint() -> BertEncoder:
        encoder = BertEncoder(config).build_from_config_shapes()
        load_original_checkpoint(encoder, fixture_model["init_checkpoint"])
        return encoder

    export_dir = export_encoder_savedmodel(encoder_from_checkpoint(), str(tmp_path / "encoder"))

    layer = SavedModelEncoderLayer(export_dir)
    from_savedmodel = PooledClassifier(layer)
    from_checkpoint = PooledClassifier(encoder_from_checkpoint())
    before = {v.path: np.array(v) for v in layer.trainable_weights}
    assert before, "the SavedModel layer exposes no trainable weights"

    losses_sm = _fine_tune(from_savedmodel)
    losses_ckpt = _fine_tune(from_checkpoint)

    changed = [p for p, v in before.items() if not np.allclose(v, np.array(
        next(w for w in layer.trainable_weights if w.path == p)))]
    assert len(changed) >= len(before) // 2, "fine-tuning left the SavedModel's variables as they were"
    # The Keras weights are the SavedModel's own variables (its functions read the new values).
    assert losses_sm[-1] < losses_sm[0]
    np.testing.assert_allclose(losses_sm, losses_ckpt, rtol=0, atol=1e-5)
    x = {k: tf.constant(v) for k, v in _inputs().items()}
    np.testing.assert_allclose(from_savedmodel(x), from_checkpoint(x), rtol=0, atol=1e-5)
    pooled_sm = layer(x)["pooled_output"]
    pooled_ckpt = from_checkpoint.encoder(x)["pooled_output"]
    np.testing.assert_allclose(pooled_sm, pooled_ckpt, rtol=0, atol=1e-5)


def test_export_of_a_pretraining_encoder_holds_no_xla(fixture_model, tmp_path):
    """The pretraining trainer's encoder computes its training GELU with XLA; its export (e.g.
    run_pretraining --export_dir) must still be XLA-free and give the same outputs."""
    from bert_tf.export.serving_compat import check_serving_compatibility

    config = BertConfig.from_json_file(fixture_model["bert_config_file"])
    encoder = BertEncoder(config, xla_gelu_in_training=True).build_from_config_shapes()
    load_original_checkpoint(encoder, fixture_model["init_checkpoint"])
    export_dir = export_encoder_savedmodel(encoder, str(tmp_path / "encoder"))
    report = check_serving_compatibility(export_dir)
    assert not [p for p in report.problems if "XLA" in p], report.problems
    obj = tf.saved_model.load(export_dir)
    inputs = {k: tf.constant(v) for k, v in _inputs().items()}
    np.testing.assert_allclose(obj(inputs, training=False)["sequence_output"],
                               encoder(inputs, training=False)["sequence_output"], atol=1e-5)
    # The saved variables are the encoder's values, in the order fine-tuning init relies on.
    assert [tuple(v.shape) for v in obj.variables if v.dtype != tf.string] == \
        [tuple(v.shape) for v in encoder.variables]
    np.testing.assert_array_equal(obj.variables[0].numpy(), encoder.variables[0].numpy())
