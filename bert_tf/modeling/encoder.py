"""`BertEncoder`: embeddings, a stack of transformer blocks and the [CLS] pooler."""
from __future__ import annotations

from typing import Mapping

import keras
import tensorflow as tf

from bert_tf.modeling.attention import attention_mask_adder
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.embeddings import BertEmbeddings, truncated_normal
from bert_tf.modeling.serialization import DummyBatchBuilt, init_kwargs_from_saved, register
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


@register
class BertEncoder(DummyBatchBuilt, keras.Model):
    """The BERT network without heads (`bert/` in the original checkpoint).

    Call with a dict of int32 [batch, seq_len] tensors `input_word_ids`, `input_mask`,
    `input_type_ids` (or the original's `input_ids`, `input_mask`, `segment_ids`). Returns a dict:
      `embedding_output` [batch, seq_len, H]: after embeddings, LayerNorm and dropout;
      `encoder_outputs`: list of L tensors [batch, seq_len, H], the output of every block;
      `sequence_output` [batch, seq_len, H]: the last block's output;
      `pooled_output` [batch, H]: tanh(dense(sequence_output[:, 0])) — the [CLS] vector;
      `attention_probs` (only with `return_attention_probs=True`): list of L [batch, N, seq, seq].

    With `output_positions` (int [batch, P]) the last block is computed only at [CLS] and those
    positions (pretraining needs nothing else): the outputs are then `embedding_output`,
    `encoder_outputs` (the first L-1 blocks), `pooled_output`, and `sequence_output_at_positions`
    [batch, P, H], equal to gathering the full `sequence_output` at `output_positions` (up to
    float rounding; dropout draws differ). The last block's cost falls by about 1 - (P+1)/seq.

    `xla_gelu_in_training=True`: with `training=True`, every block's FFN GELU runs as two
    XLA-compiled elementwise kernels (`activations.gelu_xla`; same values up to rounding). Off by
    default so that exported training functions hold no XLA; the pretraining trainer turns it on.
    """

    def __init__(self, config: BertConfig, xla_gelu_in_training: bool = False, **kwargs):
        kwargs.setdefault("name", "bert")
        super().__init__(**kwargs)
        self.config = config
        self.xla_gelu_in_training = xla_gelu_in_training
        self.embeddings = BertEmbeddings(config, name="embeddings")
        self.blocks = [BertTransformerBlock(config, xla_gelu_in_training=xla_gelu_in_training,
                                            name=f"layer_{i}")
                       for i in range(config.num_hidden_layers)]
        self.pooler = keras.layers.Dense(config.hidden_size, activation="tanh",
                                         kernel_initializer=truncated_normal(config), name="pooler")

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict(),
                "xla_gelu_in_training": self.xla_gelu_in_training}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))

    def build(self, input_shape=None) -> None:
        h = (None, None, self.config.hidden_size)
        self.embeddings.build(None)
        for block in self.blocks:
            block.build(h)
        self.pooler.build((None, self.config.hidden_size))
        self.built = True

    def call(self, inputs: Mapping[str, tf.Tensor], training: bool | None = None,
             return_attention_probs: bool = False,
             output_positions: tf.Tensor | None = None) -> dict:
        inputs = canonical_inputs(inputs)
        embedding_output = self.embeddings(inputs["input_word_ids"], inputs["input_type_ids"],
                                           training=training)
        mask_adder = attention_mask_adder(inputs["input_mask"], embedding_output.dtype)
        hidden = embedding_output
        encoder_outputs, probs = [], []
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            query_positions = None
            if output_positions is not None and i == last:
                # [CLS] (for the pooler) followed by the requested positions.
                positions = tf.cast(output_positions, tf.int32)
                query_positions = tf.concat([tf.zeros_like(positions[:, :1]), positions], axis=1)
            hidden = block(hidden, mask_adder, training=training,
                           return_probs=return_attention_probs, query_positions=query_positions)
            if return_attention_probs:
                hidden, p = hidden
                probs.append(p)
            if query_positions is None:
                encoder_outputs.append(hidden)
        pooled_output = self.pooler(hidden[:, 0])
        outputs = {
            "embedding_output": embedding_output,
            "encoder_outputs": encoder_outputs,
            "pooled_output": pooled_output,
        }
        if output_positions is None:
            outputs["sequence_output"] = hidden
        else:
            outputs["sequence_output_at_positions"] = hidden[:, 1:]
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
