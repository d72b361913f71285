"""The encoder as a reusable SavedModel (TF Hub BERT convention).

The SavedModel is callable as `obj(inputs, training=False)` with a dict of int32 [batch, seq]
`input_word_ids`, `input_mask`, `input_type_ids` (exactly these keys: TensorFlow refuses a call
with other keys; `SavedModelEncoderLayer` also maps the original's `input_ids`, `segment_ids`,
`token_type_ids` onto them and names an unknown key in one line) and returns `pooled_output` [batch, H],
`sequence_output` [batch, seq, H] and `encoder_outputs` (list of L [batch, seq, H]); it carries
`variables` / `trainable_variables` for fine-tuning, and a `serving_default` signature with the
same inputs and outputs (`encoder_outputs` stacked batch-first: [batch, L, seq, H], so that every
output has the batch as its first dimension, as TF Serving's REST row format requires).
"""
from __future__ import annotations

import keras
import tensorflow as tf

from bert_tf.export.savedmodel_io import write_atomically
from bert_tf.modeling import BertEncoder, canonical_inputs
from bert_tf.training.distribution import tf_variable


def encoder_savedmodel_root(encoder: BertEncoder, vocab_file: str | None = None,
                            do_lower_case: bool = True) -> tf.train.Checkpoint:
    """The object that is saved: `__call__(inputs, training)`, `variables`,
    `trainable_variables`, `regularization_losses` (TF Hub reusable-SavedModel API) and
    `serving_default`. The Keras model itself is kept out of the object graph (Keras 3 would add
    a float32 signature of its own); its variables are tracked directly.

    With `vocab_file`, the module also carries its tokenizer as TF Hub BERT encoders do: the
    vocab as an asset (`obj.vocab_file.asset_path`) and `obj.do_lower_case` (a bool variable),
    which `bert_tf.pretrained.resolve_hub_module` reads (the original's `tokenization_info`)."""
    spec = {k: tf.TensorSpec([None, None], tf.int32, name=k)
            for k in ("input_word_ids", "input_mask", "input_type_ids")}
    if any(getattr(block, "xla_gelu_in_training", False) for block in encoder.blocks):
        # Exports hold no XLA-compiled function: trace the training path of a copy that uses the
        # plain GELU op pattern (same values up to rounding; same variable order and values).
        plain = BertEncoder(encoder.config, name=encoder.name).build_from_config_shapes()
        plain.set_weights(encoder.get_weights())
        encoder = plain

    def call(inputs, training=False):
        out = encoder(inputs, training=training)
        return {"pooled_output": out["pooled_output"], "sequence_output": out["sequence_output"],
                "encoder_outputs": out["encoder_outputs"]}

    def serve(input_word_ids, input_mask, input_type_ids):
        out = call({"input_word_ids": input_word_ids, "input_mask": input_mask,
                    "input_type_ids": input_type_ids}, training=False)
        return {"pooled_output": out["pooled_output"], "sequence_output": out["sequence_output"],
                "encoder_outputs": tf.stack(out["encoder_outputs"], axis=1)}

    root = tf.train.Checkpoint()
    root.variables = [tf_variable(v) for v in encoder.variables]
    root.trainable_variables = [tf_variable(v) for v in encoder.trainable_variables]
    root.regularization_losses = []
    root.bert_config_json = tf.Variable(encoder.config.to_json_string(), trainable=False)
    if vocab_file:
        root.vocab_file = tf.saved_model.Asset(vocab_file)
        root.do_lower_case = tf.Variable(bool(do_lower_case), trainable=False)
    root.__call__ = tf.function(call)
    for training in (False, True):
        root.__call__.get_concrete_function(spec, training=training)
    root.serving_default = tf.function(serve, input_signature=[
        spec["input_word_ids"], spec["input_mask"], spec["input_type_ids"]])
    return root


def export_encoder_savedmodel(encoder: BertEncoder, export_dir: str, overwrite: bool = False,
                              vocab_file: str | None = None, do_lower_case: bool = True) -> str:
    """Saves the encoder to `export_dir` atomically (written beside it, then renamed).

    An existing `export_dir` is an error unless `overwrite`; it is replaced only after the new
    export is complete. (For TF Serving's versioned layout use
    `bert_tf.export.savedmodel_io.save_versioned_savedmodel`.)
    """
    root = encoder_savedmodel_root(encoder, vocab_file, do_lower_case)
    return write_atomically(
        export_dir, lambda tmp: tf.saved_model.save(
            root, tmp, signatures={"serving_default": root.serving_default}),
        overwrite=overwrite)


@keras.saving.register_keras_serializable(package="bert_tf")
class SavedModelEncoderLayer(keras.layers.Layer):
    """A Keras 3 layer around an encoder SavedModel, for fine-tuning it inside a Keras model.

    `layer(inputs, training=...)` takes the dict of int32 [batch, seq] `input_word_ids`,
    `input_mask`, `input_type_ids` (or the original's `input_ids`, `segment_ids` /
    `token_type_ids`; any other key is a `ModelInputError`, as for `BertEncoder`) and returns the SavedModel's dict (`pooled_output` [batch, H],
    `sequence_output` [batch, seq, H], `encoder_outputs`: L x [batch, seq, H]); `training` is
    passed through (dropout). The SavedModel's own tf.Variables become the layer's weights (the
    Keras variables wrap them, as `keras.layers.TFSMLayer` does), so optimizers update the
    variables the SavedModel's functions read.

    Serializable (`get_config` holds `export_dir`): a `.keras` file of a model that contains this
    layer re-opens the SavedModel at `export_dir` when loaded, then restores the saved weights.
    """

    def __init__(self, export_dir: str, trainable: bool = True, **kwargs):
        super().__init__(trainable=trainable, **kwargs)
        self.export_dir = export_dir
        self._encoder = tf.saved_model.load(export_dir)
        for name in ("variables", "trainable_variables"):
            if not hasattr(self._encoder, name):
                raise ValueError(f"{export_dir} is not a reusable encoder SavedModel: it has no "
                                 f"`{name}` (export it with bert_tf.export.export_encoder_savedmodel "
                                 "or tools/export_savedmodel.py --model_type=encoder)")
        trainable_ids = {id(v) for v in self._encoder.trainable_variables}
        for v in self._encoder.variables:
            if v.dtype == tf.string:
                continue  # The bert_config_json metadata variable.
            self._track_variable(keras.Variable(
                initializer=v, trainable=id(v) in trainable_ids, dtype=v.dtype, shape=v.shape,
                name=v.name.split(":")[0].replace("/", "_")))
        self.built = True

    def get_config(self) -> dict:
        return {**super().get_config(), "export_dir": self.export_dir}

    def call(self, inputs, training=False):
        # The SavedModel's function takes exactly the three TF Hub names: the original's names
        # are mapped onto them, and a key it would not take is one clear error here.
        inputs = canonical_inputs(inputs, owner="SavedModelEncoderLayer")
        return self._encoder(inputs, training=bool(training))
