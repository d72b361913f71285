"""Every bert_tf layer and model round-trips through Keras' `.keras` format: same class, same
config (the BertConfig inside, as a dict), bit-identical weights and outputs — also in training
mode with dropout on (the dropout random streams are saved with the weights) — and a file loads
in a fresh Python process. Task models train with `compile(metrics=...)`, `fit` and `evaluate`."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling import (BertClassifier, BertConfig, BertEmbeddings, BertEncoder,
                              BertMultipleChoice, BertPretrainer, BertSelfAttention,
                              BertSpanLabeler, BertTokenClassifier, BertTransformerBlock,
                              ClassificationHead, MaskedLMHead, MultipleChoiceHead,
                              NextSentenceHead, SpanHead, TokenClassificationHead)
from bert_tf.modeling.dropout import BertDropout
from bert_tf.modeling.heads import OutputProjection
from bert_tf.tasks.feature_based import FeatureBasedTagger, ScalarMix

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]

# A small model with the published configs' dropout (0.1 everywhere) and an extra key of the
# Chinese/multilingual configs, which must travel with the model too.
CONFIG = BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                    intermediate_size=64, type_vocab_size=2, max_position_embeddings=64,
                    extra_fields={"pooler_type": "first_token_transform"})


def _encoder_inputs(batch: int = 3, seq: int = 12, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, CONFIG.vocab_size, size=(batch, seq)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[0, seq - 3:] = 0
    types = np.zeros_like(ids)
    types[:, seq // 2:] = 1
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def _pretrainer_inputs() -> dict[str, np.ndarray]:
    return {**_encoder_inputs(), "masked_lm_positions": np.array([[1, 4, 7]] * 3, np.int32)}


def _choice_inputs() -> dict[str, np.ndarray]:
    a, b = _encoder_inputs(seed=1), _encoder_inputs(seed=2)
    return {k: np.stack([a[k], b[k]], axis=1) for k in a}  # [batch, 2 choices, seq]


MODELS = {
    "encoder": (lambda: BertEncoder(CONFIG), _encoder_inputs),
    "encoder_xla_gelu": (lambda: BertEncoder(CONFIG, xla_gelu_in_training=True), _encoder_inputs),
    "pretrainer": (lambda: BertPretrainer(CONFIG), _pretrainer_inputs),
    "pretrainer_options": (lambda: BertPretrainer(CONFIG, last_layer_at_predictions_only=True,
                                                  xla_gelu_in_training=True), _pretrainer_inputs),
    "classifier": (lambda: BertClassifier(CONFIG, num_labels=3, dropout_rate=0.2),
                   _encoder_inputs),
    "regressor": (lambda: BertClassifier(CONFIG, num_labels=1), _encoder_inputs),
    "span_labeler": (lambda: BertSpanLabeler(CONFIG), _encoder_inputs),
    "token_classifier": (lambda: BertTokenClassifier(CONFIG, num_labels=9), _encoder_inputs),
    "multiple_choice": (lambda: BertMultipleChoice(CONFIG, num_choices=2), _choice_inputs),
    "feature_based_tagger": (lambda: FeatureBasedTagger(
        CONFIG, num_labels=9, feature_layers="weighted_sum_last_four", lstm_units=8),
        _encoder_inputs),
}


def _flat(outputs) -> dict[str, np.ndarray]:
    """Output dict -> {name: array}; lists (encoder_outputs, attention_probs) by index."""
    flat = {}
    for key, value in outputs.items():
        if isinstance(value, (list, tuple)):
            flat.update({f"{key}/{i}": np.asarray(v) for i, v in enumerate(value)})
        else:
            flat[key] = np.asarray(value)
    return flat


def _assert_same_outputs(a, b) -> None:
    a, b = _flat(a), _flat(b)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def _assert_same_weights(a: keras.Model, b: keras.Model) -> None:
    assert [v.path for v in a.weights] == [v.path for v in b.weights]
    for va, vb in zip(a.weights, b.weights):
        np.testing.assert_array_equal(np.asarray(va), np.asarray(vb), err_msg=va.path)


@pytest.mark.long
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_keras_file_round_trip_is_bit_identical(kind, tmp_path):
    make, make_inputs = MODELS[kind]
    model = make()
    model.build_from_config_shapes()
    inputs = make_inputs()
    model(inputs, training=True)  # advance the dropout streams past their initial state
    path = tmp_path / f"{kind}.keras"
    model.save(path)

    loaded = keras.models.load_model(path)
    assert type(loaded) is type(model)
    assert loaded.get_config() == model.get_config()
    assert loaded.config == CONFIG and loaded.config.extra_fields == CONFIG.extra_fields
    _assert_same_weights(model, loaded)
    _assert_same_outputs(model(inputs, training=False), loaded(inputs, training=False))
    # Training mode: dropout 0.1 on, and the next masks are the same as the original model's.
    _assert_same_outputs(model(inputs, training=True), loaded(inputs, training=True))
    _assert_same_outputs(model(inputs, training=True), loaded(inputs, training=True))


@pytest.mark.long
def test_pretrainer_options_and_tied_table_survive(tmp_path):
    model = BertPretrainer(CONFIG, last_layer_at_predictions_only=True,
                           xla_gelu_in_training=True).build_from_config_shapes()
    model.save(tmp_path / "p.keras")
    loaded = keras.models.load_model(tmp_path / "p.keras")
    assert loaded.last_layer_at_predictions_only and loaded.xla_gelu_in_training
    assert all(block.xla_gelu_in_training for block in loaded.encoder.blocks)
    # The masked-LM output weights are the encoder's word embeddings, not a copy.
    assert loaded.masked_lm.embedding_table is loaded.encoder.word_embeddings
    out = loaded(_pretrainer_inputs(), training=False)
    assert "sequence_output_at_positions" in out and "sequence_output" not in out


LAYERS = [
    lambda: BertEmbeddings(CONFIG),
    lambda: BertSelfAttention(CONFIG),
    lambda: BertTransformerBlock(CONFIG, xla_gelu_in_training=True),
    lambda: BertDropout(0.1, seed=3),
    lambda: OutputProjection(5, 32, keras.initializers.TruncatedNormal(stddev=0.02)),
    lambda: MaskedLMHead(CONFIG),
    lambda: NextSentenceHead(CONFIG),
    lambda: ClassificationHead(CONFIG, num_labels=4, dropout_rate=0.3),
    lambda: SpanHead(CONFIG),
    lambda: TokenClassificationHead(CONFIG, num_labels=7),
    lambda: MultipleChoiceHead(CONFIG, num_choices=3, dropout_rate=0.2),
    lambda: ScalarMix(4),
]


@pytest.mark.parametrize("make", LAYERS, ids=lambda f: type(f()).__name__)
def test_layer_config_round_trip(make):
    layer = make()
    serialized = keras.saving.serialize_keras_object(layer)
    assert serialized["registered_name"] == f"bert_tf>{type(layer).__name__}"
    json.dumps(serialized)  # plain JSON: the BertConfig travels as a dict
    revived = keras.saving.deserialize_keras_object(serialized)
    assert type(revived) is type(layer)
    assert revived.get_config() == layer.get_config()


def test_classifier_on_given_encoder_keeps_it(tmp_path):
    encoder = BertEncoder(CONFIG, name="my_bert")
    model = BertClassifier(CONFIG, num_labels=2, encoder=encoder).build_from_config_shapes()
    model.save(tmp_path / "c.keras")
    loaded = keras.models.load_model(tmp_path / "c.keras")
    assert loaded.encoder.name == "my_bert"
    _assert_same_weights(model, loaded)


_FRESH_PROCESS_SCRIPT = """
import sys
import keras
import numpy as np
import bert_tf.modeling  # registers the bert_tf classes
import bert_tf.tasks.feature_based
data = np.load(sys.argv[2])
inputs = {k: data[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}
model = keras.models.load_model(sys.argv[1])
outputs = model(inputs, training=False)
np.savez(sys.argv[3], **{k: np.asarray(v) for k, v in outputs.items() if k != "encoder_outputs"})
print(type(model).__name__)
"""


@pytest.mark.long
@pytest.mark.parametrize("kind", ["classifier", "feature_based_tagger"])
def test_load_model_in_a_fresh_process(kind, tmp_path):
    make, make_inputs = MODELS[kind]
    model = make().build_from_config_shapes()
    inputs = make_inputs()
    model.save(tmp_path / "m.keras")
    np.savez(tmp_path / "inputs.npz", **inputs)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join([str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS_SCRIPT, str(tmp_path / "m.keras"),
         str(tmp_path / "inputs.npz"), str(tmp_path / "out.npz")],
        capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == type(model).__name__
    expected = model(inputs, training=False)
    got = np.load(tmp_path / "out.npz")
    assert set(got.files) == {k for k in expected if k != "encoder_outputs"}
    for key in got.files:
        np.testing.assert_array_equal(got[key], np.asarray(expected[key]), err_msg=key)


# ---- compile / fit / evaluate on real rows ------------------------------------------------------
@pytest.fixture(scope="module")
def mrpc_arrays(shared_data, original_fixtures):
    """32 train and 16 dev rows of GLUE MRPC, tokenized with the original uncased vocab."""
    from bert_tf.tasks import glue
    from bert_tf.tokenization import FullTokenizer

    processor = glue.get_processor("mrpc")
    data_dir = str(shared_data / "glue" / "MRPC")
    tokenizer = FullTokenizer(str(original_fixtures / "vocab_uncased.txt"), do_lower_case=True)

    def arrays(examples):
        features = glue.convert_examples_to_features(examples, processor.get_labels(), 64,
                                                     tokenizer, log_examples=0)
        return glue.features_to_arrays(features, regression=False)

    train = arrays(processor.get_train_examples(data_dir)[:32])
    dev = arrays(processor.get_dev_splits(data_dir)[0].examples[:16])
    return train, dev


def _split(arrays):
    return ({k: arrays[k] for k in ("input_word_ids", "input_mask", "input_type_ids")},
            arrays["label_ids"])


@pytest.mark.long
def test_compile_fit_evaluate_with_metrics_on_mrpc_rows(mrpc_arrays, original_fixtures, tmp_path):
    """A classifier initialised from the original release's (tiny) checkpoint, compiled with a
    metrics dict keyed by output name, trains on real MRPC rows: the loss on those rows falls,
    and evaluate() reports the metric; the compiled, trained model round-trips too."""
    from bert_tf.checkpoints import load_original_checkpoint

    config = BertConfig.from_json_file(original_fixtures / "checkpoint" / "bert_config.json")
    keras.utils.set_random_seed(1)
    model = BertClassifier(config, num_labels=2).build_from_config_shapes()
    load_original_checkpoint(model, str(original_fixtures / "checkpoint" / "bert_model.ckpt"),
                             heads="if_present")
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss={"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
                  metrics={"logits": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]})
    (x_train, y_train), (x_dev, y_dev) = _split(mrpc_arrays[0]), _split(mrpc_arrays[1])
    before = model.evaluate(x_train, {"logits": y_train}, batch_size=16, verbose=0,
                            return_dict=True)
    history = model.fit(x_train, {"logits": y_train}, batch_size=8, epochs=6, verbose=0,
                        validation_data=(x_dev, {"logits": y_dev}))
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    after = model.evaluate(x_train, {"logits": y_train}, batch_size=16, verbose=0,
                           return_dict=True)
    assert after["loss"] < before["loss"] - 0.05, (before, after)
    assert after["accuracy"] >= 0.75, after
    dev = model.evaluate(x_dev, y_dev, batch_size=16, verbose=0, return_dict=True)
    assert 0.0 <= dev["accuracy"] <= 1.0 and np.isfinite(dev["loss"])
    # A plain label array and a plain metrics list work as well (one output).
    model.compile(optimizer="sgd",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    plain = model.evaluate(x_dev, y_dev, batch_size=16, verbose=0, return_dict=True)
    np.testing.assert_allclose(plain["loss"], dev["loss"], rtol=1e-5)
    model.save(tmp_path / "trained.keras")
    loaded = keras.models.load_model(tmp_path / "trained.keras")
    _assert_same_outputs(model(x_dev, training=False), loaded(x_dev, training=False))


@pytest.mark.long
def test_compile_fit_on_a_two_output_task_model(mrpc_arrays):
    """Span labeller: losses and metrics keyed by its two outputs."""
    x, _ = _split(mrpc_arrays[0])
    starts = (x["input_mask"].sum(axis=1) // 3).astype(np.int32)
    ends = starts + 1
    config = BertConfig.from_dict({**CONFIG.to_dict(), "vocab_size": 30522})
    model = BertSpanLabeler(config).build_from_config_shapes()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer="adam", loss={"start_logits": loss, "end_logits": loss},
                  metrics={"start_logits": ["accuracy"], "end_logits": ["accuracy"]})
    history = model.fit(x, {"start_logits": starts, "end_logits": ends}, batch_size=16,
                        epochs=1, verbose=0)
    assert {"start_logits_accuracy", "end_logits_accuracy", "loss"} <= set(history.history)


def test_classifier_on_an_encoder_savedmodel_round_trips(tmp_path):
    """A task model on `SavedModelEncoderLayer` (bert_tf/export/encoder.py): the layer re-opens
    its export when loaded, then takes the saved (here: changed, as after fine-tuning) weights."""
    from bert_tf.export import SavedModelEncoderLayer, export_encoder_savedmodel

    encoder = BertEncoder(CONFIG).build_from_config_shapes()
    export_encoder_savedmodel(encoder, str(tmp_path / "encoder"))
    model = BertClassifier(CONFIG, num_labels=2,
                           encoder=SavedModelEncoderLayer(str(tmp_path / "encoder")))
    model.build_from_config_shapes()
    for weight in model.weights[:3]:  # as if fine-tuned: no longer the export's values
        weight.assign(weight + 0.5)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert isinstance(loaded.encoder, SavedModelEncoderLayer)
    assert len(loaded.weights) == len(model.weights)
    for a, b in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    inputs = _encoder_inputs()
    _assert_same_outputs(model(inputs, training=False), loaded(inputs, training=False))
