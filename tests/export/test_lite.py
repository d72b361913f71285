"""LiteRT / TFLite export (bert_tf.export.lite, --export_format=tflite): the interpreter's
float32 outputs equal Keras' within 1e-5 on real MRPC rows, float16 and int8 convert and run,
raw text does not convert (one line), bad flag combinations are one line."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.export.exporter import ExportOptions, build_export_module, export_savedmodel
from bert_tf.export.lite import (LiteExportError, TFLITE_FILE, convert_concrete_function,
                                 run_tflite, tflite_from_signatures)
from bert_tf.export.savedmodel_io import ExportError
from bert_tf.tokenization import FullTokenizer
from mrpc_rows import mrpc_dev_rows, pack_pairs

FLOAT32_ATOL = 1e-5  # the bound; also the fixture README's forward-pass tolerance
SEQ = 32


@pytest.fixture(scope="module")
def classifier(fixture_model):
    """(module, signatures) of a classifier on the original release's tiny checkpoint (its head
    randomly initialised: the comparison is Keras vs interpreter on the same weights)."""
    opts = ExportOptions(model_type="classifier", export_dir="unused", num_labels=2,
                         allow_untrained_head=True, seq_length=SEQ, **fixture_model)
    return build_export_module(opts)


@pytest.fixture(scope="module")
def mrpc_ids(fixture_model, shared_data):
    tokenizer = FullTokenizer(fixture_model["vocab_file"], do_lower_case=True)
    return pack_pairs(tokenizer, mrpc_dev_rows(shared_data, limit=24), SEQ)


def _keras(signatures, ids):
    out = signatures["serving_ids"](**{k: tf.constant(v) for k, v in ids.items()})
    return {k: v.numpy() for k, v in out.items()}


def test_float32_equals_keras_on_mrpc_rows(classifier, mrpc_ids):
    module, signatures = classifier
    content = tflite_from_signatures(module, signatures)
    got = run_tflite(content, mrpc_ids)
    want = _keras(signatures, mrpc_ids)
    assert set(got) == set(want) == {"logits", "probabilities", "label_ids"}
    for name in ("logits", "probabilities"):
        np.testing.assert_allclose(got[name], want[name], atol=FLOAT32_ATOL, rtol=0,
                                   err_msg=name)
    np.testing.assert_array_equal(got["label_ids"], want["label_ids"])


@pytest.mark.long
@pytest.mark.parametrize("quantize", ["float16", "int8"])
def test_quantized_conversions_run_and_shrink(classifier, mrpc_ids, quantize):
    module, signatures = classifier
    float_size = len(tflite_from_signatures(module, signatures))
    content = tflite_from_signatures(module, signatures, quantize)
    assert len(content) < float_size * (0.6 if quantize == "float16" else 0.4)
    got = run_tflite(content, mrpc_ids)
    want = _keras(signatures, mrpc_ids)
    assert got["logits"].shape == want["logits"].shape
    assert np.all(np.isfinite(got["logits"]))


def test_raw_text_signature_does_not_convert(classifier):
    module, signatures = classifier
    with pytest.raises(LiteExportError) as e:
        convert_concrete_function(signatures["serving_default"], module)
    message = str(e.value)
    assert message.startswith("TFLite conversion failed: ") and "\n" not in message
    assert "neither a custom op nor a flex op" in message


@pytest.mark.long
def test_export_tool_writes_model_tflite(fixture_model, tmp_path, mrpc_ids):
    opts = ExportOptions(model_type="classifier", export_dir=str(tmp_path / "lite"),
                         num_labels=2, allow_untrained_head=True, seq_length=SEQ,
                         export_format="tflite", quantize="int8", **fixture_model)
    folder = export_savedmodel(opts)
    path = tmp_path / "lite" / "1" / TFLITE_FILE
    assert str(path.parent) == folder and path.is_file()
    out = run_tflite(path.read_bytes(), mrpc_ids)
    assert out["probabilities"].shape == (len(mrpc_ids["input_word_ids"]), 2)
    with pytest.raises(ExportError, match="already exists"):
        export_savedmodel(opts)


@pytest.mark.parametrize("changes, message", [
    ({"model_type": "encoder"}, "--export_format=tflite converts the task models"),
    ({"quantize": "int4"}, "--quantize must be int8 or float16 (or unset), got 'int4'"),
    ({"export_format": "onnx"}, "--export_format must be savedmodel or tflite, got 'onnx'"),
    ({"export_format": "savedmodel", "quantize": "float16"},
     "--quantize=float16 is for --export_format=tflite"),
])
def test_bad_format_flags_are_one_line(fixture_model, tmp_path, changes, message):
    from bert_tf.export.exporter import validate_options

    fields = {"model_type": "classifier", "export_dir": str(tmp_path / "x"), "num_labels": 2,
              "allow_untrained_head": True, "export_format": "tflite", **fixture_model,
              **changes}
    with pytest.raises(ExportError) as e:
        validate_options(ExportOptions(**fields))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_variables_the_module_does_not_track_are_refused():
    from bert_tf.modeling import BertClassifier, BertConfig

    model = BertClassifier(BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
                                      num_attention_heads=2, intermediate_size=16), num_labels=2)
    model.build_from_config_shapes()
    spec = {k: tf.TensorSpec([None, 8], tf.int32, name=k)
            for k in ("input_word_ids", "input_mask", "input_type_ids")}
    fn = tf.function(lambda b: model(b)["logits"], input_signature=[spec])
    with pytest.raises(LiteExportError, match="not tracked by the object given with it"):
        convert_concrete_function(fn.get_concrete_function(), tf.Module())
