"""`NerSentence`s -> WordPiece `NerFeature` windows with first-sub-token labels (see
`bert_tf.tasks.ner`)."""
from __future__ import annotations

import dataclasses
from typing import Sequence

from absl import logging

from bert_tf.tasks.ner.reading import IGNORE_LABEL, NerDataError, NerSentence, check_labels
from bert_tf.tasks.squad.features import check_is_max_context, make_doc_spans


# ---------------------------------------------------------------------------------------------
# Features
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class NerFeature:
    """One model input window of a sentence.

    Attributes:
      sentence_index: index of its sentence.
      window_index: which window of the sentence (0 unless the sentence was split).
      tokens: `[CLS] sub-tokens [SEP]` (unpadded).
      input_ids / input_mask / segment_ids: int lists of length `max_seq_length`.
      label_ids: label id at the first sub-token of every word, `IGNORE_LABEL` everywhere else
        (other sub-tokens, [CLS], [SEP], padding, and every position of unlabelled sentences).
      word_index: index of the word whose first sub-token is at each position, -1 elsewhere.
      predict_mask: 1 where the word is to be predicted from this window (first sub-token and
        the window gives it the most context), 0 elsewhere.
    """

    sentence_index: int
    window_index: int
    tokens: list[str]
    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    label_ids: list[int]
    word_index: list[int]
    predict_mask: list[int]


def tokenize_words(words: Sequence[str], tokenizer
                   ) -> tuple[list[str], list[int], list[bool], int]:
    """WordPiece-tokenizes each word separately.

    Returns:
      (sub_tokens, word_of_token, is_first, num_empty): the sub-tokens; for every sub-token, the
      index of its word and whether it is the word's first sub-token; and how many words had no
      sub-token at all (each of those becomes one `[UNK]`).
    """
    sub_tokens: list[str] = []
    word_of_token: list[int] = []
    is_first: list[bool] = []
    num_empty = 0
    for w, word in enumerate(words):
        pieces = tokenizer.tokenize(word)
        if not pieces:
            num_empty += 1
            pieces = ["[UNK]"]
        for j, piece in enumerate(pieces):
            sub_tokens.append(piece)
            word_of_token.append(w)
            is_first.append(j == 0)
    return sub_tokens, word_of_token, is_first, num_empty


