"""BERT Table 5's left-to-right models on SQuAD: GPT-1's `GptModel` with a span head (start and
end logits at every position), optionally with a randomly initialised BiLSTM between the two
("LTR & No NSP" and "+ BiLSTM"). GPT-1 itself was not evaluated on SQuAD; the BERT paper's LTR
model was, with BERT's own fine-tuning recipe.

Inputs are BERT's SQuAD windows (`bert_tf.tasks.squad.features`) with the special tokens
swapped for GPT's (`gpt_span_token_ids`): the positions of every window are the same, so BERT's
post-processing (n-best, max-context, answer text) and the official evaluation score both
models alike. Every position sees only what lies to its left, so a context token's logits see
the question (it comes first) and the context before it; the BiLSTM adds the right context.
"""
from __future__ import annotations

from typing import Any, Mapping

import keras
import numpy as np
import tensorflow as tf

from bert_tf.gpt import losses as gpt_losses
from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.input_transforms import SpecialTokens
from bert_tf.gpt.model import GptModel


def swap_bert_specials(input_word_ids: np.ndarray, input_mask: np.ndarray, cls_id: int,
                       sep_id: int, special: SpecialTokens, name: str = "gpt_span_token_ids",
                       seps: int = 2) -> np.ndarray:
    """BERT windows with their special tokens swapped for GPT's: [CLS] -> `_start_`; with two
    [SEP] (`[CLS] a [SEP] b [SEP]`) the first -> `_delimiter_`, the last -> `_classify_`; with
    one (`[CLS] a [SEP]`) it -> `_classify_`. WordPiece ids unchanged (GPT's vocabulary is
    BERT's in the studies).

    Args: input_word_ids int [N, S]; input_mask int [N, S]; `name` heads the errors.
    Returns int32 [N, S]. Raises ValueError for a window not starting with [CLS] or holding
    other than `seps` [SEP] among its real tokens.
    """
    ids = np.array(input_word_ids, dtype=np.int32, copy=True)
    if len(ids) and not np.all(ids[:, 0] == cls_id):
        raise ValueError(f"{name}: every window must start with [CLS]")
    ids[:, 0] = special.start
    for row, real in zip(ids, np.asarray(input_mask) > 0):
        found = np.flatnonzero((row == sep_id) & real)
        if len(found) != seps:
            raise ValueError(f"{name}: a window holds {len(found)} [SEP], expected {seps}")
        if seps == 2:
            row[found[0]] = special.delimiter
        row[found[-1]] = special.classify
    return ids


def gpt_span_token_ids(input_word_ids: np.ndarray, input_mask: np.ndarray, cls_id: int,
                       sep_id: int, special: SpecialTokens) -> np.ndarray:
    """BERT's `[CLS] question [SEP] context [SEP] [PAD]...` windows as GPT's
    `_start_ question _delimiter_ context _classify_ 0...` (`swap_bert_specials`).

    Args: input_word_ids int [N, S]; input_mask int [N, S]. Returns int32 [N, S].
    """
    return swap_bert_specials(input_word_ids, input_mask, cls_id, sep_id, special)


class LtrSpanLabeler(keras.Model):
    """GptModel (-> BiLSTM over its hidden states, padding masked) -> Dense(2) start/end logits.

    Inputs: {"token_ids": int [B, S], "mask": float [B, S] (1 = real token)}.
    Outputs: {"start_logits", "end_logits": float [B, S]} and, when `lm_coef` > 0,
    "lm_logits" [B, S-1, table rows] (the auxiliary LM loss, `compute_losses`).

    Args:
      config: the transformer's `GptConfig`.
      bilstm: put a bidirectional LSTM (n_embd // 2 units per direction, returning every
        position) between the transformer and the span head (BERT Table 5's "+ BiLSTM").
      lm_coef: weight of GPT-1's auxiliary LM loss (0 = none).
    """

    def __init__(self, config: GptConfig, bilstm: bool = False, lm_coef: float = 0.0,
                 **kwargs):
        super().__init__(**kwargs)
        self.config, self.lm_coef = config, float(lm_coef)
        self.transformer = GptModel(config, classifier=False, name="transformer")
        self.bilstm = keras.layers.Bidirectional(
            keras.layers.LSTM(max(1, config.n_embd // 2), return_sequences=True),
            name="bilstm") if bilstm else None
        self.span = keras.layers.Dense(
            2, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02), name="span")

    def call(self, inputs: Mapping[str, Any], training: bool | None = None) -> dict:
        out = self.transformer({"token_ids": inputs["token_ids"]}, training=training,
                               with_lm_logits=self.lm_coef > 0)
        hidden = out["hidden_states"]  # [B, S, n_embd]
        if self.bilstm is not None:
            mask = tf.cast(inputs["mask"], tf.float32) > 0.5  # [B, S]
            hidden = self.bilstm(hidden, mask=mask, training=training)  # [B, S, n_embd]
        logits = self.span(hidden)  # [B, S, 2]
        result = {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}
        if self.lm_coef > 0:
            result["lm_logits"] = out["lm_logits"]
        return result

    def compute_loss_value(self, outputs: Mapping[str, tf.Tensor], batch: Mapping[str, Any]
                           ) -> tf.Tensor:
        """BERT's SQuAD loss (mean of the start and end cross-entropies) plus `lm_coef` x the
        mean per-window LM loss over the real tokens (GPT-1's auxiliary objective)."""
        from bert_tf.tasks.squad.run import squad_loss

        loss = squad_loss(outputs["start_logits"], outputs["end_logits"],
                          batch["start_positions"], batch["end_positions"])
        if self.lm_coef > 0:
            token_losses = gpt_losses.lm_token_losses(outputs["lm_logits"], batch["token_ids"])
            loss = loss + self.lm_coef * tf.reduce_mean(
                gpt_losses.lm_losses(token_losses, batch["mask"]))
        return loss
