"""CoNLL-2003 named-entity recognition with BERT: reading the column files, WordPiece features with
first-sub-token labels, the masked token loss, mapping predictions back to words, and the conlleval
files and scores.

Data flow: `read_conll_file` (one `NerSentence` per sentence: words, tags, line numbers) →
`convert_sentences_to_features` (`[CLS] sub-tokens [SEP]` windows; the first sub-token of each
word carries the word's label, every other position is ignored with `IGNORE_LABEL`) →
`BertTokenClassifier` (or the feature-based tagger of `bert_tf.tasks.feature_based`) →
`word_predictions` (one tag per word, read at its first sub-token) → `write_conlleval_file` and
`bert_tf.evaluation.conlleval` (entity-level precision / recall / F1). `run_ner` drives a whole
`tools/run_ner.py` invocation.

Decisions (the original release has no NER script; the paper, section 5.3, says that the first
sub-token's representation feeds the token classifier and that the input includes the maximal
document context the data provide):
  * Tags are used as the files have them (IOB1 for the raw CoNLL-2003 files); conlleval scores
    IOB1 and IOB2 alike. The label list is the nine CoNLL-2003 tags (`CONLL2003_LABELS`) followed
    by any other tag of the training file (sorted); it is written to `label_list.txt` in the
    output directory and read back by later evaluation / prediction runs.
  * By default the input is one sentence at a time. With `document_context` (the paper's
    "maximal document context"), the window around a sentence is filled with the WordPiece
    tokens of the sentences before and after it in the same `-DOCSTART-` document, the sentence
    in the middle; only the sentence's own words are labelled and predicted.
  * A sentence longer than `max_seq_length - 2` WordPiece tokens is split into windows that
    start every `doc_stride` sub-tokens (as SQuAD documents); every window is trained on, and
    each word is predicted from the window where its first sub-token has the most context
    (SQuAD's max-context rule). No word is ever dropped; the number of split sentences is
    logged.
  * A word that WordPiece turns into no token at all (e.g. only control characters) is fed as
    `[UNK]` so that it still gets a prediction.
"""
from __future__ import annotations

import dataclasses
import os
import random
from typing import Sequence

from absl import logging

from bert_tf.errors import UserInputError
from bert_tf.evaluation import conlleval
from bert_tf.options import option
from bert_tf.tasks.feature_based import FEATURE_LAYERS
from bert_tf.tasks.results import write_eval_results
from bert_tf.tasks.run_checks import check_modes_and_files, check_positive
from bert_tf.tasks.run_options import EvaluatingRunOptions
from bert_tf.tasks.squad import check_is_max_context, make_doc_spans

# The nine tags of CoNLL-2003 (IOB1 uses B- only between two adjacent entities of one type).
CONLL2003_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC",
                    "I-MISC")
IGNORE_LABEL = -100  # label id of positions without a loss: sub-tokens after the first, [CLS], ...
DOCSTART = "-DOCSTART-"
LABEL_LIST_FILE = "label_list.txt"


class NerDataError(UserInputError):
    """A CoNLL file, sentence or label that cannot be used (the message names file and line)."""


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class NerSentence:
    """One sentence of a CoNLL column file.

    Attributes:
      words: the tokens (first column).
      labels: the tags (last column), or None for a file with a single (token) column.
      lines: 1-based line number of every word in `source`.
      source: the file name.
      doc_index: index of the `-DOCSTART-` document the sentence belongs to (0 before the first).
    """

    words: list[str]
    labels: list[str] | None
    lines: list[int]
    source: str = "<data>"
    doc_index: int = 0


