"""`SquadExample`s -> WordPiece `InputFeatures`, as the original run_squad.py builds them: query
truncation, `[CLS] query [SEP] doc-span [SEP]` windows every `doc_stride` tokens, max-context
flags, start/end targets (see `bert_tf.tasks.squad`)."""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from absl import logging

from bert_tf.errors import UserInputError
from bert_tf.tasks.squad.reading import SquadDataError, SquadExample
from bert_tf.tokenization import printable_text

FIRST_UNIQUE_ID = 1000000000  # the original's first feature id


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
