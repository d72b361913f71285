"""Model input dicts: the original's key names are aliases, any other key is one clear error, in
the encoder, every task model, the pretrainer (which also takes a pretraining batch's labels) and
the export wrappers. Before (issue 31) `token_type_ids` was silently dropped (segment ids all
zero) and so was a typo such as `segmnet_ids`."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.checkpoints import load_original_checkpoint
from bert_tf.errors import UserInputError
from bert_tf.modeling import (PRETRAINING_LABEL_KEYS, BertClassifier, BertConfig, BertEncoder,
                              BertMultipleChoice, BertPretrainer, BertSpanLabeler,
                              BertTokenClassifier, ModelInputError, canonical_inputs)

HIDDEN_ATOL = 1e-5  # the fixture README §7 (hidden states against the original's)
CONFIG = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, type_vocab_size=2, max_position_embeddings=16)
ACCEPTED = ("accepted keys: input_word_ids, input_mask, input_type_ids (or the original's "
            "input_ids, segment_ids, token_type_ids)")


@pytest.fixture(scope="module")
def fixture_encoder(original_fixtures):
    ckpt = original_fixtures / "checkpoint"
    encoder = BertEncoder(BertConfig.from_json_file(ckpt / "bert_config.json"))
    encoder.build_from_config_shapes()
    load_original_checkpoint(encoder, ckpt / "bert_model.ckpt")
    inputs = json.loads((ckpt / "inputs.json").read_text())
    feeds = {k: tf.constant(inputs[k], tf.int32) for k in ("input_ids", "input_mask",
                                                           "segment_ids")}
    return encoder, feeds, dict(np.load(ckpt / "reference_outputs.npz"))


def _outputs(encoder, inputs):
    out = encoder(inputs, training=False)
    return {"sequence_output": out["sequence_output"].numpy(),
            "pooled_output": out["pooled_output"].numpy()}


def test_token_type_ids_differ_from_zeros_exactly_as_input_type_ids(fixture_encoder):
    """The original's `BertModel` argument name `token_type_ids` (and run_classifier's
    `segment_ids`) give bit for bit the outputs of `input_type_ids`: the original's outputs on
    the fixture checkpoint, which differ from the all-zero segments' outputs."""
    encoder, feeds, ref = fixture_encoder
    ids, mask, segments = feeds["input_ids"], feeds["input_mask"], feeds["segment_ids"]
    assert np.asarray(segments).any()
    hub = _outputs(encoder, {"input_word_ids": ids, "input_mask": mask,
                             "input_type_ids": segments})
    zeros = _outputs(encoder, {"input_word_ids": ids, "input_mask": mask})
    for name, value in [("token_type_ids", segments), ("segment_ids", segments)]:
        original = _outputs(encoder, {"input_ids": ids, "input_mask": mask, name: value})
        for key in hub:
            np.testing.assert_array_equal(original[key] - zeros[key], hub[key] - zeros[key])
            np.testing.assert_array_equal(original[key], hub[key])
    for key in hub:
        np.testing.assert_allclose(hub[key], ref[key], atol=HIDDEN_ATOL, rtol=0)
        assert np.abs(zeros[key] - hub[key]).max() > 100 * HIDDEN_ATOL


def _ids(shape=(2, 5)):
    return tf.ones(shape, tf.int32)


MODELS = {
    "encoder": (lambda: BertEncoder(CONFIG), (2, 5)),
    "classifier": (lambda: BertClassifier(CONFIG, 3), (2, 5)),
    "span_labeler": (lambda: BertSpanLabeler(CONFIG), (2, 5)),
    "token_classifier": (lambda: BertTokenClassifier(CONFIG, 3), (2, 5)),
    "multiple_choice": (lambda: BertMultipleChoice(CONFIG, 2), (2, 2, 5)),
    "pretrainer": (lambda: BertPretrainer(CONFIG), (2, 5)),
}


@pytest.fixture(scope="module")
def models():
    return {name: make().build_from_config_shapes() for name, (make, _) in MODELS.items()}


def _inputs(name, **keys):
    shape = MODELS[name][1]
    inputs = {k: _ids(shape) if v is None else v for k, v in keys.items()}
    if name == "pretrainer":
        inputs["masked_lm_positions"] = tf.constant([[1], [2]])
    return inputs


@pytest.mark.parametrize("name", sorted(MODELS))
def test_unknown_key_is_one_error_naming_the_accepted_ones(models, name):
    model = models[name]
    with pytest.raises(ModelInputError) as e:
        model(_inputs(name, input_ids=None, input_mask=None, segmnet_ids=None))
    message = str(e.value)
    assert isinstance(e.value, UserInputError) and "\n" not in message
    assert message.startswith(f"{type(model).__name__} inputs: unknown key 'segmnet_ids' "
                              "(did you mean 'segment_ids'?); " + ACCEPTED), message


@pytest.mark.parametrize("name", sorted(MODELS))
def test_original_names_give_the_same_outputs(models, name):
    model = models[name]
    shape = MODELS[name][1]
    types = tf.cast(tf.range(shape[-1]) >= 2, tf.int32) * tf.ones(shape, tf.int32)
    hub = model(_inputs(name, input_word_ids=None, input_mask=None, input_type_ids=types),
                training=False)
    for segment_key in ("segment_ids", "token_type_ids"):
        original = model(_inputs(name, input_ids=None, input_mask=None, **{segment_key: types}),
                         training=False)
        for key, value in hub.items():
            if isinstance(value, list):
                continue
            np.testing.assert_array_equal(np.asarray(original[key]), np.asarray(value), key)


