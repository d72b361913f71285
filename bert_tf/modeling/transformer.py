"""One post-LayerNorm transformer block, as the original `transformer_model` builds per layer."""
from __future__ import annotations

import keras
import tensorflow as tf

from bert_tf.modeling.activations import gelu, gelu_xla, get_activation
from bert_tf.modeling.attention import BertSelfAttention
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling import lora
from bert_tf.modeling.dropout import BertDropout
from bert_tf.modeling.embeddings import layer_norm, truncated_normal
from bert_tf.modeling.fused import dropout_residual_layer_norm
from bert_tf.modeling.serialization import init_kwargs_from_saved, register


@register
class BertTransformerBlock(keras.layers.Layer):
    """Self-attention → dense → dropout → LayerNorm(+residual) → FFN → dropout → LayerNorm(+residual).

    Variables (original names under `bert/encoder/layer_<i>/`): `attention/self/{query,key,value}`,
    `attention/output/dense`, `attention/output/LayerNorm`, `intermediate/dense` [H, I],
    `output/dense` [I, H], `output/LayerNorm`.

    `xla_gelu_in_training=True`: when `training` is true, computes the FFN's GELU with `gelu_xla`
    and each dropout + residual + LayerNorm with `fused.dropout_residual_layer_norm` (XLA kernels;
    same masks, same values up to float rounding, fewer passes on CPU); inference always uses the
    plain op pattern.
    """

    def __init__(self, config: BertConfig, xla_gelu_in_training: bool = False, **kwargs):
        super().__init__(**kwargs)
        init = truncated_normal(config)
        self.config = config
        self.xla_gelu_in_training = xla_gelu_in_training
        self.hidden_size = config.hidden_size
        self.attention = BertSelfAttention(config, name="self")
        self.attention_output = keras.layers.Dense(config.hidden_size, kernel_initializer=init,
                                                   name="attention_output_dense")
        self.attention_dropout = BertDropout(config.hidden_dropout_prob)
        self.attention_layer_norm = layer_norm("attention_output_LayerNorm")
        self.intermediate = keras.layers.Dense(
            config.intermediate_size, activation=get_activation(config.hidden_act),
            kernel_initializer=init, name="intermediate_dense")
        self.output_dense = keras.layers.Dense(config.hidden_size, kernel_initializer=init,
                                               name="output_dense")
        self.output_dropout = BertDropout(config.hidden_dropout_prob)
        self.output_layer_norm = layer_norm("output_LayerNorm")

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict(),
                "xla_gelu_in_training": self.xla_gelu_in_training}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))

    def build(self, input_shape) -> None:
        h = (None, None, self.hidden_size)
        self.attention.build(h)
        self.attention_output.build(h)
        self.attention_layer_norm.build(h)
        self.intermediate.build(h)
        self.output_dense.build((None, None, self.intermediate.units))
        self.output_layer_norm.build(h)
        self.built = True

    def call(self, hidden_states: tf.Tensor, mask_adder: tf.Tensor, training: bool | None = None,
             return_probs: bool = False, query_positions: tf.Tensor | None = None):
        """Args: hidden_states float [batch, seq, H]; mask_adder [batch, 1, 1, seq];
        query_positions: optional int [batch, Q], compute the block's output only at these
        positions (attention still reads every position; rows equal the full block's rows).

        Returns: float [batch, seq, H] ([batch, Q, H] with `query_positions`), and attention probs
        [batch, N, seq or Q, seq] if `return_probs`.

        Works on [batch * seq, H] matrices inside, as the original does, with each dense layer
        written as MatMul → BiasAdd (→ GELU): the pattern TensorFlow's CPU graph optimizer fuses
        into one oneDNN kernel (a reshape between them, as Keras' 3-D `Dense` has, prevents it).
        """
        if query_positions is None:
            residual = hidden_states
        else:
            residual = tf.gather(hidden_states, tf.cast(query_positions, tf.int32), batch_dims=1)
        shape = tf.shape(residual)
        flat_input = tf.reshape(residual, [-1, self.hidden_size])
        attended = self.attention(hidden_states, mask_adder, training=training,
                                  return_probs=return_probs,
                                  queries=None if query_positions is None else residual)
        if return_probs:
            attended, probs = attended
        attended = tf.reshape(attended, [-1, self.hidden_size])
        fused = bool(training) and self.xla_gelu_in_training
        projected = dense_2d(attended, self.attention_output, training)
        attention_output = self._dropout_residual_layer_norm(
            projected, flat_input, self.attention_dropout, self.attention_layer_norm, training,
            fused)
        activation = self.intermediate.activation
        if fused and activation is gelu:
            activation = gelu_xla
        intermediate = activation(dense_2d(attention_output, self.intermediate, training))
        projected = dense_2d(intermediate, self.output_dense, training)
        layer_output = self._dropout_residual_layer_norm(
            projected, attention_output, self.output_dropout, self.output_layer_norm, training,
            fused)
        layer_output = tf.reshape(layer_output, shape)
        if return_probs:
            return layer_output, probs
        return layer_output

    @staticmethod
    def _dropout_residual_layer_norm(x, residual, dropout, norm, training, fused):
        """norm(dropout(x) + residual) for x, residual [rows, H]; with `fused`, as the two XLA
        kernels of `dropout_residual_layer_norm` (same mask, same values up to rounding)."""
        if not fused:
            return norm(dropout(x, training=training) + residual)
        return dropout_residual_layer_norm(x, dropout.scale_mask(x, training), residual,
                                           norm.gamma, norm.beta, norm.epsilon)


def dense_2d(x: tf.Tensor, layer: keras.layers.Dense, training: bool | None = None
             ) -> tf.Tensor:
    """x [rows, in] @ kernel [in, out] + bias, without the layer's activation: [rows, out].

    With LoRA adapter dropout while training, `lora.adapter_term` (the adapters on the
    dropped-out input) is added to the base matmul; otherwise the one matmul by `layer.kernel`
    (the adapted kernel under LoRA)."""
    out = tf.nn.bias_add(tf.matmul(x, tf.cast(lora.layer_kernel(layer, training), x.dtype)),
                         tf.cast(layer.bias, x.dtype))
    adapter = lora.adapter_term(x, layer, training)
    return out if adapter is None else out + adapter
