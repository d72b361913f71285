"""Original TF1 checkpoints (`bert_model.ckpt`) <-> Keras variables of `bert_tf.modeling` models.

The original release names variables `bert/embeddings/word_embeddings`,
`bert/encoder/layer_<i>/attention/self/query/kernel`, `cls/predictions/output_bias`, ... (see
`../shared/fixtures/original/checkpoint/variables.txt`). `variable_map(model)` gives that name for
every weight of a model, so loading and saving are plain name lookups, in both directions.
"""
from __future__ import annotations

from bert_tf.errors import UserInputError
import contextlib
import os
import shutil
import tempfile
from typing import Mapping

import numpy as np
import tensorflow as tf
from absl import logging

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


def resolve_checkpoint_prefix(path: str | os.PathLike) -> str:
    """Accepts a checkpoint prefix (`.../bert_model.ckpt`), a file of it, or a directory."""
    path = os.fspath(path)
    for suffix in (".index", ".data-00000-of-00001"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    if os.path.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            candidates = sorted(f[:-6] for f in os.listdir(path) if f.endswith(".index"))
            if len(candidates) != 1:
                raise CheckpointError(f"{path}: a directory with {len(candidates)} checkpoints "
                                      "and no 'checkpoint' state file; pass the prefix")
            latest = os.path.join(path, candidates[0])
        path = latest
    if not tf.io.gfile.exists(path + ".index"):
        raise CheckpointError(f"no checkpoint at {path} (expected {path}.index and its data file)")
    return path


def read_checkpoint(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """All variables of a TF checkpoint as NumPy arrays, by name."""
    prefix = resolve_checkpoint_prefix(path)
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def load_original_checkpoint(model, path: str | os.PathLike, heads: str = "if_present"
                             ) -> dict[str, list[str]]:
    """Loads an original-format (TF1-named) checkpoint into a model.

    Every encoder variable must be in the checkpoint with the model's shape. Head variables are
    loaded as `heads` says: "if_present" (load those found, keep the fresh initialisation of the
    rest, as fine-tuning from a pretraining checkpoint needs), "required", or "skip". Nothing is
    assigned unless every required variable checks out.

    Args:
      model: a `BertEncoder` or an encoder+head model from `bert_tf.modeling`.
      path: checkpoint prefix, one of its files, or a directory holding it.
      heads: "if_present", "required" or "skip".

    Returns:
      {"loaded": [...], "initialized": [...], "unused": [...]} original names.

    Raises:
      CheckpointError naming the checkpoint and the variable that is missing or mis-shaped.
    """
    if heads not in ("if_present", "required", "skip"):
        raise ValueError(f"heads must be 'if_present', 'required' or 'skip', got {heads!r}")
    prefix = resolve_checkpoint_prefix(path)
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    encoder = model if isinstance(model, BertEncoder) else model.encoder
    required = encoder_variable_map(encoder)
    optional = head_variable_map(model) if heads != "skip" else {}
    if heads == "required":
        required, optional = {**required, **optional}, {}
    to_assign, initialized = [], []
    for name, var in list(required.items()) + list(optional.items()):
        if name not in shapes:
            if name in required:
                raise CheckpointError(
                    f"checkpoint {prefix} has no variable '{name}' (needed for "
                    f"{var.path}, shape {tuple(var.shape)})")
            initialized.append(name)
            continue
        if tuple(shapes[name]) != tuple(var.shape):
            raise CheckpointError(
                f"checkpoint {prefix}: variable '{name}' has shape {tuple(shapes[name])}, the model "
                f"expects {tuple(var.shape)} (is the bert_config.json the one of this checkpoint?)")
        to_assign.append((name, var))
    values = [reader.get_tensor(name) for name, _ in to_assign]
    for (name, var), value in zip(to_assign, values):
        var.assign(value.astype(var.dtype))
    loaded = [name for name, _ in to_assign]
    used = set(loaded)
    unused = sorted(n for n in shapes if n not in used)
    logging.info("Loaded %d variables from %s; %d newly initialised (%s); %d in the checkpoint "
                 "unused", len(loaded), prefix, len(initialized), ", ".join(initialized) or "-",
                 len(unused))
    return {"loaded": loaded, "initialized": initialized, "unused": unused}


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
    directory = os.path.dirname(os.path.abspath(prefix))
    os.makedirs(directory, exist_ok=True)
    tmp_dir = tempfile.mkdtemp(prefix=".ckpt_tmp_", dir=directory)
    try:
        tmp_prefix = os.path.join(tmp_dir, "ckpt")
        names = sorted(tensors)
        with tf.device("/cpu:0"):
            values = [tf.convert_to_tensor(tensors[n].value() if isinstance(tensors[n], tf.Variable)
                                           else tensors[n]) for n in names]
            tf.raw_ops.SaveV2(prefix=tmp_prefix, tensor_names=names,
                              shape_and_slices=[""] * len(names), tensors=values)
        data_files = [f for f in os.listdir(tmp_dir) if f.startswith("ckpt.data-")]
        for f in data_files:
            os.replace(os.path.join(tmp_dir, f), prefix + f[len("ckpt"):])
        os.replace(tmp_prefix + ".index", prefix + ".index")
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp_dir)
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
