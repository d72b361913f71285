"""`BertTextClassifier`: raw texts (or text pairs) in, class probabilities (or regression values)
out, with its tokenizer inside (keras-hub's `BertTextClassifier` shape, the original's numbers).

    import bert_tf
    clf = bert_tf.BertTextClassifier.from_pretrained("uncased_L-12_H-768_A-12", num_classes=2,
                                                     sequence_length=128,
                                                     label_names=["negative", "positive"])
    clf.fit(["a fine film", "a dull one"], ["positive", "negative"], epochs=3)
    clf.predict(["what a film"])            # float32 [N, 2] probabilities
    clf.predict_labels(["what a film"])     # ["positive"]
    clf.save("clf.keras")                   # keras.models.load_model after `import bert_tf`
    clf.export("serving/clf")               # serving/clf/1/: raw-text SavedModel for TF Serving

The model is the original `run_classifier.py`'s (`bert_tf.modeling.BertClassifier`: [CLS] pooled
output, dropout 0.1, one dense layer); `task_type="regression"` (`num_classes=1`, STS-B) trains
with mean squared error and predicts one float per text. See `text_task` for the inputs `fit`,
`evaluate` and `predict` take and for `compile()`'s defaults.
"""
from __future__ import annotations

import os
from typing import Sequence

import keras
import numpy as np

from bert_tf.errors import UserInputError
from bert_tf.tasks.text_models.preprocessors import BertTextPreprocessor
from bert_tf.tasks.text_models.text_task import TextTask, load_backbone, softmax

__all__ = ["BertTextClassifier", "TASK_TYPES", "window_starts"]

TASK_TYPES = ("classification", "regression")


def window_starts(num_pieces: int, span: int, stride: int) -> list[int]:
    """First piece of each window of `span` pieces, `stride` apart, covering all `num_pieces`
    (the last window ends at the last piece; one window at 0 for a text that fits)."""
    if num_pieces <= span:
        return [0]
    starts = list(range(0, num_pieces - span + 1, stride))
    if starts[-1] != num_pieces - span:
        starts.append(num_pieces - span)
    return starts


