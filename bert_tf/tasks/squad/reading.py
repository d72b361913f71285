"""SQuAD v1.1 / v2.0 json -> `SquadExample`s, as the original run_squad.py reads them: whitespace
words, char -> word offsets, the training answer's word positions (see `bert_tf.tasks.squad`)."""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping, Sequence

from absl import logging

from bert_tf import io_utils
from bert_tf.errors import UserInputError
from bert_tf.tokenization import printable_text


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
        with io_utils.open_file(path, encoding="utf-8") as f:
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