def test_two_keys_for_one_input_and_missing_ids():
    ids = _ids()
    with pytest.raises(ModelInputError, match=r"keys 'segment_ids' and 'input_type_ids' both give "
                                              r"'input_type_ids'; pass one of them"):
        canonical_inputs({"input_ids": ids, "segment_ids": ids, "input_type_ids": ids})
    with pytest.raises(ModelInputError, match=r"'input_word_ids' \(or the original's "
                                              r"'input_ids'\) is missing; got keys "
                                              r"\['input_mask'\]"):
        canonical_inputs({"input_mask": ids})
    with pytest.raises(ModelInputError, match="expected a dict .* got EagerTensor"):
        canonical_inputs(ids)
    out = canonical_inputs({"input_ids": ids, "input_mask": None})
    assert sorted(out) == ["input_mask", "input_type_ids", "input_word_ids"]
    np.testing.assert_array_equal(out["input_mask"], np.ones((2, 5)))
    np.testing.assert_array_equal(out["input_type_ids"], np.zeros((2, 5)))


def test_pretrainer_takes_a_whole_pretraining_batch(models, original_fixtures):
    """The pretraining loop passes whole batches (inputs + labels) to the model: a batch of the
    original's pretraining TFRecords gives the outputs of its inputs alone."""
    from bert_tf.pretraining_data.tfrecord_reader import pretraining_dataset

    files = str(original_fixtures / "pretraining_data" / "run1.tfrecord")
    batch = next(iter(pretraining_dataset(files, 128, 20, batch_size=2, is_training=False)))
    assert set(PRETRAINING_LABEL_KEYS) <= set(batch)
    config = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, type_vocab_size=2,
                        max_position_embeddings=128)
    model = BertPretrainer(config).build_from_config_shapes()
    full = model(batch, training=False)
    inputs_only = model({k: v for k, v in batch.items() if k not in PRETRAINING_LABEL_KEYS},
                        training=False)
    for key in ("masked_lm_logits", "next_sentence_logits"):
        np.testing.assert_array_equal(full[key], inputs_only[key])
    with pytest.raises(ModelInputError, match=r"BertPretrainer inputs: 'masked_lm_positions' "
                                              r"missing"):
        model({"input_ids": batch["input_ids"]})
    with pytest.raises(ModelInputError, match=r"unknown key 'next_sentence_label' \(did you mean "
                                              r"'next_sentence_labels'\?\)"):
        model({**batch, "next_sentence_label": batch["next_sentence_labels"]})
    # The task models take no labels: the fine-tuning loop passes their inputs only.
    with pytest.raises(ModelInputError, match="unknown key 'label_ids'"):
        models["classifier"]({"input_ids": _ids(), "label_ids": tf.zeros([2], tf.int32)})


def test_keys_are_checked_in_a_traced_function(models):
    model = models["classifier"]

    @tf.function
    def run(inputs):
        return model(inputs, training=False)["logits"]

    assert run({"input_ids": _ids(), "token_type_ids": _ids()}).shape == (2, 3)
    with pytest.raises(ModelInputError, match="unknown key 'segmnet_ids'"):
        run({"input_ids": _ids(), "segmnet_ids": _ids()})


def test_export_wrappers_check_their_input_dicts(models, original_fixtures):
    """The task exports' Python-side runner and the Keras layer around an encoder SavedModel
    take the original's names and refuse unknown keys, as the models do."""
    from bert_tf.export.preprocessor import BertPreprocessor
    from bert_tf.export.task_models import ClassifierExport

    model = models["classifier"]
    export = ClassifierExport(model, BertPreprocessor(original_fixtures / "vocab_uncased.txt", 5))
    ids = tf.constant([[1, 2, 3, 0, 0]])
    mask = tf.constant([[1, 1, 1, 0, 0]])
    types = tf.constant([[0, 1, 1, 0, 0]])
    hub = export.outputs({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types})
    original = export.outputs({"input_ids": ids, "input_mask": mask, "segment_ids": types})
    np.testing.assert_array_equal(original["logits"], hub["logits"])
    with pytest.raises(ModelInputError, match=r"ClassifierExport inputs: unknown key "
                                              r"'segmnet_ids'"):
        export.outputs({"input_ids": ids, "input_mask": mask, "segmnet_ids": types})


@pytest.mark.slow  # a SavedModel export and load: ~5 s
def test_encoder_savedmodel_layer_maps_the_original_names(models, tmp_path):
    from bert_tf.export.encoder import SavedModelEncoderLayer, export_encoder_savedmodel

    encoder = models["encoder"]
    export_dir = export_encoder_savedmodel(encoder, str(tmp_path / "encoder"))
    layer = SavedModelEncoderLayer(export_dir)
    ids, types = _ids(), tf.constant([[0, 0, 1, 1, 1]] * 2)
    hub = layer({"input_word_ids": ids, "input_mask": ids, "input_type_ids": types})
    original = layer({"input_ids": ids, "input_mask": ids, "token_type_ids": types})
    np.testing.assert_array_equal(original["pooled_output"], hub["pooled_output"])
    np.testing.assert_allclose(hub["pooled_output"], encoder(
        {"input_ids": ids, "segment_ids": types})["pooled_output"], atol=1e-6, rtol=0)
    with pytest.raises(ModelInputError, match=r"SavedModelEncoderLayer inputs: unknown key "
                                              r"'segmnet_ids'"):
        layer({"input_ids": ids, "segmnet_ids": types})
    # The serving signature's names are fixed: TensorFlow refuses any other, never drops it.
    serving = tf.saved_model.load(export_dir).signatures["serving_default"]
    with pytest.raises(TypeError, match="segmnet_ids"):
        serving(input_word_ids=ids, input_mask=ids, segmnet_ids=types)
