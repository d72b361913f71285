"""SQuAD v1.1 / v2.0 for BERT: reading the JSON, WordPiece features with doc strides, fine-tuning and
prediction, as the original `run_squad.py` does them.

Data flow: `read_squad_examples` (whitespace words, char → word offsets, answer positions) →
`convert_examples_to_features` (query truncation, WordPiece sub-tokens, `[CLS] query [SEP] doc-span
[SEP]` windows every `doc_stride` tokens, max-context flags, start/end targets) → the model
(`BertSpanLabeler`) → `bert_tf.tasks.squad_postprocess` (n-best, `get_final_text`, null scores,
output files). `run_squad` drives a whole `tools/run_squad.py` invocation.

Behaviour kept from the original (and where this code differs):
  * Training questions must have exactly one answer unless `is_impossible` (v2.0); the answer's
    text must be found in the whitespace words its `answer_start` points at. The original logs
    "Could not find answer" and skips such a question silently; here each skip names the question
    id, the total is logged, and ``on_bad_answer="raise"`` turns them into a `SquadDataError`.
    An `answer_start` outside the context (an IndexError in the original) is treated the same way.
  * Training targets are token positions in the window; 0 (the [CLS] token) for unanswerable
    questions and for windows that do not contain the whole answer.
  * `num_train_steps = int(len(train_examples) / train_batch_size * num_train_epochs)` counts
    *questions*, not windows, as the original; the training input repeats, shuffles with a
    100-element buffer and drops the last partial batch.
  * The original writes features to `train.tf_record` / `eval.tf_record` and trains with
    TPUEstimator; here features stay in memory and checkpoints are written in the original TF1
    format (`model.ckpt-<step>` + a `checkpoint` state file) in `output_dir`.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
from typing import Any, Callable, Mapping, Sequence

from absl import logging

from bert_tf.errors import UserInputError
from bert_tf.options import option
from bert_tf.tasks.run_options import FinetuningRunOptions
from bert_tf.tokenization import printable_text

FIRST_UNIQUE_ID = 1000000000  # the original's first feature id


class SquadDataError(UserInputError):
    """A SQuAD file or question that cannot be used (the message names the file and question)."""


# ---------------------------------------------------------------------------------------------
# Examples
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class SquadExample:
    """One question about one paragraph.

    Attributes:
      qas_id: the question id.
      question_text: the question.
      doc_tokens: the paragraph split on whitespace (the "original words").
      orig_answer_text: the answer as written in the file (training only; "" if impossible).
      start_position / end_position: indices into `doc_tokens` of the answer's first and last
        word (training only; -1 for impossible questions; None when not training).
      is_impossible: v2.0 question without answer.
    """

    qas_id: str
    question_text: str
    doc_tokens: list[str]
    orig_answer_text: str | None = None
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool = False

    def __str__(self) -> str:
        parts = [f"qas_id: {printable_text(self.qas_id)}",
                 f"question_text: {printable_text(self.question_text)}",
                 f"doc_tokens: [{' '.join(self.doc_tokens)}]"]
        if self.start_position is not None:
            parts.append(f"start_position: {self.start_position}")
        if self.end_position is not None:
            parts.append(f"end_position: {self.end_position}")
        if self.is_impossible:
            parts.append(f"is_impossible: {self.is_impossible}")
        return ", ".join(parts)


def is_squad_whitespace(c: str) -> bool:
    """The original reader's whitespace: space, tab, CR, LF and U+202F (narrow no-break space)."""
    return c in " \t\r\n" or ord(c) == 0x202F


def split_paragraph(paragraph_text: str) -> tuple[list[str], list[int]]:
    """Splits a context on whitespace.

    Returns:
      (doc_tokens, char_to_word_offset): the words, and for every character of the text the index
      of the word it belongs to (a whitespace character maps to the word before it, -1 before the
      first word).
    """
    doc_tokens: list[str] = []
    char_to_word_offset: list[int] = []
    prev_is_whitespace = True
    for c in paragraph_text:
        if is_squad_whitespace(c):
            prev_is_whitespace = True
        else:
            if prev_is_whitespace:
                doc_tokens.append(c)
            else:
                doc_tokens[-1] += c
            prev_is_whitespace = False
        char_to_word_offset.append(len(doc_tokens) - 1)
    return doc_tokens, char_to_word_offset


