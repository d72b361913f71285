"""int8 for CPU serving: post-training quantization of a BERT model's Dense layers.

Weights: Keras 3's `layer.quantize("int8")` layout (per output column absmax: q = round(W · s),
s = m / max|W[:, j]|, kernel stored int8 [in, out] with `kernel_scale` [out]; m = 127 with
float maths, WEIGHT_MAX = 63 with integer maths). The embeddings, LayerNorms and the task head
stay float32.

Maths (`compute="int8"`, the default): every matmul by a quantized kernel is an integer one.
Activations are quantized on the fly per row (dynamic range: x_q = round(x · r), r = 127 /
max|x[i, :]|, 8 bits), the product x_q · q runs as uint8 x int8 -> int32 (oneDNN's VNNI kernel
behind TF's core op `QuantizedMatMulWithBiasAndDequantize`, which also converts it to float32;
x_q + 128 as uint8, the offset taken back with the kernel's column sums as the op's bias), and
the result is scaled back by 1 / (r_i · s_j).

Keras' own int8 `Dense.call` was not usable: bert_tf's attention and feed-forward blocks read
`layer.kernel` and multiply themselves (one fused matmul per block), which after Keras'
quantization is the raw int8 tensor (silently wrong outputs); and Keras' TF-backend int8 matmul
(`tf.matmul(int8, int8, output_type=int32)`, Eigen's integer GEMM) measured 7x slower than the
float32 matmul here. So a quantized layer's `kernel` is an `Int8Kernel` (int8 values + scales),
for which `tf.cast`, `tf.concat`, `*` (by a scalar) and `tf.matmul` are dispatched: the blocks'
own code (cast, the 1/√D query scale, the q/k/v concat, the matmul) runs unchanged and the
matmul becomes the integer one above.

`compute="float"` keeps the weight-only variant: `kernel` is the dequantized float kernel
q / s and the maths stays float32 (4x smaller kernels, not faster; runs on any TF build).

Requirements and limits of `compute="int8"`:
- `INT8_MATMUL_OP` has CPU kernels only in TF builds with oneDNN turned on (the
  default of TF's Linux x86-64 wheels; not with TF_ENABLE_ONEDNN_OPTS=0). A server without them
  fails the request; quantizing checks the running TF once and refuses in one line.
- Kernels use 7 bits (|q| <= 63): on x86 CPUs without VNNI, oneDNN's uint8 x int8 kernel adds
  pairs of products in saturating int16 (vpmaddubsw), where 2 · 255 · 127 overflows and
  2 · 255 · 63 does not; so the integer products are exact on every x86 CPU
  (tests/export/test_quantize.py compares them with numpy's). 7-bit activations with 8-bit
  weights were measured worse on the fine-tuned MRPC model (98.77% agreement vs 100%).

TF's own SavedModel quantizer (tensorflow.compiler.mlir.quantization, METHOD_DYNAMIC_RANGE_INT8)
was tried on a classifier export: it rewrites the matmuls to `XlaDotV2` (an XLA op run by
on-demand compilation outside XLA), keeps only the signatures it is given, and hung on the
raw-text signatures (tf-text ops); not used.
"""
from __future__ import annotations

import functools
import typing

import keras
import tensorflow as tf

from bert_tf.errors import UserInputError

QUANTIZE_MODES = ("int8", "float16")
"""--quantize values: int8 (SavedModel and TFLite), float16 (TFLite only)."""

COMPUTE_MODES = ("int8", "float")
"""`quantize_int8_weights(compute=...)`: integer matmuls, or float32 maths on int8 weights."""

ACTIVATION_MAX = 127
"""Largest |x_q| of a quantized activation (8 bits)."""

WEIGHT_MAX = 63
"""Largest |q| of a kernel multiplied in integers (7 bits; see the module docstring)."""

INT8_MATMUL_OP = "QuantizedMatMulWithBiasAndDequantize"
"""The TF core op (oneDNN kernel) every integer matmul runs as."""

_OFFSET = ACTIVATION_MAX + 1  # x_q + _OFFSET is the uint8 the kernel multiplies (1..255)


class QuantizationError(UserInputError):
    """A model or setting that cannot be quantized: one line naming the layer or flag."""


