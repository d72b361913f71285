"""The pretraining objective and one training step: loss = mean masked-LM + mean next-sentence."""
from __future__ import annotations

from typing import Mapping

import tensorflow as tf

from bert_tf.modeling import BertPretrainer, masked_lm_loss, next_sentence_loss
from bert_tf.training.optimization import clip_by_global_norm


def pretraining_losses(model: BertPretrainer, batch: Mapping[str, tf.Tensor],
                       training: bool) -> dict[str, tf.Tensor]:
    """Forward pass and the original losses.

    Args:
      model: a `BertPretrainer`.
      batch: the pretraining features (`input_ids`, `input_mask`, `segment_ids`,
        `masked_lm_positions`, `masked_lm_ids`, `masked_lm_weights`, `next_sentence_labels`).
      training: dropout on/off.

    Returns: {"loss", "masked_lm_loss", "next_sentence_loss"} scalars plus
      "masked_lm_log_probs" [batch·P, vocab] and "next_sentence_log_probs" [batch, 2].
    """
    out = model(batch, training=training)
    mlm, _, mlm_lp = masked_lm_loss(out["masked_lm_logits"], batch["masked_lm_ids"],
                                    batch["masked_lm_weights"])
    nsp, _, nsp_lp = next_sentence_loss(out["next_sentence_logits"], batch["next_sentence_labels"])
    return {"loss": mlm + nsp, "masked_lm_loss": mlm, "next_sentence_loss": nsp,
            "masked_lm_log_probs": mlm_lp, "next_sentence_log_probs": nsp_lp}


def train_step(model: BertPretrainer, optimizer, batch: Mapping[str, tf.Tensor],
               clip_norm: float = 1.0) -> dict[str, tf.Tensor]:
    """One update as the original: gradients of the total loss, clip by global norm, apply.

    The learning rate is the schedule at the optimizer's iteration count before this update.
    Returns the losses (before the update), "learning_rate" and "grad_norm" (before clipping).
    """
    learning_rate = optimizer.learning_rate  # evaluated at the pre-update iteration count
    with tf.GradientTape() as tape:
        losses = pretraining_losses(model, batch, training=True)
    variables = model.trainable_variables
    grads = tape.gradient(losses["loss"], variables)
    clipped, norm = clip_by_global_norm(grads, clip_norm)
    optimizer.apply_gradients(zip(clipped, variables))
    return {"loss": losses["loss"], "masked_lm_loss": losses["masked_lm_loss"],
            "next_sentence_loss": losses["next_sentence_loss"],
            "learning_rate": tf.convert_to_tensor(learning_rate), "grad_norm": norm}