def read_conll_file(path: str | os.PathLike, require_labels: bool = True) -> list[NerSentence]:
    """Reads a CoNLL-2003-style column file.

    One token a line, columns separated by whitespace (`token POS chunk NER` in CoNLL-2003): the
    word is the first column and its tag the last. Blank lines separate sentences;
    `-DOCSTART-` lines separate documents and are not sentences. Every line must have as many
    columns as the first token line.

    Args:
      path: the file (UTF-8).
      require_labels: the file must have a tag column (at least 2 columns). Otherwise a file with
        only the token column is accepted and its sentences have `labels=None`.

    Returns:
      The sentences in file order.

    Raises:
      NerDataError naming the file and line: unreadable file, not UTF-8, a line whose number of
      columns differs from the first, no tag column when one is required.
    """
    source = os.fspath(path)
    sentences: list[NerSentence] = []
    n_columns: int | None = None
    doc_index = 0
    seen_docstart = False
    current: list[tuple[int, list[str]]] = []

    def flush() -> None:
        if current:
            words = [c[0] for _, c in current]
            labels = [c[-1] for _, c in current] if n_columns and n_columns >= 2 else None
            sentences.append(NerSentence(words=words, labels=labels,
                                         lines=[n for n, _ in current], source=source,
                                         doc_index=doc_index))
            current.clear()

    try:
        f = open(source, "rb")
    except OSError as e:
        raise NerDataError(f"cannot read CoNLL file {source}: {e}") from e
    with f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise NerDataError(f"{source}:{lineno}: not valid UTF-8 ({e.reason} at byte "
                                   f"{e.start})") from e
            fields = line.split()
            if not fields:
                flush()
                continue
            if fields[0] == DOCSTART:
                flush()
                if seen_docstart or sentences:
                    doc_index += 1
                seen_docstart = True
                continue
            if n_columns is None:
                n_columns = len(fields)
                if require_labels and n_columns < 2:
                    raise NerDataError(
                        f"{source}:{lineno}: expected a token and its tag (columns such as "
                        f"`token POS chunk NER`), got one column {line.rstrip()!r}")
            elif len(fields) != n_columns:
                raise NerDataError(
                    f"{source}:{lineno}: {len(fields)} columns, expected {n_columns} as on the "
                    f"first token line (`token POS chunk NER` for CoNLL-2003): {line.rstrip()!r}")
            current.append((lineno, fields))
    flush()
    if not sentences:
        raise NerDataError(f"{source}: no sentences (expected one token a line, blank lines "
                           "between sentences)")
    return sentences


def build_label_list(sentences: Sequence[NerSentence]) -> list[str]:
    """`CONLL2003_LABELS`, then every other tag found in `sentences` (sorted).

    Raises NerDataError if a sentence has no tags.
    """
    extra: set[str] = set()
    for s in sentences:
        if s.labels is None:
            raise NerDataError(f"{s.source}:{s.lines[0]}: training sentences need a tag column")
        extra.update(label for label in s.labels if label not in CONLL2003_LABELS)
    if extra:
        logging.warning("tags beyond the CoNLL-2003 set found in the training data, added to the "
                        "label list: %s", ", ".join(sorted(extra)))
    return [*CONLL2003_LABELS, *sorted(extra)]


def check_labels(sentences: Sequence[NerSentence], label_list: Sequence[str]) -> None:
    """Raises NerDataError naming file and line of the first tag not in `label_list`."""
    known = set(label_list)
    for s in sentences:
        if s.labels is None:
            continue
        for label, line in zip(s.labels, s.lines):
            if label not in known:
                raise NerDataError(
                    f"{s.source}:{line}: unknown tag {label!r}; the model's {len(label_list)} "
                    f"labels are {', '.join(label_list)}")


def write_label_list(path: str | os.PathLike, label_list: Sequence[str]) -> None:
    """One label a line (atomically)."""
    from bert_tf.io_utils import atomic_write_text

    atomic_write_text(path, "".join(f"{label}\n" for label in label_list))


def read_label_list(path: str | os.PathLike) -> list[str]:
    """Reads `write_label_list` output; NerDataError for duplicates or an empty file."""
    with open(path, encoding="utf-8") as f:
        labels = [line.strip() for line in f if line.strip()]
    if not labels or len(set(labels)) != len(labels):
        raise NerDataError(f"{os.fspath(path)}: expected distinct labels, one a line")
    return labels


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


