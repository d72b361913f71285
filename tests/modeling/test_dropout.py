"""BertDropout: Keras Dropout's contract with 16-bit random draws."""
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling.dropout import BertDropout


def test_inference_is_identity_and_rate_zero_is_identity():
    x = tf.random.normal([4, 8])
    np.testing.assert_array_equal(BertDropout(0.1)(x, training=False).numpy(), x.numpy())
    np.testing.assert_array_equal(BertDropout(0.0)(x, training=True).numpy(), x.numpy())


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_drop_fraction_scale_and_expectation(rate):
    n = 1 << 20
    layer = BertDropout(rate, seed=3)
    y = layer(tf.ones([n // 1024, 1024]), training=True).numpy()
    dropped = float(np.mean(y == 0))
    p = round(rate * 65536) / 65536
    assert abs(dropped - p) < 5 * np.sqrt(p * (1 - p) / n)  # 5 sigma
    kept = y[y != 0]
    np.testing.assert_allclose(kept, 1.0 / (1.0 - p), rtol=1e-6)
    assert abs(float(y.mean()) - 1.0) < 5 * np.sqrt(p / (1 - p) / n)


def test_new_mask_every_call_same_sequence_for_same_seed():
    x = tf.ones([64, 64])
    a, b = BertDropout(0.1, seed=7), BertDropout(0.1, seed=7)
    first, second = a(x, training=True).numpy(), a(x, training=True).numpy()
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(first, b(x, training=True).numpy())


def test_odd_sizes_and_gradient_is_the_mask():
    x = tf.random.normal([3, 5, 7])  # 105 elements: odd
    layer = BertDropout(0.3, seed=1)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    grad = tape.gradient(y, x).numpy()
    mask = np.where(y.numpy() == 0, 0.0, 1.0 / (1.0 - round(0.3 * 65536) / 65536))
    np.testing.assert_allclose(grad, mask, rtol=1e-6)
    assert y.shape == x.shape


def test_noise_shape_rejected():
    with pytest.raises(ValueError, match="noise_shape"):
        BertDropout(0.1, noise_shape=(1, 2))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_inputs_get_the_float32_mask_and_rate(dtype):
    """Under mixed precision the mask and rate are float32's (Keras' own layer draws bfloat16
    uniforms for a bfloat16 input and drops 10.16% for 0.1)."""
    x = tf.ones([1000, 1000])
    full, half = BertDropout(0.1, seed=5), BertDropout(0.1, seed=5, dtype=f"mixed_{dtype}")
    want = full(x, training=True).numpy()
    got = half(tf.cast(x, dtype), training=True)
    assert got.dtype == dtype
    got = got.numpy().astype(np.float32)
    np.testing.assert_array_equal(got != 0, want != 0)
    assert abs(float(np.mean(got == 0)) - 0.1) < 0.0015  # 5 sigma over 10^6 elements


def test_feature_based_heads_drop_the_configured_rate_under_mixed_precision():
    """The feature-based tagger's dropouts (over frozen features and the BiLSTM output) use
    BertDropout's draws: 10% of a bfloat16 input for a rate of 0.1."""
    import keras

    from bert_tf.modeling import BertConfig
    from bert_tf.tasks.feature_based import FeatureBasedTagger

    config = BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=16)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        tagger = FeatureBasedTagger(config, num_labels=3, feature_layers="last",
                                    lstm_units=4, dropout_rate=0.1)
    finally:
        keras.config.set_dtype_policy(previous)
    for layer in (tagger.feature_dropout, tagger.output_dropout):
        y = layer(tf.ones([1000, 1000], tf.bfloat16), training=True).numpy().astype(np.float32)
        assert abs(float(np.mean(y == 0)) - 0.1) < 0.0015, layer.name
