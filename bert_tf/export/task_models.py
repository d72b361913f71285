"""Fine-tuned task models as serving SavedModels: raw text in, named dense outputs out.

Each export wraps a fine-tuned Keras model (`BertClassifier`, `BertSpanLabeler`,
`BertTokenClassifier`, `BertMultipleChoice`) and a `BertPreprocessor` (in-graph tokenizer, vocab
as an asset). Every signature runs with `training=False`, is not XLA-compiled and returns dense
tensors with stable names:

  classifier       serving_default(text) / serving_pair(text_a, text_b) / serving_ids(ids...)
                   -> probabilities [B, L] f32, label_ids [B] i32, logits [B, L]
                      (+ labels [B] string with a label list; regression: predictions [B] f32)
  squad            serving_default(question, context) / serving_ids(ids...)
                   -> start_logits, end_logits [B, S] f32; raw text also start_index, end_index
                      [B] i32 (best span in the context, original post-processing limits) and
                      input_word_ids [B, S]
  ner              serving_default(text) / serving_ids(ids...)
                   -> probabilities [B, S, L] f32, label_ids [B, S] i32 (+ labels [B, S] string);
                      raw text also input_word_ids and word_start_mask [B, S] i32
  multiple_choice  serving_default(context [B], choices [B, C]) / serving_ids(ids [B, C, S]...)
                   -> probabilities [B, C] f32, label_ids [B] i32, logits [B, C]

The id signatures take int32 `input_word_ids`, `input_mask`, `input_type_ids` of shape
[batch, seq] (multiple choice: [batch, num_choices, seq]), any seq up to the model's
`max_position_embeddings`. A signature's input names are fixed when it is saved: a request with
another name (the original's `segment_ids`, a typo) is refused by TensorFlow / TF Serving, never
dropped; in Python, each module's `_run` checks its dict as the models do.

The classifier and multiple-choice signatures (one output row per example) run the model on the
request cut to its longest example, rounded up to a multiple of 8
(`training.length_batching.trim_padding`): a short sentence packed to seq_length 128 costs its own
length, with the same outputs up to float rounding (padding never reaches a real position). The
per-position exports (squad, ner) keep the full length, so their [B, S] outputs are unchanged.
"""
from __future__ import annotations

from typing import Sequence

import keras
import tensorflow as tf

from bert_tf.export.preprocessor import (INPUT_KEYS, BertPreprocessor, ensure_input_shape,
                                         with_same_batch_size)
from bert_tf.export.serving_module import (ModelServingModule, concrete_signature,
                                           text_specs)
from bert_tf.modeling import (BertClassifier, BertMultipleChoice, BertSpanLabeler,
                              BertTokenClassifier, canonical_inputs)
from bert_tf.training.length_batching import DEFAULT_LENGTH_MULTIPLE, trim_padding

TASK_TYPES = ("classifier", "squad", "ner", "multiple_choice")


class TaskServingModule(ModelServingModule):
    """Base: tracks the model's variables (not the Keras model object: Keras 3 would add a
    float32 signature of its own), the BERT config, the preprocessor and the label list
    (`bert_tf.export.serving_module`)."""

    def __init__(self, model: keras.Model, preprocessor: BertPreprocessor,
                 label_list: Sequence[str] | None = None, name: str | None = None):
        super().__init__(model, model.variables, "bert_config_json",
                         model.config.to_json_string(), label_list, name=name)
        self.preprocessor = preprocessor

    def _run(self, inputs: dict[str, tf.Tensor], cut_padding: bool = False
             ) -> dict[str, tf.Tensor]:
        """The model (training=False) on int32 inputs [B, ..., S]; `cut_padding`: on the batch
        cut to its longest example (outputs without a sequence axis only). `inputs` is checked
        as the models check theirs (`modeling.canonical_inputs`: the original's key names are
        accepted, an unknown key is a `ModelInputError`)."""
        inputs = canonical_inputs(inputs, owner=type(self).__name__)
        inputs = {k: ensure_input_shape(tf.cast(inputs[k], tf.int32),
                                        [None] * inputs[k].shape.rank) for k in INPUT_KEYS}
        if cut_padding:
            inputs = trim_padding(inputs, DEFAULT_LENGTH_MULTIPLE)
        return self._model(inputs, training=False)

    def ids_signature(self, outputs, rank: int = 2):
        """The `serving_ids` signature: `outputs(packed inputs)` on the three int32 id tensors
        [batch, ..., seq] (rank 2, or 3 for multiple choice)."""
        return concrete_signature(
            lambda input_word_ids, input_mask, input_type_ids: outputs(
                {"input_word_ids": input_word_ids, "input_mask": input_mask,
                 "input_type_ids": input_type_ids}),
            *[tf.TensorSpec([None] * rank, tf.int32, name=k) for k in INPUT_KEYS])


