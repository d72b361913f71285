"""The training-only fused paths (`bert_tf.modeling.fused`: bias + dropout + residual + LayerNorm,
bias + GELU, scale + mask + softmax + dropout, each as two XLA kernels) compute what the op-by-op
path computes, with the same dropout masks.

Tolerances: float32 paths differ only in the order of the reductions (mean, variance, the
gradient's sums over 24-64 rows or features; XLA's order against TensorFlow's kernels, which may
contract a multiply-add), whose rounding errors scale with the largest summand, not with the
result: each tensor is compared with an absolute tolerance of 1e-5 (~170 float32 ulps) times its
largest element (measured: up to 5e-7 of it, a gamma gradient summing terms that cancel), plus
1e-6 for tensors that are zero in exact arithmetic and rounding noise of O(1) terms in float32
(the key bias gradient, softmax being shift-invariant; the sum of an LayerNorm's input gradient).
bfloat16 outputs are rounded
once to bfloat16 (8 significant bits) on both paths, so they may differ by one bfloat16 ulp:
2^-7 relative to the value. The fixture tests (tests/modeling/test_reference_outputs.py,
tests/gpt, tests/training) check the fused paths against the originals' recorded outputs.
"""
from __future__ import annotations

import importlib.util
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.gpt.block import GptBlock
from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.dropout import GptDropout
from bert_tf.modeling import BertConfig
from bert_tf.modeling.dropout import BertDropout
from bert_tf.gpt.attention import causal_mask_scores
from bert_tf.modeling.activations import gelu
from bert_tf.modeling.fused import (attention_softmax_dropout, bias_gelu,
                                    dropout_residual_layer_norm)
from bert_tf.modeling.transformer import BertTransformerBlock

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "profile_train_step.py"
F32_REL_TO_MAX = 1e-5
BF16_RTOL = 2.0 ** -7


def assert_close_f32(actual, expected):
    """|actual - expected| <= 1e-5 · max|expected| + 1e-6 elementwise (see module doc)."""
    expected = np.asarray(expected)
    np.testing.assert_allclose(actual, expected, rtol=0,
                               atol=F32_REL_TO_MAX * float(np.max(np.abs(expected))) + 1e-6)


@pytest.fixture(autouse=True)
def _float32_policy():
    yield
    keras.config.set_dtype_policy("float32")


def _inputs(dtype, rows=24, width=32, seed=0):
    rng = np.random.default_rng(seed)
    x = tf.cast(rng.normal(size=(rows, width)) * 3.0, dtype)
    residual = tf.cast(rng.normal(size=(rows, width)), dtype)
    keep = rng.random((rows, width)) >= 0.1
    mask = tf.cast(np.where(keep, 1.0 / 0.9, 0.0), dtype)
    gamma = tf.constant(rng.normal(1.0, 0.2, width), tf.float32)
    beta = tf.constant(rng.normal(0.0, 0.2, width), tf.float32)
    return x, mask, residual, gamma, beta


def _plain(x, mask, residual, gamma, beta, epsilon):
    """Keras' layer normalization (what its LayerNormalization layer calls) of x · mask +
    residual, as the blocks compute it unfused."""
    summed = x if mask is None else x * mask
    return keras.ops.layer_normalization(summed + residual, gamma, beta, epsilon=epsilon)


@pytest.mark.parametrize("with_mask", [True, False])
def test_fused_layer_norm_float32_values_and_gradients(with_mask):
    x, mask, residual, gamma, beta = _inputs(tf.float32)
    mask = mask if with_mask else None
    upstream = tf.constant(np.random.default_rng(1).normal(size=x.shape), tf.float32)
    results = []
    for fn in (_plain, dropout_residual_layer_norm):
        with tf.GradientTape() as tape:
            tape.watch([x, residual, gamma, beta])
            y = fn(x, mask, residual, gamma, beta, 1e-12)
            loss = tf.reduce_sum(y * upstream)
        results.append([y, *tape.gradient(loss, [x, residual, gamma, beta])])
    for plain, fused in zip(*results):
        assert_close_f32(fused, plain)


def test_fused_layer_norm_bfloat16_output_within_one_ulp():
    keras.config.set_dtype_policy("mixed_bfloat16")
    x, mask, residual, gamma, beta = _inputs(tf.bfloat16)
    plain = _plain(x, mask, residual, gamma, beta, 1e-12)
    fused = dropout_residual_layer_norm(x, mask, residual, gamma, beta, 1e-12)
    assert fused.dtype == tf.bfloat16
    plain, fused = (tf.cast(t, tf.float32).numpy() for t in (plain, fused))
    np.testing.assert_allclose(fused, plain, rtol=BF16_RTOL, atol=BF16_RTOL)