def load_squad_json(input_file: str | os.PathLike) -> list[Mapping[str, Any]]:
    """Reads a SQuAD file and returns its `data` list; `SquadDataError` naming the file otherwise."""
    path = os.fspath(input_file)
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except OSError as e:
        raise SquadDataError(f"cannot read SQuAD file {path}: {e}") from e
    except json.JSONDecodeError as e:
        raise SquadDataError(f"SQuAD file {path} is not valid JSON: {e.msg} "
                             f"(line {e.lineno}, column {e.colno})") from e
    except UnicodeDecodeError as e:
        raise SquadDataError(f"SQuAD file {path} is not UTF-8 text: {e}") from e
    if not isinstance(obj, Mapping) or not isinstance(obj.get("data"), list):
        raise SquadDataError(f"SQuAD file {path} has no 'data' list (expected the SQuAD layout "
                             "data -> paragraphs -> context/qas)")
    return obj["data"]


def read_squad_examples(input_file: str | os.PathLike, is_training: bool,
                        version_2_with_negative: bool = False,
                        on_bad_answer: str = "skip") -> list[SquadExample]:
    """Reads a SQuAD json file into `SquadExample`s (see `examples_from_squad_data`)."""
    return examples_from_squad_data(load_squad_json(input_file), is_training,
                                    version_2_with_negative, on_bad_answer,
                                    source=os.fspath(input_file))


def examples_from_squad_data(data: Sequence[Mapping[str, Any]], is_training: bool,
                             version_2_with_negative: bool = False, on_bad_answer: str = "skip",
                             source: str = "<data>") -> list[SquadExample]:
    """Turns the `data` list of a SQuAD file into `SquadExample`s, in file order.

    Args:
      data: articles, each with `paragraphs` → `context`, `qas` → `id`, `question`, `answers`
        (`text`, `answer_start`) and, in v2.0, `is_impossible`.
      is_training: read answers and compute word positions (otherwise answers are ignored).
      version_2_with_negative: honour `is_impossible` (absent means False).
      on_bad_answer: "skip" (log and drop the question, as the original) or "raise" when an
        answer's text is not the context span its `answer_start` points at.
      source: file name used in messages.

    Returns:
      The examples (skipped questions left out).

    Raises:
      SquadDataError: malformed entries, a training question without exactly one answer, a bad
        answer with ``on_bad_answer="raise"``, or a training file where every question was bad.
    """
    if on_bad_answer not in ("skip", "raise"):
        raise ValueError(f"on_bad_answer must be 'skip' or 'raise', got {on_bad_answer!r}")
    examples: list[SquadExample] = []
    skipped: list[str] = []
    num_questions = 0
    for a_index, article in enumerate(data):
        try:
            paragraphs = article["paragraphs"]
        except (KeyError, TypeError) as e:
            raise SquadDataError(f"{source}: article {a_index} has no 'paragraphs'") from e
        for paragraph in paragraphs:
            try:
                context = paragraph["context"]
                qas = paragraph["qas"]
            except (KeyError, TypeError) as e:
                raise SquadDataError(f"{source}: a paragraph of article {a_index} lacks "
                                     f"'context' or 'qas'") from e
            doc_tokens, char_to_word_offset = split_paragraph(context)
            for qa in qas:
                num_questions += 1
                try:
                    qas_id = qa["id"]
                    question_text = qa["question"]
                except (KeyError, TypeError) as e:
                    raise SquadDataError(f"{source}: a question of article {a_index} lacks "
                                         f"'id' or 'question'") from e
                example = SquadExample(qas_id=qas_id, question_text=question_text,
                                       doc_tokens=doc_tokens)
                if is_training:
                    problem = _set_training_answer(example, qa, context, doc_tokens,
                                                   char_to_word_offset, version_2_with_negative,
                                                   source)
                    if problem is not None:
                        message = f"{source}: question {qas_id}: {problem}"
                        if on_bad_answer == "raise":
                            raise SquadDataError(message)
                        logging.warning("Could not find answer, skipping the question: %s",
                                        message)
                        skipped.append(qas_id)
                        continue
                examples.append(example)
    if skipped:
        logging.warning("%s: skipped %d of %d training questions whose answer does not match its "
                        "context span (first: %s)", source, len(skipped), num_questions,
                        skipped[0])
    if is_training and num_questions and not examples:
        raise SquadDataError(f"{source}: none of the {num_questions} training questions has a "
                             f"usable answer (first skipped: {skipped[0]})")
    return examples


