"""LiteRT / TFLite export of the task models: float32, float16 or int8 (dynamic range).

The converted signature is the serving module's `serving_ids`: int32 `input_word_ids`,
`input_mask`, `input_type_ids` [batch, seq] (or [batch, choices, seq] for multiple choice) ->
the same outputs as the SavedModel's (`logits`, `probabilities`, `label_ids`; `start_logits` /
`end_logits`; ...). In the `.tflite` file it is the signature `serving_default` with those input
and output names (`tf.lite.Interpreter(...).get_signature_runner()`).

- float32: the converter's float graph (TFLite builtins only).
- float16: weights stored as float16 (half the size), computed in float32 on CPU.
- int8: the converter's dynamic-range quantization (`Optimize.DEFAULT` without a
  representative dataset): int8 weights, and on CPU the fully-connected kernels quantize their
  activations on the fly (integer matmuls); the embeddings' gathers stay float. The
  interpreter's default XNNPACK delegate runs those matmuls with its int8 kernels (per-row
  dynamic activations, weights packed once when the interpreter is built): on x86 with
  AVX-512 VNNI one [128, 768] x [768, 3072] layer measured 3.7x TF's float32 matmul
  (bench/bench_int8_tflite.py has the whole model), where TF's own int8 op re-packs its weights
  on every call (docs/export.md).

Raw-text inputs are not converted: bert_tf's in-graph WordPiece (`BertPreprocessor`, the
classic tf-text ops `NormalizeUTF8`, `WordpieceTokenizeWithOffsets`, `RegexSplitWithOffsets`)
has no TFLite kernels, and the TFLite converter refuses them even with select TF ops (they are
not TF core ops). tensorflow-text's TFLite-ready ops are `FastWordpieceTokenizer` and
`FastBertNormalizer` (`bert_tf.tokenization.fast_in_graph`); converting them needs
`allow_custom_ops` and an interpreter built with `tensorflow_text.tflite_registrar`, which the
tensorflow-text wheel on this machine has not been checked for (see docs/serving.md): tokenize
on the device with the app's own WordPiece and feed ids.
"""
from __future__ import annotations

import os

import tensorflow as tf

from bert_tf.errors import UserInputError

LITE_QUANTIZE = (None, "float16", "int8")
TFLITE_FILE = "model.tflite"


class LiteExportError(UserInputError):
    """A model or setting that does not convert to TFLite: one line."""


def convert_concrete_function(function, trackable, quantize: str | None = None) -> bytes:
    """The `.tflite` flatbuffer of one concrete function.

    Args:
      function: a concrete function (e.g. a serving module's `serving_ids` signature).
      trackable: the object holding its variables (the serving module).
      quantize: None (float32), "float16" or "int8" (dynamic range).

    Raises:
      LiteExportError: an unknown `quantize`; a graph with ops TFLite cannot run (the
        converter's first error line).
    """
    if quantize not in LITE_QUANTIZE:
        raise LiteExportError(f"--quantize must be one of float16, int8 (or unset) for "
                              f"--export_format=tflite, got {quantize!r}")
    # The converter reads variables through `trackable`; one it does not track would be
    # converted without its value (a small file computing wrong outputs), so refuse that.
    tracked = {id(v) for v in getattr(trackable, "variables", ())}
    untracked = [v.name for v in function.variables if id(v) not in tracked]
    if untracked:
        raise LiteExportError(f"{len(untracked)} variable(s) of the function are not tracked by "
                              f"the object given with it (e.g. {untracked[0]}); pass the module "
                              "that holds them as tf.Variables")
    converter = tf.lite.TFLiteConverter.from_concrete_functions([function], trackable)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize is not None:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
        converter.target_spec.supported_types = [tf.float16]
    try:
        return converter.convert()
    except Exception as e:  # the converter raises ConverterError with an MLIR dump
        first = next((line for line in str(e).splitlines() if "error" in line.lower()),
                     str(e).splitlines()[0] if str(e) else type(e).__name__)
        raise LiteExportError(f"TFLite conversion failed: {first.strip()}") from None


def tflite_from_signatures(module, signatures: dict, quantize: str | None = None) -> bytes:
    """The `.tflite` of a task serving module's token-id signature (`serving_ids`)."""
    if "serving_ids" not in signatures:
        raise LiteExportError("--export_format=tflite exports a task model's token-id signature "
                              f"(serving_ids); this export has {sorted(signatures)}")
    return convert_concrete_function(signatures["serving_ids"], module, quantize)


def run_tflite(model_content: bytes, inputs: dict, num_threads: int | None = None) -> dict:
    """Runs a `.tflite` model's `serving_default` signature on numpy `inputs` (name -> array;
    the batch shape may differ from the one converted) and returns its outputs by name.
    `num_threads`: the interpreter's threads (default: all of this machine's CPUs)."""
    num_threads = num_threads or os.cpu_count() or 1
    interpreter = tf.lite.Interpreter(model_content=model_content, num_threads=num_threads)
    runner = interpreter.get_signature_runner()
    return runner(**inputs)
