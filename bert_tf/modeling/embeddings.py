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


def layer_norm(name: str) -> keras.layers.LayerNormalization:
    """LayerNorm over the last axis with the original's epsilon (1e-12) and biased variance."""
    return keras.layers.LayerNormalization(axis=-1, epsilon=LAYER_NORM_EPSILON, name=name)


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
        output = self.layer_norm(output)
        return self.dropout(output, training=training)
