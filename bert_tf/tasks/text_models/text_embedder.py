"""`BertTextEmbedder`: raw texts in, one L2-normalised vector per text out (sentence embeddings
for search, clustering, deduplication), with its tokenizer inside.

    import bert_tf
    emb = bert_tf.BertTextEmbedder.from_pretrained("all-MiniLM-L6-v2/", pooling="mean")
    vectors = emb.predict(["a cat sat", "a dog ran"])     # float32 [N, hidden_size], |v| = 1
    emb.similarity(["a cat sat"], ["a kitten sat", "stocks fell"])   # cosine, [1, 2]
    emb.save("emb.keras"); emb.export("serving/emb")       # serving_default(text) -> embeddings

Pooling: "cls" (the last layer's [CLS] vector), "mean" (mean of the last layer over the real
tokens, input_mask = 1: sentence-transformers' default), or "pooled" (BERT's pooler, tanh dense
on [CLS], the vector the original classifier reads); "cls" and "pooled" compute the last block
at [CLS] only (`BertEncoder(pooled_only=True)`: the same vectors up to float rounding).
`normalize=False` keeps raw lengths.
`fit` works with a loss you give `compile(loss=...)` (there is no default loss for embeddings).
"""
from __future__ import annotations

import os

import keras
import numpy as np
import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.export.serving_module import ModelServingModule, concrete_signature, text_specs
from bert_tf.modeling.models import pooled_only_kwargs
from bert_tf.tasks.text_models.preprocessors import BertTextPreprocessor
from bert_tf.tasks.text_models.text_task import TextTask, load_backbone

__all__ = ["BertTextEmbedder", "POOLINGS", "encoder_kwargs", "pool"]

POOLINGS = ("cls", "mean", "pooled")


def encoder_kwargs(encoder, pooling: str) -> dict:
    """The encoder call's options for `pooling`: "cls" and "pooled" read only the last block's
    [CLS] row, so a `BertEncoder` computes that block at [CLS] alone (`pooled_only=True`; the
    same vectors up to float rounding)."""
    return pooled_only_kwargs(encoder) if pooling in ("cls", "pooled") else {}


def pool(outputs: dict, input_mask: tf.Tensor, pooling: str, normalize: bool) -> tf.Tensor:
    """The encoder's outputs -> one float32 vector per text [B, H] (module docstring)."""
    if pooling == "pooled":
        vectors = outputs["pooled_output"]
    elif pooling == "cls":  # the encoder's `cls_output` when it ran with pooled_only=True
        vectors = outputs["cls_output"] if "cls_output" in outputs else \
            outputs["sequence_output"][:, 0]
    else:
        sequence = tf.cast(outputs["sequence_output"], tf.float32)
        mask = tf.cast(input_mask, tf.float32)[:, :, tf.newaxis]  # [B, S, 1]
        vectors = tf.reduce_sum(sequence * mask, axis=1) / tf.maximum(
            tf.reduce_sum(mask, axis=1), 1.0)
    vectors = tf.cast(vectors, tf.float32)
    return tf.math.l2_normalize(vectors, axis=-1, epsilon=1e-12) if normalize else vectors