class Int8Kernel(tf.experimental.ExtensionType):
    """A Dense kernel [in, out] held as int8 `values` and float32 per-column `scale` [out]:
    W[:, j] ≈ values[:, j] / scale[j] (Keras' `kernel_scale` convention).

    `tf.cast` (to float32), `tf.concat` (along the output axis), `* c` (a scalar) and
    `tf.matmul(x, kernel)` (x float32 [..., in]) are defined on it; `dequantized()` gives the
    float kernel."""

    values: tf.Tensor
    scale: tf.Tensor
    column_sums: tf.Tensor  # int32 [out]: sum over i of values[i, j] (stored, not recomputed)

    @classmethod
    def of(cls, values, scale) -> "Int8Kernel":
        """From int8 `values` [in, out] and float32 `scale` [out], column sums computed."""
        values = tf.convert_to_tensor(values, tf.int8)
        return cls(values, tf.convert_to_tensor(scale, tf.float32),
                   tf.reduce_sum(tf.cast(values, tf.int32), axis=0))

    @property
    def dtype(self):
        return tf.float32

    @property
    def shape(self):
        return self.values.shape

    def dequantized(self) -> tf.Tensor:
        """float32 [in, out] = values / scale."""
        return tf.cast(self.values, tf.float32) / self.scale

    def __mul__(self, other):
        """The kernel times a float scalar `other` (e.g. the attention's folded 1/√D)."""
        other = tf.convert_to_tensor(other, tf.float32)
        if other.shape.rank not in (None, 0):
            raise QuantizationError(f"an int8-quantized kernel is multiplied by scalars only, "
                                    f"not by a tensor of shape {other.shape}")
        return Int8Kernel(self.values, self.scale / other, self.column_sums)

    __rmul__ = __mul__


@tf.experimental.dispatch_for_api(tf.cast, {"x": Int8Kernel})
def _cast(x, dtype, name=None):
    if tf.as_dtype(dtype) != tf.float32:
        raise QuantizationError(f"an int8-quantized kernel computes in float32, not "
                                f"{tf.as_dtype(dtype).name}")
    return x


# (Types given to the decorator: this module's annotations are strings.)
@tf.experimental.dispatch_for_api(tf.concat, {"values": typing.List[Int8Kernel]})
def _concat(values, axis, name="concat"):
    if axis not in (1, -1):
        raise QuantizationError(f"int8-quantized kernels concatenate along their output axis "
                                f"(1), not {axis}")
    return Int8Kernel(tf.concat([v.values for v in values], axis=1),
                      tf.concat([v.scale for v in values], axis=0),
                      tf.concat([v.column_sums for v in values], axis=0))


@tf.experimental.dispatch_for_api(tf.linalg.matmul, {"b": Int8Kernel})
def _matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False,
            adjoint_b=False, a_is_sparse=False, b_is_sparse=False, output_type=None,
            grad_a=False, grad_b=False, name=None):
    if transpose_a or transpose_b or adjoint_a or adjoint_b:
        raise QuantizationError("an int8-quantized kernel multiplies untransposed")
    return int8_matmul(a, b)


def int8_matmul(x: tf.Tensor, kernel: Int8Kernel) -> tf.Tensor:
    """x @ W with integer arithmetic.

    Args:
      x: float32 [..., in].
      kernel: the quantized W [in, out].

    Returns:
      float32 [..., out]: (x_q (x) values) / (r · scale), with x_q = round(x · r) per row of x,
      r = ACTIVATION_MAX / max|x[row, :]| (an all-zero row gives zeros).

    One op does the integer product and its conversion to float: TF's core
    `QuantizedMatMulWithBiasAndDequantize` (oneDNN's uint8 x int8 -> int32 inner product with
    float output), given unit scales (min/max ±255 and ±127) and the float bias
    -_OFFSET · column_sums, returns x_q (x) values as float32 (exact while below 2^24 in
    magnitude; beyond, float32 rounding, relative 6e-8). Only the per-row and per-column
    rescales follow it. (The op with int32 output followed by bitcast, subtract, cast and
    divide measured 1.8x slower per [128, 768] x [768, 3072] matmul.)
    """
    x = tf.convert_to_tensor(x, tf.float32)
    shape = tf.shape(x)
    flat = tf.reshape(x, [-1, shape[-1]])  # [rows, in]
    absmax = tf.maximum(tf.reduce_max(tf.abs(flat), axis=1, keepdims=True), 1e-30)  # [rows, 1]
    shifted = tf.cast(tf.round(flat * (ACTIVATION_MAX / absmax)) + _OFFSET, tf.uint8)  # 1..255
    exact = tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
        a=tf.bitcast(shifted, tf.quint8), b=tf.bitcast(kernel.values, tf.qint8),
        bias=tf.cast(kernel.column_sums * -_OFFSET, tf.float32), min_a=0.0, max_a=255.0,
        min_b=-127.0, max_b=127.0, min_freezed_output=-1.0, max_freezed_output=1.0,
        Toutput=tf.float32, input_quant_mode="SCALED")  # [rows, out]: x_q (x) values
    out = exact * (absmax / ACTIVATION_MAX) * (1.0 / kernel.scale)
    return tf.reshape(out, tf.concat([shape[:-1], tf.shape(kernel.values)[1:]], axis=0))


