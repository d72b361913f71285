"""Heads on top of `BertEncoder`: pretraining (masked LM, next sentence) and fine-tuning heads.

Variable names in the original checkpoints: masked LM `cls/predictions/transform/dense`,
`cls/predictions/transform/LayerNorm`, `cls/predictions/output_bias` (weights tied to the word
embeddings); next sentence `cls/seq_relationship/output_{weights,bias}`; sequence classification
`output_{weights,bias}` (run_classifier.py); SQuAD spans `cls/squad/output_{weights,bias}`.
"""
from __future__ import annotations

import keras
import tensorflow as tf

from bert_tf.modeling.activations import get_activation
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.dropout import BertDropout
from bert_tf.modeling.embeddings import layer_norm, truncated_normal
from bert_tf.modeling.fused import widened_bias_add
from bert_tf.modeling.serialization import init_kwargs_from_saved, register


def gather_indexes(sequence_tensor: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    """Picks vectors at per-example positions.

    Args:
      sequence_tensor: [batch, seq_len, H].
      positions: int [batch, num_positions], indices into each example's own sequence.

    Returns:
      [batch * num_positions, H], batch-major (the original's layout).
    """
    gathered = tf.gather(sequence_tensor, tf.cast(positions, tf.int32), batch_dims=1)
    return tf.reshape(gathered, [-1, tf.shape(sequence_tensor)[-1]])


@register
class OutputProjection(keras.layers.Layer):
    """logits = x @ output_weights^T + output_bias, with weights stored [num_outputs, H] as the
    original stores them (not a Dense kernel [H, num_outputs])."""

    def __init__(self, num_outputs: int, hidden_size: int, initializer, **kwargs):
        super().__init__(**kwargs)
        self.num_outputs = num_outputs
        self.hidden_size = hidden_size
        self.initializer = keras.initializers.get(initializer)

    def get_config(self) -> dict:
        return {**super().get_config(), "num_outputs": self.num_outputs,
                "hidden_size": self.hidden_size,
                "initializer": keras.initializers.serialize(self.initializer)}

    def build(self, input_shape=None) -> None:
        self.output_weights = self.add_weight(name="output_weights",
                                              shape=(self.num_outputs, self.hidden_size),
                                              initializer=self.initializer)
        self.output_bias = self.add_weight(name="output_bias", shape=(self.num_outputs,),
                                           initializer="zeros")
        self.built = True

    def call(self, x: tf.Tensor) -> tf.Tensor:
        """x [..., H] -> logits [..., num_outputs]."""
        w = tf.cast(self.output_weights, x.dtype)
        flat = tf.reshape(x, [-1, self.hidden_size])
        logits = tf.nn.bias_add(tf.matmul(flat, w, transpose_b=True),
                                tf.cast(self.output_bias, x.dtype))
        return tf.reshape(logits, tf.concat([tf.shape(x)[:-1], [self.num_outputs]], axis=0))


@register
class MaskedLMHead(keras.layers.Layer):
    """Masked-LM head: transform (dense + activation + LayerNorm), then logits over the vocabulary
    with output weights tied to the word embedding table and a separate output bias.

    `embedding_table` is the encoder's `word_embeddings` variable [vocab_size, H] (not copied).
    It is not part of the Keras config: the owner (`BertPretrainer`) ties it when it builds.
    `xla_in_training`: under a 16-bit policy, widen the logits and add the bias with
    `fused.widened_bias_add` (XLA kernels) while training; the owner passes its
    `xla_gelu_in_training` (the pretraining trainer's fused kernels). Float32 is unaffected.
    """

    def __init__(self, config: BertConfig, embedding_table=None, xla_in_training: bool = False,
                 **kwargs):
        kwargs.setdefault("name", "predictions")
        super().__init__(**kwargs)
        self.config = config
        self.embedding_table = embedding_table
        self.xla_in_training = bool(xla_in_training)
        self.transform_dense = keras.layers.Dense(
            config.hidden_size, activation=get_activation(config.hidden_act),
            kernel_initializer=truncated_normal(config), name="transform_dense")
        self.transform_layer_norm = layer_norm("transform_LayerNorm")

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict(),
                "xla_in_training": self.xla_in_training}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))

    def _own_variables(self) -> list:
        """This layer's variables without the tied table (Keras tracks it here too, since it is
        an attribute; it is saved once, by the encoder that owns it)."""
        return [v for v in self._trainable_variables + self._non_trainable_variables
                if v is not self.embedding_table]

    def save_own_variables(self, store) -> None:
        for i, v in enumerate(self._own_variables()):
            store[f"{i}"] = v

    def load_own_variables(self, store) -> None:
        own = self._own_variables()
        if len(store.keys()) != len(own):
            raise ValueError(f"layer '{self.name}' has {len(own)} variables of its own; the file "
                             f"holds {len(store.keys())}")
        for i, v in enumerate(own):
            v.assign(store[f"{i}"])

    def build(self, input_shape=None) -> None:
        self.transform_dense.build((None, self.config.hidden_size))
        self.transform_layer_norm.build((None, self.config.hidden_size))
        # autocast=False: read in float32 under mixed precision too (added in float32, `call`).
        self.output_bias = self.add_weight(name="output_bias", shape=(self.config.vocab_size,),
                                           initializer="zeros", autocast=False)
        self.built = True

    def transform(self, sequence_output: tf.Tensor,
                  masked_lm_positions: tf.Tensor | None) -> tf.Tensor:
        """[batch, seq, H], int [batch, P] -> transformed vectors [batch * P, H]. With
        `masked_lm_positions=None`, `sequence_output` is already gathered: [batch, P, H]."""
        if masked_lm_positions is None:
            x = tf.reshape(sequence_output, [-1, self.config.hidden_size])
        else:
            x = gather_indexes(sequence_output, masked_lm_positions)
        dense = self.transform_dense
        x = tf.nn.bias_add(tf.matmul(x, tf.cast(dense.kernel, x.dtype)), tf.cast(dense.bias, x.dtype))
        return self.transform_layer_norm(dense.activation(x))

    def call(self, sequence_output: tf.Tensor,
             masked_lm_positions: tf.Tensor | None, training=None) -> tf.Tensor:
        """Args: sequence_output [batch, seq, H]; masked_lm_positions int [batch, P] (None when
        `sequence_output` already holds just those positions, [batch, P, H]).

        Returns: float32 logits [batch, P, vocab_size], under a 16-bit compute dtype (mixed
        precision) too: there the product is widened to float32 before the bias is added.
        """
        x = self.transform(sequence_output, masked_lm_positions)
        table = tf.cast(self.embedding_table, x.dtype)
        logits = tf.matmul(x, table, transpose_b=True)
        if logits.dtype != tf.float32:
            # Mixed precision: the losses widen the logits to float32 anyway, so widen them
            # before the bias. oneDNN's MatMul with a fused 16-bit bias over [rows, 30,522] took
            # 3.7x the product alone on an AMX host (docs/performance.md, 2026-11-30); the
            # product, the Cast and a float32 BiasAdd take less than half the fused kernel.
            # Training: the Cast and the BiasAdd (and, backward, the BiasAddGrad and the Cast)
            # as one XLA kernel each, the same float32 sums; inference keeps the plain ops.
            if training and self.xla_in_training:
                logits = widened_bias_add(logits, self.output_bias)
            else:
                logits = tf.nn.bias_add(tf.cast(logits, tf.float32), self.output_bias)
        else:
            # BiasAdd (not +): its gradient is one BiasAddGrad instead of a generic reduction
            # over [batch * P, vocab], and in float32 the forward fuses with the MatMul.
            logits = tf.nn.bias_add(logits, tf.cast(self.output_bias, logits.dtype))
        batch = tf.shape(sequence_output)[0]
        return tf.reshape(logits, [batch, -1, self.config.vocab_size])