def test_fused_layer_norm_keeps_leading_axes():
    x, mask, residual, gamma, beta = _inputs(tf.float32)
    three = [tf.reshape(t, [4, 6, 32]) for t in (x, mask, residual)]
    flat = dropout_residual_layer_norm(x, mask, residual, gamma, beta, 1e-5)
    shaped = dropout_residual_layer_norm(*three, gamma, beta, 1e-5)
    assert shaped.shape == (4, 6, 32)
    np.testing.assert_array_equal(tf.reshape(shaped, [24, 32]), flat)


@pytest.mark.parametrize("layer_cls", [BertDropout, GptDropout])
def test_scale_mask_is_the_mask_call_applies(layer_cls):
    """`scale_mask` draws what `call` draws (same stream position): inputs · mask == call."""
    x = tf.random.stateless_normal([8, 16, 32], seed=[1, 2])
    a, b = layer_cls(0.1, seed=3), layer_cls(0.1, seed=3)
    called = a(x, training=True)
    mask = b.scale_mask(x, training=True)
    np.testing.assert_array_equal(x * mask, called)
    assert b.scale_mask(x, training=False) is None
    assert layer_cls(0.0).scale_mask(x, training=True) is None


@pytest.mark.parametrize("layer_cls", [BertDropout, GptDropout])
def test_keep_mask_is_the_scale_mask(layer_cls):
    """`keep_mask` draws the elements `scale_mask` keeps (same stream position), scaled by
    `keep_scale`."""
    x = tf.random.stateless_normal([4, 8, 16], seed=[1, 2])
    a, b = layer_cls(0.1, seed=5), layer_cls(0.1, seed=5)
    mask = a.scale_mask(x, training=True)
    keep = b.keep_mask(x, training=True)
    assert keep.dtype == tf.bool
    np.testing.assert_array_equal(tf.where(keep, tf.constant(b.keep_scale, x.dtype), 0.0), mask)
    assert b.keep_mask(x, training=False) is None
    assert layer_cls(0.0).keep_mask(x, training=True) is None


def _grads(fn, inputs, upstream):
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        y = fn(*inputs)
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
    return [y, *tape.gradient(loss, inputs)]


def test_bias_layer_norm_and_bool_mask_float32():
    """With `bias`, the fused LayerNorm adds it and gives its gradient (what BiasAdd and its
    BiasAddGrad give); a bool keep mask with its scale gives exactly the float mask's results."""
    x, mask, residual, gamma, beta = _inputs(tf.float32)
    bias = tf.constant(np.random.default_rng(2).normal(size=32), tf.float32)
    upstream = tf.constant(np.random.default_rng(1).normal(size=x.shape), tf.float32)
    inputs = [x, residual, gamma, beta, bias]
    plain = _grads(lambda x, r, g, b, c: _plain(tf.nn.bias_add(x, c), mask, r, g, b, 1e-12),
                   inputs, upstream)
    fused = _grads(lambda x, r, g, b, c: dropout_residual_layer_norm(x, mask, r, g, b, 1e-12,
                                                                      bias=c), inputs, upstream)
    for a, b in zip(plain, fused):
        assert_close_f32(b, a)
    keep = tf.not_equal(mask, 0.0)
    scale = float(np.max(mask))
    with_keep = _grads(lambda x, r, g, b, c: dropout_residual_layer_norm(
        x, keep, r, g, b, 1e-12, bias=c, keep_scale=scale), inputs, upstream)
    for a, b in zip(fused, with_keep):
        np.testing.assert_array_equal(b, a)
    with pytest.raises(ValueError, match="keep_scale"):
        dropout_residual_layer_norm(x, keep, residual, gamma, beta, 1e-12)


def _bias_gelu_plain_and_fused(dtype, seed):
    """[y, dh, dbias] of gelu(bias_add(h, bias)) op by op and of `bias_gelu`, for h [24, 64]
    (normal x 2) and bias [64] in `dtype`, with a float32 upstream gradient [24, 64]."""
    rng = np.random.default_rng(seed)
    h = tf.cast(rng.normal(size=(24, 64)) * 2.0, dtype)
    bias = tf.cast(rng.normal(size=64), dtype)
    upstream = tf.constant(rng.normal(size=(24, 64)), tf.float32)
    plain = _grads(lambda h, b: gelu(tf.nn.bias_add(h, b)), [h, bias], upstream)
    return plain, _grads(bias_gelu, [h, bias], upstream)


