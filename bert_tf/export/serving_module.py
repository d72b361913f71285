"""The serving-module pattern every task export shares (BERT's task models in `task_models.py`,
GPT-1's LM and classifier in `gpt.py`).

A `ModelServingModule` is the `tf.Module` that is saved: it tracks the Keras model's variables
(not the Keras object: Keras 3 would add a float32 signature of its own) and its config as a
JSON string variable; its signatures close over the model, run it with `training=False` and are
not XLA-compiled (`concrete_signature`); a label list becomes a `labels` string output
(`label_outputs`). `save_serving_savedmodel` writes it atomically, under TF Serving's versioned
layout `<export_dir>/<version>/`, checked servable first (`serving_compat.assert_servable`: op
allowlist, dense outputs, no XLA).
"""
from __future__ import annotations

import os
from typing import Callable, Sequence

import keras
import tensorflow as tf

from bert_tf.training.distribution import tf_variable


def concrete_signature(fn: Callable, *specs: tf.TensorSpec):
    """`fn` traced for `specs` as a serving signature (a concrete function, not XLA-compiled)."""
    return tf.function(fn, jit_compile=False).get_concrete_function(*specs)


def text_specs(*names: str) -> list[tf.TensorSpec]:
    """tf.string [batch] input specs of a raw-text signature, one per name."""
    return [tf.TensorSpec([None], tf.string, name=name) for name in names]


class ModelServingModule(tf.Module):
    """Base of the task exports: tracks a Keras model's variables, its config and label names.

    Args:
      model: the built Keras model the signatures run (kept out of the tracked object graph).
      variables: the model's variables to save (`model.variables` or `model.weights`).
      config_attr: attribute holding the config JSON in the SavedModel (`bert_config_json`,
        `gpt_config_json`).
      config_json: that JSON string.
      label_list: class names in label-id order (adds `labels` outputs), or None.
      name: the module's name.
    """

    def __init__(self, model: keras.Model, variables: Sequence, config_attr: str,
                 config_json: str, label_list: Sequence[str] | None = None,
                 name: str | None = None):
        super().__init__(name=name)
        if not model.built:
            raise ValueError(f"{type(model).__name__} must be built (call "
                             "build_from_config_shapes() or load a checkpoint) before export")
        # Kept out of the tracked object graph (plain __dict__ entry): the signatures close over it
        # and its variables are tracked below.
        self.__dict__["_model"] = model
        self.model_variables = [tf_variable(v) for v in variables]
        self.label_list = list(label_list) if label_list is not None else None
        if self.label_list is not None:
            self.label_names = tf.constant(self.label_list, tf.string)
        setattr(self, config_attr, tf.Variable(config_json, trainable=False))

    def label_outputs(self, label_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        """{"labels": the names of `label_ids`} with a label list, else {}."""
        if self.label_list is None:
            return {}
        return {"labels": tf.gather(self.label_names, label_ids)}

    def serving_signatures(self) -> dict:
        """Signature name -> concrete function (or tf.function with an input signature)."""
        raise NotImplementedError


def save_serving_savedmodel(module: tf.Module, export_dir: str | os.PathLike,
                            version: int | str | None = 1, overwrite: bool = False,
                            signatures: dict | None = None, check: bool = True) -> str:
    """Writes `module` with its signatures atomically; returns the written folder.

    Args:
      module: the module to save (a `ModelServingModule`, or another trackable with
        `signatures`).
      export_dir: the model base path; the export is `<export_dir>/<version>/` (TF Serving's
        layout), or `export_dir` itself with `version=None`.
      version: positive integer, or None (see export_dir).
      overwrite: replace an existing folder (only once the new one is complete).
      signatures: default `module.serving_signatures()`.
      check: run `serving_compat.assert_servable` on the written folder before it is moved into
        place (a failing export leaves nothing behind).

    Raises:
      ExportError (a UserInputError) for an existing folder without `overwrite`, or one the
      serving checks reject.
    """
    from bert_tf.export.savedmodel_io import check_version, save_savedmodel_atomically
    from bert_tf.export.serving_compat import assert_servable

    target = (os.fspath(export_dir) if version is None
              else os.path.join(os.fspath(export_dir), str(check_version(version))))
    if signatures is None:
        signatures = module.serving_signatures()
    return save_savedmodel_atomically(module, target, signatures=signatures, overwrite=overwrite,
                                      check=assert_servable if check else None)
