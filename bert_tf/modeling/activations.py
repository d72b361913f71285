"""Activations named in `bert_config.json` (`hidden_act`)."""
from __future__ import annotations

import math
from typing import Callable

import tensorflow as tf

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715


def gelu(x: tf.Tensor) -> tf.Tensor:
    """GELU, tanh approximation, as the original `modeling.gelu` at HEAD.

    0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))). Any shape; same dtype out.
    Computed by `tf.nn.gelu(approximate=True)` — the same formula (equal to the original's up to
    float rounding) in the op pattern that TensorFlow's graph optimizer fuses with the preceding
    MatMul + BiasAdd into one oneDNN kernel on CPU.
    """
    return tf.nn.gelu(tf.convert_to_tensor(x), approximate=True)


@tf.function(jit_compile=True, autograph=False)
def _gelu_forward_xla(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    t = tf.tanh(_SQRT_2_OVER_PI * (x + _CUBIC * x * x * x))
    return 0.5 * x * (1.0 + t), t


@tf.function(jit_compile=True, autograph=False)
def _gelu_backward_xla(dy: tf.Tensor, x: tf.Tensor, t: tf.Tensor) -> tf.Tensor:
    # d/dx 0.5·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³)
    du_dx = _SQRT_2_OVER_PI * (1.0 + 3.0 * _CUBIC * x * x)
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx)


def gelu_xla(x: tf.Tensor) -> tf.Tensor:
    """`gelu` (tanh form) for training: forward and backward each one XLA-compiled elementwise
    kernel, instead of ~20 separate passes over the tensor (about 2x faster on a CPU for a
    [4096, 1024] FFN activation, forward + backward). Same values as `gelu` up to float rounding
    (~1e-6). Inference keeps `gelu`, which TensorFlow fuses into the preceding MatMul and which
    needs no XLA in an exported graph.

    16-bit inputs are computed in float32 (widened and narrowed by TensorFlow's Cast: XLA's CPU
    code reads and writes bfloat16 slowly; [4096, 1024] bf16 forward + backward 8.2 -> 6.8 ms),
    the result rounded once to the input's dtype.
    """
    x = tf.convert_to_tensor(x)
    with tf.name_scope("gelu_xla"):  # names the XLA call ops (bench/profile_train_step.py)
        if x.dtype in (tf.bfloat16, tf.float16):
            return tf.cast(_gelu_xla(tf.cast(x, tf.float32)), x.dtype)
        return _gelu_xla(x)


@tf.custom_gradient
def _gelu_xla(x: tf.Tensor):
    y, t = _gelu_forward_xla(x)

    def grad(dy):
        with tf.name_scope("gelu_xla_grad"):
            return _gelu_backward_xla(dy, x, t)

    return y, grad


def gelu_exact(x: tf.Tensor) -> tf.Tensor:
    """GELU with the exact Gaussian CDF (erf form): the first BERT release and Hugging Face "gelu"."""
    return tf.nn.gelu(x, approximate=False)


def linear(x: tf.Tensor) -> tf.Tensor:
    """Identity."""
    return x


_ACTIVATIONS: dict[str, Callable[[tf.Tensor], tf.Tensor]] = {
    "gelu": gelu,
    "gelu_exact": gelu_exact,
    "relu": tf.nn.relu,
    "tanh": tf.tanh,
    "linear": linear,
    "swish": tf.nn.silu,
    "silu": tf.nn.silu,
}


def get_activation(name: str) -> Callable[[tf.Tensor], tf.Tensor]:
    """Maps a `hidden_act` string to a function; raises ValueError naming the known ones."""
    key = name.lower()
    if key not in _ACTIVATIONS:
        raise ValueError(f"unsupported activation {name!r}; expected one of {sorted(_ACTIVATIONS)}")
    return _ACTIVATIONS[key]
