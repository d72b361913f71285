"""The fine-tuning loop shared by every fine-tuning script (GLUE, SQuAD, NER, SWAG, ...).

It is the original `run_classifier.py` / `run_squad.py` training under any `tf.distribute`
strategy (one device, mirrored GPUs, several workers, TPU), as the original's TPUEstimator:
AdamWeightDecay with linear warm-up and linear decay (`create_optimizer`, decay decided on the
original TF1 variable names), gradients summed over the replicas and clipped to global norm 1.0,
the training input repeated, shuffled over a 100-example buffer and cut into global batches (the
last partial one dropped), each global batch split evenly across the replicas. Length-aware by
default: the same batches in the same order, each cut on its sequence axis to its longest example
rounded up to a multiple of 8 (`training.length_batching.trim_padding`; one graph with a dynamic
sequence axis), with the dropout masks the padded batch would draw
(`modeling.dropout.dropout_masks_at_padded_length`), so losses and weights equal the padded path
up to float rounding; `FinetuneOptions.length_bucketing=False` is the padded path.

Checkpoints are the original Estimator's: `<output_dir>/model.ckpt-<step>` (TF1 format) with the
weights under the original names, `global_step`, and the optimizer's `<name>/adam_m` and
`<name>/adam_v` slots as the original's optimizer names them, plus the dropout layers' random
streams (`bert_tf/random_state/...`), and a `checkpoint` state file. The original code,
`tf.train.latest_checkpoint` and `load_original_checkpoint` all read them. A run whose
`output_dir` holds a checkpoint resumes from it (weights, optimizer slots, step, position in the
shuffled input, dropout streams): on one device the result is bit-identical to an uninterrupted
run. `init_checkpoint` only seeds a fresh run.

  init_model(model, init_checkpoint)             # TF1 checkpoint or our encoder SavedModel
  train_model(model, arrays, loss_fn, options, strategy=...)  # -> {"global_step", "loss", ...}
  predict_arrays(model, arrays, batch_size, ["logits"])
  latest_checkpoint(output_dir)

A task supplies its features as NumPy arrays (one row per example) and a loss
`loss_fn(model_outputs, batch)`; everything else is here. Progress (with ETA) goes to a Keras
`Progbar` and the log; TensorBoard scalars (loss, learning_rate, grad_norm, steps_per_second) to
`<output_dir>/train`, from which `bert_tf.plotting.plot_training_curves` draws the curves.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from typing import Any, Callable, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.checkpoints import (CheckpointError, assign_from_checkpoint, checkpoint_global_step,
                                 checkpoint_variable_map, encoder_variable_map,
                                 is_encoder_savedmodel, latest_checkpoint,
                                 load_encoder_savedmodel, load_original_checkpoint,
                                 remove_stale_temp_files, resolve_checkpoint_prefix,
                                 write_step_checkpoint)
from bert_tf.modeling import lora
from bert_tf.modeling.dropout import dropout_masks_at_padded_length
from bert_tf.modeling.recompute import enable_recompute
from bert_tf.modeling.transformer import BertTransformerBlock
from bert_tf.progress import progress_bar
from bert_tf.training.accumulation import MemoryOptions, accumulate_gradients, check_accumulation
from bert_tf.training.lora_finetuning import (LoraOptions, apply_lora_options,
                                              enable_lora_from_checkpoint, lora_variable_map,
                                              save_run_adapters)
from bert_tf.training.length_batching import (DEFAULT_LENGTH_MULTIPLE, cached_model_function,
                                           select_outputs, trim_padding)
from bert_tf.training.distribution import (check_global_batch, check_model_in_scope,
                                           check_tpu_paths, is_chief, is_tpu_strategy,
                                           resolve_strategy)
from bert_tf.training.optimization import clip_by_global_norm, create_optimizer
from bert_tf.training.random_state import seed_generators

ENCODER_INPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")
RANDOM_STATE_SCOPE = "bert_tf/random_state"
"""Checkpoint name prefix of the dropout layers' seed-generator states."""

LossFn = Callable[[dict, dict], Any]
"""(model outputs, batch) -> the loss of the batch: a scalar float32 mean over its examples, or a
pair (sum, weight) whose ratio is the loss (e.g. Σ token losses, number of labelled tokens), so
that the global-batch loss is Σ sums / Σ weights over the replicas exactly."""

__all__ = ["ENCODER_INPUT_KEYS", "FinetuneOptions", "LossFn", "checkpoint_variable_map",
           "encoder_variable_map", "fused_block_kernels", "init_model", "is_encoder_savedmodel",
           "latest_checkpoint", "load_checkpoint", "make_train_step", "model_strategy",
           "num_train_and_warmup_steps", "predict_arrays", "restore_for_prediction", "train_model",
           "training_state_map", "write_checkpoint"]