# ---------------------------------------------------------------------------------------------
# Loss and predictions
# ---------------------------------------------------------------------------------------------
def token_classification_loss(logits, label_ids):
    """Mean cross-entropy over the labelled positions of a batch.

    Args:
      logits: float [batch, seq, num_labels].
      label_ids: int [batch, seq]; `IGNORE_LABEL` (any negative id) marks positions without loss.

    Returns:
      Scalar float32: Σ over labelled positions of -log p(label) / max(1, number of labelled
      positions).
    """
    import tensorflow as tf

    logits = tf.cast(logits, tf.float32)
    label_ids = tf.cast(label_ids, tf.int32)
    weights = tf.cast(label_ids >= 0, tf.float32)
    safe_ids = tf.maximum(label_ids, 0)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    nll = -tf.gather(log_probs, safe_ids, batch_dims=2)
    return tf.reduce_sum(weights * nll) / tf.maximum(tf.reduce_sum(weights), 1.0)


def ner_loss_fn(outputs: dict, batch: dict):
    """`LossFn` for `bert_tf.training.finetuning.train_model`: `token_classification_loss` of
    outputs["logits"] and batch["label_ids"]."""
    return token_classification_loss(outputs["logits"], batch["label_ids"])


def numpy_token_loss(logits, label_ids) -> float:
    """`token_classification_loss` in NumPy (for evaluation of predicted logits)."""
    import numpy as np

    logits = logits.astype(np.float64)
    logits = logits - logits.max(axis=-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    mask = label_ids >= 0
    if not mask.any():
        return 0.0
    picked = np.take_along_axis(log_probs, np.maximum(label_ids, 0)[..., None], axis=-1)[..., 0]
    return float(-(picked[mask]).sum() / mask.sum())


def word_predictions(features: Sequence[NerFeature], predicted_ids, sentences:
                     Sequence[NerSentence], label_list: Sequence[str]) -> list[list[str]]:
    """One predicted tag per word, read at the word's first sub-token in its max-context window.

    Args:
      features: the features the model was run on (in the same order as `predicted_ids`).
      predicted_ids: int [num_features, max_seq_length] (argmax of the logits).
      sentences: the sentences the features came from.
      label_list: label id -> tag.

    Returns:
      For every sentence, its predicted tags (as many as words).
    """
    predictions: list[list[str | None]] = [[None] * len(s.words) for s in sentences]
    for feature, ids in zip(features, predicted_ids):
        row = predictions[feature.sentence_index]
        for pos, (word, use) in enumerate(zip(feature.word_index, feature.predict_mask)):
            if use:
                row[word] = label_list[int(ids[pos])]
    for s, row in zip(sentences, predictions):
        if any(tag is None for tag in row):
            raise AssertionError(f"{s.source}:{s.lines[0]}: a word got no prediction (the "
                                 "features do not cover the sentence)")
    return predictions  # type: ignore[return-value]


def write_conlleval_file(path: str | os.PathLike, sentences: Sequence[NerSentence],
                         predictions: Sequence[Sequence[str]]) -> None:
    """Writes `token gold predicted` (or `token predicted` without gold tags), one word a line,
    a blank line after each sentence: the input format of conlleval. Written atomically."""
    from bert_tf.io_utils import atomic_output_path

    with atomic_output_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for s, preds in zip(sentences, predictions):
                if len(preds) != len(s.words):
                    raise ValueError(f"{s.source}:{s.lines[0]}: {len(s.words)} words but "
                                     f"{len(preds)} predictions")
                for i, (word, pred) in enumerate(zip(s.words, preds)):
                    if s.labels is not None:
                        f.write(f"{word} {s.labels[i]} {pred}\n")
                    else:
                        f.write(f"{word} {pred}\n")
                f.write("\n")


def score_predictions(sentences: Sequence[NerSentence], predictions: Sequence[Sequence[str]]
                      ) -> conlleval.ConllEvalResult:
    """conlleval's entity-level counts of predicted vs gold tags."""
    return conlleval.evaluate([s.labels for s in sentences], predictions)


# ---------------------------------------------------------------------------------------------
# One run of tools/run_ner.py
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class NerRunOptions(EvaluatingRunOptions):
    """Flags of tools/run_ner.py (the original scripts' names where they exist).

    `data_dir` fills the files not given (`resolve_data_files`). `document_context` fills each
    window with the neighbouring sentences of the document (the paper's setting for CoNLL-2003;
    see `convert_sentences_to_features`). `feature_based` trains the paper's feature-based
    tagger (frozen BERT, `feature_layers` combination of its layers, `lstm_layers` BiLSTM layers
    of `lstm_units` per direction) instead of fine-tuning `BertTokenClassifier`.
    """

    _: dataclasses.KW_ONLY
    data_dir: str | None = option(None, "Folder with eng.train, eng.testa, eng.testb "
                                  "(CoNLL-2003).")
    train_file: str | None = option(None, "Training file (CoNLL columns); default "
                                    "data_dir/eng.train.")
    eval_file: str | None = option(None, "Evaluation file; default data_dir/eng.testa.")
    predict_file: str | None = option(None, "Prediction file (tags optional); default "
                                      "data_dir/eng.testb.")
    do_lower_case: bool = option(True, "Lower-case the input (True for uncased models; NER "
                                 "usually uses a cased model with False).")
    max_seq_length: int = option(128, "WordPiece tokens per window, [CLS] and [SEP] included; "
                                 "longer sentences are split into windows.")
    doc_stride: int = option(64, "Sub-tokens between the starts of the windows of a long "
                             "sentence.")
    document_context: bool = option(
        False, "Fill each window with the neighbouring sentences of the same -DOCSTART- "
        "document, the sentence in the middle (the paper's \"maximal document context\"); only "
        "the sentence's own words are labelled.")
    feature_based: bool = option(False, "Train a BiLSTM tagger on frozen BERT features instead "
                                 "of fine-tuning BERT (the paper's section 5.3 ablation).")
    feature_layers: str = option(
        "concat_last_four", "Which BERT layers feed the feature-based tagger.",
        choices=FEATURE_LAYERS)
    lstm_units: int = option(768, "Feature-based: units per direction of each BiLSTM.")
    lstm_layers: int = option(2, "Feature-based: number of BiLSTM layers.")
    dropout_rate: float = option(0.1, "Dropout before the tagging layer (and between the BiLSTM "
                                 "layers of the feature-based tagger).")


def resolve_data_files(data_dir: str | None, train_file: str | None, eval_file: str | None,
                       predict_file: str | None) -> tuple[str | None, str | None, str | None]:
    """`--data_dir` gives `eng.train`, `eng.testa` and `eng.testb` for the files not given."""
    if data_dir:
        train_file = train_file or os.path.join(data_dir, "eng.train")
        eval_file = eval_file or os.path.join(data_dir, "eng.testa")
        predict_file = predict_file or os.path.join(data_dir, "eng.testb")
    return train_file, eval_file, predict_file


def validate_options(opts: NerRunOptions, config=None) -> None:
    """Flag checks (UserInputError naming the flag)."""
    check_modes_and_files(opts)
    check_positive(opts, ("train_batch_size", "eval_batch_size", "predict_batch_size",
                          "save_checkpoints_steps", "keep_checkpoint_max", "doc_stride",
                          "lstm_units", "lstm_layers"))
    if opts.max_seq_length < 3:
        raise UserInputError(f"--max_seq_length must be >= 3, got {opts.max_seq_length}")
    if not 0.0 <= opts.warmup_proportion <= 1.0:
        raise UserInputError(f"--warmup_proportion must be in [0, 1], got {opts.warmup_proportion}")
    if opts.feature_based and config is not None:
        if opts.feature_layers not in FEATURE_LAYERS:
            raise UserInputError(f"--feature_layers={opts.feature_layers!r}; expected one of "
                             f"{', '.join(FEATURE_LAYERS)}")
    if config is not None and opts.max_seq_length > config.max_position_embeddings:
        raise UserInputError(
            f"Cannot use sequence length {opts.max_seq_length} because the BERT model was only "
            f"trained up to sequence length {config.max_position_embeddings} "
            f"(--max_seq_length vs max_position_embeddings in {opts.bert_config_file})")


def _build_model(opts: NerRunOptions, config, num_labels: int):
    if opts.feature_based:
        from bert_tf.tasks.feature_based import FeatureBasedTagger

        return FeatureBasedTagger(config, num_labels, feature_layers=opts.feature_layers,
                                  lstm_units=opts.lstm_units, lstm_layers=opts.lstm_layers,
                                  dropout_rate=opts.dropout_rate)
    from bert_tf.modeling import BertTokenClassifier

    return BertTokenClassifier(config, num_labels, dropout_rate=opts.dropout_rate)


def _predict_and_write(model, sentences: Sequence[NerSentence], tokenizer,
                       label_list: Sequence[str], opts: NerRunOptions, batch_size: int,
                       prefix: str, global_step: int | None) -> dict | None:
    """Predicts `sentences`; writes `<prefix>_predictions.txt` and, with gold tags,
    `<prefix>_results.txt` (key = value) and `<prefix>_conlleval.txt` (conlleval's report)."""
    import numpy as np

    from bert_tf.io_utils import atomic_write_text
    from bert_tf.training.finetuning import predict_arrays

    features = convert_sentences_to_features(sentences, tokenizer, label_list,
                                             opts.max_seq_length, opts.doc_stride,
                                             opts.document_context)
    arrays = features_to_arrays(features)
    logging.info("***** Running %s *****", prefix)
    logging.info("  Num sentences = %d, windows = %d, batch size = %d", len(sentences),
                 len(features), batch_size)
    logits = predict_arrays(model, arrays, batch_size, ["logits"])["logits"]
    predicted_ids = np.argmax(logits, axis=-1)
    predictions = word_predictions(features, predicted_ids, sentences, label_list)
    write_conlleval_file(os.path.join(opts.output_dir, f"{prefix}_predictions.txt"), sentences,
                         predictions)
    if any(s.labels is None for s in sentences):
        logging.info("%s has no gold tags; predictions written, not scored", sentences[0].source)
        return None
    result = score_predictions(sentences, predictions)
    atomic_write_text(os.path.join(opts.output_dir, f"{prefix}_conlleval.txt"),
                      conlleval.format_report(result))
    # Unprefixed metric names as the GLUE results (and tools/sweep_learning_rate.py) use them.
    metrics = {"precision": result.precision, "recall": result.recall, "f1": result.f1,
               "token_accuracy": result.accuracy,
               f"{prefix}_loss": numpy_token_loss(logits, arrays["label_ids"]),
               "num_sentences": len(sentences)}
    if global_step is not None:
        metrics["global_step"] = global_step
    write_eval_results(os.path.join(opts.output_dir, f"{prefix}_results.txt"), metrics)
    logging.info("***** %s results *****\n%s", prefix, conlleval.format_report(result))
    for key in sorted(metrics):
        logging.info("  %s = %s", key, metrics[key])
    return metrics


def run_ner(opts: NerRunOptions) -> dict:
    """One run of tools/run_ner.py: optional training, evaluation and prediction.

    Writes into `opts.output_dir`: `label_list.txt`, `model.ckpt-<step>` checkpoints (training);
    `eval_predictions.txt` (conlleval input: `token gold predicted`), `eval_results.txt`
    (`precision`, `recall`, `f1`, `token_accuracy` in %, `eval_loss`, `num_sentences`,
    `global_step`) and `eval_conlleval.txt` (conlleval's report) for --do_eval; the same with
    the `test_` prefix for --do_predict (the results files only when the predict file has tags).

    Evaluation and prediction use the weights just trained; without --do_train, the latest
    checkpoint in `output_dir` if there is one, else --init_checkpoint.

    Returns: {"train": train_model's dict or None, "eval": metrics or None, "test": metrics or
    None, "label_list": [...]}.
    """
    from bert_tf.tokenization import validate_case_matches_checkpoint

    # Flag and data errors come before TensorFlow is imported.
    opts = dataclasses.replace(opts, **dict(zip(
        ("train_file", "eval_file", "predict_file"),
        resolve_data_files(opts.data_dir, opts.train_file, opts.eval_file, opts.predict_file))))
    validate_options(opts)
    validate_case_matches_checkpoint(opts.do_lower_case, opts.init_checkpoint)
    label_file = os.path.join(opts.output_dir, LABEL_LIST_FILE)
    train_sentences = eval_sentences = predict_sentences = None
    if opts.do_train:
        train_sentences = read_conll_file(opts.train_file, require_labels=True)
        label_list = build_label_list(train_sentences)
    elif os.path.exists(label_file):
        label_list = read_label_list(label_file)
    else:
        label_list = list(CONLL2003_LABELS)
    if opts.do_eval:
        eval_sentences = read_conll_file(opts.eval_file, require_labels=True)
        check_labels(eval_sentences, label_list)
    if opts.do_predict:
        predict_sentences = read_conll_file(opts.predict_file, require_labels=False)
        check_labels(predict_sentences, label_list)

    import keras

    from bert_tf.modeling import BertConfig
    from bert_tf.pretrained import check_vocab_matches_config, load_tokenizer
    from bert_tf.training import finetuning

    config = BertConfig.from_json_file(opts.bert_config_file)
    validate_options(opts, config)
    check_vocab_matches_config(opts.vocab_file, config, opts.bert_config_file)
    tokenizer = load_tokenizer(opts.vocab_file, opts.do_lower_case)
    os.makedirs(opts.output_dir, exist_ok=True)
    keras.utils.set_random_seed(opts.seed)  # fresh weights (the head) and dropout
    model = _build_model(opts, config, len(label_list))
    result: dict = {"train": None, "eval": None, "test": None, "label_list": label_list}
    global_step = None

    if opts.do_train:
        if opts.feature_based and not opts.init_checkpoint:
            logging.warning("--feature_based without --init_checkpoint: the tagger is trained on "
                            "the features of a randomly initialised, frozen BERT")
        if finetuning.latest_checkpoint(opts.output_dir):
            logging.warning("%s already holds checkpoints; training starts from "
                            "--init_checkpoint and overwrites them", opts.output_dir)
        finetuning.init_model(model, opts.init_checkpoint)
        write_label_list(label_file, label_list)
        features = convert_sentences_to_features(train_sentences, tokenizer, label_list,
                                                 opts.max_seq_length, opts.doc_stride,
                                                 opts.document_context)
        random.Random(opts.seed).shuffle(features)
        num_train_steps, num_warmup_steps = finetuning.num_train_and_warmup_steps(
            len(train_sentences), opts.train_batch_size, opts.num_train_epochs,
            opts.warmup_proportion)
        logging.info("***** Running training *****")
        logging.info("  Num sentences = %d, windows = %d", len(train_sentences), len(features))
        logging.info("  Batch size = %d", opts.train_batch_size)
        logging.info("  Num steps = %d", num_train_steps)
        arrays = features_to_arrays(features)
        arrays.pop("predict_mask")
        train_options = finetuning.FinetuneOptions(
            output_dir=opts.output_dir, learning_rate=opts.learning_rate,
            num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps,
            train_batch_size=opts.train_batch_size,
            save_checkpoints_steps=opts.save_checkpoints_steps,
            keep_checkpoint_max=opts.keep_checkpoint_max, seed=opts.seed)
        result["train"] = finetuning.train_model(model, arrays, ner_loss_fn, train_options)
        global_step = result["train"]["global_step"]
        write_eval_results(os.path.join(opts.output_dir, "train_results.txt"),
                       {"first_loss": result["train"]["first_loss"],
                        "loss": result["train"]["loss"], "global_step": global_step})
    else:
        global_step = finetuning.restore_for_prediction(model, opts.output_dir,
                                                        opts.init_checkpoint)

    if opts.do_eval:
        result["eval"] = _predict_and_write(model, eval_sentences, tokenizer, label_list, opts,
                                            opts.eval_batch_size, "eval", global_step)
    if opts.do_predict:
        result["test"] = _predict_and_write(model, predict_sentences, tokenizer, label_list,
                                            opts, opts.predict_batch_size, "test", global_step)
    return result
