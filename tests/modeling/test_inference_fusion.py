"""BERT inference graphs with oneDNN's fused kernels (issue 35): each LayerNorm as one
`_MklLayerNorm` (`embeddings.inference_layer_norm`), the attention scores' matmul, 1/sqrt(D)
scale and key-mask add as one `_MklFusedBatchMatMulV2` (`attention.FUSED_INFERENCE_SCORES`),
against the original's numbers.

Fixtures: ../shared/fixtures/original/misc (the layer norm reference, with its ill-conditioned
rows) and checkpoint/ (tiny BERT and its reference forward pass). Tolerances from the fixture
README (§6 for the layer norm rows, §7 for hidden states), as tests/modeling/test_reference_outputs.py.
The op types are read from the function's post-grappler graph (what the runtime executes).
"""
import collections

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.util import _pywrap_util_port

from bert_tf.modeling import attention, embeddings
from bert_tf.modeling.embeddings import apply_layer_norm, inference_layer_norm, layer_norm
# The tiny-BERT fixture (model with the original's checkpoint, its inputs, outputs, reference
# arrays), README §7's hidden-state tolerance and §6's helpers for the layer-norm rows.
from tests.modeling.test_reference_outputs import (  # noqa: F401 (reference: a fixture)
    HIDDEN_ATOL, ill_conditioned_rows, layer_norm_float64, reference)

ILL_CONDITIONED_ATOL = 5e-4  # README §6: rows with a tiny spread, against float64
ONEDNN = _pywrap_util_port.IsMklEnabled()  # False with TF_ENABLE_ONEDNN_OPTS=0


def optimized_op_types(function, *args) -> tuple[object, collections.Counter]:
    """Runs a tf.function; -> (its result, Counter of the op types of its post-grappler graph)."""
    ctx = context.context()
    ctx.enable_run_metadata()
    try:
        ctx.export_run_metadata()  # drop what an earlier function left (it accumulates)
        out = function(*args)
        metadata = ctx.export_run_metadata()
    finally:
        ctx.disable_run_metadata()
    return out, collections.Counter(node.op for graph in metadata.function_graphs
                                    for node in graph.post_optimization_graph.node)


def fused_layer_norm_op() -> str:
    """The op a LayerNorm of a dynamic-shape inference graph runs as."""
    return "_MklLayerNorm" if ONEDNN else "FusedBatchNormV3"


@pytest.mark.parametrize("mode", ["eager", "static_graph", "dynamic_graph"])
def test_inference_layer_norm_against_the_original(original_fixtures, mode):
    ref = np.load(original_fixtures / "misc" / "gelu_layernorm_reference.npz")
    x = ref["layer_norm_input"]
    hidden = x.shape[-1]
    gamma, beta = tf.ones([hidden]), tf.zeros([hidden])
    fn = lambda t: inference_layer_norm(t, gamma, beta, 1e-12)  # noqa: E731
    if mode == "eager":
        out, ops = fn(tf.constant(x)), None
    else:
        signature = [tf.TensorSpec(x.shape if mode == "static_graph" else [None, None, hidden])]
        out, ops = optimized_op_types(tf.function(fn, input_signature=signature), tf.constant(x))
    out = out.numpy()
    ill = ill_conditioned_rows(x)
    assert ill.any() and not ill.all()
    np.testing.assert_allclose(out[~ill], ref["layer_norm_output_gamma1_beta0"][~ill],
                               atol=HIDDEN_ATOL, rtol=1e-6)
    np.testing.assert_allclose(out[ill], layer_norm_float64(x)[ill], atol=ILL_CONDITIONED_ATOL,
                               rtol=0)
    if mode == "dynamic_graph":
        assert ops[fused_layer_norm_op()] == 1, ops
        assert ops["Mean"] == 0 and ops["Rsqrt"] == 0, ops


@pytest.mark.parametrize("shape", [[7, 48], [3, 5, 48]])
def test_apply_layer_norm_matches_keras_and_keeps_training(shape):
    """Inference: the Keras layer's numbers (float32 rounding; values of the fixture's scale);
    training: Keras' own layer, op for op."""
    rng = np.random.default_rng(3)
    norm = layer_norm("LayerNorm")
    norm.build([None, shape[-1]])
    norm.set_weights([1 + 0.2 * rng.standard_normal(shape[-1]).astype(np.float32),
                      0.2 * rng.standard_normal(shape[-1]).astype(np.float32)])
    x = tf.constant(3 + 2 * rng.standard_normal(shape).astype(np.float32))
    want = norm(x).numpy()
    signature = [tf.TensorSpec([None] * (len(shape) - 1) + [shape[-1]])]
    got, ops = optimized_op_types(
        tf.function(lambda t: apply_layer_norm(norm, t, training=False),
                    input_signature=signature), x)
    np.testing.assert_allclose(got.numpy(), want, atol=HIDDEN_ATOL, rtol=0)
    assert ops[fused_layer_norm_op()] == 1, ops
    np.testing.assert_allclose(apply_layer_norm(norm, x, None).numpy(), want, atol=HIDDEN_ATOL,
                               rtol=0)
    trained, ops = optimized_op_types(
        tf.function(lambda t: apply_layer_norm(norm, t, training=True),
                    input_signature=signature), x)
    keras_traced = tf.function(lambda t: norm(t), input_signature=signature)(x)
    np.testing.assert_array_equal(trained.numpy(), keras_traced.numpy())
    assert ops["FusedBatchNormV3"] == 0 and ops["_MklLayerNorm"] == 0, ops