def _set_training_answer(example: SquadExample, qa: Mapping[str, Any], context: str,
                         doc_tokens: list[str], char_to_word_offset: list[int],
                         version_2_with_negative: bool, source: str) -> str | None:
    """Fills the answer fields of a training example; returns a problem message or None.

    Structural errors (wrong number of answers) raise `SquadDataError` directly.
    """
    qas_id = example.qas_id
    is_impossible = bool(qa.get("is_impossible", False)) if version_2_with_negative else False
    answers = qa.get("answers", [])
    if is_impossible:
        example.is_impossible = True
        example.start_position = -1
        example.end_position = -1
        example.orig_answer_text = ""
        return None
    if len(answers) != 1:
        raise SquadDataError(
            f"{source}: question {qas_id} has {len(answers)} answers; for training, each question "
            "should have exactly 1 answer (keep one, e.g. the first, in the training file)"
            + ("" if version_2_with_negative else
               "; or pass --version_2_with_negative for a v2.0 file with is_impossible"))
    answer = answers[0]
    try:
        orig_answer_text = answer["text"]
        answer_offset = int(answer["answer_start"])
    except (KeyError, TypeError, ValueError) as e:
        raise SquadDataError(f"{source}: question {qas_id}: the answer needs 'text' and an "
                             f"integer 'answer_start', got {answer!r}") from e
    answer_length = len(orig_answer_text)
    end_char = answer_offset + answer_length - 1
    if answer_length == 0 or answer_offset < 0 or end_char >= len(context):
        return (f"answer {orig_answer_text!r} at answer_start={answer_offset} does not lie inside "
                f"the context ({len(context)} characters)")
    start_position = char_to_word_offset[answer_offset]
    end_position = char_to_word_offset[end_char]
    # Only answers whose text can be recovered from the document are used. With an answer_start
    # that points elsewhere (or badly normalised text), the question is skipped.
    actual_text = " ".join(doc_tokens[max(start_position, 0):end_position + 1])
    cleaned_answer_text = " ".join(orig_answer_text.split())
    if start_position < 0 or actual_text.find(cleaned_answer_text) == -1:
        return (f"answer text {cleaned_answer_text!r} does not match the context span "
                f"{actual_text!r} at answer_start={answer_offset}")
    example.orig_answer_text = orig_answer_text
    example.start_position = start_position
    example.end_position = end_position
    return None


# ---------------------------------------------------------------------------------------------
# Features
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class DocSpan:
    """A window of the document's WordPiece tokens: `length` tokens from `start`."""

    start: int
    length: int


@dataclasses.dataclass
class InputFeatures:
    """One model input window (the original's `InputFeatures`).

    Attributes:
      unique_id: feature id (from 1000000000, as the original).
      example_index: index of its example in the example list.
      doc_span_index: which window of the example.
      tokens: `[CLS] query [SEP] doc-span [SEP]` WordPiece tokens (unpadded).
      token_to_orig_map: position in `tokens` → index of the original word (doc tokens only).
      token_is_max_context: position in `tokens` → whether this window is the one with the most
        context for that token.
      input_ids / input_mask / segment_ids: int lists of length `max_seq_length`.
      start_position / end_position: training targets in `tokens` (0 = [CLS] for no answer in
        this window); None when not training.
      is_impossible: the example's v2.0 flag.
    """

    unique_id: int
    example_index: int
    doc_span_index: int
    tokens: list[str]
    token_to_orig_map: dict[int, int]
    token_is_max_context: dict[int, bool]
    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool = False


def improve_answer_span(doc_tokens: Sequence[str], input_start: int, input_end: int,
                        tokenizer, orig_answer_text: str) -> tuple[int, int]:
    """Narrows a token span to the sub-tokens that exactly spell the tokenized answer.

    Word-level positions over-cover answers that are part of a word, e.g. the answer "1895" in
    "(1895-1943)." whose word tokenizes to `( 1895 - 1943 ) .`. The first (start, end) inside the
    span (start ascending, end descending) whose tokens joined by spaces equal the answer's
    tokens is returned; the input span if none does.
    """
    tok_answer_text = " ".join(tokenizer.tokenize(orig_answer_text))
    for new_start in range(input_start, input_end + 1):
        for new_end in range(input_end, new_start - 1, -1):
            if " ".join(doc_tokens[new_start:new_end + 1]) == tok_answer_text:
                return new_start, new_end
    return input_start, input_end


def check_is_max_context(doc_spans: Sequence[DocSpan], cur_span_index: int,
                         position: int) -> bool:
    """Whether window `cur_span_index` gives token `position` its best context.

    Score of a window: min(left context, right context) + 0.01 · window length; the first window
    with the highest score wins.
    """
    best_score = None
    best_span_index = None
    for span_index, doc_span in enumerate(doc_spans):
        end = doc_span.start + doc_span.length - 1
        if position < doc_span.start or position > end:
            continue
        num_left_context = position - doc_span.start
        num_right_context = end - position
        score = min(num_left_context, num_right_context) + 0.01 * doc_span.length
        if best_score is None or score > best_score:
            best_score = score
            best_span_index = span_index
    return cur_span_index == best_span_index


