"""int8 weights for CPU serving: post-training quantization of a BERT model's Dense kernels.

Keras 3's `layer.quantize("int8")` does the quantization (per output column absmax: q =
round(W · s), s = 127 / max|W[:, j]|, kernel stored int8 [in, out] with `kernel_scale` [out]).
Its int8 `Dense.call` is not enough on its own for bert_tf: the attention and feed-forward
blocks read `layer.kernel` and multiply themselves (one fused matmul per block), and after
Keras' quantization `layer.kernel` is the raw int8 tensor. So each quantized layer's class
becomes `Int8WeightDense`, whose `kernel` is the dequantized float kernel q / s and whose call
is the float Dense call on it. The result is **weight-only int8** ("dynamic range" weights):

- the SavedModel stores the kernels (every encoder block's six matrices and the pooler) as int8,
  about 4x smaller on disk than float32 (the embeddings and the task head stay float32);
- the serving graph computes in float32 on `Cast(int8) / scale`: the same signatures, the same
  core ops (`Cast`, `RealDiv`: no new op in the serving allowlist), loads in TF Serving;
- it is not faster than float32 on CPU (the multiplications stay float32). Integer arithmetic
  comes with the TFLite int8 export (`bert_tf.export.lite`, the converter's dynamic-range
  quantization, whose kernels quantize activations on the fly).

TF's own SavedModel quantizer (tensorflow.compiler.mlir.quantization, METHOD_DYNAMIC_RANGE_INT8)
was tried on a classifier export: it rewrites the matmuls to `XlaDotV2` (an XLA op run by
on-demand compilation outside XLA), keeps only the signatures it is given, and hung on the
raw-text signatures (tf-text ops); not used.
"""
from __future__ import annotations

import keras
import tensorflow as tf

from bert_tf.errors import UserInputError

QUANTIZE_MODES = ("int8", "float16")
"""--quantize values: int8 (SavedModel and TFLite), float16 (TFLite only)."""


class QuantizationError(UserInputError):
    """A model or setting that cannot be quantized: one line naming the layer or flag."""


class Int8WeightDense(keras.layers.Dense):
    """A Keras `Dense` after `quantize("int8")` whose `kernel` is the dequantized float kernel
    [in, out] = int8 kernel / kernel_scale [out], so that code reading `layer.kernel` (bert_tf's
    blocks) and the layer's own call both compute in float on the int8-stored weights."""

    @property
    def kernel(self):
        return tf.cast(self._kernel, self.compute_dtype) / tf.cast(self.kernel_scale,
                                                                    self.compute_dtype)

    def quantized_call(self, inputs, training=None):
        x = tf.matmul(inputs, self.kernel)
        if self.bias is not None:
            x = tf.nn.bias_add(x, self.bias)
        return self.activation(x) if self.activation is not None else x


def _layers(model):
    return model._flatten_layers(include_self=False, recursive=True)


def quantize_int8_weights(model) -> list[str]:
    """Quantizes every plain `keras.layers.Dense` of a built `model` to int8 weights, in place
    (see the module docstring). The model keeps its float32 inputs and outputs.

    Returns: the quantized layers' Keras paths.

    Raises:
      QuantizationError (one line): a model with LoRA adapters (merge them first), a layer that
        holds matmul weights of a kind this does not quantize (e.g. GPT-1's GptConv1D), a model
        without Dense layers, an already quantized model.
    """
    layers = list(_layers(model))
    for layer in layers:
        if getattr(layer, "lora_enabled", False):
            raise QuantizationError(f"{layer.path} has LoRA adapters; merge them first "
                                    "(bert_tf.modeling.lora.merge_lora)")
        if type(layer).__name__ == "GptConv1D":
            raise QuantizationError(f"int8 quantization supports BERT models (Dense layers); "
                                    f"{layer.path} is a {type(layer).__name__} (GPT-1), which "
                                    "it does not quantize")
        if isinstance(layer, Int8WeightDense) or getattr(layer, "quantization_mode", None):
            raise QuantizationError(f"{layer.path} is already quantized "
                                    f"({layer.quantization_mode})")
    dense = [layer for layer in layers if type(layer) is keras.layers.Dense]
    if not dense:
        raise QuantizationError(f"{type(model).__name__} has no Dense layer to quantize")
    for layer in dense:
        if layer.dtype_policy.name != "float32":
            raise QuantizationError(f"{layer.path} computes in {layer.dtype_policy.name}; "
                                    "int8 quantization starts from a float32 model")
        layer.quantize("int8")
        layer.__class__ = Int8WeightDense
    return [layer.path for layer in dense]
