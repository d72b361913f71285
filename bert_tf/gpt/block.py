"""One post-LayerNorm decoder block as train.py's `block` and `mlp`."""
from __future__ import annotations

import keras
import tensorflow as tf

from bert_tf.gpt.attention import GptAttention
from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.dropout import GptDropout
from bert_tf.gpt.layers import GptConv1D, GptLayerNorm
from bert_tf.modeling.activations import gelu, get_activation
from bert_tf.modeling.fused import bias_gelu, dropout_residual_layer_norm


@keras.saving.register_keras_serializable(package="bert_tf")
class GptMlp(keras.layers.Layer):
    """train.py's `mlp`: `c_proj(afn(c_fc(x)))`, then `resid_pdrop` dropout.

    Variables (under `h<l>/mlp/`): `c_fc/w` [1, n_embd, 4·n_embd], `c_fc/b`, `c_proj/w`
    [1, 4·n_embd, n_embd], `c_proj/b`. Input/output float [N, S, n_embd].

    Computed on [N·S, ·] matrices as MatMul -> BiasAdd (-> activation), the pattern TensorFlow's
    CPU graph optimizer fuses; while training, c_fc's bias + "gelu" runs as two XLA-compiled
    kernels (`bert_tf.modeling.fused.bias_gelu`: forward, backward with the bias gradient; the
    same function up to float rounding), as BERT's FFN.
    """

    def __init__(self, config: GptConfig | dict, **kwargs):
        super().__init__(**kwargs)
        self.config = config if isinstance(config, GptConfig) else GptConfig.from_dict(config)
        c = self.config
        self.c_fc = GptConv1D(4 * c.n_embd, c.n_embd, name="c_fc")
        self.c_proj = GptConv1D(c.n_embd, 4 * c.n_embd, name="c_proj")
        # bert_tf's activations: "gelu" is the tanh approximation, "swish" is x·sigmoid(x).
        self.activation = get_activation(c.afn)
        self.resid_dropout = GptDropout(c.resid_pdrop, name="mlp_resid_dropout")

    def build(self, input_shape=None) -> None:
        self.c_fc.build()
        self.c_proj.build()
        self.built = True

    def call(self, x: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        return self.resid_dropout(self.project(x, training=training), training=training)

    def project(self, x: tf.Tensor, training: bool | None = None,
                with_bias: bool = True) -> tf.Tensor:
        """`call` without the residual dropout: c_proj's output float [N, S, n_embd]
        (`with_bias=False`: without c_proj's bias, flattened [N·S, n_embd], for a fused kernel
        that adds it). While training, "gelu" is c_fc's bias + GELU as `fused.bias_gelu`."""
        flat = tf.reshape(x, [-1, self.config.n_embd])
        if training and self.activation is gelu:
            hidden = bias_gelu(self.c_fc.matmul_2d(flat, with_bias=False), self.c_fc.b)
        else:
            hidden = self.activation(self.c_fc.matmul_2d(flat))
        out = self.c_proj.matmul_2d(hidden, with_bias=with_bias)
        return tf.reshape(out, tf.shape(x)) if with_bias else out

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package="bert_tf")
class GptBlock(keras.layers.Layer):
    """`n = LN_1(x + attn(x))`, `h = LN_2(n + mlp(n))` (post-LN; LN epsilon 1e-5).

    Variables, in the original's creation order: `attn/c_attn/{w,b}`, `attn/c_proj/{w,b}`,
    `ln_1/{g,b}`, `mlp/c_fc/{w,b}`, `mlp/c_proj/{w,b}`, `ln_2/{g,b}`.
    """

    def __init__(self, config: GptConfig | dict, **kwargs):
        super().__init__(**kwargs)
        self.config = config if isinstance(config, GptConfig) else GptConfig.from_dict(config)
        c = self.config
        self.attn = GptAttention(c, name="attn")
        self.ln_1 = GptLayerNorm(c.n_embd, name="ln_1")
        self.mlp = GptMlp(c, name="mlp")
        self.ln_2 = GptLayerNorm(c.n_embd, name="ln_2")

    def build(self, input_shape=None) -> None:
        for layer in (self.attn, self.ln_1, self.mlp, self.ln_2):
            layer.build()
        self.built = True

    def original_variables(self) -> list[tuple[str, keras.Variable]]:
        """(name relative to `h<l>/`, variable) in the original's creation order."""
        return [("attn/c_attn/w", self.attn.c_attn.w), ("attn/c_attn/b", self.attn.c_attn.b),
                ("attn/c_proj/w", self.attn.c_proj.w), ("attn/c_proj/b", self.attn.c_proj.b),
                ("ln_1/g", self.ln_1.g), ("ln_1/b", self.ln_1.b),
                ("mlp/c_fc/w", self.mlp.c_fc.w), ("mlp/c_fc/b", self.mlp.c_fc.b),
                ("mlp/c_proj/w", self.mlp.c_proj.w), ("mlp/c_proj/b", self.mlp.c_proj.b),
                ("ln_2/g", self.ln_2.g), ("ln_2/b", self.ln_2.b)]

    def call(self, x: tf.Tensor, training: bool | None = None, return_probs: bool = False):
        """Args: x float [N, S, n_embd]. Returns h [N, S, n_embd] (and the attention
        probabilities [N, n_head, S, S] with `return_probs`).

        While training (unless a test injects the residual dropouts' masks), each
        `ln(residual + dropout(sublayer + bias))` runs as the two XLA kernels of
        `bert_tf.modeling.fused.dropout_residual_layer_norm` (the dropout layer's own mask; same
        values up to float rounding) and the MLP's bias + GELU as `fused.bias_gelu` (the
        attention's softmax + dropout as `fused.attention_softmax_dropout` only with
        `GptAttention.fused_attention_softmax`, off)."""
        fused = bool(training) and not (self.attn.resid_dropout.has_injected_mask
                                        or self.mlp.resid_dropout.has_injected_mask)
        if not fused:
            a = self.attn(x, training=training, return_probs=return_probs)
            if return_probs:
                a, probs = a
            n = self.ln_1(x + a)
            h = self.ln_2(n + self.mlp(n, training=training))
            return (h, probs) if return_probs else h
        a = self.attn.project(x, training=training, return_probs=return_probs, fused=True,
                              with_bias=False)
        if return_probs:
            a, probs = a
        n = _fused_ln(a, self.attn.c_proj.b, self.attn.resid_dropout, x, self.ln_1)
        h = _fused_ln(self.mlp.project(n, training=True, with_bias=False), self.mlp.c_proj.b,
                      self.mlp.resid_dropout, n, self.ln_2)
        return (h, probs) if return_probs else h

    def call_cached(self, x: tf.Tensor, cache: tuple[tf.Tensor, tf.Tensor],
                    index: tf.Tensor) -> tuple[tf.Tensor, tuple[tf.Tensor, tf.Tensor]]:
        """`call` in eval mode for positions index..index+T-1 of x float [N, T, n_embd], with
        this block's key/value cache (keys, values: each [N·n_head, C, head_size];
        `GptAttention.call_cached`). Returns (h [N, T, n_embd], the updated cache)."""
        a, cache = self.attn.call_cached(x, cache, index)
        n = self.ln_1(x + a)
        return self.ln_2(n + self.mlp(n, training=False)), cache

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict()}


def _fused_ln(y: tf.Tensor, bias: tf.Tensor, dropout: GptDropout, residual: tf.Tensor,
              norm: GptLayerNorm) -> tf.Tensor:
    """norm(residual + dropout(y + bias)) for y [N·S, n_embd] (a conv1d's matmul output without
    its bias), residual [N, S, n_embd]: the bias add, the dropout layer's mask (drawn for
    [N, S, n_embd], as its `call` draws it) and the LayerNorm inside the fused XLA kernels,
    whose backward gives the bias gradient too. Returns residual's shape."""
    keep = dropout.keep_mask(residual, training=True)  # the sublayer output's shape
    out = dropout_residual_layer_norm(y, keep, residual, norm.g,
                                      norm.b, norm.epsilon, bias=bias,
                                      keep_scale=dropout.keep_scale)
    return tf.reshape(out, tf.shape(residual))
