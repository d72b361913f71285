"""Length-aware batching: run BERT on each batch padded only to its longest example.

Task features are padded to `max_seq_length` (the original's fixed-shape TPU inputs), so a
sentence of 20 pieces costs as much as one of 128. BERT with an `input_mask` gives the same
outputs at any padding (the mask keeps every real position from attending to padding; padded
positions never feed real ones), up to float rounding, so cutting the padding is exact:

  * `predict_length_bucketed(model, arrays, batch_size, output_keys)`: prediction /
    evaluation. Examples are sorted by length, cut into batches of `batch_size`, each batch is
    sliced to its longest example rounded up to a multiple of `length_multiple` (8 by default;
    at most max_seq_length / length_multiple shapes), run through one `tf.function` traced for
    a dynamic sequence length, and the outputs are returned in the ORIGINAL example order, with
    per-position outputs ([N, S, ...]) padded back to `max_seq_length`. That `tf.function` is
    kept with the model (`cached_model_function`): a user who predicts repeatedly, at any batch
    size or length, traces it once per model and input signature, not once per call.
  * `trim_padding(batch, length_multiple)`: the same cut for one training batch (tf.data /
    graph ops), for a training loop that keeps its batch composition.

In per-position outputs, positions up to the padded length of an example's batch are computed
as in the padded path (a [PAD] query attends to the real keys only, so even its values are the
same); positions past it are `pad_value` (-10000) here, whereas the padded path computes
values for the [PAD] tokens there. NER reads real tokens only; SQuAD's n-best takes the top
start/end logits over all positions and then drops those outside the context, so -10000 keeps
padding out of the n-best (the padded path could only have let a [PAD] position take a slot).
"""
from __future__ import annotations

import dataclasses
import sys
import weakref
from typing import Any, Callable, Hashable, Mapping, Sequence

import numpy as np
import tensorflow as tf

__all__ = ["DEFAULT_LENGTH_MULTIPLE", "LengthBatch", "cached_model_function", "example_lengths",
           "plan_length_batches", "predict_length_bucketed", "round_up_length",
           "select_outputs", "trim_padding"]

# Cut lengths are rounded up to a multiple of this. The sequence axis is dynamic in the one
# traced graph, so the multiple does not add graphs; on CPU a [32, L] MiniLM forward costs the
# same per column at every L (2.0-2.1 ms per column for L = 32..128, none faster at multiples
# of 32), so a small multiple only removes padding.
DEFAULT_LENGTH_MULTIPLE = 8

ENCODER_INPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")


@dataclasses.dataclass(frozen=True)
class LengthBatch:
    """One batch of a length-aware plan.

    Attributes:
      indices: int64 [n] positions of its examples in the original arrays.
      length: the sequence length it is padded to (a multiple of `length_multiple`, or
        `max_seq_length`).
    """

    indices: np.ndarray
    length: int


def example_lengths(input_mask: np.ndarray) -> np.ndarray:
    """Length of each example: 1 + the last position whose mask is non-zero (at least 1).

    Args:
      input_mask: [N, S] or [N, ..., S] (e.g. [N, num_choices, S]); the longest row of an
        example counts.

    Returns:
      int64 [N].
    """
    mask = np.asarray(input_mask)
    if mask.ndim < 2:
        raise ValueError(f"input_mask must be [N, ..., seq_length]; got shape {mask.shape}")
    flat = mask.reshape(mask.shape[0], -1, mask.shape[-1]) != 0
    seq = mask.shape[-1]
    # Last non-zero position + 1 per row: seq - (index of the first non-zero from the end).
    last = np.where(flat.any(axis=-1), seq - np.argmax(flat[..., ::-1], axis=-1), 0)
    return np.maximum(last.max(axis=-1), 1).astype(np.int64)


