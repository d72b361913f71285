"""Static serving check: every export uses only TF core ops and the classic tensorflow-text ops
TF Serving links, is tagged `serve`, has dense outputs and no XLA; models breaking a rule are
reported."""
from __future__ import annotations

import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.export.serving_compat import check_serving_compatibility, tensorflow_text_ops


def test_every_export_is_servable(exports):
    for model_type, path in exports.items():
        report = check_serving_compatibility(path)
        assert report.ok, (model_type, report.problems)
        assert ["serve"] in report.tags
        assert report.oldest_serving_release == "2.13.0", model_type
        assert "DisableCopyOnRead" in report.core_ops
        if model_type == "encoder":
            assert report.text_ops == {}
        else:
            assert report.text_ops == {"NormalizeUTF8": "_normalize_ops",
                                       "WordpieceTokenizeWithOffsets": "_wordpiece_tokenizer"}
    signatures = check_serving_compatibility(exports["classifier"]).signatures
    assert signatures["serving_default"] == {
        "inputs": ["text"], "outputs": ["label_ids", "labels", "logits", "probabilities"]}
    assert signatures["serving_pair"]["inputs"] == ["text_a", "text_b"]
    assert signatures["serving_ids"]["inputs"] == ["input_mask", "input_type_ids",
                                                   "input_word_ids"]
    squad = check_serving_compatibility(exports["squad"]).signatures["serving_default"]
    assert squad["outputs"] == ["end_index", "end_logits", "input_word_ids", "start_index",
                                "start_logits"]


def test_text_op_inventory_comes_from_the_installed_libraries():
    ops = tensorflow_text_ops()
    assert ops["WordpieceTokenizeWithOffsets"] == "_wordpiece_tokenizer"
    assert ops["NormalizeUTF8"] == "_normalize_ops"
    assert ops["FastWordpieceTokenizeWithOffsets"] == "_fast_wordpiece_tokenizer"


class _Probe(tf.Module):
    pass


def _save(tmp_path, name, fn, spec, **kwargs):
    module = _Probe()
    module.f = tf.function(fn, input_signature=[spec], **kwargs)
    path = tmp_path / name
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.f})
    return check_serving_compatibility(path)


def test_reports_fast_text_ops_xla_and_composite_outputs(tmp_path):
    tokenizer = tf_text.FastWordpieceTokenizer(["[UNK]", "a", "##b"], token_out_type=tf.int32)
    report = _save(tmp_path, "fast", lambda x: {"ids": tokenizer.tokenize(x).to_tensor()},
                   tf.TensorSpec([None], tf.string))
    assert any("FastWordpieceTokenizeWithOffsets" in p and "classic" in p
               for p in report.problems)

    report = _save(tmp_path, "xla", lambda x: {"y": x * 2.0}, tf.TensorSpec([None], tf.float32),
                   jit_compile=True)
    assert any("XLA-compiled" in p for p in report.problems)

    report = _save(tmp_path, "ragged", lambda x: {"r": tf.strings.split(x)},
                   tf.TensorSpec([None], tf.string))
    assert any("dense tensors" in p for p in report.problems), report.problems

    report = _save(tmp_path, "fine", lambda x: {"y": x * 2.0}, tf.TensorSpec([None], tf.float32))
    assert report.ok, report.problems


def test_missing_serve_tag(tmp_path):
    path = tmp_path / "train_only"
    module = _Probe()
    module.v = tf.Variable(1.0)
    tf.saved_model.save(module, str(path))
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((path / "saved_model.pb").read_bytes())
    del sm.meta_graphs[0].meta_info_def.tags[:]
    sm.meta_graphs[0].meta_info_def.tags.append("train")
    (path / "saved_model.pb").write_bytes(sm.SerializeToString())
    report = check_serving_compatibility(path)
    assert not report.ok and "tagged 'serve'" in report.problems[0]


@pytest.mark.parametrize("name", ["encoder", "classifier"])
def test_no_xla_attribute_in_exports(exports, name):
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((exports[name] / "saved_model.pb").read_bytes())
    for fn in sm.meta_graphs[0].graph_def.library.function:
        for node in fn.node_def:
            if "_XlaMustCompile" in node.attr:
                assert node.attr["_XlaMustCompile"].b is False


def test_reports_outputs_without_a_common_batch_dimension(tmp_path):
    report = _save(tmp_path, "layers_first",
                   lambda x: {"per_layer": tf.stack([x, x]), "y": x},
                   tf.TensorSpec([None, 3], tf.float32))
    assert any("same (batch) dimension" in p for p in report.problems), report.problems
