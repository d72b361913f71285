"""Activations named in `bert_config.json` (`hidden_act`)."""
from __future__ import annotations

from typing import Callable

import tensorflow as tf


def gelu(x: tf.Tensor) -> tf.Tensor:
    """GELU, tanh approximation, as the original `modeling.gelu` at HEAD.

    0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))). Any shape; same dtype out.
    Computed by `tf.nn.gelu(approximate=True)` — the same formula (equal to the original's up to
    float rounding) in the op pattern that TensorFlow's graph optimizer fuses with the preceding
    MatMul + BiasAdd into one oneDNN kernel on CPU.
    """
    return tf.nn.gelu(tf.convert_to_tensor(x), approximate=True)


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
