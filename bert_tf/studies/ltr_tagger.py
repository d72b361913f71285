"""The left-to-right model on CoNLL-2003 NER (issue 33's "MLM > LTR on NER"): GPT-1's
`GptModel` with a token-classification head on every position, optionally with a randomly
initialised BiLSTM between the two (BERT Table 5's "+ BiLSTM" row). Neither paper tagged with
a left-to-right model; this gives it BERT's NER recipe (`cell_runs.finetune_ner`).

Inputs are BERT's NER windows (`bert_tf.tasks.ner.features`) with the special tokens swapped
for GPT's (`gpt_tagger_token_ids`): the positions are unchanged, so BERT's word-level
predictions (first WordPiece of each word) and conlleval score both models alike. Every
position sees only the tokens to its left: a word's label is decided without the words after
it, which is what the comparison measures.
"""
from __future__ import annotations

from typing import Any, Mapping

import keras
import numpy as np
import tensorflow as tf

from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.input_transforms import SpecialTokens
from bert_tf.gpt.model import GptModel
from bert_tf.studies.ltr_span_labeler import swap_bert_specials


def gpt_tagger_token_ids(input_word_ids: np.ndarray, input_mask: np.ndarray, cls_id: int,
                         sep_id: int, special: SpecialTokens) -> np.ndarray:
    """BERT's `[CLS] tokens [SEP] [PAD]...` NER windows as GPT's `_start_ tokens _classify_
    0...` (`ltr_span_labeler.swap_bert_specials` with one [SEP]).

    Args: input_word_ids int [N, S]; input_mask int [N, S]. Returns int32 [N, S].
    """
    return swap_bert_specials(input_word_ids, input_mask, cls_id, sep_id, special,
                              name="gpt_tagger_token_ids", seps=1)


class LtrTokenTagger(keras.Model):
    """GptModel (-> BiLSTM over its hidden states, padding masked) -> Dense(num_labels).

    Inputs: {"token_ids": int [B, S], "mask": float [B, S] (1 = real token)}.
    Outputs: {"logits": float [B, S, num_labels]} (`tasks.ner.scoring.ner_loss_fn`'s input).

    Args:
      config: the transformer's `GptConfig`.
      num_labels: the tag set's size.
      bilstm: a bidirectional LSTM (n_embd // 2 units per direction) between the transformer
        and the head (the right context BERT Table 5's "+ BiLSTM" row adds).
    """

    def __init__(self, config: GptConfig, num_labels: int, bilstm: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.transformer = GptModel(config, classifier=False, name="transformer")
        self.bilstm = keras.layers.Bidirectional(
            keras.layers.LSTM(max(1, config.n_embd // 2), return_sequences=True),
            name="bilstm") if bilstm else None
        self.dropout = keras.layers.Dropout(config.clf_pdrop)
        self.tagger = keras.layers.Dense(
            num_labels, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            name="tagger")

    def call(self, inputs: Mapping[str, Any], training: bool | None = None) -> dict:
        hidden = self.transformer({"token_ids": inputs["token_ids"]}, training=training,
                                  with_lm_logits=False)["hidden_states"]  # [B, S, n_embd]
        if self.bilstm is not None:
            mask = tf.cast(inputs["mask"], tf.float32) > 0.5  # [B, S]
            hidden = self.bilstm(hidden, mask=mask, training=training)
        return {"logits": self.tagger(self.dropout(hidden, training=training))}
