"""The exports through TF Serving's loader (TF_LoadSessionFromSavedModel = the C++ LoadSavedModel
of tensorflow_model_server) with the tensorflow-text kernels loaded as libraries: every raw-text
`serving_default` equals Python within 1e-5, and bad requests give clear errors (or a defined
truncation) without killing the loader process."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.export import loader_harness as lh

from serving_setup import CLASSIFIER_LABELS, SEQ_LENGTH

TEXTS = np.array(["Hello, World! The movie was unaffable.", "", "Ünïcödé naïve café straße",
                  "word " * 2_000], dtype=object)
REQUESTS = {
    "encoder": {"input_word_ids": np.array([[101, 7592, 1010, 2088, 102, 0]] * 2, np.int32),
                "input_mask": np.array([[1, 1, 1, 1, 1, 0]] * 2, np.int32),
                "input_type_ids": np.array([[0, 0, 0, 1, 1, 0]] * 2, np.int32)},
    "preprocessor": {"text": TEXTS},
    "classifier": {"text": TEXTS},
    "squad": {"question": TEXTS, "context": TEXTS[::-1]},
    "ner": {"text": TEXTS},
    "multiple_choice": {"context": TEXTS, "choices": np.stack([TEXTS, TEXTS[::-1], TEXTS], 1)},
}


def _python_outputs(export_dir, request, signature="serving_default"):
    import tensorflow_text  # noqa: F401

    fn = tf.saved_model.load(str(export_dir)).signatures[signature]
    args = {k: tf.constant(v.astype(str) if v.dtype == object else v) for k, v in request.items()}
    return {k: v.numpy() for k, v in fn(**args).items()}


@pytest.mark.long
@pytest.mark.parametrize("model_type", list(REQUESTS))
def test_serving_default_matches_python(exports, harness, model_type):
    request = REQUESTS[model_type]
    responses, proc = lh.run_signature(harness, exports[model_type], [request])
    assert proc.returncode == 0, proc.stderr[-3000:]
    (got,) = responses
    assert isinstance(got, dict), got
    expected = _python_outputs(exports[model_type], request)
    assert set(got) == set(expected)
    for name, value in expected.items():
        assert got[name].shape == value.shape, name
        if value.dtype == object:
            assert got[name].tolist() == value.tolist(), name
        elif value.dtype.kind == "f":
            np.testing.assert_allclose(got[name], value, atol=1e-5, rtol=0, err_msg=name)
        else:
            np.testing.assert_array_equal(got[name], value, err_msg=name)
    if model_type == "classifier":
        assert got["probabilities"].shape == (len(TEXTS), len(CLASSIFIER_LABELS))
        assert got["label_ids"].dtype == np.int32
    if model_type in ("preprocessor", "ner", "squad"):
        ids = got["input_word_ids"]
        assert ids.shape == (len(TEXTS), SEQ_LENGTH) and ids.dtype == np.int32
        # The 10,000-character text is truncated to seq_length, ending in [SEP].
        assert ids[3, -1] == 102


def test_bad_text_requests_are_clear_errors_and_the_loader_survives(exports, harness):
    export = exports["classifier"]
    good = {"text": np.array(["a good film"], dtype=object)}
    requests = [
        {"text": np.array([1, 2], np.int32)},                       # wrong dtype
        {"text": np.array([["a", "b"]], dtype=object)},             # wrong rank (2)
        {"text": np.array("a", dtype=object)},                      # wrong rank (scalar)
        {"text": np.array([""], dtype=object)},                     # empty string
        {"text": np.array(["z" * 10_000, "a " * 10_000], dtype=object)},  # 10,000 characters
        {"text": np.array([b"\xff\xfe invalid utf-8"], dtype=object)},
        {"text": np.array([], dtype=object)},                       # empty batch
        good,
    ]
    responses, proc = lh.run_signature(harness, export, requests)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dtype_err, rank2_err, scalar_err, empty, long, invalid, empty_batch, after = responses
    assert "Expects arg[0] to be string but int32 is provided" in dtype_err
    assert "serving_default_text" in rank2_err and "not compatible with expected shape" in rank2_err
    assert "serving_default_text" in scalar_err and "not compatible" in scalar_err
    assert empty["label_ids"].shape == (1,)
    assert long["probabilities"].shape == (2, len(CLASSIFIER_LABELS))
    assert invalid["label_ids"].shape == (1,)
    assert empty_batch["probabilities"].shape == (0, len(CLASSIFIER_LABELS))
    np.testing.assert_allclose(after["probabilities"],
                               _python_outputs(export, good)["probabilities"], atol=1e-5)


@pytest.mark.long
def test_bad_pair_and_id_requests(exports, harness):
    responses, proc = lh.run_signature(harness, exports["classifier"], [
        {"text_a": np.array(["a", "b"], dtype=object), "text_b": np.array(["c"], dtype=object)},
        {"text_a": np.array(["a"], dtype=object)},                     # text_b missing
        {"text_a": np.array(["a"], dtype=object), "text_b": np.array(["c"], dtype=object)},
    ], signature="serving_pair")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "text_b" in responses[0] and "must have the same batch size" in responses[0]
    assert "serving_pair_text_b" in responses[1], responses[1]
    assert responses[2]["probabilities"].shape == (1, 2)

    ids = np.array([[101, 2000, 102]], np.int32)
    ok = {"input_word_ids": ids, "input_mask": np.ones_like(ids), "input_type_ids": 0 * ids}
    responses, proc = lh.run_signature(harness, exports["classifier"], [
        {**ok, "input_word_ids": ids.astype(np.int64)},                 # int64 instead of int32
        {**ok, "input_word_ids": ids[0]},                               # rank 1
        {**ok, "input_word_ids": np.array([[101, 99999, 102]], np.int32)},  # id out of range
        ok,
    ], signature="serving_ids")
    assert proc.returncode == 0, proc.stderr[-3000:]
    int64_err, rank_err, range_err, fine = responses
    assert "to be int32 but int64 is provided" in int64_err
    assert "not compatible with expected shape" in rank_err
    assert "99999" in range_err and "[0, 30522)" in range_err
    assert fine["probabilities"].shape == (1, 2)


@pytest.mark.long
def test_bench_mode_smoke(exports, harness):
    """The load-test mode (bench/bench_serving.py): threads share one session, zero errors."""
    requests = [{"text": TEXTS[i:i + 1]} for i in range(len(TEXTS))]
    result = lh.bench_signature(harness, exports["preprocessor"], requests, threads=3,
                                iterations=4)
    assert result["errors"] == 0, result["first_error"]
    assert result["threads"] == 3 and result["requests"] == 12
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]
    assert result["qps"] > 0