@keras.saving.register_keras_serializable(package="bert_tf")
class BertTextClassifier(TextTask):
    """Sentence(-pair) classification or regression on raw text.

    Args:
      backbone: a `bert_tf.modeling.BertClassifier` (num_labels = number of classes, 1 for
        regression).
      preprocessor: a `BertTextPreprocessor` (vocab, sequence_length, casing).
      label_names: class names in label-id order (kept in the `.keras` file and the export);
        None: labels are ids.
      task_type: "classification" or "regression".

    Call: {"input_word_ids", "input_mask", "input_type_ids"} int32 [B, S] -> logits float32
    [B, num_classes] (`call_text` on tf.string texts). `predict(texts)`: probabilities
    [N, num_classes] (regression: float32 [N]).
    """

    trims_prediction_padding = True  # one row per text (TextTask.predict_raw)

    def __init__(self, backbone, preprocessor: BertTextPreprocessor,
                 label_names: Sequence[str] | None = None,
                 task_type: str = "classification", **kwargs):
        kwargs.setdefault("name", "bert_text_classifier")
        super().__init__(preprocessor, label_names, **kwargs)
        if task_type not in TASK_TYPES:
            raise UserInputError(f"task_type={task_type!r}; expected one of {TASK_TYPES}")
        if task_type == "regression" and backbone.num_labels != 1:
            raise UserInputError(f"task_type='regression' needs num_classes=1; the model has "
                                 f"{backbone.num_labels}")
        if self.label_names is not None and len(self.label_names) != backbone.num_labels:
            raise UserInputError(f"label_names has {len(self.label_names)} names "
                                 f"{self.label_names} but num_classes is {backbone.num_labels}")
        self.backbone = backbone
        self.built = bool(backbone.built)  # the task adds no weights of its own
        self.task_type = task_type

    @property
    def num_classes(self) -> int:
        return self.backbone.num_labels

    @classmethod
    def from_pretrained(cls, path_or_preset: str | os.PathLike, num_classes: int | None = None,
                        sequence_length: int = 128, label_names: Sequence[str] | None = None,
                        task_type: str = "classification", dropout_rate: float = 0.1, *,
                        vocab_file: str | os.PathLike | None = None,
                        do_lower_case: bool | None = None, heads: str = "if_present"
                        ) -> "BertTextClassifier":
        """A classifier on a pretrained BERT from any layout `bert_tf.from_pretrained` reads
        (Google's release folder, a Hugging Face folder, a bert_tf `.keras` file or encoder
        SavedModel, a preset name with `vocab_file=`).

        A `.keras` file of a `BertTextClassifier` is returned as saved (its classes, labels and
        sequence length; `num_classes` must agree). Otherwise a new head is put on the encoder
        (loaded from the checkpoint too when it has one of this shape, `heads`).

        Args:
          num_classes: output classes (1 for regression); default: the number of
            `label_names`, else 2 (for a saved `BertTextClassifier`: its own).
          sequence_length: the packed length of every input.
          label_names: class names in id order (or None).
          task_type: "classification" or "regression".
          dropout_rate: of the head's dropout (the original's 0.1).
          vocab_file, do_lower_case, heads: as `bert_tf.from_pretrained`.
        """
        from bert_tf.modeling import BertClassifier

        name = os.fspath(path_or_preset)
        saved = cls.saved_instance(name)
        if saved is not None:
            if num_classes is not None and saved.num_classes != num_classes:
                raise UserInputError(f"{name}: the classifier has {saved.num_classes} "
                                     f"classes, not num_classes={num_classes}")
            return saved
        if task_type == "regression":
            num_classes = 1
        elif num_classes is None:
            num_classes = len(label_names) if label_names is not None else 2

        def factory(config, encoder=None):
            return BertClassifier(config, num_labels=num_classes, encoder=encoder,
                                  dropout_rate=dropout_rate)

        backbone, tokens, lower = load_backbone(name, factory, vocab_file, do_lower_case, heads)
        preprocessor = BertTextPreprocessor(tokens, sequence_length, lower)
        return cls(backbone, preprocessor, label_names, task_type)

    def get_config(self) -> dict:
        return {**super().get_config(), "label_names": self.label_names,
                "task_type": self.task_type}

    def call(self, inputs, training=None):
        """Token-id dict [B, S] -> logits float32 [B, num_classes]."""
        return self.backbone(inputs, training=training)["logits"]

    def _default_loss(self):
        if self.task_type == "regression":
            return keras.losses.MeanSquaredError()
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def _default_metrics(self):
        if self.task_type == "regression":
            return [keras.metrics.MeanSquaredError(name="mse")]
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    def _label_ids(self, y, what="y"):
        if self.task_type == "regression":
            return np.asarray(y, np.float32).reshape(-1, 1)
        self._infer_label_names(y, self.num_classes, what)
        return super()._label_ids(y, what)

    def _outputs_from_predictions(self, raw):
        if self.task_type == "regression":
            return np.asarray(raw, np.float32)[:, 0]
        return softmax(raw)

    def predict(self, x, batch_size: int | None = None, window_stride: int | None = None,
                **kwargs):
        """Texts -> probabilities float32 [N, num_classes] (regression: values [N]).

        `window_stride`: for single texts longer than `sequence_length - 2` pieces: classify
        every window of `sequence_length - 2` pieces, `window_stride` pieces apart (the last
        one ends at the text's end), each packed as [CLS] window [SEP], and average the
        windows' probabilities (regression: values). A text that fits is one window, the same
        as without it. None: the original's truncation to the first pieces.
        """
        if window_stride is None:
            return super().predict(x, batch_size, **kwargs)
        return self._predict_windows(x, batch_size, int(window_stride))

    def _predict_windows(self, x, batch_size, stride: int):
        import tensorflow as tf

        from bert_tf.tasks.text_models.preprocessors import as_text_array

        texts = as_text_array(x)
        if texts.ndim != 1:
            raise UserInputError("window_stride is for single texts, not text pairs")
        pre = self.preprocessor
        span = pre.sequence_length - 2
        if not 1 <= stride <= span:
            raise UserInputError(f"window_stride={stride}; expected 1..{span} (sequence_length "
                                 "- 2) so that the windows cover the text")
        encoded = [t if isinstance(t, bytes) else str(t).encode("utf-8") for t in texts]
        pieces = pre.tokenize(tf.constant(encoded, tf.string)).to_list() if encoded else []
        rows, owner = [], []
        for i, p in enumerate(pieces):
            for start in window_starts(len(p), span, stride):
                rows.append(p[start:start + span])
                owner.append(i)
        ids = np.zeros([len(rows), pre.sequence_length], np.int32)
        mask = np.zeros_like(ids)
        for r, row in enumerate(rows):
            packed = [pre.cls_id, *row, pre.sep_id]
            ids[r, :len(packed)] = packed
            mask[r, :len(packed)] = 1
        raw = keras.Model.predict(self, {"input_word_ids": ids, "input_mask": mask,
                                         "input_type_ids": np.zeros_like(ids)},
                                  batch_size=batch_size or 32, verbose=0)
        per_window = self._outputs_from_predictions(raw)
        owner = np.asarray(owner)
        counts = np.bincount(owner, minlength=len(texts)).astype(np.float32)
        shape = (len(texts),) + per_window.shape[1:]
        total = np.zeros(shape, np.float32)
        np.add.at(total, owner, per_window)
        return total / counts.reshape((-1,) + (1,) * (total.ndim - 1))

    def predict_labels(self, x, batch_size: int | None = None) -> list:
        """Texts -> the predicted label names (ids without label_names); classification only."""
        if self.task_type == "regression":
            raise UserInputError("predict_labels is for classification; use predict()")
        ids = np.argmax(self.predict(x, batch_size), axis=-1)
        return [self.label_names[i] for i in ids] if self.label_names else ids.tolist()

    def export(self, export_dir: str | os.PathLike, version: int | None = 1,
               overwrite: bool = False, check: bool = True) -> str:
        """A raw-text serving SavedModel at `<export_dir>/<version>/` (TF Serving's layout),
        written atomically and checked servable (`bert_tf.export.task_models.ClassifierExport`:
        `serving_default(text)`, `serving_pair(text_a, text_b)`, `serving_ids`; outputs
        `probabilities`, `label_ids`, `logits` (+ `labels`), regression `predictions`).
        Loading it needs `import tensorflow_text` first. Returns the written folder."""
        from bert_tf.export.task_models import ClassifierExport

        labels = self.label_names if self.task_type != "regression" else None
        return self.write_export(lambda pre: ClassifierExport(self.backbone, pre, labels),
                                 export_dir, version, overwrite, check)
