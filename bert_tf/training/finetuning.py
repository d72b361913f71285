"""The fine-tuning loop shared by every fine-tuning script (GLUE, SQuAD, NER, SWAG, ...).

It is the original `run_classifier.py` / `run_squad.py` training as one function, without
TPUEstimator: AdamWeightDecay with linear warm-up and linear decay (`create_optimizer`, decay
decided on the original TF1 variable names), gradients clipped to global norm 1.0, the training
input repeated, shuffled over a 100-example buffer and batched with the last partial batch
dropped. Checkpoints are written in the original TF1 format (`model.ckpt-<step>` + a
`checkpoint` state file) so that the original code, `tf.train.latest_checkpoint` and
`load_original_checkpoint` all read them.

  init_model(model, init_checkpoint)             # TF1 checkpoint or our encoder SavedModel
  train_model(model, arrays, loss_fn, options)   # -> {"global_step", "first_loss", "loss", ...}
  predict_arrays(model, arrays, batch_size, ["logits"])
  latest_checkpoint(output_dir)

A task supplies its features as NumPy arrays (one row per example) and a loss
`loss_fn(model_outputs, batch) -> scalar`; everything else is here.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Callable, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.checkpoints import (CheckpointError, encoder_variable_map, load_original_checkpoint,
                                 resolve_checkpoint_prefix, variable_map, write_tf1_checkpoint)
from bert_tf.io_utils import atomic_write_text
from bert_tf.modeling import BertConfig, BertEncoder
from bert_tf.training.optimization import clip_by_global_norm, create_optimizer

ENCODER_INPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")

LossFn = Callable[[dict, dict], tf.Tensor]
"""(model outputs, batch) -> scalar float32 loss; both dicts of tensors keyed by name."""


@dataclasses.dataclass
class FinetuneOptions:
    """Hyper-parameters of one fine-tuning run (the original scripts' flags of the same names).

    Attributes:
      output_dir: where `model.ckpt-<step>` checkpoints and the `checkpoint` file are written.
      learning_rate: peak learning rate (after warm-up).
      num_train_steps: number of batches to train on (see `num_train_and_warmup_steps`).
      num_warmup_steps: steps of linear warm-up from 0.
      train_batch_size: examples per step.
      save_checkpoints_steps: write a checkpoint every this many steps (and at the end).
      keep_checkpoint_max: keep this many most recent checkpoints (older ones are deleted).
      clip_norm: gradients are clipped to this global norm (1.0 in the original).
      seed: seed of the input shuffle.
      shuffle_buffer: shuffle buffer size in examples (100 in the original).
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

    def validate(self) -> None:
        """ValueError naming the option when a value cannot be used."""
        for name in ("num_train_steps", "train_batch_size", "save_checkpoints_steps",
                     "keep_checkpoint_max", "shuffle_buffer"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.num_warmup_steps < 0:
            raise ValueError(f"num_warmup_steps must be >= 0, got {self.num_warmup_steps}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        if not self.clip_norm > 0:
            raise ValueError(f"clip_norm must be positive, got {self.clip_norm}")


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
# Variable names and checkpoints
# ---------------------------------------------------------------------------------------------
def _encoder_of(model) -> BertEncoder | None:
    if isinstance(model, BertEncoder):
        return model
    encoder = getattr(model, "encoder", None)
    return encoder if isinstance(encoder, BertEncoder) else None


def _ensure_built(model) -> None:
    if not model.built and hasattr(model, "build_from_config_shapes"):
        model.build_from_config_shapes()
    if not model.built:
        raise ValueError(f"{type(model).__name__} is not built; build it (call it once on a "
                         "batch) before fine-tuning")


def checkpoint_variable_map(model) -> dict[str, tf.Variable]:
    """Checkpoint name -> variable for every weight of `model`.

    BERT models of `bert_tf.modeling` get the original TF1 names (`checkpoints.variable_map`).
    Another model (e.g. a task model built around a `BertEncoder`) gets the original names for
    its `encoder` and its Keras variable paths for the rest.
    """
    _ensure_built(model)
    try:
        return dict(variable_map(model))
    except (TypeError, AttributeError):
        pass
    names: dict[str, tf.Variable] = {}
    encoder = _encoder_of(model)
    taken: set[int] = set()
    if encoder is not None:
        for name, var in encoder_variable_map(encoder).items():
            names[name] = var
            taken.add(id(var))
    # model.weights, not .variables: seed-generator states are named by a process-wide counter
    for var in model.weights:
        if id(var) not in taken:
            names[var.path] = var
    return names


def latest_checkpoint(output_dir: str) -> str | None:
    """The newest checkpoint prefix in `output_dir` (from its `checkpoint` file), or None."""
    if not output_dir or not os.path.isdir(output_dir):
        return None
    try:
        return tf.train.latest_checkpoint(output_dir)
    except (tf.errors.OpError, ValueError):
        return None


def write_checkpoint(model, output_dir: str, step: int, kept: list[str],
                     keep_checkpoint_max: int) -> str:
    """Writes `output_dir/model.ckpt-<step>` (original names + `global_step`) atomically, deletes
    the oldest of `kept` beyond `keep_checkpoint_max`, and rewrites the `checkpoint` state file.

    `kept` (prefixes written by this run, oldest first) is updated in place. Returns the prefix.
    """
    prefix = os.path.join(output_dir, f"model.ckpt-{step}")
    tensors: dict = dict(checkpoint_variable_map(model))
    tensors["global_step"] = np.int64(step)
    write_tf1_checkpoint(tensors, prefix, overwrite=True)
    if prefix not in kept:
        kept.append(prefix)
    while len(kept) > keep_checkpoint_max:
        old = kept.pop(0)
        for suffix in (".index", ".data-00000-of-00001"):
            try:
                os.remove(old + suffix)
            except OSError:
                pass
    state = [f'model_checkpoint_path: "{os.path.basename(prefix)}"']
    state += [f'all_model_checkpoint_paths: "{os.path.basename(p)}"' for p in kept]
    atomic_write_text(os.path.join(output_dir, "checkpoint"), "\n".join(state) + "\n")
    logging.info("Saved checkpoint %s", prefix)
    return prefix


def _load_named(model, prefix: str, required_all: bool) -> dict[str, list[str]]:
    """Loads a checkpoint by `checkpoint_variable_map` names into a model that is not one of the
    `bert_tf.modeling` models. Encoder variables are always required; the others too when
    `required_all`, else missing ones keep their initialisation."""
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    encoder = _encoder_of(model)
    encoder_names = set(encoder_variable_map(encoder)) if encoder is not None else set()
    to_assign, initialized = [], []
    for name, var in checkpoint_variable_map(model).items():
        if name not in shapes:
            if required_all or name in encoder_names:
                raise CheckpointError(f"checkpoint {prefix} has no variable '{name}' (needed for "
                                      f"{var.path}, shape {tuple(var.shape)})")
            initialized.append(name)
            continue
        if tuple(shapes[name]) != tuple(var.shape):
            raise CheckpointError(
                f"checkpoint {prefix}: variable '{name}' has shape {tuple(shapes[name])}, the "
                f"model expects {tuple(var.shape)} (is the bert_config.json the one of this "
                "checkpoint?)")
        to_assign.append((name, var))
    values = [reader.get_tensor(name) for name, _ in to_assign]
    for (_, var), value in zip(to_assign, values):
        var.assign(value.astype(var.dtype))
    logging.info("Loaded %d variables from %s; %d newly initialised", len(to_assign), prefix,
                 len(initialized))
    return {"loaded": [n for n, _ in to_assign], "initialized": initialized}


def load_checkpoint(model, path: str, heads: str = "required") -> dict[str, list[str]]:
    """Loads a checkpoint written by `train_model` (or any original-format one) into `model`.

    Args:
      model: the model (built, or with `build_from_config_shapes`).
      path: checkpoint prefix, one of its files, or a directory with a `checkpoint` file.
      heads: "required" (every head variable must be there: a fine-tuned checkpoint),
        "if_present" (a pretraining checkpoint: missing head variables keep their fresh
        initialisation) or "skip" (BERT models only: the encoder alone).

    Raises:
      CheckpointError naming the checkpoint and the variable that is missing or mis-shaped.
    """
    _ensure_built(model)
    try:
        variable_map(model)
        known = True
    except (TypeError, AttributeError):
        known = False
    if known:
        return load_original_checkpoint(model, path, heads=heads)
    return _load_named(model, resolve_checkpoint_prefix(path), required_all=heads == "required")


def is_encoder_savedmodel(path: str) -> bool:
    """Whether `path` is a directory holding a SavedModel (e.g. `export_encoder_savedmodel`'s)."""
    return bool(path) and os.path.isdir(path) and (
        os.path.exists(os.path.join(path, "saved_model.pb"))
        or os.path.exists(os.path.join(path, "saved_model.pbtxt")))


def _init_from_encoder_savedmodel(model, export_dir: str) -> None:
    encoder = _encoder_of(model)
    if encoder is None:
        raise CheckpointError(f"{type(model).__name__} has no BertEncoder to initialise from the "
                              f"SavedModel {export_dir}")
    try:
        loaded = tf.saved_model.load(export_dir)
    except (OSError, ValueError, tf.errors.OpError) as e:
        raise CheckpointError(f"cannot load the SavedModel {export_dir}: {e}") from e
    if not hasattr(loaded, "bert_config_json") or not hasattr(loaded, "variables"):
        raise CheckpointError(
            f"{export_dir} is a SavedModel but not a bert_tf encoder export (no bert_config_json/"
            "variables; it should come from bert_tf.export.export_encoder_savedmodel)")
    source = os.path.join(export_dir, "(bert_config_json)")
    saved_config = BertConfig.from_dict(
        json.loads(loaded.bert_config_json.numpy().decode("utf-8")), source=source)
    # The export holds `encoder.variables` in creation order; an encoder built from the same
    # config has the same order, which gives every saved value its original name.
    reference = BertEncoder(saved_config)
    reference.build_from_config_shapes()
    path_to_name = {v.path: n for n, v in encoder_variable_map(reference).items()}
    saved_vars = list(loaded.variables)
    if len(saved_vars) != len(reference.variables):
        raise CheckpointError(f"{export_dir}: {len(saved_vars)} variables, an encoder of its "
                              f"config has {len(reference.variables)}")
    saved = {}
    for ref_var, saved_var in zip(reference.variables, saved_vars):
        name = path_to_name[ref_var.path]
        if tuple(saved_var.shape) != tuple(ref_var.shape):
            raise CheckpointError(f"{export_dir}: variable '{name}' has shape "
                                  f"{tuple(saved_var.shape)}, its config says "
                                  f"{tuple(ref_var.shape)}")
        saved[name] = saved_var
    targets = encoder_variable_map(encoder)
    for name, var in targets.items():
        if name not in saved:
            raise CheckpointError(f"SavedModel {export_dir} has no variable '{name}' (needed for "
                                  f"{var.path}, shape {tuple(var.shape)})")
        if tuple(saved[name].shape) != tuple(var.shape):
            raise CheckpointError(
                f"SavedModel {export_dir}: variable '{name}' has shape "
                f"{tuple(saved[name].shape)}, the model expects {tuple(var.shape)} (is the "
                "bert_config.json the one of this SavedModel?)")
    if saved_config.hidden_act != encoder.config.hidden_act:
        raise CheckpointError(f"SavedModel {export_dir} was exported with hidden_act="
                              f"{saved_config.hidden_act!r}, the model uses "
                              f"{encoder.config.hidden_act!r}")
    for name, var in targets.items():
        var.assign(tf.cast(saved[name], var.dtype))
    logging.info("Initialised %d encoder variables from the SavedModel %s; head variables keep "
                 "their fresh initialisation", len(targets), export_dir)


def init_model(model, init_checkpoint: str | None) -> None:
    """Initialises `model` (building it if needed) before fine-tuning.

    Args:
      model: a `bert_tf.modeling` model (or a model with a `BertEncoder` as `.encoder`).
      init_checkpoint: None (keep the fresh weights); an original-format (TF1-named) checkpoint
        prefix, file or directory — Google's `bert_model.ckpt`, a converted Hugging Face model, or
        one of ours (`model.ckpt-N`), whose head variables are loaded when present; or a directory
        holding our encoder SavedModel (`bert_tf.export.export_encoder_savedmodel`), which gives
        the encoder weights.

    Raises:
      CheckpointError naming the file and the variable when a variable is missing or its shape
      does not fit (e.g. a checkpoint of another model size).
    """
    _ensure_built(model)
    if not init_checkpoint:
        return
    if is_encoder_savedmodel(init_checkpoint):
        _init_from_encoder_savedmodel(model, init_checkpoint)
    else:
        load_checkpoint(model, init_checkpoint, heads="if_present")


# ---------------------------------------------------------------------------------------------
# Training and prediction
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


def make_train_step(model: keras.Model, optimizer, loss_fn: LossFn,
                    input_keys: Sequence[str] = ENCODER_INPUT_KEYS, clip_norm: float = 1.0):
    """A compiled step: forward (training=True), `loss_fn`, gradients clipped by global norm,
    update. Returns `step(batch) -> {"loss", "learning_rate", "grad_norm"}` (scalars)."""
    input_keys = tuple(input_keys)

    @tf.function
    def step(batch):
        learning_rate = optimizer.learning_rate  # at the pre-update iteration count
        with tf.GradientTape() as tape:
            outputs = model({k: batch[k] for k in input_keys}, training=True)
            loss = tf.cast(loss_fn(outputs, batch), tf.float32)
        variables = model.trainable_variables
        grads = tape.gradient(loss, variables)
        clipped, norm = clip_by_global_norm(grads, clip_norm)
        # Variables without a gradient (e.g. an unused pooler) are skipped, as the original does.
        optimizer.apply_gradients([(g, v) for g, v in zip(clipped, variables) if g is not None])
        return {"loss": loss, "learning_rate": tf.convert_to_tensor(learning_rate),
                "grad_norm": norm}

    return step


def train_model(model: keras.Model, arrays: Mapping[str, np.ndarray], loss_fn: LossFn,
                options: FinetuneOptions,
                input_keys: Sequence[str] = ENCODER_INPUT_KEYS) -> dict:
    """Fine-tunes `model` for `options.num_train_steps` batches, as the original.

    Args:
      model: built model; called with `{k: batch[k] for k in input_keys}` and training=True.
      arrays: name -> array with the same first dimension N (the examples): the model inputs
        (int32 [N, seq] for BERT) and whatever `loss_fn` reads (e.g. "label_ids" [N]).
      loss_fn: (model outputs, batch) -> scalar loss.
      options: `FinetuneOptions`.
      input_keys: which arrays are model inputs.

    Returns:
      {"global_step": int, "first_loss": float, "loss": float (last step),
       "checkpoint": prefix of the last checkpoint written}.

    Raises:
      FloatingPointError naming the step when the loss is NaN or infinite.
    """
    options.validate()
    num_examples = _check_arrays(arrays, input_keys)
    if num_examples < options.train_batch_size:
        logging.warning("only %d training examples for a batch of %d: each batch repeats "
                        "examples", num_examples, options.train_batch_size)
    os.makedirs(options.output_dir, exist_ok=True)
    dataset = (tf.data.Dataset.from_tensor_slices(dict(arrays)).repeat()
               .shuffle(buffer_size=options.shuffle_buffer, seed=options.seed)
               .batch(options.train_batch_size, drop_remainder=True)
               .prefetch(tf.data.AUTOTUNE))
    names = {var.path: name for name, var in checkpoint_variable_map(model).items()}
    optimizer = create_optimizer(options.learning_rate, options.num_train_steps,
                                 options.num_warmup_steps, variable_names=names)
    step_fn = make_train_step(model, optimizer, loss_fn, input_keys, options.clip_norm)
    kept: list[str] = []
    num_train_steps = options.num_train_steps
    log_every = max(1, min(100, num_train_steps // 10))
    t_start = time.time()
    last: dict = {}
    first_loss = float("nan")
    checkpoint = None
    for step, batch in enumerate(dataset.take(num_train_steps), start=1):
        last = step_fn(batch)
        loss = float(last["loss"])
        if step == 1:
            first_loss = loss
        if not math.isfinite(loss):
            raise FloatingPointError(f"training loss is {loss} at step {step}; lower "
                                     "--learning_rate or check the data")
        if step % log_every == 0 or step == num_train_steps:
            elapsed = time.time() - t_start
            logging.info("step %d/%d loss=%.4f lr=%.3g grad_norm=%.3f (%.2f steps/s)", step,
                         num_train_steps, loss, float(last["learning_rate"]),
                         float(last["grad_norm"]), step / max(elapsed, 1e-9))
        if step % options.save_checkpoints_steps == 0 or step == num_train_steps:
            checkpoint = write_checkpoint(model, options.output_dir, step, kept,
                                          options.keep_checkpoint_max)
    return {"global_step": num_train_steps, "first_loss": first_loss,
            "loss": float(last["loss"]) if last else float("nan"), "checkpoint": checkpoint}


def predict_arrays(model: keras.Model, arrays: Mapping[str, np.ndarray], batch_size: int,
                   output_keys: Sequence[str],
                   input_keys: Sequence[str] = ENCODER_INPUT_KEYS) -> dict[str, np.ndarray]:
    """Runs the model (training=False) on every example, in order; the last partial batch is kept.

    Args:
      model: built model.
      arrays: name -> array [N, ...]; only `input_keys` are read.
      batch_size: examples per forward pass.
      output_keys: which model outputs to return.
      input_keys: which arrays are model inputs.

    Returns:
      output key -> NumPy array [N, ...] (the model's output rows concatenated).
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    input_keys = tuple(input_keys)
    output_keys = tuple(output_keys)
    _check_arrays({k: arrays[k] for k in input_keys if k in arrays} or arrays, input_keys)

    @tf.function
    def predict_step(batch):
        outputs = model(batch, training=False)
        missing = [k for k in output_keys if k not in outputs]
        if missing:
            raise ValueError(f"the model has no outputs {missing} (it has {sorted(outputs)})")
        return {k: outputs[k] for k in output_keys}

    inputs = {k: np.asarray(arrays[k]) for k in input_keys}
    num_examples = len(next(iter(inputs.values())))
    parts: dict[str, list[np.ndarray]] = {k: [] for k in output_keys}
    for start in range(0, num_examples, batch_size):
        batch = {k: v[start:start + batch_size] for k, v in inputs.items()}
        size = len(next(iter(batch.values())))
        if size < batch_size:
            # The last partial batch is padded (repeating its last row) to the full batch shape,
            # so that the step is traced once; the padded rows' outputs are dropped.
            batch = {k: np.concatenate([v, np.repeat(v[-1:], batch_size - size, axis=0)])
                     for k, v in batch.items()}
        out = predict_step(batch)
        for k in output_keys:
            parts[k].append(out[k].numpy()[:size])
        if (start + size) // 1000 > start // 1000:
            logging.info("Processing example: %d", start + size)
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
        try:
            return int(tf.train.load_checkpoint(latest).get_tensor("global_step"))
        except (tf.errors.OpError, ValueError, KeyError):
            return None
    if not init_checkpoint:
        logging.warning("no --init_checkpoint and no checkpoint in --output_dir: "
                        "predicting with randomly initialised weights")
    init_model(model, init_checkpoint)
    return None
