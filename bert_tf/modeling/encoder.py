"""`BertEncoder`: embeddings, a stack of transformer blocks and the [CLS] pooler."""
from __future__ import annotations

from typing import Mapping

import keras
import tensorflow as tf

from bert_tf.modeling.attention import attention_mask_adder
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.embeddings import BertEmbeddings, truncated_normal
from bert_tf.modeling.transformer import BertTransformerBlock

# Input names follow the TF Hub BERT convention; the original's names are accepted too.
INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
_ORIGINAL_INPUT_NAMES = {"input_ids": "input_word_ids", "segment_ids": "input_type_ids"}


def canonical_inputs(inputs: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """Returns {input_word_ids, input_mask, input_type_ids} from TF Hub or original key names.

    `input_mask` defaults to all ones and `input_type_ids` to all zeros when absent.
    """
    out = {}
    for key, value in inputs.items():
        out[_ORIGINAL_INPUT_NAMES.get(key, key)] = value
    if "input_word_ids" not in out:
        raise KeyError(f"encoder inputs need 'input_word_ids' (or 'input_ids'); got {sorted(inputs)}")
    ids = tf.convert_to_tensor(out["input_word_ids"])
    out["input_word_ids"] = ids
    if out.get("input_mask") is None:
        out["input_mask"] = tf.ones_like(ids)
    if out.get("input_type_ids") is None:
        out["input_type_ids"] = tf.zeros_like(ids)
    return {name: out[name] for name in INPUT_NAMES}


class BertEncoder(keras.Model):
    """The BERT network without heads (`bert/` in the original checkpoint).

    Call with a dict of int32 [batch, seq_len] tensors `input_word_ids`, `input_mask`,
    `input_type_ids` (or the original's `input_ids`, `input_mask`, `segment_ids`). Returns a dict:
      `embedding_output` [batch, seq_len, H]: after embeddings, LayerNorm and dropout;
      `encoder_outputs`: list of L tensors [batch, seq_len, H], the output of every block;
      `sequence_output` [batch, seq_len, H]: the last block's output;
      `pooled_output` [batch, H]: tanh(dense(sequence_output[:, 0])) — the [CLS] vector;
      `attention_probs` (only with `return_attention_probs=True`): list of L [batch, N, seq, seq].
    """

    def __init__(self, config: BertConfig, **kwargs):
        kwargs.setdefault("name", "bert")
        super().__init__(**kwargs)
        self.config = config
        self.embeddings = BertEmbeddings(config, name="embeddings")
        self.blocks = [BertTransformerBlock(config, name=f"layer_{i}")
                       for i in range(config.num_hidden_layers)]
        self.pooler = keras.layers.Dense(config.hidden_size, activation="tanh",
                                         kernel_initializer=truncated_normal(config), name="pooler")

    def build(self, input_shape=None) -> None:
        h = (None, None, self.config.hidden_size)
        self.embeddings.build(None)
        for block in self.blocks:
            block.build(h)
        self.pooler.build((None, self.config.hidden_size))
        self.built = True

    def call(self, inputs: Mapping[str, tf.Tensor], training: bool | None = None,
             return_attention_probs: bool = False) -> dict:
        inputs = canonical_inputs(inputs)
        embedding_output = self.embeddings(inputs["input_word_ids"], inputs["input_type_ids"],
                                           training=training)
        mask_adder = attention_mask_adder(inputs["input_mask"], embedding_output.dtype)
        hidden = embedding_output
        encoder_outputs, probs = [], []
        for block in self.blocks:
            hidden = block(hidden, mask_adder, training=training,
                           return_probs=return_attention_probs)
            if return_attention_probs:
                hidden, p = hidden
                probs.append(p)
            encoder_outputs.append(hidden)
        pooled_output = self.pooler(hidden[:, 0])
        outputs = {
            "embedding_output": embedding_output,
            "encoder_outputs": encoder_outputs,
            "sequence_output": hidden,
            "pooled_output": pooled_output,
        }
        if return_attention_probs:
            outputs["attention_probs"] = probs
        return outputs

    @property
    def word_embeddings(self):
        """The word embedding table [vocab_size, H] (the MLM head's tied output weights)."""
        return self.embeddings.word_embeddings

    def build_from_config_shapes(self, seq_len: int = 2) -> "BertEncoder":
        """Creates every variable by running a tiny dummy batch; returns self."""
        ids = tf.zeros([1, seq_len], tf.int32)
        self({"input_word_ids": ids, "input_mask": ids + 1, "input_type_ids": ids})
        return self