@functools.lru_cache(maxsize=None)
def int8_matmul_error() -> str | None:
    """None if this TensorFlow runs `int8_matmul` (oneDNN's kernel) exactly; else why not."""
    values = tf.constant([[1, -2], [3, 4], [-127, 127]], tf.int8)
    x = tf.constant([[1.0, -2.0, float(ACTIVATION_MAX)]])
    try:
        got = int8_matmul(x, Int8Kernel.of(values, tf.ones([2]))).numpy()
    except (tf.errors.OpError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return first
    want = [[1 - 6 - ACTIVATION_MAX * 127, -2 - 8 + ACTIVATION_MAX * 127]]
    if got.tolist() != want:
        return f"{INT8_MATMUL_OP} gave {got.tolist()} for {want}"
    return None


class Int8WeightDense(keras.layers.Dense):
    """A Keras `Dense` after `quantize("int8")`. `kernel` is an `Int8Kernel` (integer matmuls)
    or, with `int8_compute = False`, the dequantized float32 kernel [in, out]; the layer's own
    call multiplies by it either way."""

    int8_compute = True

    @property
    def kernel(self):
        stored = super().kernel  # Keras' int8 kernel variable [in, out] (no LoRA: refused)
        if self.int8_compute:
            return Int8Kernel(tf.convert_to_tensor(stored),
                              tf.cast(self.kernel_scale, tf.float32),
                              tf.convert_to_tensor(self.kernel_column_sums))
        return tf.cast(stored, self.compute_dtype) / tf.cast(self.kernel_scale,
                                                              self.compute_dtype)

    def quantized_call(self, inputs, training=None):
        x = tf.matmul(inputs, self.kernel)
        if self.bias is not None:
            x = tf.nn.bias_add(x, self.bias)
        return self.activation(x) if self.activation is not None else x


def _layers(model):
    return model._flatten_layers(include_self=False, recursive=True)


def quantize_int8_weights(model, compute: str = "int8") -> list[str]:
    """Quantizes every plain `keras.layers.Dense` of a built `model` to int8 weights, in place
    (see the module docstring). The model keeps its float32 inputs and outputs.

    Args:
      model: a built float32 BERT model (e.g. `BertClassifier`).
      compute: "int8" (integer matmuls, oneDNN) or "float" (float32 maths on int8 weights).

    Returns: the quantized layers' Keras paths.

    Raises:
      QuantizationError (one line): a model with LoRA adapters (merge them first), a layer that
        holds matmul weights of a kind this does not quantize (e.g. GPT-1's GptConv1D), a model
        without Dense layers, an already quantized model, an unknown `compute`, or
        `compute="int8"` on a TensorFlow without oneDNN's int8 matmul kernel.
    """
    if compute not in COMPUTE_MODES:
        raise QuantizationError(f"compute must be one of {', '.join(COMPUTE_MODES)}, "
                                f"got {compute!r}")
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
    if compute == "int8" and (error := int8_matmul_error()) is not None:
        raise QuantizationError(f"int8 matmuls need TensorFlow's oneDNN kernel "
                                f"{INT8_MATMUL_OP}, which this TensorFlow does not run "
                                f"({error}; is TF_ENABLE_ONEDNN_OPTS=0 set?); "
                                "use compute='float' (int8 weights, float32 maths)")
    for layer in dense:
        kernel = tf.convert_to_tensor(layer.kernel)  # float32 [in, out]
        layer.quantize("int8")
        if compute == "int8":  # WEIGHT_MAX levels instead of Keras' 127
            scale = WEIGHT_MAX / tf.maximum(tf.reduce_max(tf.abs(kernel), axis=0), 1e-30)
            values = tf.cast(tf.round(kernel * scale), tf.int8)
            layer.kernel.assign(values)  # Dense.kernel in int8 mode: the int8 variable
            layer.kernel_scale.assign(scale)
            # summing an int8 kernel per call measured a third of a batch-1 matmul's time;
            # (Keras locks a built layer's state; its own quantize() unlocks it the same way)
            layer._tracker.unlock()
            layer.kernel_column_sums = layer.add_weight(
                name="kernel_column_sums", shape=(layer.units,), dtype="int32",
                trainable=False, initializer="zeros")
            layer._tracker.lock()
            layer.kernel_column_sums.assign(tf.reduce_sum(tf.cast(values, tf.int32), axis=0))
        layer.__class__ = Int8WeightDense
        layer.int8_compute = compute == "int8"
    return [layer.path for layer in dense]