@dataclasses.dataclass
class FinetuneOptions(LoraOptions, MemoryOptions):
    """Hyper-parameters of one fine-tuning run (the original scripts' flags of the same names).

    Attributes:
      output_dir: where `model.ckpt-<step>` checkpoints, the `checkpoint` file and the TensorBoard
        events (`train/`) are written; a checkpoint already there is resumed from.
      learning_rate: peak learning rate (after warm-up).
      num_train_steps: number of global batches to train on (see `num_train_and_warmup_steps`).
      num_warmup_steps: steps of linear warm-up from 0.
      train_batch_size: examples per step, over all replicas (the original's global batch).
      save_checkpoints_steps: write a checkpoint every this many steps (and at the end).
      keep_checkpoint_max: keep this many most recent checkpoints (older ones are deleted).
      clip_norm: gradients are clipped to this global norm (1.0 in the original).
      seed: seed of the input shuffle (tf.data combines it with the global seed,
        `keras.utils.set_random_seed`, which a resumed run must set to the same value).
      shuffle_buffer: shuffle buffer size in examples (100 in the original).
      progress: show a Keras progress bar (with ETA) on stdout.
      plot_curves: at the end, draw the TensorBoard scalars of `output_dir` (this run's and
        earlier, interrupted ones') into `<output_dir>/curves.png` (`bert_tf.plotting`).
      length_bucketing: cut each training batch's sequence axis to its longest example, rounded
        up to a multiple of `length_multiple` (same batches, same order, same dropout masks:
        the padded path's losses up to float rounding); only when `train_model` has a
        `length_key` array, never on TPUs. False: every batch at full length.
      length_multiple: the cut lengths are multiples of this (or the full length; 8 by
        default, `training.length_batching.DEFAULT_LENGTH_MULTIPLE`).
      fused_kernels: train BERT's blocks with the pretraining trainer's XLA-fused kernels
        (`fused_block_kernels`: the FFN GELU and each dropout + residual + LayerNorm as one
        forward and one backward kernel; same dropout masks, equal to the op-by-op step up to
        float rounding). Off by default (the original's op pattern); prediction is unchanged.
      gradient_accumulation_steps, recompute_activations (keyword-only): the memory savers of
        `bert_tf.training.accumulation.MemoryOptions` (1 and False: the original step).
      lora_rank, lora_alpha, lora_targets, lora_dropout (keyword-only): LoRA fine-tuning
        (`bert_tf.training.lora_finetuning.LoraOptions`; rank 0, the default, is off).
    """

    output_dir: str
    learning_rate: float
    num_train_steps: int
    num_warmup_steps: int
    train_batch_size: int
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    clip_norm: float = 1.0
    seed: int = 12345
    shuffle_buffer: int = 100
    progress: bool = True
    plot_curves: bool = True
    length_bucketing: bool = True
    length_multiple: int = DEFAULT_LENGTH_MULTIPLE
    fused_kernels: bool = False

    def validate(self) -> None:
        """ValueError naming the option when a value cannot be used."""
        for name in ("num_train_steps", "train_batch_size", "save_checkpoints_steps",
                     "keep_checkpoint_max", "shuffle_buffer", "length_multiple"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.num_warmup_steps < 0:
            raise ValueError(f"num_warmup_steps must be >= 0, got {self.num_warmup_steps}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        if not self.clip_norm > 0:
            raise ValueError(f"clip_norm must be positive, got {self.clip_norm}")
        self.check_memory_options(self.train_batch_size)


def num_train_and_warmup_steps(num_examples: int, train_batch_size: int,
                               num_train_epochs: float, warmup_proportion: float
                               ) -> tuple[int, int]:
    """The original's step counts: `int(n / batch * epochs)` and `int(steps * proportion)`.

    Raises ValueError (naming the flags) when that gives no training step.
    """
    num_train_steps = int(num_examples / train_batch_size * num_train_epochs)
    num_warmup_steps = int(num_train_steps * warmup_proportion)
    if num_train_steps <= 0:
        raise ValueError(
            f"{num_examples} training examples / --train_batch_size={train_batch_size} * "
            f"--num_train_epochs={num_train_epochs} gives {num_train_steps} training steps; use "
            "more data, more epochs or a smaller batch")
    return num_train_steps, num_warmup_steps


# ---------------------------------------------------------------------------------------------
# Weights in and out (the I/O itself is bert_tf.checkpoints.original)
# ---------------------------------------------------------------------------------------------
def load_checkpoint(model, path: str, heads: str = "required") -> dict[str, list[str]]:
    """Loads a checkpoint written by `train_model` (or any original-format one) into `model`.

    Args:
      model: the model (built, or with `build_from_config_shapes`).
      path: checkpoint prefix, one of its files, or a directory with a `checkpoint` file.
      heads: "required" (every head variable must be there: a fine-tuned checkpoint),
        "if_present" (a pretraining checkpoint: missing head variables keep their fresh
        initialisation) or "skip" (the encoder alone).

    A checkpoint of a LoRA run (adapters under `<kernel prefix>/lora_a|lora_b`) re-creates the
    adapters on `model` (`lora_finetuning.enable_lora_from_checkpoint`) and loads them too.

    Raises:
      CheckpointError naming the checkpoint and the variable that is missing or mis-shaped.
    """
    checkpoint_variable_map(model)  # builds it
    prefix = resolve_checkpoint_prefix(path)
    with model_strategy(model).scope():
        enable_lora_from_checkpoint(model, prefix, checkpoint_variable_map)
    if not lora.lora_layers(model):
        return load_original_checkpoint(model, prefix, heads=heads)
    with lora.base_kernels(model):
        loaded = load_original_checkpoint(model, prefix, heads=heads)
    adapters = {n: v for n, v in lora_variable_map(model, checkpoint_variable_map).items()
                if n.endswith(("/lora_a", "/lora_b"))}
    assign_from_checkpoint(prefix, adapters)
    loaded["loaded"] = list(loaded["loaded"]) + sorted(adapters)
    return loaded


def init_model(model, init_checkpoint: str | None) -> None:
    """Initialises `model` (building it if needed) before fine-tuning.

    Args:
      model: a `bert_tf.modeling` model (or a model with a `BertEncoder` as `.encoder`).
      init_checkpoint: None (keep the fresh weights); an original-format (TF1-named) checkpoint
        prefix, file or directory — Google's `bert_model.ckpt`, a converted Hugging Face model, or
        one of ours (`model.ckpt-N`), whose head variables are loaded when present; or a directory
        holding our encoder SavedModel (`bert_tf.export.export_encoder_savedmodel`), which gives
        the encoder weights. Load only SavedModels you trust: a SavedModel is a program.

    Raises:
      CheckpointError naming the file and the variable when a variable is missing or its shape
      does not fit (e.g. a checkpoint of another model size).
    """
    checkpoint_variable_map(model)  # builds it
    if not init_checkpoint:
        return
    with lora.base_kernels(model):  # (a model with adapters: its base weights are loaded)
        if is_encoder_savedmodel(init_checkpoint):
            load_encoder_savedmodel(model, init_checkpoint)
        else:
            load_original_checkpoint(model, init_checkpoint, heads="if_present")


def _random_state_map(model) -> dict[str, tf.Variable]:
    return {f"{RANDOM_STATE_SCOPE}/{name}": gen.state
            for name, gen in seed_generators(model).items()}


def training_state_map(model, optimizer=None) -> dict[str, tf.Variable]:
    """Checkpoint name -> variable of everything a resume needs besides `global_step`: the
    weights (original names), the optimizer's `<name>/adam_m` / `<name>/adam_v` slots (the
    original AdamWeightDecayOptimizer's names) and the dropout streams' states. With LoRA, the
    adapters under `<kernel prefix>/lora_a|lora_b` (`lora_finetuning.lora_variable_map`)."""
    names = lora_variable_map(model, checkpoint_variable_map)
    state = dict(names)
    # AdamWeightDecay's moments(var) or OpenAIAdam's slots(var): (m, v).
    moments = getattr(optimizer, "moments", None) or getattr(optimizer, "slots", None)
    if moments is not None:
        trainable = {id(v) for v in model.trainable_variables}
        for name, var in names.items():
            if id(var) in trainable:
                m, v = moments(var)
                state[f"{name}/adam_m"] = m
                state[f"{name}/adam_v"] = v
    state.update(_random_state_map(model))
    return state


def write_checkpoint(model, output_dir: str, step: int, kept: list[str] | None = None,
                     keep_checkpoint_max: int = 5, optimizer=None) -> str:
    """Writes `output_dir/model.ckpt-<step>` (original names + `global_step`, and with an
    optimizer the whole training state, see `training_state_map`) atomically, updates the
    `checkpoint` state file and deletes the oldest checkpoints beyond `keep_checkpoint_max`.

    `kept` is accepted for compatibility and ignored (the state file says what is kept).
    Returns the prefix.
    """
    del kept
    tensors: dict = dict(training_state_map(model, optimizer) if optimizer is not None
                         else lora_variable_map(model, checkpoint_variable_map))
    tensors.update(lora_variable_map(model, checkpoint_variable_map, alphas=True))
    tensors["global_step"] = np.int64(step)
    return write_step_checkpoint(tensors, output_dir, step, keep_checkpoint_max)


def _resume(model, optimizer, prefix: str) -> int:
    """Restores the training state of `prefix` into `model` and `optimizer`; returns its step."""
    step = checkpoint_global_step(prefix)
    if step is None:
        raise CheckpointError(f"checkpoint {prefix} has no 'global_step'; it is not a training "
                              "checkpoint of this loop (move it out of --output_dir, or pass it "
                              "as --init_checkpoint)")
    state = training_state_map(model, optimizer)
    weights = lora_variable_map(model, checkpoint_variable_map)
    extra = {n: v for n, v in state.items() if n not in weights}
    _, missing = assign_from_checkpoint(prefix, weights, extra)
    if missing:
        logging.warning("%s holds the weights but not %d of the optimizer slots / dropout "
                        "streams (e.g. %s); they restart from zero, so training continues but "
                        "not exactly as an uninterrupted run", prefix, len(missing), missing[0])
    optimizer.iterations.assign(step)
    logging.info("Resumed from %s at step %d", prefix, step)
    return step


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------
def _check_arrays(arrays: Mapping[str, np.ndarray], keys: Sequence[str]) -> int:
    if not arrays:
        raise ValueError("no input arrays")
    missing = [k for k in keys if k not in arrays]
    if missing:
        raise ValueError(f"input arrays lack {missing} (have {sorted(arrays)})")
    sizes = {k: len(v) for k, v in arrays.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"input arrays differ in their number of examples: {sizes}")
    return next(iter(sizes.values()))


def _replica_loss(loss_value, ctx: tf.distribute.ReplicaContext) -> tf.Tensor:
    """This replica's share of the global-batch loss (the shares sum to the global loss)."""
    if isinstance(loss_value, (tuple, list)):
        loss_sum, weight = (tf.cast(x, tf.float32) for x in loss_value)
        total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.stop_gradient(weight))
        return loss_sum / tf.maximum(total, 1.0)
    loss = tf.cast(loss_value, tf.float32)
    # A mean over this replica's examples; every replica has the same number of them.
    return loss / ctx.num_replicas_in_sync if ctx.num_replicas_in_sync > 1 else loss


@contextlib.contextmanager
def fused_block_kernels(model: keras.layers.Layer, enabled: bool = True):
    """While tracing inside it, every `BertTransformerBlock` of `model` trains with the XLA-fused
    kernels the pretraining trainer uses (the blocks' `xla_gelu_in_training`, see
    `BertTransformerBlock`): the FFN's GELU and each dropout + residual + LayerNorm (and what
    else the blocks fuse in training) as one forward and one backward kernel each, instead of
    tens of separate passes over [rows, H] tensors. The dropout layers draw the same masks from
    the same streams; the values equal the op-by-op path's up to float rounding (the order of
    the LayerNorm reductions). Inference (training=False) is unchanged.

    The blocks' setting is restored on exit, so the model's config (and so its saved and
    exported forms) keeps its own value; a `tf.function` traced inside keeps the fused graph.
    Models without BERT blocks (GPT-1 trains fused already) are left as they are.
    """
    layers = model._flatten_layers(include_self=True)  # noqa: SLF001 (Keras' own walk)
    blocks = [layer for layer in layers if isinstance(layer, BertTransformerBlock)]
    saved = [block.xla_gelu_in_training for block in blocks]
    try:
        if enabled:
            for block in blocks:
                block.xla_gelu_in_training = True
        yield
    finally:
        for block, value in zip(blocks, saved):
            block.xla_gelu_in_training = value


def make_train_step(model: keras.Model, optimizer, loss_fn: LossFn,
                    input_keys: Sequence[str] = ENCODER_INPUT_KEYS, clip_norm: float = 1.0,
                    padded_length: int | None = None, length_key: str | None = None,
                    gradient_accumulation_steps: int = 1, fused_kernels: bool = False):
    """The per-replica step: forward (training=True), `loss_fn`, gradients summed over the
    replicas and clipped by global norm, update. Run it with `strategy.run` (or directly on one
    device). Returns `step(batch) -> {"loss", "learning_rate", "grad_norm"}` (scalars; the loss
    is the global batch's, the same on every replica).

    With `padded_length` (S) and `length_key` (the array whose last axis is the batch's cut
    sequence length L), batches may be cut to L <= S: dropout draws the masks of the S-padded
    batch (`dropout_masks_at_padded_length`).

    `gradient_accumulation_steps` k > 1: the batch's gradient is computed in k sequential
    micro-batches (`bert_tf.training.accumulation`: the same update, one micro-batch's
    activations in memory); each replica's batch must be divisible by k.

    `fused_kernels`: the forward pass runs under `fused_block_kernels(model)` (BERT blocks'
    XLA-fused GELU and dropout + residual + LayerNorm; same masks, same values up to float
    rounding); False keeps the model's own setting (the original op pattern by default)."""
    input_keys = tuple(input_keys)
    if (padded_length is None) != (length_key is None):
        raise ValueError("padded_length and length_key go together")
    check_accumulation(gradient_accumulation_steps)
    optimizer.aggregate_gradients = False  # the step all-reduces itself, before clipping

    def step(batch):
        ctx = tf.distribute.get_replica_context()
        learning_rate = optimizer.learning_rate  # at the pre-update iteration count
        variables = model.trainable_variables
        with tf.GradientTape() as tape, _padded_dropout(batch), _fused():
            outputs = model({k: batch[k] for k in input_keys}, training=True)
            share = _replica_loss(loss_fn(outputs, batch), ctx)
        grads = tape.gradient(share, variables)
        # Variables without a gradient (e.g. an unused pooler) are skipped, as the original does.
        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
        grads = [g for g, _ in pairs]
        if ctx.num_replicas_in_sync > 1:
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        clipped, norm = clip_by_global_norm(grads, clip_norm)
        optimizer.apply_gradients(zip(clipped, [v for _, v in pairs]))
        loss = ctx.all_reduce(tf.distribute.ReduceOp.SUM, share) \
            if ctx.num_replicas_in_sync > 1 else share
        return {"loss": loss, "learning_rate": tf.cast(learning_rate, tf.float32),
                "grad_norm": norm}

    def accumulating_step(batch):
        ctx = tf.distribute.get_replica_context()
        k = gradient_accumulation_steps
        learning_rate = optimizer.learning_rate  # at the pre-update iteration count
        variables = model.trainable_variables
        pair = []  # at trace time: whether loss_fn returns (sum, weight)

        def micro_step(micro):
            with _padded_dropout(micro), _fused():
                outputs = model({key: micro[key] for key in input_keys}, training=True)
                value = loss_fn(outputs, micro)
            pair[:] = [isinstance(value, (tuple, list))]
            if pair[0]:
                loss_sum, weight = (tf.cast(x, tf.float32) for x in value)
                return loss_sum, [loss_sum, tf.stop_gradient(weight)]
            loss = tf.cast(value, tf.float32)
            return loss, [loss, tf.ones([], tf.float32)]

        grads, (loss_sum, weight) = accumulate_gradients(batch, k, variables, micro_step, 2)
        replicas = ctx.num_replicas_in_sync
        if pair[0]:  # Σ sums / the global batch's Σ weights, as `_replica_loss`
            total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, weight) if replicas > 1 else weight
            denominator = tf.maximum(total, 1.0)
        else:  # a mean over each micro-batch: Σ means / (k · replicas)
            denominator = tf.constant(float(k * replicas), tf.float32)
        share = loss_sum / denominator
        pairs = [(g / tf.cast(denominator, g.dtype), v) for g, v in zip(grads, variables)
                 if g is not None]
        grads = [g for g, _ in pairs]
        if replicas > 1:
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        clipped, norm = clip_by_global_norm(grads, clip_norm)
        optimizer.apply_gradients(zip(clipped, [v for _, v in pairs]))
        loss = ctx.all_reduce(tf.distribute.ReduceOp.SUM, share) if replicas > 1 else share
        return {"loss": loss, "learning_rate": tf.cast(learning_rate, tf.float32),
                "grad_norm": norm}

    def _padded_dropout(batch):
        if padded_length is None:
            return contextlib.nullcontext()
        shape = tf.shape(batch[length_key])  # [B, ..., L]
        return dropout_masks_at_padded_length(padded_length, shape[-1],
                                              tf.reduce_prod(shape[:-1]))

    def _fused():
        return fused_block_kernels(model) if fused_kernels else contextlib.nullcontext()

    return step if gradient_accumulation_steps == 1 else accumulating_step


