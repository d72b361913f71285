"""`BertTextTokenClassifier`: words in, one label per word out (NER, POS tagging), with its
tokenizer inside; BERT's NER recipe (the paper's section 4.3): each word is split into WordPieces
and the word's label sits on its first piece, the other pieces are not scored.

    import bert_tf
    tagger = bert_tf.BertTextTokenClassifier.from_pretrained(
        "cased_L-12_H-768_A-12", label_names=["O", "B-PER", "I-PER", "B-LOC", "I-LOC"],
        sequence_length=128)
    tagger.fit([["John", "lives", "in", "Paris"]], [["B-PER", "O", "O", "B-LOC"]], epochs=3)
    tagger.predict_labels([["Mary", "left", "Berlin"]])   # [["B-PER", "O", "B-LOC"]]
    tagger.predict([["Mary", "left", "Berlin"]])          # [float32 [3, num_labels]] per text
    tagger.save("ner.keras"); tagger.export("serving/ner")

(Named `BertTextTokenClassifier` because `bert_tf.modeling.BertTokenClassifier`, the token-id
model underneath, already holds Keras' registered name `bert_tf>BertTokenClassifier`.)

Inputs: a list of texts as word lists (`[["John", "lives"], ...]`, a `tf.RaggedTensor` of
strings [B, (words)]) or of strings (split on whitespace). A text longer than `sequence_length - 2`
pieces keeps its first words (the later ones get no prediction, as the original's truncation),
unless `predict(..., window_stride=k)` tags it in overlapping windows (one row per word).
The export's `serving_default(text)` is `bert_tf.export.task_models.TokenClassifierExport`'s:
it splits text into the original BasicTokenizer's words and returns per-piece
`probabilities`, `label_ids`, `labels` and `word_start_mask`.
"""
from __future__ import annotations

import os
from typing import Sequence

import keras
import numpy as np
import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.tasks.text_models.preprocessors import BertTextPreprocessor
from bert_tf.tasks.text_models.text_task import (DEFAULT_BATCH_SIZE, TextTask, load_backbone,
                                                 softmax)

__all__ = ["BertTextTokenClassifier", "pack_words"]

WORD_START = "word_start_mask"


def pack_words(preprocessor: BertTextPreprocessor, words: tf.RaggedTensor,
               labels: tf.RaggedTensor | None = None) -> dict[str, tf.Tensor]:
    """Words [B, (W)] (tf.string) -> packed ids plus `word_start_mask` int32 [B, S] (1 on each
    kept word's first piece) and, with word `labels` [B, (W)] int, `labels` int32 [B, S] (the
    word's label on its first piece, 0 elsewhere)."""
    pieces = preprocessor.tokenize(words.flat_values)  # [n_words, (pieces)]
    per_word = words.with_flat_values(pieces)  # [B, (W), (P)]
    flat = per_word.merge_dims(1, 2)
    counts = pieces.row_lengths()
    first = tf.cast(tf.equal(tf.ragged.range(counts).flat_values, 0), tf.int32)
    starts = flat.with_flat_values(first)
    packer = preprocessor.packer
    keep, _ = packer.pair_lengths(flat, None)
    out = dict(packer.pack(flat, None, keep, None))
    out[WORD_START] = packer.pack_values(starts, None, keep, None, 0)
    if labels is not None:
        piece_labels = tf.repeat(tf.cast(labels.flat_values, tf.int32), counts) * first
        out["labels"] = packer.pack_values(flat.with_flat_values(piece_labels), None, keep,
                                           None, 0)
    return out


def _as_words(x, what: str = "x") -> tf.RaggedTensor:
    if isinstance(x, tf.RaggedTensor):
        return x
    if isinstance(x, (str, bytes)):
        x = [x]
    rows = []
    for i, item in enumerate(x):
        if isinstance(item, (str, bytes)):
            item = (item.decode("utf-8") if isinstance(item, bytes) else item).split()
        item = list(item)
        if not all(isinstance(w, (str, bytes, np.str_, np.bytes_)) for w in item):
            raise UserInputError(f"{what}: text {i} is not a list of word strings: {item!r:.80}")
        rows.append([w if isinstance(w, (bytes, np.bytes_)) else str(w).encode("utf-8")
                     for w in item])
    return tf.ragged.constant(rows, dtype=tf.string, ragged_rank=1) if rows else \
        tf.RaggedTensor.from_row_lengths(tf.constant([], tf.string), tf.constant([], tf.int64))


