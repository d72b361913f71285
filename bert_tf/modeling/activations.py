"""Activations named in `bert_config.json` (`hidden_act`)."""
from __future__ import annotations

import math
from typing import Callable

import tensorflow as tf


def gelu(x: tf.Tensor) -> tf.Tensor:
    """GELU, tanh approximation, as the original `modeling.gelu` at HEAD.

    0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))). Any shape; same dtype out.
    """
    x = tf.convert_to_tensor(x)
    cdf = 0.5 * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * tf.pow(x, 3))))
    return x * cdf


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