def test_bias_gelu_float32_values_and_gradients():
    plain, fused = _bias_gelu_plain_and_fused(tf.float32, seed=3)
    for a, b in zip(plain, fused):
        assert_close_f32(b, a)


def test_bias_gelu_bfloat16_within_one_ulp():
    plain, fused = _bias_gelu_plain_and_fused(tf.bfloat16, seed=4)
    assert fused[0].dtype == tf.bfloat16 and fused[2].dtype == tf.bfloat16
    # y and dh are elementwise: one bf16 ulp. The bias gradient sums 24 rows of bf16 terms (the
    # plain BiasAddGrad rounds per its own order): one ulp of the largest absolute row sum.
    for a, b in zip(plain[:2], fused[:2]):
        a, b = (tf.cast(t, tf.float32).numpy() for t in (a, b))
        np.testing.assert_allclose(b, a, rtol=BF16_RTOL, atol=BF16_RTOL * np.max(np.abs(a)))
    a, b = (tf.cast(t, tf.float32).numpy() for t in (plain[2], fused[2]))
    scale = np.sum(np.abs(tf.cast(plain[1], tf.float32).numpy()), axis=0)
    assert np.all(np.abs(b - a) <= BF16_RTOL * (np.abs(a) + scale))


def _scores(dtype, shape=(2, 3, 8, 8), seed=5):
    rng = np.random.default_rng(seed)
    scores = tf.cast(rng.normal(size=shape) * 3.0, dtype)
    keep = tf.constant(rng.random(shape) >= 0.1)
    return scores, keep


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_attention_softmax_dropout_bert(dtype):
    """BERT's additive key mask, softmax and dropout mask as the XLA kernels against the
    attention layer's ops (float32: rounding; bfloat16: one ulp of the probabilities)."""
    scores, keep = _scores(dtype)
    scale = 1.0 / 0.9
    mask = tf.where(keep, tf.constant(scale, dtype), tf.constant(0.0, dtype))
    input_mask = tf.constant([[1] * 8, [1] * 5 + [0] * 3])
    adder = tf.cast((1.0 - tf.cast(input_mask, tf.float32)) * -10000.0, dtype)[:, None, None, :]
    upstream = tf.constant(np.random.default_rng(6).normal(size=scores.shape), tf.float32)
    plain = _grads(lambda s: tf.nn.softmax(s + adder, axis=-1) * mask, [scores], upstream)
    fused = _grads(lambda s: attention_softmax_dropout(s, adder, keep, scale), [scores],
                   upstream)
    floats = lambda t: tf.cast(t, tf.float32).numpy()  # noqa: E731
    if dtype == tf.float32:
        for a, b in zip(plain, fused):
            assert_close_f32(b, a)
        with_float_mask = _grads(lambda s: attention_softmax_dropout(s, adder, mask), [scores],
                                 upstream)
        for a, b in zip(fused, with_float_mask):
            np.testing.assert_array_equal(b, a)
    else:
        assert fused[0].dtype == tf.bfloat16
        np.testing.assert_allclose(floats(fused[0]), floats(plain[0]), rtol=BF16_RTOL,
                                   atol=BF16_RTOL * scale)
        # The gradient: the plain path's SoftmaxGrad rounds its row sum and products to bf16.
        a, b = floats(plain[1]), floats(fused[1])
        np.testing.assert_allclose(b, a, rtol=0, atol=4 * BF16_RTOL * np.max(np.abs(a)))
    # The padded keys get no probability.
    assert np.all(floats(fused[0])[1, :, :, 5:] == 0)


def test_attention_softmax_dropout_gpt_causal():
    """GPT-1's scale, causal mask (w·b − 1e9·(1 − b)), softmax and dropout."""
    scores, keep = _scores(tf.float32, seed=7)
    scale = 1.0 / 0.9
    mask = tf.where(keep, scale, 0.0)
    upstream = tf.constant(np.random.default_rng(8).normal(size=scores.shape), tf.float32)

    def plain_fn(w):
        return tf.nn.softmax(causal_mask_scores(w * tf.math.rsqrt(16.0))) * mask

    plain = _grads(plain_fn, [scores], upstream)
    fused = _grads(lambda w: attention_softmax_dropout(w, None, keep, scale, head_size=16,
                                                       causal=True), [scores], upstream)
    for a, b in zip(plain, fused):
        assert_close_f32(b, a)
    assert np.all(np.triu(fused[0].numpy()[0, 0], 1) == 0)


