"""Original TF1 checkpoints load into Keras models and are written back with the same names."""
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.checkpoints import (CheckpointError, load_original_checkpoint, read_checkpoint,
                                 save_original_checkpoint, variable_map, write_tf1_checkpoint)
from bert_tf.modeling import (BertClassifier, BertConfig, BertEncoder, BertMultipleChoice,
                              BertPretrainer, BertSpanLabeler, BertTokenClassifier)


def _variables_txt(original_fixtures):
    rows = {}
    for line in (original_fixtures / "checkpoint" / "variables.txt").read_text().splitlines():
        name, shape, dtype = line.split("\t")
        rows[name] = (tuple(int(s) for s in shape.strip("[]").split(",") if s.strip()), dtype)
    return rows


def test_round_trip_bit_identical(original_fixtures, tmp_path):
    ckpt = original_fixtures / "checkpoint"
    config = BertConfig.from_json_file(ckpt / "bert_config.json")
    model = BertPretrainer(config).build_from_config_shapes()
    load_original_checkpoint(model, ckpt / "bert_model.ckpt", heads="required")
    out_prefix = str(tmp_path / "out" / "bert_model.ckpt")
    save_original_checkpoint(model, out_prefix)

    original = read_checkpoint(ckpt / "bert_model.ckpt")
    written = read_checkpoint(out_prefix)
    expected = _variables_txt(original_fixtures)
    assert set(written) == set(expected) == set(original)
    reader = tf.train.load_checkpoint(out_prefix)
    dtypes = reader.get_variable_to_dtype_map()
    for name, (shape, dtype) in expected.items():
        assert written[name].shape == shape, name
        assert dtypes[name].name == dtype, name
        np.testing.assert_array_equal(written[name], original[name], err_msg=name)

    # ... and back into a fresh Keras model, bit-identical again.
    again = BertPretrainer(config).build_from_config_shapes()
    load_original_checkpoint(again, out_prefix, heads="required")
    for name, var in variable_map(again).items():
        np.testing.assert_array_equal(var.numpy(), original[name], err_msg=name)
    # tf.train.list_variables (what the original's get_assignment_map uses) reads it.
    assert dict(tf.train.list_variables(out_prefix))["bert/pooler/dense/kernel"] == [128, 128]


@pytest.mark.long
def test_encoder_only_and_fine_tuning_models_load(original_fixtures):
    ckpt = original_fixtures / "checkpoint" / "bert_model.ckpt"
    config = BertConfig.from_json_file(original_fixtures / "checkpoint" / "bert_config.json")
    report = load_original_checkpoint(BertEncoder(config), ckpt)
    assert len(report["loaded"]) == 39 and not report["initialized"]
    assert "cls/predictions/output_bias" in report["unused"]
    clf = BertClassifier(config, num_labels=3)
    report = load_original_checkpoint(clf, ckpt)
    assert report["initialized"] == ["output_weights", "output_bias"]
    with pytest.raises(CheckpointError, match="no variable 'output_weights'"):
        load_original_checkpoint(BertClassifier(config, num_labels=3), ckpt, heads="required")
    for model in (BertSpanLabeler(config), BertTokenClassifier(config, 9),
                  BertMultipleChoice(config, 4)):
        names = variable_map(model)
        assert len(names) == 41
        load_original_checkpoint(model, ckpt)


@pytest.fixture()
def tiny_model():
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, type_vocab_size=2)
    return config, BertPretrainer(config).build_from_config_shapes()


def test_missing_variable_and_wrong_shape_are_named(tmp_path, tiny_model):
    config, model = tiny_model
    tensors = {n: v.numpy() for n, v in variable_map(model).items()}
    missing = dict(tensors)
    del missing["bert/encoder/layer_1/output/dense/kernel"]
    write_tf1_checkpoint(missing, str(tmp_path / "missing.ckpt"))
    fresh = BertPretrainer(config).build_from_config_shapes()
    before = fresh.encoder.embeddings.word_embeddings.numpy()
    with pytest.raises(CheckpointError) as e:
        load_original_checkpoint(fresh, tmp_path / "missing.ckpt")
    assert "bert/encoder/layer_1/output/dense/kernel" in str(e.value)
    assert "missing.ckpt" in str(e.value)
    # nothing was assigned
    np.testing.assert_array_equal(fresh.encoder.embeddings.word_embeddings.numpy(), before)

    wrong = dict(tensors)
    wrong["bert/pooler/dense/bias"] = np.zeros([17], np.float32)
    write_tf1_checkpoint(wrong, str(tmp_path / "wrong.ckpt"))
    with pytest.raises(CheckpointError, match=r"'bert/pooler/dense/bias' has shape \(17,\).*\(16,\)"):
        load_original_checkpoint(fresh, tmp_path / "wrong.ckpt")

    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_original_checkpoint(fresh, tmp_path / "absent.ckpt")


def test_write_refuses_to_overwrite_and_leaves_no_temp(tmp_path, tiny_model):
    _, model = tiny_model
    prefix = str(tmp_path / "model.ckpt")
    save_original_checkpoint(model, prefix)
    first = open(prefix + ".index", "rb").read()
    with pytest.raises(CheckpointError, match="already exists"):
        save_original_checkpoint(model, prefix)
    assert open(prefix + ".index", "rb").read() == first
    save_original_checkpoint(model, prefix, overwrite=True, extra={"global_step": np.int64(7)})
    assert read_checkpoint(prefix)["global_step"] == 7
    assert sorted(os.listdir(tmp_path)) == ["model.ckpt.data-00000-of-00001", "model.ckpt.index"]
