"""GPT-1's LM and classification losses as train.py computes them (always in float32, also
when a mixed-precision policy makes the logits 16-bit)."""
from __future__ import annotations

import tensorflow as tf

from bert_tf.modeling.cross_entropy import sparse_softmax_cross_entropy


def lm_token_losses(lm_logits: tf.Tensor, token_ids: tf.Tensor) -> tf.Tensor:
    """Cross-entropy of the prediction at position i for the token at i + 1, unmasked.

    Args: lm_logits float [..., S-1, rows] (from h[..., :-1, :]); token_ids int [..., S].
    Returns float [..., S-1] (padding targets included).
    """
    return sparse_softmax_cross_entropy(token_ids[..., 1:], lm_logits)


def lm_losses(token_losses: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """Per-sequence masked mean with M[..., 1:]: Σ(loss·M[1:]) / Σ M[1:].

    `_start_` is never a target; the delimiter and the classify token are. A sequence with a
    single real token gives 0/0 (NaN), as in the original.

    Args: token_losses float [..., S-1]; mask float [..., S]. Returns float [...].
    """
    m = tf.cast(mask, token_losses.dtype)[..., 1:]
    return tf.reduce_sum(token_losses * m, axis=-1) / tf.reduce_sum(m, axis=-1)


def masked_lm_losses(hidden: tf.Tensor, table: tf.Tensor, token_ids: tf.Tensor,
                     mask: tf.Tensor) -> tf.Tensor:
    """`lm_losses(lm_token_losses(tied_lm_logits(hidden[..., :-1, :], table), token_ids), mask)`
    with the tied LM head applied only where M[..., 1:] is not 0.

    The same per-sequence losses and gradients as the head over every position (the masked
    positions' losses are multiplied by 0 there; up to float rounding), without the
    [positions, table_rows] logits of the padding: a fine-tuning batch of short texts pads
    most of its positions, and the head is the largest matmul of a small model. The row
    selection has a dynamic size (XLA pads it to its bound).

    Args: hidden float [..., S, n_embd] (`GptModel`'s hidden_states); table float [rows, n_embd]
    (its `lm_table`); token_ids int [..., S]; mask float [..., S]. Returns float32 [...].
    """
    from bert_tf.gpt.heads import tied_lm_logits

    width = tf.shape(hidden)[-1]
    flat_hidden = tf.reshape(hidden[..., :-1, :], [-1, width])
    targets = token_ids[..., 1:]
    flat_m = tf.reshape(tf.cast(mask, tf.float32)[..., 1:], [-1])
    rows = tf.where(flat_m != 0)[:, 0]
    kept = sparse_softmax_cross_entropy(tf.gather(tf.reshape(targets, [-1]), rows),
                                        tied_lm_logits(tf.gather(flat_hidden, rows), table))
    # 0 at the masked positions, which `lm_losses` weighs by 0 anyway.
    token_losses = tf.scatter_nd(rows[:, tf.newaxis], kept, tf.shape(flat_m, out_type=tf.int64))
    return lm_losses(tf.reshape(token_losses, tf.shape(targets)), mask)


def classification_losses(clf_logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Softmax cross-entropy over the choices. Args: clf_logits float [B, C]; labels int [B]
    (index of the right choice). Returns float [B]."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(labels, tf.int32),
                                                          logits=tf.cast(clf_logits, tf.float32))


def regression_losses(scores: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Squared error of a one-unit regression head (STS-B; the original has none).
    Args: scores float [B, 1]; labels float [B]. Returns float32 [B]."""
    predictions = tf.cast(scores, tf.float32)[:, 0]
    return tf.square(predictions - tf.cast(labels, tf.float32))


def train_loss(clf_losses: tf.Tensor | None, lm_losses_: tf.Tensor | None,
               lm_coef: float = 0.5) -> tf.Tensor:
    """train.py's `mgpu_train` loss: mean(clf_losses) + lm_coef · mean(lm_losses) (plain means,
    so every sequence — wrong endings included — weighs the same); lm_coef 0 leaves out the LM
    term. With `clf_losses=None` (language-model training) it is mean(lm_losses)."""
    if clf_losses is None:
        return tf.reduce_mean(lm_losses_)
    loss = tf.reduce_mean(clf_losses)
    if lm_coef > 0:
        loss = loss + lm_coef * tf.reduce_mean(lm_losses_)
    return loss
