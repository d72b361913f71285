"""One post-LayerNorm transformer block, as the original `transformer_model` builds per layer."""
from __future__ import annotations

import keras
import tensorflow as tf

from bert_tf.modeling.activations import gelu, get_activation
from bert_tf.modeling.attention import BertSelfAttention
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling import lora
from bert_tf.modeling.dropout import BertDropout
from bert_tf.modeling.embeddings import apply_layer_norm, layer_norm, truncated_normal
from bert_tf.modeling.fused import bias_gelu, dropout_residual_layer_norm
from bert_tf.modeling.serialization import init_kwargs_from_saved, register


@register
class BertTransformerBlock(keras.layers.Layer):
    """Self-attention → dense → dropout → LayerNorm(+residual) → FFN → dropout → LayerNorm(+residual).

    Variables (original names under `bert/encoder/layer_<i>/`): `attention/self/{query,key,value}`,
    `attention/output/dense`, `attention/output/LayerNorm`, `intermediate/dense` [H, I],
    `output/dense` [I, H], `output/LayerNorm`.

    `xla_gelu_in_training=True`: when `training` is true, computes the FFN's bias + GELU with
    `fused.bias_gelu` and each bias + dropout + residual + LayerNorm with
    `fused.dropout_residual_layer_norm` (XLA kernels whose backward also gives the bias
    gradients; same masks, same values up to float rounding, fewer passes on CPU), and with
    the class attribute `fused_attention_softmax` also the attention's mask + softmax + dropout
    with `fused.attention_softmax_dropout` (off). Inference computes each LayerNorm with
    `embeddings.apply_layer_norm` (one oneDNN `_MklLayerNorm` kernel after grappler).
    """

    # The attention's mask + softmax + dropout as `fused.attention_softmax_dropout` while
    # training with `xla_gelu_in_training` (not saved). Off: on CPU, XLA's softmax over
    # [B, N, S, S] measured slower than oneDNN's (fwd + bwd of [32, 4, 128, 128]: 2.0x the
    # op-by-op time in float32, 1.27x in bfloat16; docs/performance.md).
    fused_attention_softmax = False

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
        fused = bool(training) and self.xla_gelu_in_training
        attended = self.attention(hidden_states, mask_adder, training=training,
                                  return_probs=return_probs,
                                  queries=None if query_positions is None else residual,
                                  fused=fused and self.fused_attention_softmax)
        if return_probs:
            attended, probs = attended
        attended = tf.reshape(attended, [-1, self.hidden_size])
        attention_output = self._dense_dropout_residual_layer_norm(
            attended, self.attention_output, flat_input, self.attention_dropout,
            self.attention_layer_norm, training, fused)
        activation = self.intermediate.activation
        if fused and activation is gelu:
            intermediate = bias_gelu(dense_2d(attention_output, self.intermediate, training,
                                              with_bias=False),
                                     self.intermediate.bias)
        else:
            intermediate = activation(dense_2d(attention_output, self.intermediate, training))
        layer_output = self._dense_dropout_residual_layer_norm(
            intermediate, self.output_dense, attention_output, self.output_dropout,
            self.output_layer_norm, training, fused)
        layer_output = tf.reshape(layer_output, shape)
        if return_probs:
            return layer_output, probs
        return layer_output

    @staticmethod
    def _dense_dropout_residual_layer_norm(x, dense, residual, dropout, norm, training, fused):
        """norm(dropout(dense(x)) + residual) for x [rows, in], residual [rows, H]; with `fused`,
        the bias add, dropout, residual sum and LayerNorm are the two XLA kernels of
        `dropout_residual_layer_norm` (same mask, same values up to rounding; the bias gradient
        from its backward kernel)."""
        if not fused:
            return apply_layer_norm(
                norm, dropout(dense_2d(x, dense, training), training=training) + residual,
                training)
        projected = dense_2d(x, dense, training, with_bias=False)
        return dropout_residual_layer_norm(projected, dropout.keep_mask(projected, training),
                                           residual, norm.gamma, norm.beta, norm.epsilon,
                                           bias=dense.bias, keep_scale=dropout.keep_scale)


def dense_2d(x: tf.Tensor, layer: keras.layers.Dense, training: bool | None = None,
             with_bias: bool = True) -> tf.Tensor:
    """x [rows, in] @ kernel [in, out] + bias, without the layer's activation: [rows, out].

    With LoRA adapter dropout while training, `lora.adapter_term` (the adapters on the
    dropped-out input) is added to the base matmul; otherwise the one matmul by `layer.kernel`
    (the adapted kernel under LoRA). `with_bias=False`: the bias is left to the caller (a fused
    kernel that adds it and gives its gradient)."""
    out = tf.matmul(x, tf.cast(lora.layer_kernel(layer, training), x.dtype))
    if with_bias:
        out = tf.nn.bias_add(out, tf.cast(layer.bias, x.dtype))
    adapter = lora.adapter_term(x, layer, training)
    return out if adapter is None else out + adapter