@register
class NextSentenceHead(OutputProjection):
    """Next-sentence prediction: pooled [batch, H] -> logits [batch, 2] (0 = IsNext, 1 = random)."""

    def __init__(self, config: BertConfig, **kwargs):
        kwargs.setdefault("name", "seq_relationship")
        super().__init__(2, config.hidden_size, truncated_normal(config), **kwargs)
        self.config = config

    def get_config(self) -> dict:
        return {**keras.layers.Layer.get_config(self), "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))


class _DropoutProjection(keras.layers.Layer):
    """dropout(x [..., H]) -> logits [..., num_labels]: the classifier of run_classifier.py,
    applied to whatever vectors it is given (see the two heads below)."""

    def __init__(self, config: BertConfig, num_labels: int, dropout_rate: float = 0.1, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.num_labels = num_labels
        self.dropout = BertDropout(dropout_rate)
        self.projection = OutputProjection(num_labels, config.hidden_size,
                                           truncated_normal(config), name="output")

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict(),
                "num_labels": self.num_labels, "dropout_rate": self.dropout.rate}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))

    def build(self, input_shape=None) -> None:
        self.projection.build(None)
        self.built = True

    def call(self, inputs: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        return self.projection(self.dropout(inputs, training=training))


@register
class ClassificationHead(_DropoutProjection):
    """Sequence classification/regression on the pooled [CLS] vector (run_classifier.py).

    dropout(pooled [batch, H]) -> logits [batch, num_labels]; num_labels = 1 for regression.
    """

    def __init__(self, config: BertConfig, num_labels: int, dropout_rate: float = 0.1, **kwargs):
        kwargs.setdefault("name", "classifier")
        super().__init__(config, num_labels, dropout_rate, **kwargs)


@register
class SpanHead(keras.layers.Layer):
    """SQuAD span head: sequence [batch, seq, H] -> (start_logits, end_logits), each [batch, seq]."""

    def __init__(self, config: BertConfig, **kwargs):
        kwargs.setdefault("name", "squad")
        super().__init__(**kwargs)
        self.config = config
        self.projection = OutputProjection(2, config.hidden_size, truncated_normal(config),
                                           name="output")

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))

    def build(self, input_shape=None) -> None:
        self.projection.build(None)
        self.built = True

    def call(self, sequence_output: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        logits = self.projection(sequence_output)  # [B, S, 2]
        return logits[..., 0], logits[..., 1]


@register
class TokenClassificationHead(_DropoutProjection):
    """Per-token labels (NER): dropout(sequence [batch, seq, H]) -> logits [batch, seq, num_labels]."""

    def __init__(self, config: BertConfig, num_labels: int, dropout_rate: float = 0.1, **kwargs):
        kwargs.setdefault("name", "token_classifier")
        super().__init__(config, num_labels, dropout_rate, **kwargs)


@register
class MultipleChoiceHead(keras.layers.Layer):
    """SWAG-style multiple choice: one score per choice from its pooled [CLS] vector.

    pooled [batch * num_choices, H] -> logits [batch, num_choices].
    """

    def __init__(self, config: BertConfig, num_choices: int, dropout_rate: float = 0.1, **kwargs):
        kwargs.setdefault("name", "multiple_choice")
        super().__init__(**kwargs)
        self.config = config
        self.num_choices = num_choices
        self.dropout = BertDropout(dropout_rate)
        self.projection = OutputProjection(1, config.hidden_size, truncated_normal(config),
                                           name="output")

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict(),
                "num_choices": self.num_choices, "dropout_rate": self.dropout.rate}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))

    def build(self, input_shape=None) -> None:
        self.projection.build(None)
        self.built = True

    def call(self, pooled_output: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        scores = self.projection(self.dropout(pooled_output, training=training))
        return tf.reshape(scores, [-1, self.num_choices])