def make_doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> list[DocSpan]:
    """Windows of at most `max_tokens_for_doc` tokens, each starting `doc_stride` tokens (or one
    window length, if shorter) after the previous, until the last token is covered."""
    if max_tokens_for_doc <= 0:
        raise ValueError(f"no room for document tokens (max_tokens_for_doc={max_tokens_for_doc})")
    if doc_stride <= 0:
        raise ValueError(f"doc_stride must be positive, got {doc_stride}")
    doc_spans: list[DocSpan] = []
    start_offset = 0
    while start_offset < num_tokens:
        length = min(num_tokens - start_offset, max_tokens_for_doc)
        doc_spans.append(DocSpan(start=start_offset, length=length))
        if start_offset + length == num_tokens:
            break
        start_offset += min(length, doc_stride)
    return doc_spans


def check_lengths(max_seq_length: int, max_query_length: int, doc_stride: int) -> None:
    """The original's flag checks on the lengths (UserInputError naming the flags)."""
    if max_seq_length <= max_query_length + 3:
        raise UserInputError(f"The max_seq_length ({max_seq_length}) must be greater than "
                         f"max_query_length ({max_query_length}) + 3")
    if doc_stride <= 0:
        raise UserInputError(f"--doc_stride must be positive, got {doc_stride}")
    if max_query_length <= 0:
        raise UserInputError(f"--max_query_length must be positive, got {max_query_length}")


def convert_examples_to_features(examples: Sequence[SquadExample], tokenizer,
                                 max_seq_length: int, doc_stride: int, max_query_length: int,
                                 is_training: bool,
                                 output_fn: Callable[[InputFeatures], None] | None = None,
                                 log_examples: int = 20) -> list[InputFeatures]:
    """Windows every example into `InputFeatures`.

    Args:
      examples: from `read_squad_examples`.
      tokenizer: a `FullTokenizer` (`tokenize`, `vocab`).
      max_seq_length: window length including [CLS] and two [SEP].
      doc_stride: step between window starts, in WordPiece tokens.
      max_query_length: questions are cut to their first this-many WordPiece tokens.
      is_training: compute `start_position` / `end_position` (needs the answer positions).
      output_fn: also called with every feature as it is made (the original's writer hook).
      log_examples: log this many first features in full at INFO level.

    Returns:
      The features, in example order (several per example for long contexts).
    """
    check_lengths(max_seq_length, max_query_length, doc_stride)
    vocab = tokenizer.vocab
    features: list[InputFeatures] = []
    unique_id = FIRST_UNIQUE_ID
    truncated_queries = 0
    for example_index, example in enumerate(examples):
        query_tokens = tokenizer.tokenize(example.question_text)
        if len(query_tokens) > max_query_length:
            truncated_queries += 1
            query_tokens = query_tokens[:max_query_length]

        tok_to_orig_index: list[int] = []
        orig_to_tok_index: list[int] = []
        all_doc_tokens: list[str] = []
        for i, token in enumerate(example.doc_tokens):
            orig_to_tok_index.append(len(all_doc_tokens))
            for sub_token in tokenizer.tokenize(token):
                tok_to_orig_index.append(i)
                all_doc_tokens.append(sub_token)

        tok_start_position = tok_end_position = None
        if is_training and example.is_impossible:
            tok_start_position = tok_end_position = -1
        if is_training and not example.is_impossible:
            if example.start_position is None or example.end_position is None:
                raise SquadDataError(f"question {example.qas_id}: training example without "
                                     "answer positions (read it with is_training=True)")
            tok_start_position = orig_to_tok_index[example.start_position]
            if example.end_position < len(example.doc_tokens) - 1:
                tok_end_position = orig_to_tok_index[example.end_position + 1] - 1
            else:
                tok_end_position = len(all_doc_tokens) - 1
            tok_start_position, tok_end_position = improve_answer_span(
                all_doc_tokens, tok_start_position, tok_end_position, tokenizer,
                example.orig_answer_text or "")

        max_tokens_for_doc = max_seq_length - len(query_tokens) - 3
        doc_spans = make_doc_spans(len(all_doc_tokens), max_tokens_for_doc, doc_stride)

        for doc_span_index, doc_span in enumerate(doc_spans):
            tokens = ["[CLS]", *query_tokens, "[SEP]"]
            segment_ids = [0] * len(tokens)
            token_to_orig_map: dict[int, int] = {}
            token_is_max_context: dict[int, bool] = {}
            for i in range(doc_span.length):
                split_token_index = doc_span.start + i
                token_to_orig_map[len(tokens)] = tok_to_orig_index[split_token_index]
                token_is_max_context[len(tokens)] = check_is_max_context(
                    doc_spans, doc_span_index, split_token_index)
                tokens.append(all_doc_tokens[split_token_index])
                segment_ids.append(1)
            tokens.append("[SEP]")
            segment_ids.append(1)

            try:
                input_ids = [vocab[t] for t in tokens]
            except KeyError as e:
                raise SquadDataError(f"question {example.qas_id}: token {e.args[0]!r} is not in "
                                     "the vocab (does the vocab have [CLS], [SEP], [UNK]?)") from e
            input_mask = [1] * len(input_ids)
            padding = max_seq_length - len(input_ids)
            input_ids += [0] * padding
            input_mask += [0] * padding
            segment_ids += [0] * padding

            start_position = end_position = None
            if is_training and not example.is_impossible:
                doc_start = doc_span.start
                doc_end = doc_span.start + doc_span.length - 1
                if tok_start_position >= doc_start and tok_end_position <= doc_end:
                    doc_offset = len(query_tokens) + 2
                    start_position = tok_start_position - doc_start + doc_offset
                    end_position = tok_end_position - doc_start + doc_offset
                else:  # the answer is not (wholly) in this window
                    start_position = end_position = 0
            if is_training and example.is_impossible:
                start_position = end_position = 0

            feature = InputFeatures(
                unique_id=unique_id, example_index=example_index, doc_span_index=doc_span_index,
                tokens=tokens, token_to_orig_map=token_to_orig_map,
                token_is_max_context=token_is_max_context, input_ids=input_ids,
                input_mask=input_mask, segment_ids=segment_ids, start_position=start_position,
                end_position=end_position, is_impossible=example.is_impossible)
            if example_index < log_examples:
                _log_feature(feature, example)
            features.append(feature)
            if output_fn is not None:
                output_fn(feature)
            unique_id += 1
    if truncated_queries:
        logging.info("%d of %d questions were longer than max_query_length=%d WordPiece tokens "
                     "and were truncated", truncated_queries, len(examples), max_query_length)
    return features


