"""BERT Table 5's "LTR + BiLSTM": a left-to-right transformer (GPT-1's `GptModel`, pretrained)
with a randomly initialised bidirectional LSTM on top, added for fine-tuning only."""
from __future__ import annotations

from typing import Any, Mapping

import keras
import tensorflow as tf

from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.dropout import GptDropout
from bert_tf.gpt.model import GptModel


class LtrBiLstmClassifier(keras.Model):
    """GptModel -> BiLSTM over its hidden states (padding masked) -> dense logits.

    Inputs: {"token_ids": int [B, S], "mask": float [B, S] (1 = real token)}.
    Outputs: {"logits": float [B, num_classes]}; the LSTM's final states of both directions
    (hidden size n_embd // 2 each, so the pooled vector is [B, n_embd]) feed the dense layer.
    """

    def __init__(self, config: GptConfig, num_classes: int, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.transformer = GptModel(config, classifier=False, name="transformer")
        self.bilstm = keras.layers.Bidirectional(
            keras.layers.LSTM(max(1, config.n_embd // 2)), name="bilstm")
        self.dropout = GptDropout(config.clf_pdrop)
        self.classifier = keras.layers.Dense(
            num_classes, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            name="clf")

    def call(self, inputs: Mapping[str, Any], training: bool | None = None) -> dict:
        hidden = self.transformer({"token_ids": inputs["token_ids"]}, training=training,
                                  with_lm_logits=False)["hidden_states"]  # [B, S, n_embd]
        mask = tf.cast(inputs["mask"], tf.float32) > 0.5  # [B, S]
        pooled = self.bilstm(hidden, mask=mask, training=training)  # [B, n_embd]
        return {"logits": self.classifier(self.dropout(pooled, training=training))}
