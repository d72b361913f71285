"""The masked-LM head's output bias under mixed precision: the 16-bit product is widened to
float32 and the float32 bias added there (no 16-bit BiasAdd over [rows, vocab], which oneDNN
fuses into a kernel several times slower than the product on an AMX host); under float32 the
graph is the original's MatMul + BiasAdd, unchanged. With `xla_in_training` (the pretraining
trainer's fused kernels) the widening and the bias are one XLA kernel while training, with the
same values.
"""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling import BertConfig
from bert_tf.modeling.heads import MaskedLMHead

CONFIG = BertConfig(vocab_size=97, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=16)


def _head(policy: str, xla_in_training: bool = False):
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        table = tf.Variable(tf.random.stateless_normal([CONFIG.vocab_size, CONFIG.hidden_size],
                                                       seed=[3, 4]) * 0.5, name="table")
        head = MaskedLMHead(CONFIG, table, xla_in_training=xla_in_training)
        head.build(None)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    # A non-zero bias, so that adding it in the wrong dtype or not at all shows.
    head.output_bias.assign(tf.random.stateless_normal([CONFIG.vocab_size], seed=[5, 6]) * 3)
    return head, table


def _traced(head, x):
    fn = tf.function(lambda t: head(t, None))
    graph = fn.get_concrete_function(tf.TensorSpec(x.shape, x.dtype)).graph
    bias_adds = [op.get_attr("T") for op in graph.get_operations() if op.type == "BiasAdd"]
    return fn(x), bias_adds


def test_bfloat16_logits_are_float32_with_the_bias_added_in_float32():
    head, table = _head("mixed_bfloat16")
    x = tf.cast(tf.random.stateless_normal([2, 5, CONFIG.hidden_size], seed=[1, 2]), tf.bfloat16)
    logits, bias_adds = _traced(head, x)
    assert logits.dtype == tf.float32 and logits.shape == [2, 5, CONFIG.vocab_size]
    assert bias_adds == [tf.bfloat16, tf.float32], bias_adds  # the transform's, then the output's
    # Against float32 math on the same transformed rows: within the bfloat16 product's rounding.
    h = tf.cast(tf.reshape(head.transform(x, None), [-1, CONFIG.hidden_size]), tf.float32)
    want = tf.matmul(h, table, transpose_b=True) + head.output_bias
    scale = float(tf.reduce_max(tf.abs(tf.matmul(h, table, transpose_b=True))))
    np.testing.assert_allclose(tf.reshape(logits, [10, -1]).numpy(), want.numpy(), rtol=0,
                               atol=scale * 2.0 ** -5)
    # With a zero table the product is exactly 0, so the logits are the bias itself: in float32,
    # not rounded to bfloat16 (which would move these values by up to 2^-9 of themselves).
    table.assign(tf.zeros_like(table))
    bias = head.output_bias.numpy()
    assert not np.array_equal(bias, tf.cast(tf.cast(bias, tf.bfloat16), tf.float32).numpy())
    logits, _ = _traced(head, x)
    np.testing.assert_array_equal(logits.numpy(), np.broadcast_to(bias, logits.shape))


def test_bfloat16_gradients_reach_the_float32_bias_and_the_table():
    head, table = _head("mixed_bfloat16")
    x = tf.cast(tf.random.stateless_normal([3, 4, CONFIG.hidden_size], seed=[7, 8]), tf.bfloat16)
    labels = tf.random.stateless_uniform([12], seed=[9, 9], maxval=CONFIG.vocab_size,
                                         dtype=tf.int32)
    with tf.GradientTape() as tape:
        logits = tf.reshape(head(x, None), [12, -1])
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    bias_grad, table_grad = tape.gradient(loss, [head.output_bias, table])
    assert bias_grad.dtype == tf.float32 and table_grad.dtype == tf.float32
    # d loss / d bias is the mean over rows of softmax - one-hot, here in float32 throughout.
    want = tf.reduce_mean(tf.nn.softmax(logits) - tf.one_hot(labels, CONFIG.vocab_size), 0)
    np.testing.assert_allclose(bias_grad.numpy(), want.numpy(), rtol=1e-5, atol=1e-7)
    assert float(tf.reduce_max(tf.abs(table_grad))) > 0


@pytest.mark.parametrize("rank", [2, 3])
def test_float32_graph_is_the_fused_matmul_and_bias(rank):
    head, table = _head("float32")
    shape = [10, CONFIG.hidden_size] if rank == 2 else [2, 5, CONFIG.hidden_size]
    x = tf.random.stateless_normal(shape, seed=[1, 2])
    logits, bias_adds = _traced(head, x)
    assert logits.dtype == tf.float32 and bias_adds == [tf.float32, tf.float32]
    h = tf.reshape(head.transform(x, None), [-1, CONFIG.hidden_size])
    want = tf.nn.bias_add(tf.matmul(h, table, transpose_b=True), head.output_bias)
    np.testing.assert_allclose(tf.reshape(logits, [10, -1]).numpy(), want.numpy(),
                               rtol=1e-6, atol=1e-6)


def _loss_and_grads(head, table, x, labels, training):
    with tf.GradientTape() as tape:
        tape.watch(x)
        logits = tf.reshape(head(x, None, training=training), [int(labels.shape[0]), -1])
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    return (logits, loss, *tape.gradient(loss, [head.output_bias, table, x]))


def test_bfloat16_training_with_xla_kernels_equals_the_plain_ops():
    head, table = _head("mixed_bfloat16", xla_in_training=True)
    x = tf.cast(tf.random.stateless_normal([4, 6, CONFIG.hidden_size], seed=[7, 1]), tf.bfloat16)
    labels = tf.random.stateless_uniform([24], seed=[2, 9], maxval=CONFIG.vocab_size,
                                         dtype=tf.int32)
    step = tf.function(lambda x, training: _loss_and_grads(head, table, x, labels, training))
    fused, plain = step(x, True), step(x, False)
    # Training traced the XLA call instead of the float32 BiasAdd; inference kept the BiasAdd.
    ops = {t: [op.type for op in step.get_concrete_function(x, t).graph.get_operations()]
           for t in (True, False)}
    assert any("widened_bias_add_xla" in op.name
               for op in step.get_concrete_function(x, True).graph.get_operations())
    assert ops[True].count("BiasAdd") == 1 and ops[False].count("BiasAdd") == 2
    assert fused[0].dtype == tf.float32
    # The logits, the loss and the 16-bit gradients (the Cast of the same float32 gradient) are
    # bit for bit the plain ops'; the bias gradient differs by the order of its float32 sums.
    for a, b in zip(fused[:2] + fused[3:], plain[:2] + plain[3:]):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_allclose(fused[2].numpy(), plain[2].numpy(), rtol=1e-6, atol=1e-8)
    assert float(tf.reduce_max(tf.abs(fused[2]))) > 0


def test_float32_training_ignores_the_xla_option():
    head, table = _head("float32", xla_in_training=True)
    x = tf.random.stateless_normal([10, CONFIG.hidden_size], seed=[1, 2])
    fn = tf.function(lambda t: head(t, None, training=True))
    ops = fn.get_concrete_function(tf.TensorSpec(x.shape, x.dtype)).graph.get_operations()
    assert [op.get_attr("T") for op in ops if op.type == "BiasAdd"] == [tf.float32, tf.float32]
    assert not any("widened_bias_add" in op.name for op in ops)
    assert MaskedLMHead.from_config(head.get_config()).xla_in_training