def _log_feature(feature: InputFeatures, example: SquadExample) -> None:
    logging.info("*** Example ***")
    logging.info("unique_id: %s", feature.unique_id)
    logging.info("example_index: %s", feature.example_index)
    logging.info("doc_span_index: %s", feature.doc_span_index)
    logging.info("tokens: %s", " ".join(printable_text(t) for t in feature.tokens))
    logging.info("token_to_orig_map: %s",
                 " ".join(f"{k}:{v}" for k, v in feature.token_to_orig_map.items()))
    logging.info("token_is_max_context: %s",
                 " ".join(f"{k}:{v}" for k, v in feature.token_is_max_context.items()))
    if feature.start_position is not None:
        if example.is_impossible:
            logging.info("impossible example")
        else:
            answer_text = " ".join(feature.tokens[feature.start_position:
                                                  feature.end_position + 1])
            logging.info("start_position: %d", feature.start_position)
            logging.info("end_position: %d", feature.end_position)
            logging.info("answer: %s", printable_text(answer_text))


def features_to_arrays(features: Sequence[InputFeatures], is_training: bool) -> dict:
    """Stacks features into int32 NumPy arrays.

    Returns:
      {"unique_ids" [N] (int64), "input_word_ids", "input_mask", "input_type_ids" [N, S]} and,
      when training, "start_positions", "end_positions" [N].
    """
    import numpy as np

    out = {
        "unique_ids": np.array([f.unique_id for f in features], dtype=np.int64),
        "input_word_ids": np.array([f.input_ids for f in features], dtype=np.int32),
        "input_mask": np.array([f.input_mask for f in features], dtype=np.int32),
        "input_type_ids": np.array([f.segment_ids for f in features], dtype=np.int32),
    }
    if is_training:
        if any(f.start_position is None for f in features):
            raise ValueError("training arrays need features made with is_training=True")
        out["start_positions"] = np.array([f.start_position for f in features], dtype=np.int32)
        out["end_positions"] = np.array([f.end_position for f in features], dtype=np.int32)
    return out


