"""GPT-1's two heads: the LM head tied to the whole table, and the classify-token classifier."""
from __future__ import annotations

import keras
import tensorflow as tf

from bert_tf.gpt.dropout import GptDropout


def tied_lm_logits(h: tf.Tensor, table: tf.Tensor) -> tf.Tensor:
    """train.py's `lm_logits = lm_h @ we^T`: no bias, over **every** row of the (dropped) table,
    i.e. BPE tokens, special tokens and the position rows.

    Args: h float [..., n_embd]; table float [rows, n_embd]. Returns float [..., rows].

    Computed as one 2-D MatMul on [prod(...), n_embd] (a batched matmul against the shared table
    makes TensorFlow's gradient a BatchMatMul per example plus a sum over the batch for the
    table's gradient: about 2x slower on a CPU for the LM head, the largest matmul of the model).
    """
    flat = tf.reshape(h, [-1, tf.shape(h)[-1]])
    logits = tf.matmul(flat, table, transpose_b=True)
    return tf.reshape(logits, tf.concat([tf.shape(h)[:-1], tf.shape(table)[:1]], axis=0))


def classify_positions(token_ids: tf.Tensor, clf_token: int) -> tf.Tensor:
    """train.py's `pool_idx = argmax(X[..., 0] == clf_token)`: the FIRST classify token of each
    sequence, and position 0 when there is none (no error, as the original).

    Args: token_ids int [..., S]. Returns int32 [...].
    """
    is_clf = tf.cast(tf.equal(tf.cast(token_ids, tf.int32), clf_token), tf.float32)
    return tf.cast(tf.argmax(is_clf, axis=-1), tf.int32)


@keras.saving.register_keras_serializable(package="bert_tf")
class GptClassifierHead(keras.layers.Layer):
    """train.py's `clf`: a linear layer [n_embd, 1] on the final state at the classify token.

    Variables (under `clf/`): `w` [n_embd, 1] (N(0, 0.02²) init), `b` [1] (zeros).
    In training the gathered states get `clf_pdrop` dropout with ONE mask per example shared by
    all its choices (the original's noise shape [examples, 1, n_embd]).
    """

    def __init__(self, n_embd: int, clf_token: int, clf_pdrop: float, **kwargs):
        super().__init__(**kwargs)
        self.n_embd, self.clf_token, self.clf_pdrop = int(n_embd), int(clf_token), float(clf_pdrop)
        self.dropout = GptDropout(self.clf_pdrop, noise_shape=(None, 1, None), name="clf_dropout")

    def build(self, input_shape=None) -> None:
        self.w = self.add_weight(name="w", shape=(self.n_embd, 1),
                                 initializer=keras.initializers.RandomNormal(stddev=0.02))
        self.b = self.add_weight(name="b", shape=(1,), initializer="zeros")
        self.built = True

    def call(self, h: tf.Tensor, token_ids: tf.Tensor, training: bool | None = None):
        """Args: h float [B, C, S, n_embd] (C choices per example) or [B, S, n_embd] (one
        sequence per example); token_ids int [B, C, S] or [B, S].

        Returns: (logits float [B, C] or [B], one score per sequence; states float [B, C, n_embd]
        or [B, n_embd] read at the classify token, before dropout; positions int32 [B, C] or [B]).
        """
        positions = classify_positions(token_ids, self.clf_token)
        states = tf.gather(h, positions, batch_dims=len(positions.shape))
        single = len(states.shape) == 2
        dropped = self.dropout(states[:, tf.newaxis] if single else states, training=training)
        if single:
            dropped = dropped[:, 0]
        logits = tf.matmul(tf.reshape(dropped, [-1, self.n_embd]), tf.cast(self.w, h.dtype))
        logits = tf.reshape(logits + tf.cast(self.b, h.dtype), tf.shape(positions))
        return logits, states, positions

    def get_config(self) -> dict:
        return {**super().get_config(), "n_embd": self.n_embd, "clf_token": self.clf_token,
                "clf_pdrop": self.clf_pdrop}