@keras.saving.register_keras_serializable(package="bert_tf")
class BertTextTokenClassifier(TextTask):
    """Words -> one label per word (module docstring).

    Args:
      backbone: a `bert_tf.modeling.BertTokenClassifier`.
      preprocessor: a `BertTextPreprocessor`.
      label_names: tag names in id order (kept in the `.keras` file and the export).

    Call: {"input_word_ids", "input_mask", "input_type_ids"} int32 [B, S] -> logits float32
    [B, S, num_labels].
    """

    def __init__(self, backbone, preprocessor: BertTextPreprocessor,
                 label_names: Sequence[str] | None = None, **kwargs):
        kwargs.setdefault("name", "bert_text_token_classifier")
        super().__init__(preprocessor, label_names, **kwargs)
        if self.label_names is not None and len(self.label_names) != backbone.num_labels:
            raise UserInputError(f"label_names has {len(self.label_names)} names but the model "
                                 f"has {backbone.num_labels} labels")
        self.backbone = backbone
        self.built = bool(backbone.built)  # the task adds no weights of its own

    @property
    def num_labels(self) -> int:
        return self.backbone.num_labels

    @classmethod
    def from_pretrained(cls, path_or_preset: str | os.PathLike,
                        label_names: Sequence[str] | None = None, num_classes: int | None = None,
                        sequence_length: int = 128, dropout_rate: float = 0.1, *,
                        vocab_file: str | os.PathLike | None = None,
                        do_lower_case: bool | None = None, heads: str = "if_present"
                        ) -> "BertTextTokenClassifier":
        """A tagger on a pretrained BERT from any layout `bert_tf.from_pretrained` reads (a
        `.keras` file of a `BertTextTokenClassifier` is returned as saved). `num_classes`
        defaults to the number of `label_names`."""
        from bert_tf.modeling import BertTokenClassifier

        name = os.fspath(path_or_preset)
        saved = cls.saved_instance(name)
        if saved is not None:
            return saved
        if num_classes is None:
            if label_names is None:
                raise UserInputError("from_pretrained needs label_names= (or num_classes=)")
            num_classes = len(label_names)

        def factory(config, encoder=None):
            return BertTokenClassifier(config, num_labels=num_classes, encoder=encoder,
                                       dropout_rate=dropout_rate)

        backbone, tokens, lower = load_backbone(name, factory, vocab_file, do_lower_case, heads)
        return cls(backbone, BertTextPreprocessor(tokens, sequence_length, lower), label_names)

    def get_config(self) -> dict:
        return {**super().get_config(), "label_names": self.label_names}

    def call(self, inputs, training=None):
        """Token-id dict [B, S] -> logits float32 [B, S, num_labels]."""
        inputs = {k: v for k, v in inputs.items() if k != WORD_START}
        return self.backbone(inputs, training=training)["logits"]

    def _default_loss(self):
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs) -> None:
        """`TextTask.compile`; the default metric is word accuracy (weighted by the word-start
        mask, so only first pieces count)."""
        if isinstance(metrics, str) and metrics == "auto":
            metrics = None
            kwargs.setdefault("weighted_metrics",
                              [keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def text_dataset(self, x, y=None, sample_weight=None, batch_size: int | None = None,
                     shuffle: bool = False, what: str = "x", labelled: bool = False):
        """(ids dict, per-piece labels, word-start weights) batches from word lists; a
        `tf.data.Dataset` must hold (words [B, (W)] ragged, word label ids [B, (W)])."""
        pre = self.preprocessor
        if isinstance(x, tf.data.Dataset):
            def prepare(words, labels=None):
                out = pack_words(pre, words, labels)
                inputs = {k: out[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}
                if labels is None:
                    return inputs
                return inputs, out["labels"], tf.cast(out[WORD_START], tf.float32)
            return x.map(prepare)
        words = _as_words(x, what)
        parts = [words]
        if y is not None:
            rows = [self._label_ids(np.asarray(row), "y").astype(np.int32) for row in y]
            if len(rows) != words.nrows() or any(
                    len(r) != n for r, n in zip(rows, words.row_lengths().numpy())):
                raise UserInputError(f"y: expected one label per word of each of the "
                                     f"{int(words.nrows())} texts")
            parts.append(tf.ragged.constant([r.tolist() for r in rows], dtype=tf.int32,
                                            ragged_rank=1))
        ds = tf.data.Dataset.from_tensor_slices(tuple(parts))
        if shuffle:
            ds = ds.shuffle(int(words.nrows()), reshuffle_each_iteration=True)
        ds = ds.ragged_batch(batch_size or DEFAULT_BATCH_SIZE)
        return self.text_dataset(ds, what=what)

    def _word_probabilities(self, x, batch_size=None) -> list[np.ndarray]:
        words = _as_words(x)
        batch_size = batch_size or DEFAULT_BATCH_SIZE
        if int(words.nrows()) and self._single_device():
            logits, starts = self._predict_words(words, batch_size)
        else:  # Keras' loop (a multi-device strategy; no text)
            logits = self.predict_raw(words, batch_size)
            starts = [b[WORD_START].numpy() for b in tf.data.Dataset.from_tensor_slices(words)
                      .ragged_batch(batch_size).map(lambda w: pack_words(self.preprocessor, w))]
            starts = np.concatenate(starts, axis=0) if starts else np.zeros([0, 0])
        probs = softmax(logits)
        return [p[s] for p, s in zip(probs, starts.astype(bool))]

    def _predict_words(self, words: tf.RaggedTensor, batch_size: int
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Word lists [N, (W)] -> (logits [N, S, num_labels], word starts [N, S]): the batches of
        `predict_raw`'s Keras loop through one `tf.function` (`pack_words`, then the model)
        kept with the model and traced once (`TextTask.predict_raw`: no pipeline per call)."""
        def body(model, batch):
            packed = pack_words(model.preprocessor, batch)
            return model(packed, training=False), packed[WORD_START]

        words = words.with_row_splits_dtype(tf.int64)  # the signature's
        return self._in_one_function(
            ("predict_words",), tf.RaggedTensorSpec([None, None], tf.string, ragged_rank=1),
            body, (words[start:start + batch_size]
                   for start in range(0, int(words.nrows()), batch_size)))

    def predict(self, x, batch_size: int | None = None, window_stride: int | None = None,
                **kwargs) -> list[np.ndarray]:
        """Word lists -> per text float32 [kept words, num_labels] probabilities.

        `window_stride`: for texts longer than `sequence_length - 2` pieces: tag every window
        of `sequence_length - 2` pieces, `window_stride` pieces apart (the last one ends at the
        text's end), each packed as [CLS] window [SEP]; each word takes its probabilities from
        the window where its first piece has the most context (SQuAD's max-context rule:
        min(pieces left, pieces right) in the window), so every word with a piece gets one
        row. A text that fits is one window, the same as without it. None: the original's
        truncation (the later words get no row).
        """
        if window_stride is None:
            return self._word_probabilities(x, batch_size)
        return self._predict_windows(x, batch_size, int(window_stride))

    def _predict_windows(self, x, batch_size, stride: int) -> list[np.ndarray]:
        from bert_tf.tasks.text_models.text_classifier import window_starts

        pre = self.preprocessor
        span = pre.sequence_length - 2
        if not 1 <= stride <= span:
            raise UserInputError(f"window_stride={stride}; expected 1..{span} (sequence_length "
                                 "- 2) so that the windows cover the text")
        words = _as_words(x)
        word_pieces = pre.tokenize(words.flat_values).to_list() if words.flat_values.shape[
            0] else []
        texts_pieces, firsts = [], []  # per text: its pieces, the first-piece index of each word
        w = 0
        for n in words.row_lengths().numpy().tolist():
            pieces, first = [], []
            for p in word_pieces[w:w + n]:
                if p:
                    first.append(len(pieces))
                    pieces.extend(p)
            w += n
            texts_pieces.append(pieces)
            firsts.append(first)
        rows, spans = [], []  # window rows; per text [(row, start)]
        for pieces in texts_pieces:
            spans.append([])
            for start in window_starts(len(pieces), span, stride):
                spans[-1].append((len(rows), start))
                rows.append(pieces[start:start + span])
        if not rows:
            return []
        packed = pre.packer.pack(tf.ragged.constant(rows, dtype=tf.int32, ragged_rank=1), None)
        logits = keras.Model.predict(self, {k: v.numpy() for k, v in packed.items()},
                                     batch_size=batch_size or DEFAULT_BATCH_SIZE, verbose=0)
        probs = softmax(logits)
        out = []
        for first, windows in zip(firsts, spans):
            text_probs = np.zeros([len(first), self.num_labels], np.float32)
            for i, p in enumerate(first):
                best, best_score = None, -1
                for row, start in windows:
                    end = start + len(rows[row])
                    if start <= p < end:
                        score = min(p - start, end - 1 - p)
                        if score > best_score:
                            best, best_score = (row, start), score
                row, start = best
                text_probs[i] = probs[row, 1 + p - start]
            out.append(text_probs)
        return out

    def predict_labels(self, x, batch_size: int | None = None,
                       window_stride: int | None = None) -> list[list]:
        """Word lists -> per text the predicted tag of each kept word (names, or ids);
        `window_stride` as `predict`'s."""
        out = []
        for probs in self.predict(x, batch_size, window_stride=window_stride):
            ids = probs.argmax(axis=-1).tolist()
            out.append([self.label_names[i] for i in ids] if self.label_names else ids)
        return out

    def export(self, export_dir: str | os.PathLike, version: int | None = 1,
               overwrite: bool = False, check: bool = True) -> str:
        """A raw-text serving SavedModel at `<export_dir>/<version>/`
        (`bert_tf.export.task_models.TokenClassifierExport`: serving_default(text) -> per-piece
        probabilities, label_ids (+ labels), input_word_ids, word_start_mask). Returns the
        written folder."""
        from bert_tf.export.task_models import TokenClassifierExport

        return self.write_export(
            lambda pre: TokenClassifierExport(self.backbone, pre, self.label_names),
            export_dir, version, overwrite, check)