def round_up_length(length: int, multiple: int, max_seq_length: int) -> int:
    """`length` rounded up to a multiple of `multiple`, at most `max_seq_length`."""
    return min(-(-length // multiple) * multiple, max_seq_length)


def plan_length_batches(lengths: np.ndarray, batch_size: int, max_seq_length: int,
                        length_multiple: int = DEFAULT_LENGTH_MULTIPLE) -> list[LengthBatch]:
    """Sorts examples by length (stable) and cuts them into batches padded to their longest.

    Args:
      lengths: int [N] example lengths (`example_lengths`).
      batch_size: examples per batch (the last batch may be smaller).
      max_seq_length: the arrays' sequence length (no batch is longer).
      length_multiple: padded lengths are rounded up to a multiple of this (fewer shapes).

    Returns:
      Batches covering every example once, shortest first.
    """
    if batch_size <= 0 or length_multiple <= 0:
        raise ValueError(f"batch_size and length_multiple must be positive; got {batch_size} "
                         f"and {length_multiple}")
    lengths = np.asarray(lengths, np.int64)
    if lengths.size and lengths.max() > max_seq_length:
        raise ValueError(f"an example is {lengths.max()} long, more than max_seq_length "
                         f"{max_seq_length}")
    order = np.argsort(lengths, kind="stable")
    return [LengthBatch(indices=order[start:start + batch_size],
                        length=round_up_length(
                            int(lengths[order[start:start + batch_size]].max()),
                            length_multiple, max_seq_length))
            for start in range(0, len(order), batch_size)]


# model -> {key: function}. Weak keys: a cached function reaches its model through a weakref
# only (`cached_model_function`), so dropping the model drops its functions.
_MODEL_FUNCTIONS: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def cached_model_function(model, key: Hashable, factory: Callable[[Callable[[], Any]], Any]):
    """The function `factory(model_ref)` built once per model, key and set of model variables.

    Prediction runs its model in a `tf.function`; building a new one per call re-traces the
    whole model every call (seconds for BERT, more than the prediction of a few hundred
    examples). This keeps the function with the model instead, so its traces are reused.

    Args:
      model: the model the function runs (weak-referenceable, e.g. a `keras.Model`).
      key: what else the function depends on (output keys, input signature, strategy...).
      factory: `model_ref -> function`; the function must reach the model only through
        `model_ref()` (a weakref), never hold it, or the model would never be freed.

    Returns:
      The cached function. It is rebuilt when the model's variables change (e.g. LoRA
      adapters added), since a traced graph captures the variables it read.
    """
    variables = tuple(id(v) for v in getattr(model, "variables", ()))
    full_key = (key, variables)
    try:
        per_model = _MODEL_FUNCTIONS.setdefault(model, {})
    except TypeError:  # not weak-referenceable: no cache (a plain function per call)
        return factory(lambda: model)
    function = per_model.get(full_key)
    if function is None:
        for stale in [k for k in per_model if k[0] == key]:  # same key, older variables
            del per_model[stale]
        function = per_model[full_key] = factory(weakref.ref(model))
    return function


def select_outputs(outputs: Mapping, output_keys: Sequence[str]) -> dict:
    """{k: outputs[k] for k in output_keys}; a ValueError naming the missing keys and the
    model's own if any is not among `outputs` (the model's output dict)."""
    missing = [k for k in output_keys if k not in outputs]
    if missing:
        raise ValueError(f"the model has no outputs {missing} (it has {sorted(outputs)})")
    return {k: outputs[k] for k in output_keys}


def _progress_bar(num_examples: int, enabled: bool):
    if not enabled or not num_examples:
        return None
    import keras

    interactive = hasattr(sys.stdout, "isatty") and sys.stdout.isatty()
    return keras.utils.Progbar(num_examples, interval=0.1 if interactive else 30.0,
                               unit_name="example")


def predict_length_bucketed(model, arrays: Mapping[str, np.ndarray], batch_size: int,
                            output_keys: Sequence[str],
                            input_keys: Sequence[str] = ENCODER_INPUT_KEYS,
                            mask_key: str = "input_mask",
                            length_multiple: int = DEFAULT_LENGTH_MULTIPLE,
                            pad_value: float = -10000.0, progress: bool = True
                            ) -> dict[str, np.ndarray]:
    """Runs `model(batch, training=False)` on length-sorted batches cut to their longest.

    The same results as running every example at full length (`finetuning.predict_arrays`):
    per-example outputs equal up to float rounding, rows in the original order.

    Args:
      model: callable on a dict of int32 [B, ..., L] inputs -> dict of outputs; must accept any
        sequence length up to the arrays' (BERT does, up to max_position_embeddings).
      arrays: name -> array [N, ..., S]; `input_keys` are read, and inputs whose last axis is S
        (the `mask_key` array's) are cut on it.
      batch_size: examples per forward pass.
      output_keys: which model outputs to return.
      input_keys: model inputs.
      mask_key: the array [N, ..., S] whose non-zero entries mark each example's tokens (an
        input, e.g. BERT's "input_mask", or not, e.g. GPT-1's "mask" beside its "token_ids").
      length_multiple: padded lengths are multiples of this (or S).
      pad_value: value of per-position outputs past the padded length of an example's batch
        (finite and very negative: never above a real logit, no NaN in a softmax).
      progress: Keras progress bar (examples done of N, with ETA) on stdout.

    Returns:
      output key -> NumPy array [N, ...], in the original order; an output with a sequence axis
      (axis 1 of the output follows the input length) has it padded back to S.

    Raises:
      ValueError: bad batch size or multiple, `mask_key` not among the arrays, or a model
        output missing.
    """
    input_keys, output_keys = tuple(input_keys), tuple(output_keys)
    if mask_key not in arrays:
        raise ValueError(f"mask_key {mask_key!r} is not among the arrays {sorted(arrays)}")
    inputs = {k: np.asarray(arrays[k]) for k in input_keys}
    mask = np.asarray(arrays[mask_key])
    max_seq_length = mask.shape[-1]
    num_examples = len(mask)
    plan = plan_length_batches(example_lengths(mask), batch_size, max_seq_length,
                               length_multiple)
    cut = {k for k, v in inputs.items() if v.ndim >= 2 and v.shape[-1] == max_seq_length}
    # One graph for every length: the sequence axis is dynamic in the signature. Outputs whose
    # axis 1 is then unknown follow the input length (per-position outputs).
    signature = {k: tf.TensorSpec([None, *v.shape[1:-1], None if k in cut else v.shape[-1]],
                                  tf.as_dtype(v.dtype)) for k, v in inputs.items()}

    def make_predict_step(model_ref):
        @tf.function(input_signature=[signature])
        def predict_step(batch):
            return select_outputs(model_ref()(batch, training=False), output_keys)

        return predict_step

    # Traced once per model, outputs and signature (batch and length axes are dynamic), and
    # reused by every later call (evaluation each epoch, then prediction, ...).
    signature_key = tuple(sorted((k, tuple(s.shape.as_list()), s.dtype.name)
                                 for k, s in signature.items()))
    predict_step = cached_model_function(
        model, ("predict_length_bucketed", output_keys, signature_key), make_predict_step)
    structure = predict_step.get_concrete_function().structured_outputs
    per_position = {k for k in output_keys
                    if structure[k].shape.rank >= 2 and structure[k].shape[1] is None}
    results: dict[str, np.ndarray] = {}
    bar = _progress_bar(num_examples, progress)
    done = 0
    for batch_plan in plan:
        batch = {k: v[batch_plan.indices][..., :batch_plan.length] if k in cut
                 else v[batch_plan.indices] for k, v in inputs.items()}
        out = predict_step(batch)
        for k in output_keys:
            value = out[k].numpy()
            if k not in results:
                shape = list(value.shape)
                shape[0] = num_examples
                if k in per_position:
                    shape[1] = max_seq_length
                results[k] = np.full(shape, pad_value, dtype=value.dtype)
            if k in per_position:
                results[k][batch_plan.indices, :value.shape[1]] = value
            else:
                results[k][batch_plan.indices] = value
        done += len(batch_plan.indices)
        if bar is not None:
            bar.update(done)
    if not plan:
        return {k: np.zeros((0,), np.float32) for k in output_keys}
    return results


def trim_padding(batch: Mapping[str, tf.Tensor], length_multiple: int = DEFAULT_LENGTH_MULTIPLE,
                 mask_key: str = "input_mask") -> dict[str, tf.Tensor]:
    """Cuts one batch's sequence axis to its longest example, rounded up (graph ops).

    For a training or evaluation loop that keeps its batches (e.g. `dataset.map(trim_padding)`,
    as `bert_tf.training.finetuning.train_model` does): every tensor of the mask's shape [B, ...,
    S] (the same leading axes and S last, e.g. input ids, NER label ids) is cut to
    L = min(S, ceil(max length / length_multiple) * length_multiple); others pass unchanged.

    Args:
      batch: name -> Tensor [B, ..., S] (the mask) and any other tensors.
      length_multiple: L is a multiple of this (or S): at most S / length_multiple shapes.
      mask_key: the input mask.

    Returns:
      The same dict with the sequence axis cut to L.
    """
    mask = batch[mask_key]
    seq = tf.shape(mask)[-1]
    positions = tf.range(1, seq + 1)
    longest = tf.reduce_max(tf.where(tf.not_equal(mask, 0), positions, 0))
    length = tf.minimum((tf.maximum(longest, 1) + length_multiple - 1)
                        // length_multiple * length_multiple, seq)
    static_seq = mask.shape[-1]
    out = {}
    for k, v in batch.items():
        if (v.shape.rank == mask.shape.rank and v.shape.rank >= 2 and v.shape[-1] == static_seq
                and v.shape[1:-1] == mask.shape[1:-1]):
            out[k] = v[..., :length]
        else:
            out[k] = v
    return out