def _train_dataset_fn(arrays: Mapping[str, np.ndarray], options: FinetuneOptions,
                      skip_steps: int, length_key: str | None = None):
    """input_context -> this input pipeline's per-replica batches, after `skip_steps` global
    batches. The example stream (repeat, seeded shuffle) is the same whatever the strategy; the
    global batch k is examples [k·B, (k+1)·B) of it, replica r of n gets its r-th 1/n slice.
    With `length_key`, each per-replica batch is then cut to its longest example by that array
    (`trim_padding`, rounded up to `options.length_multiple`): the same rows, fewer columns."""
    global_batch = options.train_batch_size

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica = ctx.get_per_replica_batch_size(global_batch)
        ds = (tf.data.Dataset.from_tensor_slices(dict(arrays)).repeat()
              .shuffle(buffer_size=options.shuffle_buffer, seed=options.seed)
              .skip(skip_steps * global_batch)
              .batch(per_replica, drop_remainder=True))
        # Per-replica batches in order; pipeline i takes every n-th, so that replica r's part of
        # global batch k is the same rows whatever the number of workers.
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        if length_key is not None:
            ds = ds.map(lambda batch: trim_padding(batch, options.length_multiple, length_key))
        return ds.prefetch(tf.data.AUTOTUNE)

    return dataset_fn