# ---------------------------------------------------------------------------------------------
# Fine-tuning and prediction (one tools/run_squad.py invocation)
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class SquadRunOptions(FinetuningRunOptions):
    """The original run_squad.py flags (same names and defaults), plus `seed` (example shuffle,
    input pipeline, initialisation of new weights, dropout), `on_bad_answer` (flag
    `--bad_answers`: "skip" as the original, or "raise"), `keep_checkpoint_max` and the
    distribution flags."""

    _: dataclasses.KW_ONLY
    train_file: str | None = option(None, "SQuAD json for training. E.g., train-v1.1.json")
    predict_file: str | None = option(None, "SQuAD json for predictions. E.g., dev-v1.1.json "
                                      "or test-v1.1.json")
    max_seq_length: int = option(384, "The maximum total input sequence length after WordPiece "
                                 "tokenization. Sequences longer than this will be truncated, "
                                 "and sequences shorter than this will be padded.")
    doc_stride: int = option(128, "When splitting up a long document into chunks, how much "
                             "stride to take between chunks.")
    max_query_length: int = option(64, "The maximum number of tokens for the question. "
                                   "Questions longer than this will be truncated to this length.")
    n_best_size: int = option(20, "The total number of n-best predictions to generate in the "
                              "nbest_predictions.json output file.")
    max_answer_length: int = option(30, "The maximum length of an answer that can be generated. "
                                    "This is needed because the start and end predictions are "
                                    "not conditioned on one another.")
    verbose_logging: bool = option(False, "If true, all of the warnings related to data "
                                   "processing will be printed.")
    version_2_with_negative: bool = option(False, "If true, the SQuAD examples contain some "
                                           "that do not have an answer.")
    null_score_diff_threshold: float = option(0.0, "If null_score - best_non_null is greater "
                                              "than the threshold predict null.")
    on_bad_answer: str = option(
        "skip", "Training answers whose text does not match their context span: skip them "
        "(logged by question id, as the original) or stop with an error.",
        choices=("skip", "raise"), flag="bad_answers")


def validate_options(opts: SquadRunOptions, config=None) -> None:
    """The original's `validate_flags_or_throw` (UserInputError naming the flag)."""
    if not opts.do_train and not opts.do_predict:
        raise UserInputError("At least one of `do_train` or `do_predict` must be True.")
    if opts.do_train and not opts.train_file:
        raise UserInputError("If `do_train` is True, then `train_file` must be specified.")
    if opts.do_predict and not opts.predict_file:
        raise UserInputError("If `do_predict` is True, then `predict_file` must be specified.")
    for name in ("train_batch_size", "predict_batch_size", "n_best_size", "max_answer_length",
                 "save_checkpoints_steps"):
        if getattr(opts, name) <= 0:
            raise UserInputError(f"--{name} must be positive, got {getattr(opts, name)}")
    if not 0.0 <= opts.warmup_proportion <= 1.0:
        raise UserInputError(f"--warmup_proportion must be in [0, 1], got {opts.warmup_proportion}")
    if opts.on_bad_answer not in ("skip", "raise"):
        raise UserInputError(f"--bad_answers must be 'skip' or 'raise', got {opts.on_bad_answer!r}")
    if config is not None and opts.max_seq_length > config.max_position_embeddings:
        raise UserInputError(
            f"Cannot use sequence length {opts.max_seq_length} because the BERT model was only "
            f"trained up to sequence length {config.max_position_embeddings} "
            f"(--max_seq_length vs max_position_embeddings in {opts.bert_config_file})")
    check_lengths(opts.max_seq_length, opts.max_query_length, opts.doc_stride)


def squad_loss(start_logits, end_logits, start_positions, end_positions):
    """The original's loss: (mean CE of the start position + mean CE of the end position) / 2.

    Args: logits [batch, seq] float; positions [batch] int. Returns a scalar.
    """
    import tensorflow as tf

    def cross_entropy(logits, positions):
        logits = tf.cast(logits, tf.float32)
        one_hot = tf.one_hot(positions, depth=tf.shape(logits)[1], dtype=tf.float32)
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        return -tf.reduce_mean(tf.reduce_sum(one_hot * log_probs, axis=-1))

    return (cross_entropy(start_logits, start_positions)
            + cross_entropy(end_logits, end_positions)) / 2.0


