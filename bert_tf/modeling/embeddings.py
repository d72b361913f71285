"""The BERT input embedding layer: word + token type + position, then LayerNorm and dropout."""
from __future__ import annotations

import keras
import tensorflow as tf

from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.dropout import BertDropout
from bert_tf.modeling.serialization import init_kwargs_from_saved, register

LAYER_NORM_EPSILON = 1e-12


def truncated_normal(config: BertConfig) -> keras.initializers.Initializer:
    """The original's initializer: truncated normal with stddev `initializer_range`."""
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


# Inference (training false or None) computes each LayerNorm with `inference_layer_norm`, which
# oneDNN's grappler remapper turns into one `_MklLayerNorm` kernel; False: Keras' op chain there
# too (read when a function is traced; `bench/profile_finetune.py --inference_fusion 0,1`).
FUSED_INFERENCE_LAYER_NORM = True
_FUSABLE_DTYPES = (tf.float16, tf.bfloat16, tf.float32)


def layer_norm(name: str) -> keras.layers.LayerNormalization:
    """LayerNorm over the last axis with the original's epsilon (1e-12) and biased variance."""
    return keras.layers.LayerNormalization(axis=-1, epsilon=LAYER_NORM_EPSILON, name=name)


def apply_layer_norm(norm: keras.layers.LayerNormalization, x: tf.Tensor,
                     training: bool | None = None) -> tf.Tensor:
    """`norm(x)` for x float [..., H]: Keras' layer while training; in inference (`training`
    false or None, `FUSED_INFERENCE_LAYER_NORM`) the same maths by `inference_layer_norm`, in
    float32 as Keras computes it, cast to the layer's compute dtype. Same shape as x."""
    if training or not FUSED_INFERENCE_LAYER_NORM or x.dtype not in _FUSABLE_DTYPES:
        return norm(x)
    with tf.name_scope(norm.name):
        y = inference_layer_norm(tf.cast(x, tf.float32), norm.gamma, norm.beta, norm.epsilon)
    return tf.cast(y, norm.compute_dtype)


def inference_layer_norm(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor,
                         epsilon: float) -> tf.Tensor:
    """LayerNorm over the last axis (biased variance) of float32 x [..., H] with gamma, beta [H],
    written as the op pattern that TensorFlow's oneDNN remapper fuses into one `_MklLayerNorm`
    kernel (`FindMklLayerNorm`, pattern 1: the tf.keras 2 LayerNormalization graph).

    x is viewed as [1, rows, H, 1] in NCHW, so `FusedBatchNormV3` in training mode with unit
    scale and zero offset, `Fill`ed to `rows` channels, normalizes each row over its H values;
    then `* gamma + beta`. The remapper matches it when the fill sizes are not graph constants
    (a dynamic batch or length, as every bert_tf prediction and serving function has) and x has
    rank 2 or 3; elsewhere, or with oneDNN off, `FusedBatchNormV3` itself runs (one kernel
    instead of Keras' ~13 ops). Both compute the mean and the variance of each row inside the
    kernel: equal to Keras' `layer_normalization` up to float32 rounding (the fixture tests'
    tolerances; tests/modeling/test_inference_fusion.py). Differentiable (FusedBatchNormV3 has a
    gradient; the remapper leaves a FusedBatchNormV3 whose other outputs a gradient reads).

    Returns: float32, the shape of x.
    """
    shape = tf.shape(x)
    rows = tf.reduce_prod(shape[:-1])
    as_image = tf.reshape(x, tf.stack([1, rows, shape[-1], 1]))
    rows_1d = tf.reshape(rows, [1])
    empty = tf.constant([], tf.float32)
    normalized = tf.raw_ops.FusedBatchNormV3(
        x=as_image, scale=tf.fill(rows_1d, 1.0), offset=tf.fill(rows_1d, 0.0), mean=empty,
        variance=empty, epsilon=epsilon, data_format="NCHW", is_training=True)[0]
    return tf.reshape(normalized, shape) * tf.cast(gamma, tf.float32) + tf.cast(beta, tf.float32)


@register
class BertEmbeddings(keras.layers.Layer):
    """Sum of word, token-type and position embeddings, LayerNorm (eps 1e-12), then dropout.

    Variables (original names under `bert/embeddings/`): `word_embeddings` [vocab_size, H],
    `token_type_embeddings` [type_vocab_size, H], `position_embeddings` [max_position_embeddings, H],
    `LayerNorm/{gamma,beta}` [H].
    """

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.layer_norm = layer_norm("LayerNorm")
        self.dropout = BertDropout(config.hidden_dropout_prob)

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))

    def build(self, input_shape=None) -> None:
        c = self.config
        init = truncated_normal(c)
        # autocast=False: read in float32 under a 16-bit policy, so that `call` casts only the
        # gathered rows (not the whole [vocab_size, H] table; the masked-LM head casts the table
        # it multiplies by, once per step).
        self.word_embeddings = self.add_weight(
            name="word_embeddings", shape=(c.vocab_size, c.hidden_size), initializer=init,
            autocast=False)
        self.token_type_embeddings = self.add_weight(
            name="token_type_embeddings", shape=(c.type_vocab_size, c.hidden_size), initializer=init)
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(c.max_position_embeddings, c.hidden_size),
            initializer=init)
        self.layer_norm.build((None, None, c.hidden_size))
        self.built = True

    def call(self, input_word_ids: tf.Tensor, input_type_ids: tf.Tensor,
             training: bool | None = None) -> tf.Tensor:
        """Embeds a batch.

        Args:
          input_word_ids: int32 [batch, seq_len] WordPiece ids.
          input_type_ids: int32 [batch, seq_len] segment ids (0 = sentence A, 1 = sentence B).
          training: enables dropout.

        Returns:
          float [batch, seq_len, hidden_size]: the embedding output (after LayerNorm and dropout).
        """
        check = tf.debugging.assert_less_equal(
            tf.shape(input_word_ids)[1], self.config.max_position_embeddings,
            message="sequence longer than max_position_embeddings")
        # The check runs first (in a graph the position add could otherwise fail before it, with
        # "Incompatible shapes").
        with tf.control_dependencies([check] if check is not None else []):
            seq_len = tf.shape(input_word_ids)[1]
        word = tf.cast(tf.gather(self.word_embeddings, input_word_ids), self.compute_dtype)
        # A one-hot matmul, as the original: same values as a gather, but its gradient is dense,
        # which the global-norm clipping sees differently from a gather's IndexedSlices.
        one_hot = tf.one_hot(input_type_ids, self.config.type_vocab_size,
                             dtype=self.token_type_embeddings.dtype)
        token_type = tf.einsum("bst,th->bsh", one_hot, self.token_type_embeddings)
        position = self.position_embeddings[:seq_len]
        output = word + token_type
        output = output + tf.cast(position, output.dtype)  # [S, H] broadcast over the batch
        output = apply_layer_norm(self.layer_norm, output, training)
        return self.dropout(output, training=training)
