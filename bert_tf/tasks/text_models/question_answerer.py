"""`BertQuestionAnswerer`: a question and a context in raw text, the answer's text, character
span and score out, with its tokenizer inside; SQuAD's recipe as the original `run_squad.py`.

    import bert_tf
    qa = bert_tf.BertQuestionAnswerer.from_pretrained("uncased_L-12_H-768_A-12",
                                                      sequence_length=384, doc_stride=128)
    qa.fit([{"question": "Who arrived?", "context": "The Huguenots arrived in 1685.",
             "answer_text": "The Huguenots", "answer_start": 0}], epochs=2)
    qa.predict(["When did they arrive?"], ["The Huguenots arrived in 1685."])
    # [{"answer": "1685", "start": 25, "end": 29, "score": 0.93, ...}]
    qa.save("qa.keras")          # keras.models.load_model after `import bert_tf`
    qa.export("serving/qa")      # bert_tf.export.task_models.SquadExport (first window only)

Every step is `bert_tf.tasks.squad`'s, the original's, on the vocab the `.keras` file carries
(the preprocessor layer's `vocabulary`, read by the original `FullTokenizer`):

  * `examples_from_squad_data`: the context split on whitespace into words, an answer's
    character offset mapped to its words (bad answers raise one line naming the example);
  * `convert_examples_to_features`: the question cut to `max_query_length` pieces, the context
    in windows of `sequence_length - question - 3` pieces every `doc_stride` pieces, each packed
    [CLS] question [SEP] window [SEP]; training targets are the answer's pieces in a window,
    position 0 ([CLS]) where the window does not hold the whole answer (and for v2.0's
    unanswerable questions);
  * `predict_logits` (`BertSpanLabeler` on every window) and `compute_predictions`: the n-best
    start/end positions of each window, spans kept only where their start has its maximum
    context in that window, at most `max_answer_length` pieces, `get_final_text`'s projection
    onto the context; v2.0: the null answer when `null score - best span score` exceeds
    `null_score_diff_threshold`.

The answer's character span is that of the span `compute_predictions` chose: the window and
positions whose start and end logits are the chosen n-best entry's, projected onto the context
through the whitespace words (so `context[start:end]` is the answer, whatever whitespace the
context has). The conversion runs in Python, as the original's, so `tf.data` inputs are read
into memory first.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import keras
import numpy as np
import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.tasks.squad import (InputFeatures, RawResult, SquadExample, check_lengths,
                                 compute_predictions, convert_examples_to_features,
                                 examples_from_squad_data, features_to_arrays,
                                 is_squad_whitespace, predict_logits)
from bert_tf.tasks.text_models.preprocessors import BertTextPreprocessor, write_vocab_file
from bert_tf.tasks.text_models.text_task import DEFAULT_BATCH_SIZE, TextTask, load_backbone

__all__ = ["BertQuestionAnswerer", "EXAMPLE_KEYS", "answer_char_span"]

EXAMPLE_KEYS = ("question", "context", "answer_text", "answer_start")
OUTPUT_KEYS = ("start_logits", "end_logits")
NO_SPAN = -1  # "start" / "end" of the null answer (v2.0) and of the original's nonce "empty"


def _text(value, what: str) -> str:
    if isinstance(value, (bytes, np.bytes_)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            raise UserInputError(f"{what}: not UTF-8 text: {e}") from e
    if isinstance(value, (str, np.str_)):
        return str(value)
    raise UserInputError(f"{what}: expected a string; got {type(value).__name__} {value!r:.60}")


def _rows(items, what: str) -> list:
    """A sequence, a numpy array, or a (batched or not) tf.data.Dataset -> a list of items."""
    if isinstance(items, tf.data.Dataset):
        out = []
        for element in items.as_numpy_iterator():
            out.extend(_unbatch(element))
        return out
    if isinstance(items, (str, bytes, dict)):
        return [items]
    if isinstance(items, np.ndarray):
        return list(items) if items.ndim else [items.item()]
    try:
        return list(items)
    except TypeError as e:
        raise UserInputError(f"{what}: expected a list, a numpy array or a tf.data.Dataset; got "
                             f"{type(items).__name__}") from e


def _item(value):
    """A numpy scalar (or 0-d array) -> its Python value; other values as they are."""
    return value.item() if isinstance(value, (np.generic, np.ndarray)) else value


def _unbatch(element) -> list:
    """One dataset element (a dict or tuple of numpy values, scalars or [B] batches) -> rows."""
    if isinstance(element, dict):
        columns = {k: np.asarray(v) for k, v in element.items()}
        if all(v.ndim == 0 for v in columns.values()):
            return [{k: _item(v) for k, v in columns.items()}]
        size = len(next(iter(columns.values())))
        return [{k: _item(v[i]) for k, v in columns.items()} for i in range(size)]
    columns = [np.asarray(v) for v in (element if isinstance(element, tuple) else (element,))]
    if all(v.ndim == 0 for v in columns):
        return [tuple(_item(v) for v in columns)]
    if len(columns) == 1:  # a [B, k] array
        return [tuple(r.tolist()) for r in columns[0]]
    return [tuple(_item(v[i]) for v in columns) for i in range(len(columns[0]))]


def _columns(x, keys: Sequence[str], what: str) -> list[tuple]:
    """Examples in the accepted forms -> tuples in `keys` order: a dict of columns, a list of
    dicts, a list of tuples / an array [N, len(keys)], or a dataset of those."""
    if isinstance(x, dict) and not isinstance(x, tf.data.Dataset):
        missing = [k for k in keys if k not in x]
        if missing:
            raise UserInputError(f"{what}: a dict of columns needs the keys {list(keys)}; "
                                 f"missing {missing}")
        columns = [_rows(x[k], f"{what}[{k!r}]") for k in keys]
        sizes = {len(c) for c in columns}
        if len(sizes) > 1:
            raise UserInputError(f"{what}: the columns {list(keys)} have "
                                 f"{[len(c) for c in columns]} items; they must be equally long")
        return list(zip(*columns))
    out = []
    for i, row in enumerate(_rows(x, what)):
        if isinstance(row, dict):
            missing = [k for k in keys if k not in row]
            if missing:
                raise UserInputError(f"{what}: example {i} lacks {missing}; expected the keys "
                                     f"{list(keys)}")
            out.append(tuple(row[k] for k in keys))
            continue
        if isinstance(row, np.ndarray):
            row = tuple(row.tolist())
        if isinstance(row, (str, bytes)) or not isinstance(row, (tuple, list)) \
                or len(row) != len(keys):
            raise UserInputError(f"{what}: example {i} is {row!r:.80}; expected "
                                 f"({', '.join(keys)})")
        out.append(tuple(row))
    return out


def _question_context_pairs(questions, contexts, what: str) -> list[tuple[str, str]]:
    """(questions, contexts) or pairs alone -> [(question, context)], checked (no missing or
    empty context)."""
    if contexts is None:
        rows = _columns(questions, EXAMPLE_KEYS[:2], what)
    else:
        qs, cs = _rows(questions, "questions"), _rows(contexts, "contexts")
        if len(qs) != len(cs):
            raise UserInputError(f"{what}: {len(qs)} questions but {len(cs)} contexts; give one "
                                 "context per question")
        rows = list(zip(qs, cs))
    pairs = []
    for i, (question, context) in enumerate(rows):
        if context is None:
            raise UserInputError(f"{what}: question {i} has no context")
        question = _text(question, f"{what}: question {i}")
        context = _text(context, f"{what}: the context of question {i}")
        if not context.strip():
            raise UserInputError(f"{what}: question {i} has an empty context")
        pairs.append((question, context))
    return pairs


def _answer_start(value, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise UserInputError(f"{what}: answer_start must be the answer's character offset in the "
                             f"context (an integer); got {value!r:.40}")
    return int(value)


def answer_char_span(context: str, example: SquadExample, features: Sequence[InputFeatures],
                     results: dict[int, RawResult], entry: dict,
                     max_answer_length: int) -> tuple[int, int]:
    """Characters [start, end) of `context` holding the n-best `entry` ({"text",
    "start_logit", "end_logit"}) that `compute_predictions` chose for `example`.

    The span is found as `compute_predictions` made it: a window's (start, end) positions that
    pass its filters (both in the context, the start at its maximum context, end >= start, at
    most `max_answer_length` pieces) whose logits are the entry's and whose words contain its
    text; the text's offset in those words (joined by one space, as `get_final_text` sees them)
    is mapped to the context's characters. (NO_SPAN, NO_SPAN) for the null answer and when no
    span matches (the original's nonce "empty" answer).
    """
    text = entry["text"]
    if not text:
        return NO_SPAN, NO_SPAN
    words = example.doc_tokens
    word_starts = [i for i, c in enumerate(context) if not is_squad_whitespace(c)
                   and (i == 0 or is_squad_whitespace(context[i - 1]))]
    for feature in features:
        result = results[int(feature.unique_id)]
        starts = [p for p in feature.token_to_orig_map
                  if feature.token_is_max_context.get(p, False)
                  and float(result.start_logits[p]) == entry["start_logit"]]
        for start in starts:
            for end in range(start, start + max_answer_length):
                if end not in feature.token_to_orig_map or \
                        float(result.end_logits[end]) != entry["end_logit"]:
                    continue
                first, last = feature.token_to_orig_map[start], feature.token_to_orig_map[end]
                offset = " ".join(words[first:last + 1]).find(text)
                if offset < 0:
                    continue
                begin = _context_char(word_starts, words, first, offset)
                stop = _context_char(word_starts, words, first, offset + len(text) - 1) + 1
                return begin, stop
    return NO_SPAN, NO_SPAN


def _context_char(word_starts: list[int], words: list[str], first_word: int,
                  offset: int) -> int:
    """Offset into `" ".join(words[first_word:])` -> the context's character index."""
    word = first_word
    while offset > len(words[word]):  # past this word and the space after it
        offset -= len(words[word]) + 1
        word += 1
    return word_starts[word] + min(offset, len(words[word]) - 1)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertQuestionAnswerer(TextTask):
    """Extractive question answering on raw text (module docstring).

    Args:
      backbone: a `bert_tf.modeling.BertSpanLabeler`.
      preprocessor: a `BertTextPreprocessor` (its vocabulary, casing and `sequence_length`, the
        window length, are the model's).
      doc_stride: pieces between the starts of a long context's windows (run_squad's 128).
      max_query_length: questions are cut to this many pieces (64).
      version_2_with_negative: SQuAD v2.0: unanswerable questions, the null answer.
      n_best_size, max_answer_length, null_score_diff_threshold: the post-processing's (20,
        30, 0.0), the defaults of `predict`.

    Call: {"input_word_ids", "input_mask", "input_type_ids"} int32 [B, S] ->
    {"start_logits", "end_logits"} float32 [B, S].
    """

    def __init__(self, backbone, preprocessor: BertTextPreprocessor, doc_stride: int = 128,
                 max_query_length: int = 64, version_2_with_negative: bool = False,
                 n_best_size: int = 20, max_answer_length: int = 30,
                 null_score_diff_threshold: float = 0.0, **kwargs):
        kwargs.setdefault("name", "bert_question_answerer")
        kwargs.pop("label_names", None)
        super().__init__(preprocessor, None, **kwargs)
        check_lengths(preprocessor.sequence_length, int(max_query_length), int(doc_stride))
        for name, value in (("n_best_size", n_best_size),
                            ("max_answer_length", max_answer_length)):
            if int(value) <= 0:
                raise UserInputError(f"{name} must be positive, got {value}")
        self.backbone = backbone
        self.built = bool(backbone.built)  # the task adds no weights of its own
        self.doc_stride = int(doc_stride)
        self.max_query_length = int(max_query_length)
        self.version_2_with_negative = bool(version_2_with_negative)
        self.n_best_size = int(n_best_size)
        self.max_answer_length = int(max_answer_length)
        self.null_score_diff_threshold = float(null_score_diff_threshold)
        object.__setattr__(self, "_full_tokenizer", None)

    @property
    def sequence_length(self) -> int:
        return self.preprocessor.sequence_length

    @classmethod
    def from_pretrained(cls, path_or_preset: str | os.PathLike, sequence_length: int = 384,
                        doc_stride: int = 128, max_query_length: int = 64,
                        version_2_with_negative: bool = False, *, n_best_size: int = 20,
                        max_answer_length: int = 30, null_score_diff_threshold: float = 0.0,
                        vocab_file: str | os.PathLike | None = None,
                        do_lower_case: bool | None = None, heads: str = "if_present"
                        ) -> "BertQuestionAnswerer":
        """A question answerer on a pretrained BERT from any layout `bert_tf.from_pretrained`
        reads (Google's release folder, a Hugging Face folder, a bert_tf `.keras` file or
        encoder SavedModel, a preset name with `vocab_file=`). A checkpoint's SQuAD head
        (`cls/squad/output_*`) is loaded when present (`heads`), else the head is new.

        A `.keras` file of a `BertQuestionAnswerer` is returned as saved (its own lengths and
        post-processing settings); another task model's `.keras` file gives its encoder and
        vocab.
        """
        from bert_tf.modeling import BertSpanLabeler

        name = os.fspath(path_or_preset)
        saved = cls.saved_instance(name)
        if saved is not None:
            return saved
        check_lengths(int(sequence_length), int(max_query_length), int(doc_stride))

        def factory(config, encoder=None):
            return BertSpanLabeler(config, encoder=encoder)

        backbone, tokens, lower = load_backbone(name, factory, vocab_file, do_lower_case, heads)
        return cls(backbone, BertTextPreprocessor(tokens, sequence_length, lower),
                   doc_stride=doc_stride, max_query_length=max_query_length,
                   version_2_with_negative=version_2_with_negative, n_best_size=n_best_size,
                   max_answer_length=max_answer_length,
                   null_score_diff_threshold=null_score_diff_threshold)

    def get_config(self) -> dict:
        return {**super().get_config(), "doc_stride": self.doc_stride,
                "max_query_length": self.max_query_length,
                "version_2_with_negative": self.version_2_with_negative,
                "n_best_size": self.n_best_size, "max_answer_length": self.max_answer_length,
                "null_score_diff_threshold": self.null_score_diff_threshold}

    def call(self, inputs, training=None):
        """Token-id dict [B, S] -> {"start_logits", "end_logits"} float32 [B, S]."""
        out = self.backbone(inputs, training=training)
        return {k: out[k] for k in OUTPUT_KEYS}

    def call_text(self, texts, training: bool = False):
        raise UserInputError("BertQuestionAnswerer reads (question, context) pairs in doc_stride "
                             "windows: use predict(questions, contexts)")

    # -- the original's SQuAD pipeline on this model's vocab ----------------------------------

    @property
    def full_tokenizer(self):
        """The original `FullTokenizer` over the preprocessor's vocabulary and casing."""
        if self._full_tokenizer is None:
            from bert_tf.tokenization import FullTokenizer

            tokenizer = FullTokenizer(write_vocab_file(self.preprocessor.vocabulary),
                                      do_lower_case=self.preprocessor.do_lower_case)
            object.__setattr__(self, "_full_tokenizer", tokenizer)
        return self._full_tokenizer

    def examples(self, x, y=None, labelled: bool = False,
                 what: str = "x") -> tuple[list[SquadExample], list[str]]:
        """`SquadExample`s (ids "0", "1", ...) and their contexts from the accepted inputs.

        Unlabelled: (question, context) pairs (see `predict`). Labelled: examples with
        `EXAMPLE_KEYS` (a dict of columns, a list of dicts or 4-tuples, a dataset of them), or
        pairs in `x` and (answer_text, answer_start) in `y`. v2.0: an answer_text "" or None
        (answer_start ignored) is an unanswerable question.

        Raises:
          UserInputError (one line naming the example): a missing or empty context, an answer
          that is not the context's text at its answer_start.
        """
        if not labelled:
            pairs = _question_context_pairs(x, None, what)
            answers = None
        elif y is None:
            rows = _columns(x, EXAMPLE_KEYS, what)
            pairs = _question_context_pairs([r[:2] for r in rows], None, what)
            answers = [r[2:] for r in rows]
        else:
            pairs = _question_context_pairs(x, None, what)
            answers = _columns(y, EXAMPLE_KEYS[2:], "y")
            if len(answers) != len(pairs):
                raise UserInputError(f"{what} has {len(pairs)} questions but y has "
                                     f"{len(answers)} answers")
        paragraphs = []
        for i, (question, context) in enumerate(pairs):
            qa: dict[str, Any] = {"id": str(i), "question": question}
            if answers is not None:
                text, start = answers[i]
                text = None if text is None else _text(text, f"{what}: the answer of "
                                                             f"question {i}")
                if not text:
                    if not self.version_2_with_negative:
                        raise UserInputError(f"{what}: question {i} has no answer_text; "
                                             "unanswerable questions need "
                                             "version_2_with_negative=True")
                    qa.update(answers=[], is_impossible=True)
                else:
                    start = _answer_start(start, f"{what}: question {i}")
                    if start is None:
                        raise UserInputError(f"{what}: question {i} has an answer_text but no "
                                             "answer_start")
                    qa.update(answers=[{"text": text, "answer_start": start}],
                              is_impossible=False)
            paragraphs.append({"context": context, "qas": [qa]})
        examples = examples_from_squad_data([{"paragraphs": paragraphs}],
                                            is_training=answers is not None,
                                            version_2_with_negative=self.version_2_with_negative,
                                            on_bad_answer="raise", source=what)
        return examples, [c for _, c in pairs]

    def features(self, examples: Sequence[SquadExample],
                 labelled: bool = False) -> list[InputFeatures]:
        """The examples' doc_stride windows (`convert_examples_to_features`)."""
        return convert_examples_to_features(
            examples, self.full_tokenizer, self.sequence_length, self.doc_stride,
            self.max_query_length, is_training=labelled, log_examples=0)

    # -- Keras loops --------------------------------------------------------------------------

    def _default_loss(self):
        return {k: keras.losses.SparseCategoricalCrossentropy(from_logits=True)
                for k in OUTPUT_KEYS}

    def _default_metrics(self):
        return {k: [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
                for k in OUTPUT_KEYS}

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs) -> None:
        """`TextTask.compile` (the original optimizer and schedule); the default loss is the
        original's, (cross-entropy of the start position + of the end position) / 2: Keras'
        two sparse cross-entropies from logits, each weighted 0.5."""
        if isinstance(loss, str) and loss == "auto":
            kwargs.setdefault("loss_weights", {k: 0.5 for k in OUTPUT_KEYS})
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def text_dataset(self, x, y=None, sample_weight=None, batch_size: int | None = None,
                     shuffle: bool = False, what: str = "x", labelled: bool = False
                     ) -> tf.data.Dataset:
        """Batches of windows: (ids dict[, {"start_logits": start_positions, "end_logits":
        end_positions}]) from the examples `examples` takes (a dataset already holding such
        batches is returned as is). Every window of every example is one row, in order (or
        shuffled)."""
        if isinstance(x, tf.data.Dataset):
            spec = x.element_spec
            first = spec[0] if isinstance(spec, tuple) else spec
            if isinstance(first, dict) and "input_word_ids" in first:
                return x
        if sample_weight is not None:
            raise UserInputError("sample_weight is not supported by BertQuestionAnswerer")
        examples, _ = self.examples(x, y, labelled, what)
        if not examples:
            raise UserInputError(f"{what}: no questions")
        arrays = features_to_arrays(self.features(examples, labelled), is_training=labelled)
        inputs = {k: arrays[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}
        parts: tuple = (inputs,)
        if labelled:
            parts += ({"start_logits": arrays["start_positions"],
                       "end_logits": arrays["end_positions"]},)
        ds = tf.data.Dataset.from_tensor_slices(parts if labelled else inputs)
        if shuffle:
            ds = ds.shuffle(len(arrays["input_word_ids"]), reshuffle_each_iteration=True)
        return ds.batch(batch_size or DEFAULT_BATCH_SIZE).prefetch(tf.data.AUTOTUNE)

    def fit(self, x=None, y=None, batch_size: int | None = None, epochs: int = 1,
            validation_data=None, shuffle: bool = True, sample_weight=None,
            steps_per_epoch=None, **kwargs):
        """`keras.Model.fit` on examples (`examples`): each example's windows with the
        original's start/end targets; `validation_data` in the same forms (a tuple (x, y) is
        pairs and answers). The default schedule's length is epochs x batches of windows."""
        if validation_data is not None and not isinstance(validation_data, tf.data.Dataset):
            vx, vy = (validation_data if isinstance(validation_data, tuple)
                      and len(validation_data) == 2 else (validation_data, None))
            validation_data = self.text_dataset(vx, vy, batch_size=batch_size,
                                                what="validation_data", labelled=True)
        return super().fit(x, y, batch_size=batch_size, epochs=epochs,
                           validation_data=validation_data, shuffle=shuffle,
                           sample_weight=sample_weight, steps_per_epoch=steps_per_epoch,
                           **kwargs)

    def predict_logits(self, questions, contexts=None, batch_size: int | None = None,
                       length_bucketing: bool = True):
        """-> (examples, contexts, windows, per window a `RawResult`): the model on every
        doc_stride window (`bert_tf.tasks.squad.predict_logits`, [PAD] logits -10000 with
        `length_bucketing` as `run_squad.py --length_bucketing`)."""
        pairs = _question_context_pairs(questions, contexts, "predict")
        examples, texts = self.examples(pairs, what="predict")
        if not examples:
            return [], [], [], []
        features = self.features(examples)
        results = predict_logits(self.backbone, features, batch_size or DEFAULT_BATCH_SIZE,
                                 length_bucketing=length_bucketing, progress=False)
        return examples, texts, features, results

    def predict(self, questions, contexts=None, batch_size: int | None = None,
                n_best_size: int | None = None, max_answer_length: int | None = None,
                null_score_diff_threshold: float | None = None, length_bucketing: bool = True,
                return_nbest: bool = False, **kwargs) -> list[dict]:
        """Questions and contexts -> one answer per question.

        Args:
          questions, contexts: equally long lists / numpy string arrays; or `questions` alone
            as (question, context) pairs (a list, an array [N, 2], a dict of "question" and
            "context" columns, a list of such dicts, or a `tf.data.Dataset` of (question,
            context) tuples or dicts, batched or not).
          n_best_size, max_answer_length, null_score_diff_threshold: the post-processing's
            (default: the model's).
          length_bucketing: as `run_squad.py`'s flag (the same answers up to float rounding).
          return_nbest: also return each question's n-best list (`compute_predictions`').

        Returns:
          Per question a dict: "answer" (text; "" = no answer in v2.0), "start", "end" (the
          answer is `context[start:end]`; -1, -1 for the null answer), "score" (its n-best
          probability), "start_logit", "end_logit"; v2.0 also "null_score_diff" (null score
          minus the best span's, the original's null_odds.json value); with `return_nbest`,
          "nbest".
        """
        n_best_size = self.n_best_size if n_best_size is None else int(n_best_size)
        max_answer_length = (self.max_answer_length if max_answer_length is None
                             else int(max_answer_length))
        threshold = (self.null_score_diff_threshold if null_score_diff_threshold is None
                     else float(null_score_diff_threshold))
        if n_best_size <= 0 or max_answer_length <= 0:
            raise UserInputError(f"n_best_size and max_answer_length must be positive; got "
                                 f"{n_best_size} and {max_answer_length}")
        examples, texts, features, results = self.predict_logits(
            questions, contexts, batch_size, length_bucketing)
        if not examples:
            return []
        preds = compute_predictions(examples, features, results, n_best_size, max_answer_length,
                                    self.preprocessor.do_lower_case,
                                    self.version_2_with_negative, threshold)
        by_id = {int(r.unique_id): r for r in results}
        by_example: dict[int, list] = {}
        for feature in features:
            by_example.setdefault(feature.example_index, []).append(feature)
        out = []
        for i, (example, context) in enumerate(zip(examples, texts)):
            nbest = preds.nbest[example.qas_id]
            text = preds.predictions[example.qas_id]
            entry = next(e for e in nbest if e["text"] == text)
            start, end = answer_char_span(context, example, by_example.get(i, []), by_id,
                                          entry, max_answer_length)
            answer = {"answer": text, "start": start, "end": end,
                      "score": float(entry["probability"]),
                      "start_logit": float(entry["start_logit"]),
                      "end_logit": float(entry["end_logit"])}
            if self.version_2_with_negative:
                answer["null_score_diff"] = float(preds.null_odds[example.qas_id])
            if return_nbest:
                answer["nbest"] = [dict(e) for e in nbest]
            out.append(answer)
        return out

    def export(self, export_dir: str | os.PathLike, version: int | None = 1,
               overwrite: bool = False, check: bool = True) -> str:
        """A raw-text serving SavedModel at `<export_dir>/<version>/`
        (`bert_tf.export.task_models.SquadExport`: serving_default(question, context) ->
        start_logits, end_logits [B, S], the best span's start_index, end_index in the packed
        pieces, input_word_ids; serving_ids). The export reads the context's first window
        only (no doc_stride windows, no n-best). Returns the written folder."""
        from bert_tf.export.task_models import SquadExport

        return self.write_export(
            lambda pre: SquadExport(self.backbone, pre, self.max_query_length,
                                    self.max_answer_length),
            export_dir, version, overwrite, check)