def _progress_bar(target: int, start: int, enabled: bool):
    bar = progress_bar(target, "step", ["loss", "lr"], enabled)
    if bar is not None and start:
        bar.update(start)
    return bar


def _format_eta(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def train_model(model: keras.Model, arrays: Mapping[str, np.ndarray], loss_fn: LossFn,
                options: FinetuneOptions, input_keys: Sequence[str] = ENCODER_INPUT_KEYS,
                strategy: Any = None,
                optimizer_fn: Callable[[], keras.optimizers.Optimizer] | None = None,
                length_key: str | None = "input_mask") -> dict:
    """Fine-tunes `model` until global step `options.num_train_steps`, as the original.

    When `options.output_dir` holds a checkpoint (of an earlier, interrupted run), training
    resumes from it: weights, optimizer slots, step, input position and dropout streams, so the
    result equals the uninterrupted run's (bit-identical on one device). If that checkpoint is
    already at `num_train_steps`, nothing is trained and its weights are loaded.

    Args:
      model: built model, created under `strategy.scope()` when a multi-replica strategy is
        used; called with `{k: batch[k] for k in input_keys}` and training=True.
      arrays: name -> array with the same first dimension N (the examples): the model inputs
        (int32 [N, seq] for BERT) and whatever `loss_fn` reads (e.g. "label_ids" [N]).
      loss_fn: (model outputs, batch) -> loss (see `LossFn`); the batch is one replica's part.
      options: `FinetuneOptions`; `train_batch_size` is the global batch.
      input_keys: which arrays are model inputs.
      strategy: None (the current strategy), a `tf.distribute.Strategy`, a strategy name, or an
        options object with the original's TPU flags (see `distribution.resolve_strategy`).
      optimizer_fn: () -> optimizer (called under the strategy's scope), instead of the
        original's AdamWeightDecay with `options`' schedule (e.g. GPT-1's OpenAIAdam; its
        schedule is its own, the loop still clips to `options.clip_norm`).
      length_key: the array [N, ..., S] whose non-zero entries mark each example's tokens (BERT's
        "input_mask", GPT-1's "mask"), by which `options.length_bucketing` cuts the batches; the
        model must give its real positions the same outputs at any padding (BERT with its input
        mask, a causal GPT). Not cut when None or not among the arrays. The default is used only
        when "input_mask" is one of `input_keys`.

    Returns:
      {"global_step": int, "start_step": int (0, or the step resumed from), "first_loss": float
       (first step run here), "loss": float (last step), "checkpoint": prefix of the last
       checkpoint, "history": [{"step", "loss", "learning_rate", "grad_norm"}] of the steps run,
       "curves": path of curves.png when drawn}.

    Raises:
      ValueError for options that cannot work (e.g. a batch the replicas cannot share, local
      paths with a TPU); CheckpointError for a checkpoint in output_dir that does not fit;
      FloatingPointError naming the step when the loss is NaN or infinite (nothing is saved).
    """
    options.validate()
    strategy = resolve_strategy(strategy)
    if is_tpu_strategy(strategy):
        check_tpu_paths([options.output_dir], "--output_dir")
    check_global_batch(options.train_batch_size, strategy)
    options.check_memory_options(options.train_batch_size, strategy.num_replicas_in_sync)
    checkpoint_variable_map(model)  # builds it
    lora_paths = apply_lora_options(model, options, strategy)  # [] without LoRA
    if options.recompute_activations:
        enable_recompute(model)
    check_model_in_scope(model, strategy)
    num_examples = _check_arrays(arrays, input_keys)
    if num_examples < options.train_batch_size:
        logging.warning("only %d training examples for a batch of %d: each batch repeats "
                        "examples", num_examples, options.train_batch_size)
    chief = is_chief(strategy)
    output_dir = options.output_dir
    tf.io.gfile.makedirs(output_dir)
    if chief and "://" not in output_dir:
        remove_stale_temp_files(output_dir)

    names = {var.path: name
             for name, var in lora_variable_map(model, checkpoint_variable_map).items()}
    with strategy.scope():
        optimizer = optimizer_fn() if optimizer_fn is not None else create_optimizer(
            options.learning_rate, options.num_train_steps, options.num_warmup_steps,
            variable_names=names)
        optimizer.build(model.trainable_variables)
    latest = latest_checkpoint(output_dir)
    start = _resume(model, optimizer, latest) if latest else 0
    num_train_steps = options.num_train_steps
    result = {"global_step": max(start, num_train_steps), "start_step": start,
              "first_loss": float("nan"), "loss": float("nan"), "checkpoint": latest,
              "history": []}
    if start >= num_train_steps:
        logging.info("%s is at step %d >= num_train_steps=%d: nothing to train", latest, start,
                     num_train_steps)
        if lora_paths and chief:
            result["lora_weights"] = save_run_adapters(model, output_dir)
        # A run killed after its last checkpoint but before its curves: draw them now.
        if (options.plot_curves and chief
                and not tf.io.gfile.exists(os.path.join(output_dir, "curves.png"))
                and tf.io.gfile.isdir(os.path.join(output_dir, "train"))):
            result["curves"] = _plot_curves(output_dir)
        return result

    length_key = _length_key(arrays, input_keys, length_key, options, strategy)
    padded_length = np.shape(arrays[length_key])[-1] if length_key else None
    dist = strategy.distribute_datasets_from_function(
        _train_dataset_fn(arrays, options, skip_steps=start, length_key=length_key))
    iterator = iter(dist)
    replica_step = make_train_step(model, optimizer, loss_fn, input_keys, options.clip_norm,
                                   padded_length=padded_length, length_key=length_key,
                                   gradient_accumulation_steps=options.gradient_accumulation_steps,
                                   fused_kernels=options.fused_kernels)

    @tf.function
    def train_step(it):
        per_replica = strategy.run(replica_step, args=(next(it),))
        return {k: strategy.experimental_local_results(v)[0] for k, v in per_replica.items()}

    writer = (tf.summary.create_file_writer(os.path.join(output_dir, "train")) if chief
              else tf.summary.create_noop_writer())
    bar = _progress_bar(num_train_steps, start, options.progress and chief)
    log_every = max(1, min(100, num_train_steps // 10))
    t_start = t_last = time.perf_counter()
    history = result["history"]
    for step in range(start + 1, num_train_steps + 1):
        out = {k: float(v) for k, v in train_step(iterator).items()}
        if not math.isfinite(out["loss"]):
            raise FloatingPointError(
                f"training loss is {out['loss']} at step {step}; lower --learning_rate or check "
                f"the data (the last checkpoint is {result['checkpoint'] or '(none)'})")
        history.append({"step": step, **out})
        with writer.as_default(step=step):
            tf.summary.scalar("loss", out["loss"])
            tf.summary.scalar("learning_rate", out["learning_rate"])
            tf.summary.scalar("grad_norm", out["grad_norm"])
        if bar is not None:
            bar.update(step, [("loss", out["loss"]), ("lr", out["learning_rate"])])
        if step % log_every == 0 or step == num_train_steps:
            now = time.perf_counter()
            done = step - start
            steps_per_s = min(log_every, done) / max(now - t_last, 1e-9)
            eta = (now - t_start) / done * (num_train_steps - step)
            t_last = now
            logging.info("step %d/%d loss=%.4f lr=%.3g grad_norm=%.3f (%.2f steps/s, ETA %s)",
                         step, num_train_steps, out["loss"], out["learning_rate"],
                         out["grad_norm"], steps_per_s, _format_eta(eta))
            with writer.as_default(step=step):
                tf.summary.scalar("steps_per_second", steps_per_s)
        if step % options.save_checkpoints_steps == 0 or step == num_train_steps:
            writer.flush()
            if chief:
                result["checkpoint"] = write_checkpoint(
                    model, output_dir, step, keep_checkpoint_max=options.keep_checkpoint_max,
                    optimizer=optimizer)
    writer.flush()
    result.update(global_step=num_train_steps, first_loss=history[0]["loss"],
                  loss=history[-1]["loss"])
    if lora_paths and chief:  # the adapters and the head, one small file
        result["lora_weights"] = save_run_adapters(model, output_dir)
    if options.plot_curves and chief:
        result["curves"] = _plot_curves(output_dir)
    return result


def _length_key(arrays: Mapping[str, np.ndarray], input_keys: Sequence[str],
                length_key: str | None, options: FinetuneOptions, strategy) -> str | None:
    """The array by which training batches are cut, or None for the padded path."""
    if not options.length_bucketing or not length_key or length_key not in arrays:
        return None
    if length_key == "input_mask" and length_key not in input_keys:
        return None  # the default, for models that read an input mask (BERT)
    if is_tpu_strategy(strategy) or np.ndim(arrays[length_key]) < 2:
        return None  # TPUs want fixed shapes
    return length_key


def _plot_curves(output_dir: str) -> str | None:
    from bert_tf.plotting import plot_training_curves

    png = os.path.join(output_dir, "curves.png")
    try:  # curves are a by-product: never fail a run for them
        plot_training_curves(os.path.join(output_dir, "train"), png,
                             title=f"fine-tuning: {output_dir}")
    except (ImportError, OSError, ValueError, tf.errors.OpError) as e:
        logging.warning("could not draw %s: %s", png, e)
        return None
    logging.info("Training curves: %s", png)
    return png


# ---------------------------------------------------------------------------------------------
# Prediction
# ---------------------------------------------------------------------------------------------
def model_strategy(model) -> tf.distribute.Strategy:
    """The `tf.distribute` strategy under whose scope `model`'s variables were created (the
    current strategy when they are plain variables, e.g. a model built outside any scope)."""
    for variable in model.variables[:1]:
        value = variable if isinstance(variable, tf.Variable) else variable.value
        strategy = getattr(value, "_distribute_strategy", None)
        if strategy is not None:
            return strategy
    return tf.distribute.get_strategy()


def _is_distributed(strategy: tf.distribute.Strategy) -> bool:
    return (strategy.num_replicas_in_sync > 1 or is_tpu_strategy(strategy)
            or strategy.extended._in_multi_worker_mode())  # noqa: SLF001 (TF's own check)


def predict_arrays(model: keras.Model, arrays: Mapping[str, np.ndarray], batch_size: int,
                   output_keys: Sequence[str],
                   input_keys: Sequence[str] = ENCODER_INPUT_KEYS,
                   progress: bool = True,
                   length_bucketing: bool = True,
                   strategy: Any = None) -> dict[str, np.ndarray]:
    """Runs the model (training=False) on every example, in order; the last partial batch is kept.

    Prediction and evaluation run as training does: each global batch of `batch_size` examples
    is split evenly across the strategy's replicas and the model runs under `strategy.run`
    (`_predict_with_strategy`); the replicas' outputs are gathered back in example order. The
    last partial batch is padded (repeating its last row) to the full batch, so that every
    replica has the same static shape (as TPUs need) and the step is traced once; the padded
    rows' outputs are dropped. Either path's `tf.function` is kept with the model
    (`length_batching.cached_model_function`): repeated calls (evaluation every epoch, then
    prediction; a user's loop) trace it once per model, outputs and input signature (and, on
    the padded path, batch size), not once per call.

    Args:
      model: built model (under the strategy's scope when the strategy has several replicas).
      arrays: name -> array [N, ...]; only `input_keys` are read.
      batch_size: examples per forward pass, over all replicas (the original's
        `--predict_batch_size` / `--eval_batch_size`); a multiple of the number of replicas.
      output_keys: which model outputs to return.
      input_keys: which arrays are model inputs.
      progress: show a Keras progress bar (examples done of N, with ETA) on stdout.
      length_bucketing: on one replica only, with an `input_mask` among the inputs, run
        length-sorted batches cut to their longest example rounded up to a multiple of 8, rows
        returned in the original order (`bert_tf.training.length_batching.predict_length_bucketed`):
        the same outputs up to float rounding; per-position outputs past a batch's length are
        -10000. False, or a strategy with several replicas or a TPU: every batch at the
        arrays' full length.
      strategy: None (the strategy `model`'s variables were created under, see
        `model_strategy`), a `tf.distribute.Strategy`, a name or options (`resolve_strategy`).

    Returns:
      output key -> NumPy array [N, ...] (the model's output rows in example order).

    Raises:
      ValueError: a batch size that is not positive or that the replicas cannot share, arrays
        of different lengths, or an output the model does not have.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    input_keys = tuple(input_keys)
    output_keys = tuple(output_keys)
    _check_arrays({k: arrays[k] for k in input_keys if k in arrays} or arrays, input_keys)
    strategy = model_strategy(model) if strategy is None else resolve_strategy(strategy)
    if length_bucketing and "input_mask" in input_keys and not _is_distributed(strategy):
        from bert_tf.training.length_batching import predict_length_bucketed

        return predict_length_bucketed(model, arrays, batch_size, output_keys, input_keys,
                                       progress=progress)
    return _predict_with_strategy(model, {k: np.asarray(arrays[k]) for k in input_keys},
                                  batch_size, output_keys, strategy, progress)


def _predict_with_strategy(model: keras.Model, inputs: Mapping[str, np.ndarray],
                           batch_size: int, output_keys: tuple[str, ...],
                           strategy: tf.distribute.Strategy, progress: bool
                           ) -> dict[str, np.ndarray]:
    """`predict_arrays` through `strategy.run`: global batch k is examples [k·B, (k+1)·B) of the
    (padded) arrays, replica r of n gets its r-th 1/n slice (as in training), and
    `strategy.gather` puts the replicas' outputs back in that order on every worker."""
    check_global_batch(batch_size, strategy, "--predict_batch_size (or --eval_batch_size)")
    num_examples = len(next(iter(inputs.values())))
    num_batches = -(-num_examples // batch_size)
    padding = num_batches * batch_size - num_examples
    if padding and num_examples:
        inputs = {k: np.concatenate([v, np.repeat(v[-1:], padding, axis=0)])
                  for k, v in inputs.items()}

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica = ctx.get_per_replica_batch_size(batch_size)
        ds = tf.data.Dataset.from_tensor_slices(dict(inputs)).batch(per_replica,
                                                                   drop_remainder=True)
        return ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).prefetch(2)

    def make_predict_step(model_ref):
        def replica_step(batch):
            return select_outputs(model_ref()(batch, training=False), output_keys)

        @tf.function
        def predict_step(iterator):
            per_replica = strategy.run(replica_step, args=(next(iterator),))
            return {k: strategy.gather(v, axis=0) for k, v in per_replica.items()}

        return predict_step

    # Kept with the model: traced once per strategy, outputs and batch shape (the iterator's
    # element spec), not once per call. The strategy is held by the function, so its id stays
    # its own while the entry lives.
    predict_step = cached_model_function(
        model, ("predict_with_strategy", id(strategy), output_keys), make_predict_step)

    parts: dict[str, list[np.ndarray]] = {k: [] for k in output_keys}
    if num_examples:
        iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
        bar = progress_bar(num_examples, "example", enabled=progress)
        for index in range(num_batches):
            out = predict_step(iterator)
            start = index * batch_size
            size = min(batch_size, num_examples - start)
            for k in output_keys:
                parts[k].append(out[k].numpy()[:size])
            if bar is not None:
                bar.update(start + size)
            if (start + size) // 1000 > start // 1000:
                logging.info("Processing example: %d of %d", start + size, num_examples)
    return {k: np.concatenate(parts[k], axis=0) if parts[k] else np.zeros((0,), np.float32)
            for k in output_keys}


def restore_for_prediction(model, output_dir: str, init_checkpoint: str | None) -> int | None:
    """Weights for a run without training, as the original's Estimator picks them: the latest
    checkpoint in `output_dir` (head included), else `init_checkpoint` (else random weights, with
    a warning). Returns the restored checkpoint's `global_step`, or None."""
    latest = latest_checkpoint(output_dir)
    if latest:
        logging.info("Using the latest checkpoint in --output_dir: %s", latest)
        init_model(model, None)
        load_checkpoint(model, latest, heads="required")
        return checkpoint_global_step(latest)
    if not init_checkpoint:
        logging.warning("no --init_checkpoint and no checkpoint in --output_dir: "
                        "predicting with randomly initialised weights")
    init_model(model, init_checkpoint)
    return None