def _same_streams(layers_a, layers_b):
    for la, lb in zip(layers_a, layers_b):
        lb.seed_generator.state.assign(la.seed_generator.state)


def _bert_block_run(block, x, mask_adder):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = block(x, mask_adder, training=True)
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * tf.range(32, dtype=tf.float32))
    return [y, *tape.gradient(loss, [x, *block.trainable_variables])]


@pytest.mark.parametrize("fused_softmax", [False, pytest.param(True, marks=pytest.mark.long)])
def test_bert_block_fused_training_path_equals_plain(fused_softmax):
    """xla_gelu_in_training (bias + GELU and bias + dropout + residual + LayerNorm as XLA
    kernels; with `fused_attention_softmax` also the attention's softmax + dropout) against the
    op-by-op block: same dropout masks, same outputs and gradients up to float32 rounding."""
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64)
    plain = BertTransformerBlock(config)
    fused = BertTransformerBlock(config, xla_gelu_in_training=True)
    fused.fused_attention_softmax = fused_softmax
    plain.build(None)
    fused.build(None)
    fused.set_weights(plain.get_weights())
    dropouts = lambda b: (b.attention.dropout, b.attention_dropout, b.output_dropout)  # noqa: E731
    _same_streams(dropouts(plain), dropouts(fused))
    x = tf.random.stateless_normal([2, 8, 32], seed=[4, 5])
    mask_adder = tf.constant([[0.0] * 8, [0.0] * 6 + [-10000.0] * 2])[:, None, None, :]
    for a, b in zip(_bert_block_run(plain, x, mask_adder), _bert_block_run(fused, x, mask_adder)):
        assert_close_f32(b, a)
    # Inference is the plain op pattern on both.
    np.testing.assert_array_equal(fused(x, mask_adder, training=False),
                                  plain(x, mask_adder, training=False))