def _check_labels(num_labels: int, label_list: Sequence[str] | None) -> None:
    if label_list is not None and len(label_list) != num_labels:
        raise ValueError(f"the label list has {len(label_list)} labels {list(label_list)} but the "
                         f"model has num_labels={num_labels}; they must match")


class ClassifierExport(TaskServingModule):
    """`BertClassifier` (GLUE-style sentence or sentence-pair classification / regression)."""

    def __init__(self, model: BertClassifier, preprocessor: BertPreprocessor,
                 label_list: Sequence[str] | None = None):
        _check_labels(model.num_labels, label_list)
        super().__init__(model, preprocessor, label_list, name="classifier_export")
        self.num_labels = model.num_labels

    def outputs(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """Packed inputs [B, S] -> named outputs (see the module docstring)."""
        logits = tf.cast(self._run(inputs, cut_padding=True)["logits"], tf.float32)
        if self.num_labels == 1:  # Regression (STS-B): the single logit is the prediction.
            return {"predictions": logits[:, 0], "logits": logits}
        label_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {"probabilities": tf.nn.softmax(logits, axis=-1), "label_ids": label_ids,
                "logits": logits, **self.label_outputs(label_ids)}

    def serving_signatures(self):
        pre = self.preprocessor
        return {
            "serving_default": concrete_signature(
                lambda text: self.outputs(pre.pack_single(text)), *text_specs("text")),
            "serving_pair": concrete_signature(
                lambda text_a, text_b: self.outputs(pre.pack_pair(text_a, text_b)),
                *text_specs("text_a", "text_b")),
            "serving_ids": self.ids_signature(self.outputs),
        }


class SquadExport(TaskServingModule):
    """`BertSpanLabeler` (SQuAD): question + context -> span logits and the best span.

    Raw text is packed as the original's `convert_examples_to_features` packs a document's first
    span: [CLS] question [SEP] context [SEP], the question cut to `max_query_length` pieces and
    the context to what is left (longer contexts: send them in doc-stride windows yourself or use
    `serving_ids`). The best span maximises start_logit + end_logit over context pieces with
    end >= start and at most `max_answer_length` pieces, as the original's post-processing.
    """

    def __init__(self, model: BertSpanLabeler, preprocessor: BertPreprocessor,
                 max_query_length: int = 64, max_answer_length: int = 30):
        super().__init__(model, preprocessor, None, name="squad_export")
        if max_query_length > preprocessor.seq_length - 3:
            raise ValueError(f"max_query_length={max_query_length} leaves no room for the context "
                             f"in seq_length={preprocessor.seq_length}")
        self.max_query_length = int(max_query_length)
        self.max_answer_length = int(max_answer_length)

    def logits(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        out = self._run(inputs)
        return {"start_logits": tf.cast(out["start_logits"], tf.float32),
                "end_logits": tf.cast(out["end_logits"], tf.float32)}

    def from_text(self, question: tf.Tensor, context: tf.Tensor) -> dict[str, tf.Tensor]:
        """tf.string [B] x 2 -> logits, best span, input_word_ids."""
        pre = self.preprocessor
        question = ensure_input_shape(question, [None])
        context = with_same_batch_size(question, ensure_input_shape(context, [None]), "question",
                                       "context")
        q, c = pre.tokenize(question), pre.tokenize(context)
        keep_q = tf.minimum(q.row_lengths(), self.max_query_length)
        keep_c = tf.minimum(c.row_lengths(), pre.seq_length - 3 - keep_q)
        inputs = pre.packer.pack(q, c, keep_q, keep_c)
        out = self.logits(inputs)
        start, end = self._best_span(out["start_logits"], out["end_logits"], inputs)
        return {**out, "start_index": start, "end_index": end,
                "input_word_ids": inputs["input_word_ids"]}

    def _best_span(self, start_logits, end_logits, inputs):
        ids = inputs["input_word_ids"]
        in_context = (inputs["input_type_ids"] == 1) & (inputs["input_mask"] == 1) & (
            ids != self.preprocessor.packer.sep_id)  # [B, S]
        seq = tf.shape(ids)[1]
        pos = tf.range(seq)
        length = pos[tf.newaxis, :] - pos[:, tf.newaxis]  # [S(start), S(end)]: end - start
        allowed = (length >= 0) & (length < self.max_answer_length)
        valid = allowed[tf.newaxis] & in_context[:, :, tf.newaxis] & in_context[:, tf.newaxis, :]
        scores = start_logits[:, :, tf.newaxis] + end_logits[:, tf.newaxis, :]
        scores = tf.where(valid, scores, tf.fill(tf.shape(scores), float("-inf")))
        best = tf.argmax(tf.reshape(scores, [tf.shape(ids)[0], -1]), axis=-1,
                         output_type=tf.int32)
        has_span = tf.reduce_any(in_context, axis=1)
        start = tf.where(has_span, best // seq, 0)
        end = tf.where(has_span, best % seq, 0)
        return start, end

    def serving_signatures(self):
        return {
            "serving_default": concrete_signature(self.from_text,
                                                  *text_specs("question", "context")),
            "serving_ids": self.ids_signature(self.logits),
        }


class TokenClassifierExport(TaskServingModule):
    """`BertTokenClassifier` (NER): one label per word piece; `word_start_mask` marks the first
    piece of each word (the piece whose label is the word's label, as in BERT's NER recipe)."""

    def __init__(self, model: BertTokenClassifier, preprocessor: BertPreprocessor,
                 label_list: Sequence[str] | None = None):
        _check_labels(model.num_labels, label_list)
        super().__init__(model, preprocessor, label_list, name="ner_export")

    def outputs(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        logits = tf.cast(self._run(inputs)["logits"], tf.float32)
        label_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {"probabilities": tf.nn.softmax(logits, axis=-1), "label_ids": label_ids,
                **self.label_outputs(label_ids)}

    def from_text(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        pre = self.preprocessor
        text = ensure_input_shape(text, [None])
        words = pre.tokenizer.tokenize_words(text)  # [B, (words), (pieces)]
        pieces = words.merge_dims(1, 2)
        starts = words.with_values(tf.cast(tf.equal(
            tf.ragged.range(words.values.row_lengths()), 0), tf.int32)).merge_dims(1, 2)
        keep, _ = pre.packer.pair_lengths(pieces, None)
        inputs = pre.packer.pack(pieces, None, keep, None)
        word_start = pre.packer.pack_values(starts, None, keep, None, 0)
        return {**self.outputs(inputs), "input_word_ids": inputs["input_word_ids"],
                "word_start_mask": word_start}

    def serving_signatures(self):
        return {
            "serving_default": concrete_signature(self.from_text, *text_specs("text")),
            "serving_ids": self.ids_signature(self.outputs),
        }


class MultipleChoiceExport(TaskServingModule):
    """`BertMultipleChoice` (SWAG-style): each (context, choice) is packed as a pair with the
    original's longest-first truncation; the choices of an example are scored together."""

    def __init__(self, model: BertMultipleChoice, preprocessor: BertPreprocessor):
        super().__init__(model, preprocessor, None, name="multiple_choice_export")
        self.num_choices = model.num_choices

    def outputs(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        logits = tf.cast(self._run(inputs, cut_padding=True)["logits"], tf.float32)
        return {"probabilities": tf.nn.softmax(logits, axis=-1),
                "label_ids": tf.argmax(logits, axis=-1, output_type=tf.int32), "logits": logits}

    def from_text(self, context: tf.Tensor, choices: tf.Tensor) -> dict[str, tf.Tensor]:
        """context tf.string [B], choices tf.string [B, num_choices] -> outputs."""
        pre = self.preprocessor
        context = ensure_input_shape(context, [None])
        choices = with_same_batch_size(
            context, ensure_input_shape(choices, [None, self.num_choices]), "context", "choices")
        repeated = tf.reshape(tf.repeat(context[:, tf.newaxis], self.num_choices, axis=1), [-1])
        packed = pre.packer.pack(pre.tokenize(repeated), pre.tokenize(tf.reshape(choices, [-1])))
        inputs = {k: tf.reshape(v, [-1, self.num_choices, pre.seq_length])
                  for k, v in packed.items()}
        return self.outputs(inputs)

    def serving_signatures(self):
        return {
            "serving_default": concrete_signature(
                self.from_text, *text_specs("context"),
                tf.TensorSpec([None, self.num_choices], tf.string, name="choices")),
            "serving_ids": self.ids_signature(self.outputs, rank=3),
        }


def task_export_module(task: str, model: keras.Model, preprocessor: BertPreprocessor,
                       label_list: Sequence[str] | None = None, **kwargs) -> TaskServingModule:
    """The export wrapper for `task` (one of TASK_TYPES)."""
    if task == "classifier":
        return ClassifierExport(model, preprocessor, label_list)
    if task == "squad":
        return SquadExport(model, preprocessor, **kwargs)
    if task == "ner":
        return TokenClassifierExport(model, preprocessor, label_list)
    if task == "multiple_choice":
        return MultipleChoiceExport(model, preprocessor)
    raise ValueError(f"unknown task {task!r}; expected one of {TASK_TYPES}")
