"""LoRA (bert_tf.modeling.lora over Keras' Dense.enable_lora): only the adapters (and the task
head) train, the adapters-only file reloads to identical outputs, merging equals the unmerged
model within 1e-5 and leaves no LoRA variables, bad settings are one line."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling import BertClassifier, BertConfig
from bert_tf.modeling.lora import (LoraError, enable_lora, lora_layers, lora_parameter_count,
                                   load_lora_weights, merge_lora, read_lora_file,
                                   save_lora_weights)

CONFIG = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=32, type_vocab_size=2, max_position_embeddings=16,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
MERGE_ATOL = 1e-5  # the bound: W + s·A@B summed once vs per call, float32 rounding


def _model(base_weights=None):
    model = BertClassifier(CONFIG, num_labels=3)
    model.build_from_config_shapes()
    if base_weights is not None:
        model.set_weights(base_weights)
    return model


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, CONFIG.vocab_size, [4, 12]).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 8:] = 0
    return {"input_word_ids": tf.constant(ids), "input_mask": tf.constant(mask),
            "input_type_ids": tf.zeros_like(ids)}, tf.constant([0, 1, 2, 1])


def _train(model, steps=3):
    batch, labels = _batch()
    opt = tf.keras.optimizers.Adam(1e-2)
    for _ in range(steps):
        with tf.GradientTape() as tape:
            logits = model(batch, training=True)["logits"]
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))


@pytest.fixture(scope="module")
def base_weights():
    return _model().get_weights()


def test_only_adapters_and_head_train(base_weights):
    model = _model(base_weights)
    paths = enable_lora(model, rank=4, alpha=8)
    assert len(paths) == 2 * CONFIG.num_hidden_layers  # query and value of each block
    assert all(p.endswith(("/query", "/value")) for p in paths)
    h, r = CONFIG.hidden_size, 4
    adapters = 2 * CONFIG.num_hidden_layers * (h * r + r * h)
    head = h * 3 + 3  # the classifier's output_weights [3, H] and output_bias [3]
    assert lora_parameter_count(model) == adapters
    assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == adapters + head
    frozen = {v.path: np.asarray(v).copy() for v in model.weights if not v.trainable}
    before = {v.path: np.asarray(v).copy() for v in model.trainable_variables}
    _train(model)
    for v in model.weights:
        if v.path in frozen:
            np.testing.assert_array_equal(np.asarray(v), frozen[v.path], err_msg=v.path)
    assert any(not np.array_equal(np.asarray(v), before[v.path])
               for v in model.trainable_variables if "lora_kernel_b" in v.path)


def test_saved_file_reloads_to_identical_outputs(base_weights, tmp_path):
    model = _model(base_weights)
    enable_lora(model, rank=2, alpha=4, targets="query,value,intermediate_dense")
    _train(model)
    path = save_lora_weights(model, str(tmp_path / "adapters.npz"))
    # Small: the adapters and the head only, not the base model.
    _, arrays = read_lora_file(path)
    head = CONFIG.hidden_size * 3 + 3
    assert sum(a.size for a in arrays.values()) == lora_parameter_count(model) + head
    fresh = _model(base_weights)
    loaded = load_lora_weights(fresh, path)
    assert loaded == sorted(lora_layers(model))
    batch, _ = _batch(1)
    np.testing.assert_array_equal(model(batch)["logits"], fresh(batch)["logits"])
    # Saving over something that is not a LoRA file is refused.
    other = tmp_path / "notes.txt"
    other.write_text("mine")
    with pytest.raises(LoraError, match="not a LoRA weights file; not overwriting"):
        save_lora_weights(model, str(other))
    assert other.read_text() == "mine"


def test_merge_equals_unmerged_and_removes_adapters(base_weights):
    model = _model(base_weights)
    enable_lora(model, rank=4, targets=["query", "*/layer_1/*value"])
    _train(model)
    batch, _ = _batch(2)
    unmerged = model(batch)["logits"].numpy()
    assert merge_lora(model)
    assert not lora_layers(model)
    assert len(model.weights) == len(base_weights)
    assert not any("lora" in v.path for v in model.weights)
    np.testing.assert_allclose(model(batch)["logits"], unmerged, atol=MERGE_ATOL, rtol=0)
    assert all(v.trainable for v in model.trainable_variables)


@pytest.mark.parametrize("kwargs, message", [
    ({"targets": ["qurey"]}, "LoRA target 'qurey' matches no Dense/EinsumDense layer of "
                             "BertClassifier; its Dense layer names: "),
    ({"rank": 0}, "LoRA rank must be an integer >= 1, got 0"),
    ({"alpha": -1.0}, "LoRA alpha must be > 0"),
    ({"dropout": 1.0}, "LoRA dropout must be in [0, 1), got 1.0"),
    ({"dropout": 0.1, "targets": ["pooler"]}, "LoRA dropout 0.1 on "),
    ({"targets": ""}, "LoRA targets are empty"),
])
def test_bad_settings_are_one_line(base_weights, kwargs, message):
    with pytest.raises(LoraError) as e:
        enable_lora(_model(base_weights), **kwargs)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_enabling_twice_and_loading_a_mismatched_file(base_weights, tmp_path):
    model = _model(base_weights)
    enable_lora(model, rank=2)
    with pytest.raises(LoraError, match="already enabled"):
        enable_lora(model, rank=2, targets=["query"])
    path = save_lora_weights(model, str(tmp_path / "a.npz"))
    other = _model(base_weights)
    enable_lora(other, rank=2, targets=["key"])
    with pytest.raises(LoraError, match="LoRA layers differ from the model's"):
        load_lora_weights(other, path)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(LoraError, match="not a LoRA weights file"):
        load_lora_weights(_model(base_weights), str(tmp_path / "junk.npz"))