def train_squad(model, train_features: Sequence[InputFeatures], opts: SquadRunOptions,
                num_train_steps: int, num_warmup_steps: int) -> dict:
    """Fine-tunes `model` on the windows with `squad_loss` through the shared loop
    (`bert_tf.training.finetuning.train_model`: AdamWeightDecay with warm-up and linear decay,
    clip 1.0, input repeated, shuffled over 100 windows, last partial batch dropped, original-format
    checkpoints every `save_checkpoints_steps` and at the end).
    Returns {"global_step", "first_loss", "loss" (of the last step), "checkpoint"}."""
    from bert_tf.training.finetuning import FinetuneOptions, train_model

    arrays = features_to_arrays(train_features, is_training=True)
    arrays.pop("unique_ids")
    options = FinetuneOptions(
        output_dir=opts.output_dir, learning_rate=opts.learning_rate,
        num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps,
        train_batch_size=opts.train_batch_size,
        save_checkpoints_steps=opts.save_checkpoints_steps,
        keep_checkpoint_max=opts.keep_checkpoint_max, seed=opts.seed)

    def loss_fn(outputs, batch):
        return squad_loss(outputs["start_logits"], outputs["end_logits"],
                          batch["start_positions"], batch["end_positions"])

    return train_model(model, arrays, loss_fn, options)


def predict_logits(model, features: Sequence[InputFeatures], batch_size: int) -> list:
    """Runs the model on every feature; returns one `RawResult` per feature, in order."""
    from bert_tf.tasks.squad_postprocess import RawResult
    from bert_tf.training.finetuning import predict_arrays

    arrays = features_to_arrays(features, is_training=False)
    unique_ids = arrays.pop("unique_ids")
    out = predict_arrays(model, arrays, batch_size, ("start_logits", "end_logits"))
    return [RawResult(unique_id=int(uid), start_logits=start.tolist(), end_logits=end.tolist())
            for uid, start, end in zip(unique_ids, out["start_logits"], out["end_logits"])]


def _has_gold_answers(data: Sequence[Mapping[str, Any]], version_2_with_negative: bool) -> bool:
    """Whether a predict file can be scored: every question carries gold answers (v1.1: at least
    one; v2.0: `answers` present, empty allowed for unanswerable questions)."""
    found = False
    for article in data:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = qa.get("answers")
                if answers is None or (not answers and not version_2_with_negative):
                    return False
                found = True
    return found


def evaluate_predictions(data: Sequence[Mapping[str, Any]], preds,
                         version_2_with_negative: bool,
                         null_score_diff_threshold: float = 0.0) -> dict:
    """Official SQuAD metrics of `compute_predictions` output.

    v1.1: `evaluate_squad_v1` of the predictions. v2.0: `evaluate_squad_v2` of the best non-null
    answers with the null odds as no-answer probabilities and `null_score_diff_threshold` as the
    threshold — `exact`/`f1` are those of `predictions.json`, and the `best_*` keys come from a
    sweep over every threshold (set `--null_score_diff_threshold` to `best_f1_thresh`).
    """
    from bert_tf.evaluation.squad import evaluate_squad_v1, evaluate_squad_v2

    if not version_2_with_negative:
        return dict(evaluate_squad_v1(data, preds.predictions, warn=logging.warning))
    return dict(evaluate_squad_v2(data, preds.best_non_null, na_probs=preds.null_odds,
                                  na_prob_thresh=null_score_diff_threshold,
                                  warn=logging.warning))