@keras.saving.register_keras_serializable(package="bert_tf")
class BertTextEmbedder(TextTask):
    """Texts -> sentence vectors.

    Args:
      backbone: a `bert_tf.modeling.BertEncoder`.
      preprocessor: a `BertTextPreprocessor`.
      pooling: "cls", "mean" or "pooled".
      normalize: L2-normalise the vectors (cosine similarity = dot product).

    Call: {"input_word_ids", "input_mask", "input_type_ids"} int32 [B, S] -> float32 [B, H].
    """

    trims_prediction_padding = True  # one row per text (TextTask.predict_raw)

    def __init__(self, backbone, preprocessor: BertTextPreprocessor, pooling: str = "cls",
                 normalize: bool = True, **kwargs):
        kwargs.setdefault("name", "bert_text_embedder")
        super().__init__(preprocessor, None, **kwargs)
        if pooling not in POOLINGS:
            raise UserInputError(f"pooling={pooling!r}; expected one of {POOLINGS}")
        self.backbone = backbone
        self.built = bool(backbone.built)  # the task adds no weights of its own
        self.pooling = pooling
        self.normalize = bool(normalize)

    @property
    def encoder(self):
        return self.backbone

    @classmethod
    def from_pretrained(cls, path_or_preset: str | os.PathLike, sequence_length: int = 128,
                        pooling: str = "cls", normalize: bool = True, *,
                        vocab_file: str | os.PathLike | None = None,
                        do_lower_case: bool | None = None) -> "BertTextEmbedder":
        """An embedder on a pretrained BERT from any layout `bert_tf.from_pretrained` reads (a
        `.keras` file of a `BertTextEmbedder` is returned as saved)."""
        from bert_tf.modeling import BertEncoder

        name = os.fspath(path_or_preset)
        saved = cls.saved_instance(name)
        if saved is not None:
            return saved

        def factory(config, encoder=None):
            return encoder if encoder is not None else BertEncoder(config)

        backbone, tokens, lower = load_backbone(name, factory, vocab_file, do_lower_case)
        return cls(backbone, BertTextPreprocessor(tokens, sequence_length, lower), pooling,
                   normalize)

    def get_config(self) -> dict:
        return {**super().get_config(), "pooling": self.pooling, "normalize": self.normalize}

    def call(self, inputs, training=None):
        """Token-id dict [B, S] -> float32 [B, H]."""
        outputs = self.backbone(inputs, training=training,
                                **encoder_kwargs(self.backbone, self.pooling))
        return pool(outputs, inputs["input_mask"], self.pooling, self.normalize)

    def _default_loss(self):
        raise UserInputError("BertTextEmbedder has no default loss: compile(loss=...) with one "
                             "for your targets")

    def compile(self, optimizer="auto", loss=None, metrics=None, **kwargs) -> None:
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def _outputs_from_predictions(self, raw):
        return np.asarray(raw, np.float32)

    def similarity(self, texts_a, texts_b, batch_size: int | None = None) -> np.ndarray:
        """Cosine similarities float32 [len(texts_a), len(texts_b)]."""
        a = self.predict(texts_a, batch_size)
        b = self.predict(texts_b, batch_size)
        if not self.normalize:
            a = a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12)
            b = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-12)
        return a @ b.T

    def export(self, export_dir: str | os.PathLike, version: int | None = 1,
               overwrite: bool = False, check: bool = True) -> str:
        """A raw-text serving SavedModel at `<export_dir>/<version>/`: `serving_default(text)`
        -> `embeddings` float32 [B, H] (checked servable; `import tensorflow_text` before
        loading). Returns the written folder."""
        return self.write_export(lambda pre: EmbedderExport(self, pre), export_dir, version,
                                 overwrite, check)


class EmbedderExport(ModelServingModule):
    """The serving module of a `BertTextEmbedder`: serving_default(text [B]) ->
    {"embeddings": float32 [B, H]}."""

    def __init__(self, embedder: BertTextEmbedder, preprocessor):
        encoder = embedder.backbone
        super().__init__(encoder, encoder.variables, "bert_config_json",
                         encoder.config.to_json_string(), None, name="embedder_export")
        self.preprocessor = preprocessor
        self.__dict__["_pooling"] = (embedder.pooling, embedder.normalize)

    def embeddings(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        inputs = self.preprocessor.pack_single(text)
        pooling, normalize = self._pooling
        outputs = self._model(inputs, training=False, **encoder_kwargs(self._model, pooling))
        return {"embeddings": pool(outputs, inputs["input_mask"], pooling, normalize)}

    def serving_signatures(self):
        return {"serving_default": concrete_signature(self.embeddings, *text_specs("text"))}
