"""The original pretraining losses: weighted mean masked-LM loss and mean next-sentence loss."""
from __future__ import annotations

import tensorflow as tf


def masked_lm_loss(logits: tf.Tensor, label_ids: tf.Tensor, label_weights: tf.Tensor
                   ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Σ w·nll / (Σ w + 1e-5), as the original `get_masked_lm_output`.

    Args:
      logits: [batch, P, vocab] (any float dtype; computed in float32).
      label_ids: int [batch, P] target ids (0 in padding slots).
      label_weights: float [batch, P], 1.0 for real predictions and 0.0 for padding slots.

    Returns:
      (loss [], per-slot loss [batch * P], log_probs [batch * P, vocab]).
    """
    logits = tf.cast(logits, tf.float32)
    vocab = tf.shape(logits)[-1]
    log_probs = tf.nn.log_softmax(tf.reshape(logits, [-1, vocab]), axis=-1)
    ids = tf.reshape(tf.cast(label_ids, tf.int32), [-1])
    weights = tf.reshape(tf.cast(label_weights, tf.float32), [-1])
    per_example = -tf.gather(log_probs, ids, batch_dims=1)
    loss = tf.reduce_sum(weights * per_example) / (tf.reduce_sum(weights) + 1e-5)
    return loss, per_example, log_probs


def next_sentence_loss(logits: tf.Tensor, labels: tf.Tensor
                       ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Mean cross-entropy of the 2-way next-sentence logits.

    Args: logits [batch, 2]; labels int [batch] or [batch, 1] (0 = IsNext, 1 = random next).
    Returns: (loss [], per-example loss [batch], log_probs [batch, 2]).
    """
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
    per_example = -tf.gather(log_probs, labels, batch_dims=1)
    return tf.reduce_mean(per_example), per_example, log_probs
