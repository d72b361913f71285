"""Original TF1 checkpoints (`bert_model.ckpt`) <-> Keras variables of `bert_tf.modeling` models.

The original release names variables `bert/embeddings/word_embeddings`,
`bert/encoder/layer_<i>/attention/self/query/kernel`, `cls/predictions/output_bias`, ... (see
`../shared/fixtures/original/checkpoint/variables.txt`). `variable_map(model)` gives that name for
every weight of a model, so loading and saving are plain name lookups, in both directions.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
import tempfile
from typing import Mapping

from bert_tf.errors import UserInputError

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.models import (BertClassifier, BertMultipleChoice, BertPretrainer,
                                     BertSpanLabeler, BertTokenClassifier)


class CheckpointError(UserInputError):
    """A checkpoint that does not fit the model: missing variable, wrong shape, unreadable file."""


def _dense(prefix: str, dense) -> dict:
    return {f"{prefix}/kernel": dense.kernel, f"{prefix}/bias": dense.bias}


def _layer_norm(prefix: str, ln) -> dict:
    return {f"{prefix}/gamma": ln.gamma, f"{prefix}/beta": ln.beta}


def encoder_variable_map(encoder: BertEncoder, prefix: str = "bert") -> dict[str, tf.Variable]:
    """Original name -> variable for every weight of a `BertEncoder` (16·L + 7 variables)."""
    if not encoder.built:
        encoder.build_from_config_shapes()
    emb = encoder.embeddings
    names = {
        f"{prefix}/embeddings/word_embeddings": emb.word_embeddings,
        f"{prefix}/embeddings/token_type_embeddings": emb.token_type_embeddings,
        f"{prefix}/embeddings/position_embeddings": emb.position_embeddings,
        **_layer_norm(f"{prefix}/embeddings/LayerNorm", emb.layer_norm),
    }
    for i, block in enumerate(encoder.blocks):
        p = f"{prefix}/encoder/layer_{i}"
        names.update(_dense(f"{p}/attention/self/query", block.attention.query))
        names.update(_dense(f"{p}/attention/self/key", block.attention.key))
        names.update(_dense(f"{p}/attention/self/value", block.attention.value))
        names.update(_dense(f"{p}/attention/output/dense", block.attention_output))
        names.update(_layer_norm(f"{p}/attention/output/LayerNorm", block.attention_layer_norm))
        names.update(_dense(f"{p}/intermediate/dense", block.intermediate))
        names.update(_dense(f"{p}/output/dense", block.output_dense))
        names.update(_layer_norm(f"{p}/output/LayerNorm", block.output_layer_norm))
    names.update(_dense(f"{prefix}/pooler/dense", encoder.pooler))
    return names


def head_variable_map(model) -> dict[str, tf.Variable]:
    """Original name -> variable for the head weights of a model (empty for a bare encoder).

    Names: pretraining `cls/predictions/*`, `cls/seq_relationship/*` (original); classifier
    `output_weights`/`output_bias` (original run_classifier.py); SQuAD `cls/squad/*` (original
    run_squad.py); token classifier `cls/token_classifier/*` and multiple choice
    `cls/multiple_choice/*` (heads the original release does not have).
    """
    if not model.built:
        model.build_from_config_shapes()
    if isinstance(model, BertEncoder):
        return {}
    if isinstance(model, BertPretrainer):
        mlm, nsp = model.masked_lm, model.next_sentence
        return {
            **_dense("cls/predictions/transform/dense", mlm.transform_dense),
            **_layer_norm("cls/predictions/transform/LayerNorm", mlm.transform_layer_norm),
            "cls/predictions/output_bias": mlm.output_bias,
            "cls/seq_relationship/output_weights": nsp.output_weights,
            "cls/seq_relationship/output_bias": nsp.output_bias,
        }
    projections = {
        BertClassifier: ("", lambda m: m.classifier.projection),
        BertSpanLabeler: ("cls/squad/", lambda m: m.span.projection),
        BertTokenClassifier: ("cls/token_classifier/", lambda m: m.token_classifier.projection),
        BertMultipleChoice: ("cls/multiple_choice/", lambda m: m.multiple_choice.projection),
    }
    for cls, (prefix, get) in projections.items():
        if isinstance(model, cls):
            proj = get(model)
            return {f"{prefix}output_weights": proj.output_weights,
                    f"{prefix}output_bias": proj.output_bias}
    raise TypeError(f"no original variable names are defined for {type(model).__name__}")


def variable_map(model) -> dict[str, tf.Variable]:
    """Original name -> variable for every weight of an encoder or encoder+head model."""
    encoder = model if isinstance(model, BertEncoder) else model.encoder
    if not model.built:
        model.build_from_config_shapes()
    return {**encoder_variable_map(encoder), **head_variable_map(model)}


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
                         "batch) first")


def _split_variable_map(model) -> tuple[dict[str, tf.Variable], dict[str, tf.Variable]]:
    """(encoder names, other names) of `checkpoint_variable_map(model)`."""
    _ensure_built(model)
    encoder = _encoder_of(model)
    encoder_names = encoder_variable_map(encoder) if encoder is not None else {}
    try:
        others = head_variable_map(model)
    except (TypeError, AttributeError):
        # A task model outside bert_tf.modeling: its own weights by Keras path. model.weights,
        # not .variables: seed-generator states are named by a process-wide counter.
        taken = {id(v) for v in encoder_names.values()}
        others = {v.path: v for v in model.weights if id(v) not in taken}
    return encoder_names, others


def checkpoint_variable_map(model) -> dict[str, tf.Variable]:
    """Checkpoint name -> variable for every weight of `model`.

    `bert_tf.modeling` models get the original TF1 names (`variable_map`). Another model (e.g. a
    task model built around a `BertEncoder` as `.encoder`) gets the original names for its
    encoder and its Keras variable paths for the rest.
    """
    encoder_names, others = _split_variable_map(model)
    return {**encoder_names, **others}


def resolve_checkpoint_prefix(path: str | os.PathLike) -> str:
    """Accepts a checkpoint prefix (`.../bert_model.ckpt`), a file of it, or a directory."""
    path = os.fspath(path)
    for suffix in (".index", ".data-00000-of-00001"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    from bert_tf import io_utils

    # A prefix whose `.index` exists is a checkpoint, whatever isdir says (TF's ram:// file
    # system, the stand-in for gs:// in tests, calls every prefix of a file name a directory).
    if not tf.io.gfile.exists(path + ".index") and io_utils.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            candidates = sorted(f[:-6] for f in io_utils.listdir(path) if f.endswith(".index"))
            if len(candidates) != 1:
                raise CheckpointError(f"{path}: a directory with {len(candidates)} checkpoints "
                                      "and no 'checkpoint' state file; pass the prefix")
            latest = io_utils.join(path, candidates[0])
        path = latest
    if not tf.io.gfile.exists(path + ".index"):
        raise CheckpointError(f"no checkpoint at {path} (expected {path}.index and its data file)")
    return path


# Readers are opened with NewCheckpointReader on the resolved prefix, not tf.train.load_checkpoint:
# the latter asks isdir(prefix) first, which TF's ram:// file system (the gs:// stand-in in tests)
# answers True for any prefix of a file name.


def read_checkpoint(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """All variables of a TF checkpoint as NumPy arrays, by name."""
    prefix = resolve_checkpoint_prefix(path)
    reader = tf.compat.v1.train.NewCheckpointReader(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def load_original_checkpoint(model, path: str | os.PathLike, heads: str = "if_present"
                             ) -> dict[str, list[str]]:
    """Loads an original-format (TF1-named) checkpoint into a model.

    Every encoder variable must be in the checkpoint with the model's shape. Head variables are
    loaded as `heads` says: "if_present" (load those found, keep the fresh initialisation of the
    rest, as fine-tuning from a pretraining checkpoint needs), "required", or "skip". Nothing is
    assigned unless every required variable checks out.

    Args:
      model: a `BertEncoder`, an encoder+head model from `bert_tf.modeling`, or another model
        with a `BertEncoder` as `.encoder` (its other weights by Keras path, see
        `checkpoint_variable_map`).
      path: checkpoint prefix, one of its files, or a directory holding it.
      heads: "if_present", "required" or "skip".

    Returns:
      {"loaded": [...], "initialized": [...], "unused": [...]} checkpoint names.

    Raises:
      CheckpointError naming the checkpoint and the variable that is missing or mis-shaped.
    """
    if heads not in ("if_present", "required", "skip"):
        raise ValueError(f"heads must be 'if_present', 'required' or 'skip', got {heads!r}")
    prefix = resolve_checkpoint_prefix(path)
    required, optional = _split_variable_map(model)
    if heads == "skip":
        optional = {}
    elif heads == "required":
        required, optional = {**required, **optional}, {}
    to_assign, initialized = assign_from_checkpoint(prefix, required, optional)
    loaded = [name for name, _ in to_assign]
    shapes = tf.compat.v1.train.NewCheckpointReader(prefix).get_variable_to_shape_map()
    used = set(loaded)
    unused = sorted(n for n in shapes if n not in used)
    logging.info("Loaded %d variables from %s; %d newly initialised (%s); %d in the checkpoint "
                 "unused", len(loaded), prefix, len(initialized), ", ".join(initialized) or "-",
                 len(unused))
    return {"loaded": loaded, "initialized": initialized, "unused": unused}


def assign_from_checkpoint(prefix: str, required: Mapping[str, tf.Variable],
                           optional: Mapping[str, tf.Variable] | None = None
                           ) -> tuple[list[tuple[str, tf.Variable]], list[str]]:
    """Assigns checkpoint tensors to variables by name, after checking all of them.

    Args:
      prefix: a checkpoint prefix (see `resolve_checkpoint_prefix`).
      required: name -> variable; each must be in the checkpoint with the variable's shape.
      optional: name -> variable; loaded when present (shape checked), else left as they are.

    Returns:
      ([(name, variable) assigned], [optional names not in the checkpoint]).

    Raises:
      CheckpointError naming the checkpoint and the first missing or mis-shaped variable; then
      nothing has been assigned.
    """
    reader = tf.compat.v1.train.NewCheckpointReader(prefix)
    shapes = reader.get_variable_to_shape_map()
    optional = dict(optional or {})
    if "_CHECKPOINTABLE_OBJECT_GRAPH" in shapes and not any(n in shapes for n in required):
        raise CheckpointError(
            f"{prefix} is a TF2 object-graph training checkpoint, not one under the original "
            "names; use the model.ckpt-<step> that bert_tf pretraining writes beside it (in "
            "--output_dir) at every checkpoint step")
    to_assign, missing = [], []
    for name, var in list(required.items()) + list(optional.items()):
        if name not in shapes:
            if name in required:
                raise CheckpointError(
                    f"checkpoint {prefix} has no variable '{name}' (needed for "
                    f"{var.path}, shape {tuple(var.shape)})")
            missing.append(name)
            continue
        if tuple(shapes[name]) != tuple(var.shape):
            raise CheckpointError(
                f"checkpoint {prefix}: variable '{name}' has shape {tuple(shapes[name])}, the model "
                f"expects {tuple(var.shape)} (is the bert_config.json the one of this checkpoint?)")
        to_assign.append((name, var))
    values = [reader.get_tensor(name) for name, _ in to_assign]
    for (_, var), value in zip(to_assign, values):
        var.assign(np.asarray(value).astype(getattr(var.dtype, "as_numpy_dtype", var.dtype)))
    return to_assign, missing


def write_tf1_checkpoint(tensors: Mapping[str, np.ndarray | tf.Tensor | tf.Variable],
                         prefix: str | os.PathLike, overwrite: bool = False) -> str:
    """Writes named tensors as a TF1 "V2" checkpoint (`prefix.index` + `prefix.data-00000-of-00001`).

    The files are written under a temporary name in the same directory and moved into place data
    first, index last, so a crash never leaves a half checkpoint under `prefix`. An existing
    checkpoint at `prefix` is an error unless `overwrite`.

    Returns the prefix written.
    """
    prefix = os.fspath(prefix)
    if not overwrite and tf.io.gfile.exists(prefix + ".index"):
        raise CheckpointError(f"a checkpoint already exists at {prefix}; refusing to overwrite it")
    from bert_tf import io_utils  # any TensorFlow file system (gs://, ram://, local)

    directory = io_utils.dirname(prefix)
    io_utils.makedirs(directory)
    tmp_dir = (tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=directory)
               if not io_utils.is_remote(prefix)
               else io_utils.join(directory, f"{_TEMP_PREFIX}{os.urandom(6).hex()}"))
    try:
        tmp_prefix = io_utils.join(tmp_dir, "ckpt")
        names = sorted(tensors)
        with tf.device("/cpu:0"):
            values = [tf.convert_to_tensor(tensors[n].value() if isinstance(tensors[n], tf.Variable)
                                           else tensors[n]) for n in names]
            tf.raw_ops.SaveV2(prefix=tmp_prefix, tensor_names=names,
                              shape_and_slices=[""] * len(names), tensors=values)
        data_files = [f for f in io_utils.listdir(tmp_dir) if f.startswith("ckpt.data-")]
        for f in data_files:
            io_utils.rename(io_utils.join(tmp_dir, f), prefix + f[len("ckpt"):])
        io_utils.rename(tmp_prefix + ".index", prefix + ".index")  # the index last
    finally:
        with contextlib.suppress(OSError):
            if io_utils.exists(tmp_dir):
                io_utils.rmtree(tmp_dir)
    return prefix


def save_original_checkpoint(model, prefix: str | os.PathLike, overwrite: bool = False,
                             extra: Mapping[str, np.ndarray] | None = None) -> str:
    """Writes a model's weights under the original TF1 names, loadable by the original code.

    Args:
      model: a `BertEncoder` or an encoder+head model.
      prefix: checkpoint prefix, e.g. `out/bert_model.ckpt`.
      overwrite: replace an existing checkpoint at `prefix`.
      extra: more named tensors to include (e.g. {"global_step": np.int64(n)}).
    """
    tensors: dict = dict(variable_map(model))
    tensors.update(extra or {})
    return write_tf1_checkpoint(tensors, prefix, overwrite=overwrite)


# ---------------------------------------------------------------------------------------------
# Training checkpoints in the original Estimator layout: <dir>/model.ckpt-<step> + `checkpoint`
# ---------------------------------------------------------------------------------------------
_TEMP_PREFIX = ".ckpt_tmp_"
_ATOMIC_TEMPORARY = re.compile(r"\..+\.[0-9a-f]{12}[^/]*\.tmp")


def latest_checkpoint(directory: str) -> str | None:
    """The newest checkpoint prefix in `directory` (from its `checkpoint` file), or None."""
    if not directory or not tf.io.gfile.isdir(directory):
        return None
    try:
        return tf.train.latest_checkpoint(directory)
    except (tf.errors.OpError, ValueError):
        return None


def checkpoint_global_step(prefix: str | None) -> int | None:
    """The `global_step` stored in a checkpoint, or None (no checkpoint / no such tensor)."""
    if not prefix:
        return None
    try:
        return int(tf.compat.v1.train.NewCheckpointReader(prefix).get_tensor("global_step"))
    except (tf.errors.OpError, ValueError, KeyError):
        return None


def remove_stale_temp_files(directory: str) -> list[str]:
    """Removes the temporary folders `write_tf1_checkpoint` leaves when its process is killed
    (`<directory>/.ckpt_tmp_*`) and the temporary files of `io_utils.atomic_output_path` there
    (`.<name>.<12 hex>.tmp`). Call it only where no other process is writing checkpoints.
    Returns the paths removed."""
    removed = []
    from bert_tf import io_utils

    for path in io_utils.glob(io_utils.join(glob.escape(directory), _TEMP_PREFIX + "*")):
        with contextlib.suppress(OSError):
            io_utils.rmtree(path)
            removed.append(path)
    # io_utils.atomic_output_path's temporaries (`.<name>.<12 hex>.tmp`) of the files written
    # beside the checkpoints: the `checkpoint` state file, eval_results.txt, curves.png, ...
    for path in io_utils.glob(io_utils.join(glob.escape(directory), ".*.tmp")):
        if _ATOMIC_TEMPORARY.fullmatch(os.path.basename(path)):
            with contextlib.suppress(OSError, tf.errors.OpError):
                tf.io.gfile.remove(path)
                removed.append(path)
    if removed:
        logging.info("Removed %d temporary checkpoint folder(s) of an interrupted run in %s",
                     len(removed), directory)
    return removed


def write_step_checkpoint(tensors: Mapping[str, np.ndarray | tf.Tensor | tf.Variable],
                          directory: str, step: int, keep_checkpoint_max: int = 5) -> str:
    """Writes `directory/model.ckpt-<step>` as the original's Estimator does, and its state.

    The checkpoint is written atomically (`write_tf1_checkpoint`), then the `checkpoint` state
    file (read by `tf.train.latest_checkpoint` and the original code) is rewritten atomically to
    list it last; the oldest checkpoints listed there beyond `keep_checkpoint_max` are deleted
    (also those of an earlier, interrupted run of the same folder).

    Returns the prefix written.
    """
    prefix = os.path.join(directory, f"model.ckpt-{step}")
    write_tf1_checkpoint(tensors, prefix, overwrite=True)
    kept = []
    try:
        state = tf.train.get_checkpoint_state(directory)
    except (tf.errors.OpError, ValueError):
        state = None
    if state is not None:
        for p in state.all_model_checkpoint_paths:
            p = p if os.path.isabs(p) else os.path.join(directory, p)
            if p != prefix and tf.io.gfile.exists(p + ".index"):
                kept.append(p)
    kept.append(prefix)
    while len(kept) > keep_checkpoint_max:
        old = kept.pop(0)
        for f in tf.io.gfile.glob(glob.escape(old) + ".*"):
            with contextlib.suppress(tf.errors.OpError):
                tf.io.gfile.remove(f)
    lines = [f'model_checkpoint_path: "{os.path.basename(prefix)}"']
    lines += [f'all_model_checkpoint_paths: "{os.path.basename(p)}"' for p in kept]
    from bert_tf.io_utils import atomic_write_text
    atomic_write_text(os.path.join(directory, "checkpoint"), "\n".join(lines) + "\n")
    logging.info("Saved checkpoint %s", prefix)
    return prefix


# ---------------------------------------------------------------------------------------------
# Encoder SavedModels (bert_tf.export.export_encoder_savedmodel) as a source of weights
# ---------------------------------------------------------------------------------------------
def is_encoder_savedmodel(path: str) -> bool:
    """Whether `path` is a directory holding a SavedModel (e.g. `export_encoder_savedmodel`'s)."""
    return bool(path) and tf.io.gfile.isdir(path) and (
        tf.io.gfile.exists(os.path.join(path, "saved_model.pb"))
        or tf.io.gfile.exists(os.path.join(path, "saved_model.pbtxt")))


def load_encoder_savedmodel(model, export_dir: str) -> None:
    """Sets the encoder weights of `model` from a bert_tf encoder SavedModel export.

    The export holds `encoder.variables` in creation order (weights and, with dropout, the
    dropout layers' seed-generator states); an encoder built from the exported config has the same
    order, which gives every saved weight its original name. Head weights keep their values.

    Raises:
      CheckpointError naming the export and the variable when it does not fit the model.
    """
    encoder = _encoder_of(model)
    if encoder is None:
        raise CheckpointError(f"{type(model).__name__} has no BertEncoder to initialise from the "
                              f"SavedModel {export_dir}")
    _ensure_built(model)
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
    reference = BertEncoder(saved_config)
    reference.build_from_config_shapes()
    path_to_name = {v.path: n for n, v in encoder_variable_map(reference).items()}
    saved_vars = list(loaded.variables)
    if len(saved_vars) != len(reference.variables):
        raise CheckpointError(f"{export_dir}: {len(saved_vars)} variables, an encoder of its "
                              f"config has {len(reference.variables)}")
    saved = {}
    for ref_var, saved_var in zip(reference.variables, saved_vars):
        name = path_to_name.get(ref_var.path)
        if name is None:
            continue  # not a weight: a dropout layer's seed-generator state
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