def document_context_window(offset: int, length: int, doc_length: int, max_tokens: int
                            ) -> tuple[int, int]:
    """The `max_tokens`-long stretch of a document's sub-tokens centred on a sentence.

    Args:
      offset / length: the sentence's first sub-token in the document and its number of
        sub-tokens (`length <= max_tokens`).
      doc_length: sub-tokens in the document.
      max_tokens: room in the window.

    Returns:
      (start, end) in the document: the sentence plus as much context as fits, split evenly
      between the left and the right, the unused side's share going to the other side.
    """
    extra = max_tokens - length
    left_room, right_room = offset, doc_length - offset - length
    left = min(left_room, max(extra // 2, extra - right_room))
    right = min(right_room, extra - left)
    return offset - left, offset + length + right


def _document_groups(sentences: Sequence[NerSentence]) -> list[list[int]]:
    """Indices of consecutive sentences from the same file and `-DOCSTART-` document."""
    groups: list[list[int]] = []
    key = None
    for i, s in enumerate(sentences):
        if (s.source, s.doc_index) != key:
            groups.append([])
            key = (s.source, s.doc_index)
        groups[-1].append(i)
    return groups


def convert_sentences_to_features(sentences: Sequence[NerSentence], tokenizer,
                                  label_list: Sequence[str] | None, max_seq_length: int,
                                  doc_stride: int, document_context: bool = False,
                                  log_examples: int = 5) -> list[NerFeature]:
    """Windows every sentence into `NerFeature`s.

    Args:
      sentences: from `read_conll_file` (in file order when `document_context`).
      tokenizer: a `FullTokenizer` (`tokenize`, `vocab`).
      label_list: the model's labels (label id = index); None to build features without labels
        (all `IGNORE_LABEL`). Tags not in the list raise NerDataError naming file and line.
      max_seq_length: window length including [CLS] and [SEP] (>= 3).
      doc_stride: sub-tokens between the starts of consecutive windows of a long sentence.
      document_context: fill each window with the sub-tokens of the neighbouring sentences of
        the same document (the paper's "maximal document context"), the sentence in the middle
        (`document_context_window`). Context positions are ignored in the loss and not
        predicted. A sentence that alone exceeds the window is split as without context.
      log_examples: log this many first features at INFO level.

    Returns:
      The features, in sentence order (several for a sentence longer than max_seq_length - 2).
    """
    if max_seq_length < 3:
        raise ValueError(f"max_seq_length must be >= 3, got {max_seq_length}")
    if doc_stride <= 0:
        raise ValueError(f"doc_stride must be positive, got {doc_stride}")
    label_map = {label: i for i, label in enumerate(label_list)} if label_list else None
    if label_map is not None:
        check_labels(sentences, label_list)
    vocab = tokenizer.vocab
    for special in ("[CLS]", "[SEP]", "[UNK]"):
        if special not in vocab:
            raise NerDataError(f"the vocab has no {special} token")
    max_tokens = max_seq_length - 2
    features: list[NerFeature] = []
    num_split = 0
    num_empty_words = 0
    tokenized = []
    for sentence in sentences:
        sub_tokens, word_of_token, is_first, num_empty = tokenize_words(sentence.words,
                                                                        tokenizer)
        num_empty_words += num_empty
        tokenized.append((sub_tokens, word_of_token, is_first))
    # Where each sentence sits in its document's sub-token stream (document_context only).
    doc_stream: dict[int, tuple[list[str], int]] = {}
    if document_context:
        for group in _document_groups(sentences):
            stream: list[str] = []
            for i in group:
                doc_stream[i] = (stream, len(stream))
                stream.extend(tokenized[i][0])

    def emit(s_index: int, w_index: int, tokens: list[str], label_ids: list[int],
             word_index: list[int], predict_mask: list[int]) -> None:
        tokens = ["[CLS]", *tokens, "[SEP]"]
        input_ids = [vocab[t] for t in tokens]
        pad = max_seq_length - len(input_ids)
        feature = NerFeature(
            sentence_index=s_index, window_index=w_index, tokens=tokens,
            input_ids=input_ids + [0] * pad, input_mask=[1] * len(input_ids) + [0] * pad,
            segment_ids=[0] * max_seq_length,
            label_ids=[IGNORE_LABEL, *label_ids, IGNORE_LABEL] + [IGNORE_LABEL] * pad,
            word_index=[-1, *word_index, -1] + [-1] * pad,
            predict_mask=[0, *predict_mask, 0] + [0] * pad)
        if len(features) < log_examples:
            sentence = sentences[s_index]
            logging.info("*** Example *** %s:%d tokens: %s label_ids: %s", sentence.source,
                         sentence.lines[0], " ".join(tokens),
                         " ".join(str(x) for x in feature.label_ids[:len(tokens)]))
        features.append(feature)

    for s_index, sentence in enumerate(sentences):
        sub_tokens, word_of_token, is_first = tokenized[s_index]
        labels = (sentence.labels if label_map is not None and sentence.labels is not None
                  else None)

        def own(k: int, predict: bool) -> tuple[int, int, int]:
            """(label id, word index, predict flag) of the sentence's sub-token k."""
            if not is_first[k]:
                return IGNORE_LABEL, -1, 0
            word = word_of_token[k]
            label = label_map[labels[word]] if labels is not None else IGNORE_LABEL
            return label, word, int(predict)

        if document_context and len(sub_tokens) <= max_tokens:
            stream, offset = doc_stream[s_index]
            start, end = document_context_window(offset, len(sub_tokens), len(stream),
                                                 max_tokens)
            rows = [(IGNORE_LABEL, -1, 0)] * (offset - start)
            rows += [own(k, True) for k in range(len(sub_tokens))]
            rows += [(IGNORE_LABEL, -1, 0)] * (end - offset - len(sub_tokens))
            emit(s_index, 0, stream[start:end], *map(list, zip(*rows)))
            continue
        spans = make_doc_spans(len(sub_tokens), max_tokens, doc_stride)
        if len(spans) > 1:
            num_split += 1
        for w_index, span in enumerate(spans):
            rows = [own(k, len(spans) == 1 or check_is_max_context(spans, w_index, k))
                    for k in range(span.start, span.start + span.length)]
            emit(s_index, w_index, sub_tokens[span.start:span.start + span.length],
                 *map(list, zip(*rows)))
    if num_split:
        logging.info("%d of %d sentences are longer than max_seq_length - 2 = %d WordPiece tokens "
                     "and were split into windows every doc_stride=%d tokens (%d windows in all)",
                     num_split, len(sentences), max_tokens, doc_stride, len(features))
    if num_empty_words:
        logging.info("%d words have no WordPiece token and are fed as [UNK]", num_empty_words)
    return features


def features_to_arrays(features: Sequence[NerFeature]) -> dict:
    """Stacks features into NumPy arrays.

    Returns:
      {"input_word_ids", "input_mask", "input_type_ids", "label_ids", "predict_mask"}: int32
      [N, max_seq_length] each.
    """
    import numpy as np

    def stack(name: str):
        return np.array([getattr(f, name) for f in features], dtype=np.int32)

    return {"input_word_ids": stack("input_ids"), "input_mask": stack("input_mask"),
            "input_type_ids": stack("segment_ids"), "label_ids": stack("label_ids"),
            "predict_mask": stack("predict_mask")}