def _gpt_block_runs(forwards, seed):
    """Values and gradients [y, dx, d(every variable)] of a 1-layer GptBlock's training forward
    for each (forward x -> y, jit) of `forwards(block)` (jit: the whole step XLA-compiled), each
    started from the same dropout stream positions (so the same masks)."""
    c = GptConfig(n_vocab=50, n_special=0, n_ctx=8, n_embd=32, n_head=2, n_layer=1,
                  embd_pdrop=0.1, attn_pdrop=0.1, resid_pdrop=0.1, clf_pdrop=0.1, afn="gelu")
    block = GptBlock(c)
    block.build()
    x = tf.random.stateless_normal([2, 8, 32], seed=seed)
    dropouts = (block.attn.probs_dropout, block.attn.resid_dropout, block.mlp.resid_dropout)
    start = [d.seed_generator.state.numpy() for d in dropouts]

    def step(forward, x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = forward(x)
            loss = tf.reduce_sum(y * tf.range(32, dtype=tf.float32))
        return [y, *tape.gradient(loss, [x, *block.trainable_variables])]

    results = []
    for forward, jit in forwards(block):
        for d, s in zip(dropouts, start):
            d.seed_generator.state.assign(s)
        run = lambda x, f=forward: step(f, x)  # noqa: E731
        results.append((tf.function(run, jit_compile=True) if jit else run)(x))
    return results


@pytest.mark.parametrize("fused_softmax", [False, pytest.param(True, marks=pytest.mark.long)])
def test_gpt_block_fused_training_path_equals_plain(fused_softmax):
    """GptBlock in training (fused bias + dropout + residual + LayerNorm, bias + GELU; with
    `fused_attention_softmax` also the attention's softmax + dropout) against the op-by-op
    block (the path it takes with injected masks): same masks, same values up to float32
    rounding."""
    def forwards(block):
        block.attn.fused_attention_softmax = fused_softmax
        def op_by_op(x):
            a = block.attn(x, training=True)
            n = block.ln_1(x + a)
            return block.ln_2(n + block.mlp(n, training=True))
        return [(op_by_op, False), (lambda x: block(x, training=True), False)]

    for a, b in zip(*_gpt_block_runs(forwards, [6, 7])):
        assert_close_f32(b, a)


def test_profile_categories():
    """bench/profile_train_step.py's op categories on op names of the traced steps."""
    spec = importlib.util.spec_from_file_location("profile_train_step", BENCH)
    profile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(profile)
    cat = profile.categorize
    assert cat("while/bert/layer_0/MatMul", "_MklNativeFusedMatMul") == "matmul"
    assert cat("while/bert/layer_0/self/MatMul_1", "_MklBatchMatMulV2") == "matmul"
    assert cat("gradient_tape/bert/layer_0/BiasAdd/BiasAddGrad", "BiasAddGrad") == "bias_grad"
    assert cat("while/bert/layer_0/attention_output_LayerNorm/moments/mean", "Mean") == \
        "layer_norm"
    assert cat("while/bert/layer_0/fused_ln/PartitionedCall", "XlaCluster") == "layer_norm"
    assert cat("while/bert/layer_0/gelu_xla/PartitionedCall", "XlaCluster") == "gelu"
    assert cat("while/bert/layer_0/self/fused_softmax/PartitionedCall", "XlaCluster") == \
        "softmax"
    assert cat("while/PartitionedCall_3", "XlaCluster") == "xla"
    assert cat("while/bert_pretrainer/predictions/widened_bias_add_xla/PartitionedCall",
               "XlaCluster") == "cast"
    assert cat("while/widened_bias_add_xla_grad_1/PartitionedCall", "XlaCluster") == "cast"
    assert cat("while/bert/layer_0/self/dropout/StatelessRandomUniformFullIntV2",
               "StatelessRandomUniformFullIntV2") == "dropout_rng"
    assert cat("while/bert/layer_0/attention_dropout/mul", "Mul") == "dropout_apply"
    assert cat("while/bert/layer_0/Cast_3", "Cast") == "cast"
    assert cat("while/AdamWeightDecay/ResourceApplyAdam", "ResourceApplyAdam") == "optimizer"
    assert cat("while/bert/embeddings/GatherV2", "GatherV2") == "gather_scatter"
    assert cat("while/bert/layer_0/self/Softmax", "_MklSoftmax") == "softmax"
    assert cat("while/bert/layer_0/add", "AddV2") == "elementwise"
    assert cat("while/gpt_model_1/h0_1/ln_1_1/Mean", "Mean") == "layer_norm"  # GPT-1's norm
    assert set(profile.CATEGORIES) >= {"matmul", "cast", "other"}


@pytest.mark.long  # compiles a whole training step with XLA (~90 s wall on a loaded 2-core host)
def test_fused_block_inside_a_jit_compiled_step():
    """`--jit_compile` compiles the whole step: the fused kernels (jit functions with custom
    gradients) inline into it and give the same values and gradients as run op by op."""
    def forwards(block):
        forward = lambda x: block(x, training=True)  # noqa: E731
        return [(forward, False), (forward, True)]

    for a, b in zip(*_gpt_block_runs(forwards, [8, 9])):
        assert_close_f32(b, a)


def test_xla_kernels_are_the_fused_paths_kernels():
    """`fused.xla_kernels()` (for benchmarks) hands out the kernels the public functions run:
    their forward outputs equal the public functions' bit for bit."""
    from bert_tf.modeling import fused

    kernels = fused.xla_kernels()
    rng = np.random.default_rng(7)
    h = tf.constant(rng.normal(size=(16, 32)), tf.float32)
    bias = tf.constant(rng.normal(size=32), tf.float32)
    np.testing.assert_array_equal(kernels["bias_gelu_forward"](h, bias)[0], bias_gelu(h, bias))
    residual = tf.constant(rng.normal(size=(16, 32)), tf.float32)
    keep = tf.constant(rng.random((16, 32)) >= 0.1)
    gamma, beta = tf.ones([32]), tf.zeros([32])
    y = kernels["layer_norm_forward"](h, keep, residual, gamma, beta, tf.constant(1e-12), None,
                                      tf.constant(1 / 0.9))[0]
    np.testing.assert_array_equal(
        y, dropout_residual_layer_norm(h, keep, residual, gamma, beta, 1e-12, keep_scale=1 / 0.9))
    assert set(kernels) == {"layer_norm_forward", "layer_norm_backward", "bias_gelu_forward",
                            "bias_gelu_backward"}
