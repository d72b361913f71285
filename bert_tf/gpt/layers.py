"""The original's two elementary layers: `conv1d` (a width-1 convolution computed as a matmul)
and `norm` (LayerNorm with epsilon 1e-5 and parameters `g`, `b`)."""
from __future__ import annotations

import keras
import tensorflow as tf

# train.py's `_norm(x, g, b, e=1e-5)`.
LAYER_NORM_EPSILON = 1e-5


@keras.saving.register_keras_serializable(package="bert_tf")
class GptConv1D(keras.layers.Layer):
    """train.py's `conv1d(x, scope, nf, rf=1)`: `x @ w + b` with `w` stored as [1, nx, nf].

    Variables: `w` [1, nx, nf] (N(0, 0.02²) init), `b` [nf] (zeros), the original's shapes so that
    the original parameter files load without reshaping and the optimizer's "rank > 1 gets L2"
    rule sees the same ranks.

    Input float [..., nx]; output float [..., nf].

    LoRA (`bert_tf.modeling.lora`, as Keras' `Dense.enable_lora`): `enable_lora(rank,
    lora_alpha)` adds `lora_a` [nx, r] and `lora_b` [r, nf] (zeros), freezes `w`, and the layer
    multiplies by `kernel` = w + alpha/r · A @ B (reshaped [1, nx, nf]). Without it, `w` itself.
    """

    supports_lora = True
    """`bert_tf.modeling.lora` may adapt this layer (it is not a Keras Dense)."""

    def __init__(self, nf: int, nx: int, **kwargs):
        super().__init__(**kwargs)
        self.nf, self.nx = int(nf), int(nx)
        self.lora_enabled = False
        self.lora_rank = None
        self.lora_alpha = None

    @property
    def _kernel(self):
        """The base weight `w` [1, nx, nf] (the name `bert_tf.modeling.lora` reads)."""
        return self.w

    @property
    def kernel(self):
        """w [1, nx, nf], plus alpha/r · A @ B when LoRA is enabled."""
        if not self.lora_enabled:
            return self.w
        delta = tf.matmul(self.lora_kernel_a, self.lora_kernel_b) * (
            float(self.lora_alpha) / float(self.lora_rank))
        return self.w + tf.reshape(tf.cast(delta, self.w.dtype), [1, self.nx, self.nf])

    def enable_lora(self, rank: int, lora_alpha: float | None = None,
                    a_initializer="he_uniform", b_initializer="zeros") -> None:
        """Adds rank-`rank` adapters (variables `lora_a` [nx, r], `lora_b` [r, nf]) and freezes
        `w`, as Keras' `Dense.enable_lora`."""
        if self.lora_enabled:
            raise ValueError(f"LoRA is already enabled on {self.path}")
        self._tracker.unlock()
        self.lora_kernel_a = self.add_weight(name="lora_a", shape=(self.nx, rank),
                                             initializer=keras.initializers.get(a_initializer))
        self.lora_kernel_b = self.add_weight(name="lora_b", shape=(rank, self.nf),
                                             initializer=keras.initializers.get(b_initializer))
        self._tracker.lock()
        self.w.trainable = False
        self.lora_enabled = True
        self.lora_rank = int(rank)
        self.lora_alpha = lora_alpha if lora_alpha is not None else int(rank)

    def build(self, input_shape=None) -> None:
        self.w = self.add_weight(name="w", shape=(1, self.nx, self.nf),
                                 initializer=keras.initializers.RandomNormal(stddev=0.02))
        self.b = self.add_weight(name="b", shape=(self.nf,), initializer="zeros")
        self.built = True

    def call(self, x: tf.Tensor) -> tf.Tensor:
        if x.shape.rank == 2:
            return self.matmul_2d(x)
        out = self.matmul_2d(tf.reshape(x, [-1, self.nx]))
        return tf.reshape(out, tf.concat([tf.shape(x)[:-1], [self.nf]], axis=0))

    def matmul_2d(self, x: tf.Tensor, with_bias: bool = True) -> tf.Tensor:
        """x [rows, nx] @ w [nx, nf] + b -> [rows, nf], as MatMul -> BiasAdd: the pattern
        TensorFlow's CPU graph optimizer fuses (with a following GELU) into one oneDNN kernel
        (a reshape between them prevents it). `with_bias=False`: x @ w only (a fused kernel
        adds `b` and gives its gradient)."""
        w = tf.reshape(tf.cast(self.kernel, x.dtype), [self.nx, self.nf])
        out = tf.matmul(x, w)
        return tf.nn.bias_add(out, tf.cast(self.b, x.dtype)) if with_bias else out

    def get_config(self) -> dict:
        return {**super().get_config(), "nf": self.nf, "nx": self.nx}


@keras.saving.register_keras_serializable(package="bert_tf")
class GptLayerNorm(keras.layers.Layer):
    """train.py's `norm`: `(x - mean) * rsqrt(biased_var + 1e-5) * g + b` over the last axis.

    Variables: `g` [n] (ones), `b` [n] (zeros) — the original's names (Keras' LayerNormalization
    would call them gamma/beta). Input/output float [..., n].
    """

    def __init__(self, n_state: int, epsilon: float = LAYER_NORM_EPSILON, **kwargs):
        super().__init__(**kwargs)
        self.n_state, self.epsilon = int(n_state), float(epsilon)

    def build(self, input_shape=None) -> None:
        # autocast=False: read in float32 under a 16-bit policy, as Keras' LayerNormalization.
        self.g = self.add_weight(name="g", shape=(self.n_state,), initializer="ones",
                                 autocast=False)
        self.b = self.add_weight(name="b", shape=(self.n_state,), initializer="zeros",
                                 autocast=False)
        self.built = True

    def call(self, x: tf.Tensor) -> tf.Tensor:
        dtype = x.dtype
        x = tf.cast(x, tf.float32)  # statistics in float32 under a 16-bit policy; no-op otherwise
        u = tf.reduce_mean(x, axis=-1, keepdims=True)
        s = tf.reduce_mean(tf.square(x - u), axis=-1, keepdims=True)
        x = (x - u) * tf.math.rsqrt(s + self.epsilon)
        return tf.cast(x * tf.cast(self.g, tf.float32) + tf.cast(self.b, tf.float32), dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "n_state": self.n_state, "epsilon": self.epsilon}
