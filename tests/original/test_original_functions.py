"""`bert_tf.original.modeling`'s helper functions: the original's semantics, eagerly and in
graphs."""
import math

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.original import modeling


def test_get_activation_follows_the_original():
    assert modeling.get_activation(None) is None
    assert modeling.get_activation("") is None
    assert modeling.get_activation("linear") is None
    assert modeling.get_activation("LINEAR") is None
    assert modeling.get_activation("relu") is tf.nn.relu
    assert modeling.get_activation("Relu") is tf.nn.relu
    assert modeling.get_activation("gelu") is modeling.gelu
    assert modeling.get_activation("tanh") is tf.tanh

    def custom(x):
        return x

    assert modeling.get_activation(custom) is custom
    with pytest.raises(ValueError, match="^Unsupported activation: swish$"):
        modeling.get_activation("Swish")
    with pytest.raises(ValueError, match="Unsupported activation: gelu_exact"):
        modeling.get_activation("gelu_exact")


def test_gelu_is_the_tanh_approximation_eagerly_and_in_a_graph():
    x = np.linspace(-6, 6, 49).astype(np.float32)
    expected = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(modeling.gelu(tf.constant(x)).numpy(), expected, atol=1e-6)
    with tf.Graph().as_default() as g:
        y = modeling.get_activation("gelu")(tf.constant(x))
        with tf.compat.v1.Session(graph=g) as sess:
            np.testing.assert_allclose(sess.run(y), expected, atol=1e-6)


def test_get_shape_list_static_eager_and_dynamic_in_a_graph():
    assert modeling.get_shape_list(tf.zeros([2, 3, 4])) == [2, 3, 4]  # eager tensor, no .name
    assert modeling.get_shape_list(tf.zeros([2, 3]), expected_rank=[2, 3]) == [2, 3]
    with tf.Graph().as_default() as g:
        p = tf.compat.v1.placeholder(tf.float32, [None, 5, None])
        shape = modeling.get_shape_list(p, expected_rank=3)
        assert shape[1] == 5 and all(isinstance(shape[i], tf.Tensor) for i in (0, 2))
        with tf.compat.v1.Session(graph=g) as sess:
            assert sess.run([shape[0], shape[2]], {p: np.zeros([7, 5, 9])}) == [7, 9]


def test_assert_rank_names_tensor_scope_and_ranks():
    modeling.assert_rank(tf.zeros([2]), 1)
    modeling.assert_rank(tf.zeros([2, 2]), [1, 2])
    modeling.assert_rank(tf.zeros([2, 2]), np.int64(2))
    with pytest.raises(ValueError, match=r"For the tensor `mine` in scope `.*`, the actual rank "
                                         r"`3` \(shape = \(1, 2, 3\)\) is not equal to the "
                                         r"expected rank `\[1, 2\]`"):
        modeling.assert_rank(tf.zeros([1, 2, 3]), [1, 2], name="mine")
    with tf.Graph().as_default():
        with tf.compat.v1.variable_scope("outer"):
            t = tf.zeros([3], name="ids")
            with pytest.raises(ValueError, match="For the tensor `outer/ids:0` in scope `outer`"):
                modeling.get_shape_list(t, expected_rank=2)


def test_reshape_to_and_from_matrix():
    x = tf.reshape(tf.range(24, dtype=tf.float32), [2, 3, 4])
    m = modeling.reshape_to_matrix(x)
    assert m.shape.as_list() == [6, 4]
    back = modeling.reshape_from_matrix(m, [2, 3, 4])
    np.testing.assert_array_equal(back.numpy(), x.numpy())
    two = tf.zeros([5, 4])
    assert modeling.reshape_to_matrix(two) is two
    assert modeling.reshape_from_matrix(two, [5, 4]) is two
    with pytest.raises(ValueError, match="at least rank 2"):
        modeling.reshape_to_matrix(tf.zeros([3]))


def test_attention_mask_from_input_mask_masks_keys_only():
    mask = modeling.create_attention_mask_from_input_mask(
        tf.zeros([2, 3], tf.int32), tf.constant([[1, 1, 0], [1, 0, 0]]))
    assert mask.dtype == tf.float32
    np.testing.assert_array_equal(mask.numpy(), [[[1, 1, 0]] * 3, [[1, 0, 0]] * 3])


def test_dropout_and_initializer():
    x = tf.ones([4, 4])
    assert modeling.dropout(x, None) is x and modeling.dropout(x, 0.0) is x
    dropped = modeling.dropout(tf.ones([1000]), 0.25).numpy()
    assert set(np.unique(dropped)) <= {0.0, np.float32(1 / 0.75)}
    assert 0.15 < np.mean(dropped == 0) < 0.35
    init = modeling.create_initializer(0.5)
    assert isinstance(init, tf.compat.v1.truncated_normal_initializer)
    values = init([2000]).numpy()
    assert np.abs(values).max() <= 1.0 + 1e-6 and 0.3 < values.std() < 0.5


def test_attention_layer_2d_needs_the_lengths_and_transformer_checks_widths():
    with tf.Graph().as_default():
        x = tf.zeros([6, 8])
        with pytest.raises(ValueError, match="must all be specified"):
            modeling.attention_layer(x, x, num_attention_heads=2, size_per_head=4)
        out = modeling.attention_layer(x, x, num_attention_heads=2, size_per_head=4,
                                       do_return_2d_tensor=True, batch_size=2,
                                       from_seq_length=3, to_seq_length=3)
        assert out.shape.as_list() == [6, 8]
        with pytest.raises(ValueError, match="must match the rank"):
            modeling.attention_layer(tf.zeros([2, 3, 8]), x)
        with pytest.raises(ValueError, match=r"width of the input tensor \(8\) != hidden size "
                                             r"\(12\)"):
            modeling.transformer_model(tf.zeros([2, 3, 8]), hidden_size=12,
                                       num_attention_heads=2)
        with pytest.raises(ValueError, match="`token_type_ids` must be specified"):
            modeling.embedding_postprocessor(tf.zeros([2, 3, 8]), use_token_type=True)