def test_apply_layer_norm_under_bfloat16_policy():
    """Mixed precision: computed in float32 as Keras does, returned in the compute dtype."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        norm = layer_norm("LayerNorm")
        norm.build([None, 32])
    finally:
        keras.mixed_precision.set_global_policy(previous)
    x = tf.cast(tf.random.stateless_normal([6, 32], seed=[1, 2]) * 2 + 1, tf.bfloat16)
    got = tf.function(lambda t: apply_layer_norm(norm, t),
                      input_signature=[tf.TensorSpec([None, 32], tf.bfloat16)])(x)
    want = norm(x)
    assert got.dtype == want.dtype == tf.bfloat16
    # Same float32 result rounded to bfloat16: at most one bfloat16 ulp apart (2^-7 relative).
    np.testing.assert_allclose(tf.cast(got, tf.float32), tf.cast(want, tf.float32),
                               rtol=2 ** -7, atol=2 ** -7)


def test_traced_inference_against_the_original(reference):
    """The pretrainer traced with a dynamic batch and length, as prediction and serving trace
    it: every encoder LayerNorm one fused kernel, each layer's scores one fused batch matmul
    (the context matmul stays a plain one), outputs the original's (README §7)."""
    model, _, feeds, _, ref = reference
    signature = [{k: tf.TensorSpec([None, None], tf.int32) for k in feeds}]
    forward = tf.function(lambda b: model(b, training=False, return_attention_probs=True),
                          input_signature=signature)
    out, ops = optimized_op_types(forward, feeds)
    layers = model.config.num_hidden_layers
    assert ops[fused_layer_norm_op()] == 1 + 2 * layers, ops
    if ONEDNN:
        assert ops["_MklFusedBatchMatMulV2"] == layers and ops["BatchMatMulV2"] == layers, ops
    for key in ("embedding_output", "sequence_output", "pooled_output"):
        np.testing.assert_allclose(out[key], ref[key], atol=HIDDEN_ATOL, rtol=0, err_msg=key)
    np.testing.assert_allclose(np.stack(out["encoder_outputs"]), ref["all_encoder_layers"],
                               atol=HIDDEN_ATOL, rtol=0)
    np.testing.assert_allclose(np.stack(out["attention_probs"]), ref["debug_attention_probs"],
                               atol=HIDDEN_ATOL, rtol=0)


def test_switch_off_gives_the_keras_graph(reference, monkeypatch):
    model, _, feeds, _, ref = reference
    monkeypatch.setattr(embeddings, "FUSED_INFERENCE_LAYER_NORM", False)
    monkeypatch.setattr(attention, "FUSED_INFERENCE_SCORES", False)
    signature = [{k: tf.TensorSpec([None, None], tf.int32) for k in feeds}]
    out, ops = optimized_op_types(
        tf.function(lambda b: model(b, training=False), input_signature=signature), feeds)
    assert ops["_MklLayerNorm"] == 0 and ops["FusedBatchNormV3"] == 0, ops
    assert ops["_MklFusedBatchMatMulV2"] == 0, ops
    np.testing.assert_allclose(out["sequence_output"], ref["sequence_output"], atol=HIDDEN_ATOL,
                               rtol=0)


def test_training_keeps_the_folded_scores(reference):
    """training=True: the query kernel carries 1/sqrt(D) (no scaled-scores batch matmul) and the
    LayerNorms are Keras' (no FusedBatchNormV3)."""
    model, _, feeds, _, _ = reference
    signature = [{k: tf.TensorSpec([None, None], tf.int32) for k in feeds}]
    _, ops = optimized_op_types(
        tf.function(lambda b: model(b, training=True), input_signature=signature), feeds)
    assert ops["_MklFusedBatchMatMulV2"] == 0 and ops["FusedBatchNormV3"] == 0, ops
    assert ops["_MklLayerNorm"] == 0, ops