def run_squad(opts: SquadRunOptions) -> dict:
    """One run of tools/run_squad.py: optional fine-tuning, then optional prediction + scoring.

    Writes into `opts.output_dir`: `model.ckpt-<step>` checkpoints (training), then
    `predictions.json`, `nbest_predictions.json`, `null_odds.json` (v2.0) and, when the predict
    file carries answers, `eval_results.json`.

    Prediction uses the weights just trained; without `--do_train`, the latest checkpoint in
    `output_dir` if there is one (as the original's Estimator), else `--init_checkpoint`.

    Returns: {"train": {...} or None, "predictions": SquadPredictions or None,
              "eval": metrics dict or None}.
    """
    from bert_tf.io_utils import atomic_write_text
    from bert_tf.tokenization import validate_case_matches_checkpoint

    # Flag and data errors are reported before TensorFlow is imported.
    validate_options(opts)
    validate_case_matches_checkpoint(opts.do_lower_case, opts.init_checkpoint)
    train_examples = None
    if opts.do_train:
        train_examples = read_squad_examples(opts.train_file, is_training=True,
                                             version_2_with_negative=opts.version_2_with_negative,
                                             on_bad_answer=opts.on_bad_answer)
        random.Random(opts.seed).shuffle(train_examples)
        num_train_steps = int(len(train_examples) / opts.train_batch_size
                              * opts.num_train_epochs)
        num_warmup_steps = int(num_train_steps * opts.warmup_proportion)
        if num_train_steps <= 0:
            raise ValueError(
                f"{len(train_examples)} training questions / --train_batch_size="
                f"{opts.train_batch_size} * --num_train_epochs={opts.num_train_epochs} gives "
                f"{num_train_steps} training steps; use more data, more epochs or a smaller "
                "batch")
    predict_data = None
    if opts.do_predict:
        predict_data = load_squad_json(opts.predict_file)
        eval_examples = examples_from_squad_data(predict_data, is_training=False,
                                                 source=os.fspath(opts.predict_file))

    from bert_tf.modeling import BertConfig, BertSpanLabeler
    from bert_tf.pretrained import load_bert
    from bert_tf.tasks import squad_postprocess
    from bert_tf.training.finetuning import init_model, latest_checkpoint, load_checkpoint

    validate_options(opts, BertConfig.from_json_file(opts.bert_config_file))
    os.makedirs(opts.output_dir, exist_ok=True)
    import keras

    keras.utils.set_random_seed(opts.seed)  # fresh weights (the squad head) and dropout
    _, tokenizer, model = load_bert(opts.bert_config_file, opts.vocab_file, None,
                                    opts.do_lower_case, model_factory=BertSpanLabeler)
    init_model(model, opts.init_checkpoint)  # TF1 checkpoint or encoder SavedModel
    result: dict = {"train": None, "predictions": None, "eval": None}

    if opts.do_train:
        if latest_checkpoint(opts.output_dir):
            logging.warning("%s already holds checkpoints; training starts from "
                            "--init_checkpoint and overwrites them", opts.output_dir)
        train_features = convert_examples_to_features(
            train_examples, tokenizer, opts.max_seq_length, opts.doc_stride,
            opts.max_query_length, is_training=True)
        if len(train_features) < opts.train_batch_size:
            logging.warning("only %d training windows for a batch of %d: each batch repeats "
                            "windows", len(train_features), opts.train_batch_size)
        logging.info("***** Running training *****")
        logging.info("  Num orig examples = %d", len(train_examples))
        logging.info("  Num split examples = %d", len(train_features))
        logging.info("  Batch size = %d", opts.train_batch_size)
        logging.info("  Num steps = %d", num_train_steps)
        result["train"] = train_squad(model, train_features, opts, num_train_steps,
                                      num_warmup_steps)
    elif opts.do_predict:
        latest = latest_checkpoint(opts.output_dir)
        if latest:
            logging.info("Predicting with the latest checkpoint in --output_dir: %s", latest)
            load_checkpoint(model, latest, heads="required")
        elif not opts.init_checkpoint:
            logging.warning("predicting with randomly initialised weights (no --init_checkpoint "
                            "and no checkpoint in --output_dir)")

    if opts.do_predict:
        eval_features = convert_examples_to_features(
            eval_examples, tokenizer, opts.max_seq_length, opts.doc_stride,
            opts.max_query_length, is_training=False)
        logging.info("***** Running predictions *****")
        logging.info("  Num orig examples = %d", len(eval_examples))
        logging.info("  Num split examples = %d", len(eval_features))
        logging.info("  Batch size = %d", opts.predict_batch_size)
        raw_results = predict_logits(model, eval_features, opts.predict_batch_size)
        null_odds_file = (os.path.join(opts.output_dir, "null_odds.json")
                          if opts.version_2_with_negative else None)
        preds = squad_postprocess.write_predictions(
            eval_examples, eval_features, raw_results, opts.n_best_size, opts.max_answer_length,
            opts.do_lower_case, os.path.join(opts.output_dir, "predictions.json"),
            os.path.join(opts.output_dir, "nbest_predictions.json"), null_odds_file,
            version_2_with_negative=opts.version_2_with_negative,
            null_score_diff_threshold=opts.null_score_diff_threshold,
            verbose_logging=opts.verbose_logging)
        result["predictions"] = preds
        if _has_gold_answers(predict_data, opts.version_2_with_negative):
            metrics = evaluate_predictions(predict_data, preds, opts.version_2_with_negative,
                                           opts.null_score_diff_threshold)
            atomic_write_text(os.path.join(opts.output_dir, "eval_results.json"),
                              json.dumps(metrics, indent=2) + "\n")
            logging.info("***** Eval results *****")
            for key, value in metrics.items():
                logging.info("  %s = %s", key, value)
            if opts.version_2_with_negative and "best_f1_thresh" in metrics:
                logging.info("best_f1_thresh = %s: pass --null_score_diff_threshold=%s to "
                             "predict with the threshold that maximises F1 on this file",
                             metrics["best_f1_thresh"], metrics["best_f1_thresh"])
            result["eval"] = metrics
        else:
            logging.info("%s has no gold answers for every question; not scored",
                         opts.predict_file)
    return result
