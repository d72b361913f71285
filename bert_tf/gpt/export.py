"""GPT-1 models as serving SavedModels.

- `export_gpt_lm_savedmodel`: the pretrained LM. `serving_default(token_ids int32 [B, S])` ->
  `hidden_states` [B, S, n_embd], `lm_logits` [B, S-1, table_rows], `next_token_logits`
  [B, n_vocab] (the prediction after the last position); S ≤ n_ctx, no padding mask (the model
  is causal: pad after the text and read the positions you need).
- `export_gpt_classifier_savedmodel`: a fine-tuned `GptClassifier` (see that function).

Signatures run with training=False, are not XLA-compiled, and track the model's variables, not
the Keras object (Keras 3 would add a float32 signature of its own), as BERT's exports
(`bert_tf.export.task_models`). Written atomically (`bert_tf.export.savedmodel_io`).
"""
from __future__ import annotations

import keras
import tensorflow as tf

from bert_tf.export.savedmodel_io import write_atomically


def _tf_variable(v):
    """The tf.Variable behind a Keras 3 variable."""
    return v.value if hasattr(v, "value") and isinstance(v.value, tf.Variable) else v


class _ModelModule(tf.Module):
    """Tracks a Keras model's variables (not the model) and its config JSON."""

    def __init__(self, model: keras.Model, config_json: str, name: str | None = None):
        super().__init__(name=name)
        self.__dict__["_model"] = model  # untracked: signatures close over it
        self.model_variables = [_tf_variable(v) for v in model.weights]
        self.gpt_config_json = tf.Variable(config_json, trainable=False)


class GptLmServingModule(_ModelModule):
    """`serving_default(token_ids)` of a `GptModel` (see the module docstring)."""

    def __init__(self, model: keras.Model):
        super().__init__(model, model.config.to_json_string(), name="gpt_lm")
        n_vocab = model.config.n_vocab

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="token_ids")])
        def serve(token_ids):
            out = self._model({"token_ids": token_ids}, training=False)
            hidden = out["hidden_states"]
            table = self._model.embedding.we
            last = tf.matmul(hidden[:, -1], tf.cast(table[:n_vocab], hidden.dtype),
                             transpose_b=True)
            return {"hidden_states": hidden, "lm_logits": out["lm_logits"],
                    "next_token_logits": last}

        self.serving_default = serve


def export_gpt_lm_savedmodel(model: keras.Model, export_dir: str, overwrite: bool = False) -> str:
    """Saves a `GptModel` (LM) to `export_dir` atomically; returns the path. An existing
    `export_dir` is an error unless `overwrite` (replaced only once the new one is complete)."""
    module = GptLmServingModule(model)
    return write_atomically(
        export_dir, lambda tmp: tf.saved_model.save(
            module, tmp, signatures={"serving_default": module.serving_default}),
        overwrite=overwrite)
