"""Sentence(-pair) classification data: GLUE, XNLI and IMDb readers and BERT features.

One `DataProcessor` per task reads the task's files in their published layout (the GLUE
download's tsv files; XNLI's `multinli/multinli.train.<lang>.tsv` + `xnli.dev.tsv`; an IMDb tsv
with columns `file rating label text`, plain or gzip) into `InputExample`s, exactly as the
original `run_classifier.py` processors do for the tasks it has (CoLA, MRPC, MNLI, XNLI) and in the
same style for the others. `convert_examples_to_features` packs them as the original
`convert_single_example` ([CLS] A [SEP] B [SEP], pairs truncated longest-first).

Task names (`get_processor`): cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli, xnli, imdb
(`sst2`, `stsb` also accepted). MNLI evaluates and predicts both the matched and the mismatched
sets. STS-B is a regression task (one output, float labels).

Malformed input raises `GlueDataError` naming the file, the line and what was expected.
"""
from __future__ import annotations

from bert_tf.errors import UserInputError
import csv
import dataclasses
import gzip
import io
import os
import zlib
from typing import Iterator, Sequence

from absl import logging

from bert_tf import io_utils
from bert_tf.tokenization.packing import pack_tokens
from bert_tf.tokenization import printable_text


class GlueDataError(UserInputError):
    """A task file that cannot be used (the message names the file and line)."""


@dataclasses.dataclass
class InputExample:
    """One example.

    Attributes:
      guid: unique id, "<split>-<n>" (as the original).
      text_a: first (or only) sentence.
      text_b: second sentence of a pair, or None.
      label: class name (str) for classification, score (float) for regression; None for test
        examples (no label in the file).
      index: the example's id in the file (first column of GLUE test files), used in the GLUE
        submission files; else its line number.
    """

    guid: str
    text_a: str
    text_b: str | None = None
    label: str | float | None = None
    index: str | None = None


@dataclasses.dataclass
class InputFeatures:
    """One packed example: int lists of length `max_seq_length` and the label id (int, or the
    float score for regression; 0 when the example has no label)."""

    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    label_id: int | float
    truncated: bool = False


@dataclasses.dataclass
class EvalSplit:
    """An evaluation or test set: a name used in output file names and its examples."""

    name: str
    examples: list[InputExample]
    leaderboard_name: str | None = None  # GLUE submission file stem (e.g. "MNLI-mm")


# ---------------------------------------------------------------------------------------------
# Reading tsv files
# ---------------------------------------------------------------------------------------------
def _open_text(path: str):
    if path.endswith(".gz"):
        return io.TextIOWrapper(gzip.GzipFile(fileobj=io_utils.open_file(path, "rb")),
                                encoding="utf-8-sig", newline="")
    return io_utils.open_file(path, encoding="utf-8-sig", newline="")


def read_tsv(path: str) -> Iterator[tuple[int, list[str]]]:
    """Yields (line number starting at 1, columns) of a tab-separated file, plain or `.gz`.

    Quotes are not special (the original's `csv.reader(delimiter="\\t", quotechar=None)`); a
    byte-order mark at the start (MRPC) is dropped.
    """
    if not io_utils.exists(path):
        raise GlueDataError(f"{path} does not exist")
    try:
        with _open_text(path) as f:
            reader = csv.reader(f, delimiter="\t", quotechar=None)
            for row in reader:
                yield reader.line_num, row
    except UnicodeDecodeError as e:
        raise GlueDataError(f"{path} is not UTF-8 text: {e}") from e
    except (OSError, EOFError, csv.Error) as e:
        raise GlueDataError(f"cannot read {path}: {e}") from e


def find_file(data_dir: str, names: Sequence[str]) -> str:
    """The first of `names` (relative to `data_dir`) that exists; GlueDataError listing them."""
    for name in names:
        path = os.path.join(data_dir, name)
        if io_utils.exists(path):
            return path
    raise GlueDataError(f"none of {', '.join(names)} found in --data_dir={data_dir}")


# ---------------------------------------------------------------------------------------------
# Processors
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where a split's fields are: column indices (negative from the end), header or not."""

    text_a: int
    text_b: int | None = None
    label: int | None = None
    index: int | None = None
    header: bool = True


class DataProcessor:
    """Reads one task's train/dev/test files.

    Subclasses set `name`, `labels` (class names in label-id order; None for regression),
    `leaderboard_name` (GLUE submission file stem, None outside GLUE), `metric_key` (the dev
    score the paper reports, a key of `glue_metrics`) and the layouts of the splits.
    """

    name = ""
    labels: list[str] | None = None
    leaderboard_name: str | None = None
    metric_key = "acc"
    train_file: Sequence[str] = ("train.tsv",)
    dev_files: Sequence[tuple[str, Sequence[str], str | None]] = (("dev", ("dev.tsv",), None),)
    test_files: Sequence[tuple[str, Sequence[str], str | None]] = (("test", ("test.tsv",), None),)
    train_layout: _Layout = _Layout(0)
    test_layout: _Layout | None = None

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        return 1 if self.labels is None else len(self.labels)

    def get_labels(self) -> list[str] | None:
        return self.labels

    # -- splits -----------------------------------------------------------------------------
    def get_train_examples(self, data_dir: str, dev_file: str | None = None
                           ) -> list[InputExample]:
        """Training examples (`dev_file` matters only where dev is held out of train: IMDb)."""
        return self.read_examples(find_file(data_dir, self.train_file), "train", self.train_layout)

    def get_dev_splits(self, data_dir: str, dev_file: str | None = None) -> list[EvalSplit]:
        """Labelled evaluation sets (MNLI: matched then mismatched). `dev_file` replaces them."""
        if dev_file:
            return [EvalSplit("dev", self.read_examples(dev_file, "dev", self.train_layout))]
        return [EvalSplit(name, self.read_examples(find_file(data_dir, files), "dev",
                                                   self.train_layout), None)
                for name, files, _ in self.dev_files]

    def get_dev_examples(self, data_dir: str) -> list[InputExample]:
        return self.get_dev_splits(data_dir)[0].examples

    def get_test_splits(self, data_dir: str) -> list[EvalSplit]:
        """Unlabelled test sets with their GLUE submission names."""
        layout = self.test_layout or self.train_layout
        return [EvalSplit(name, self.read_examples(find_file(data_dir, files), "test", layout),
                          leaderboard)
                for name, files, leaderboard in self.test_files]

    def get_test_examples(self, data_dir: str) -> list[InputExample]:
        return self.get_test_splits(data_dir)[0].examples

    # -- parsing ----------------------------------------------------------------------------
    def parse_label(self, value: str, path: str, line_num: int) -> str | float:
        """Checks a label against `labels` (or parses a float for regression)."""
        if self.labels is None:
            try:
                return float(value)
            except ValueError:
                raise GlueDataError(f"{path}:{line_num}: label {value!r} is not a number "
                                    f"({self.name} is a regression task)") from None
        if value not in self.labels:
            raise GlueDataError(f"{path}:{line_num}: label {value!r} is not one of "
                                f"{self.labels} (task {self.name}; is it the right file?)")
        return value

    def read_examples(self, path: str, set_type: str, layout: _Layout) -> list[InputExample]:
        """Reads one file with `layout`; GlueDataError naming file and line for a short row or a
        bad label."""
        needed = [c for c in (layout.text_a, layout.text_b, layout.label, layout.index)
                  if c is not None]
        # A label counted from the end (MNLI's gold label after a varying number of annotator
        # labels) must come after the other columns.
        width = max([c for c in needed if c >= 0] + [0]) + 1 + any(c < 0 for c in needed)
        examples: list[InputExample] = []
        for n, (line_num, row) in enumerate(read_tsv(path)):
            if n == 0 and layout.header:
                continue
            if not row or row == [""]:
                continue  # blank line (e.g. at the end of a file)
            if len(row) < width:
                raise GlueDataError(
                    f"{path}:{line_num}: {len(row)} tab-separated column(s), expected at least "
                    f"{width} (task {self.name}: {self.describe(layout)})")
            label = None
            if layout.label is not None:
                label = self.parse_label(row[layout.label], path, line_num)
            index = row[layout.index] if layout.index is not None else str(line_num)
            examples.append(InputExample(
                guid=f"{set_type}-{len(examples)}", text_a=row[layout.text_a],
                text_b=row[layout.text_b] if layout.text_b is not None else None,
                label=label, index=index))
        if not examples:
            raise GlueDataError(f"{path} holds no examples")
        return examples

    def describe(self, layout: _Layout) -> str:
        parts = [f"text_a in column {layout.text_a}"]
        if layout.text_b is not None:
            parts.append(f"text_b in column {layout.text_b}")
        if layout.label is not None:
            parts.append(f"label in column {layout.label}")
        return ", ".join(parts) + ("; first line a header" if layout.header else "; no header")


class ColaProcessor(DataProcessor):
    """CoLA: train/dev `source label star sentence` without header; test `index sentence`."""

    name, labels, leaderboard_name, metric_key = "cola", ["0", "1"], "CoLA", "mcc"
    test_files = (("test", ("test.tsv",), "CoLA"),)
    train_layout = _Layout(text_a=3, label=1, header=False)
    test_layout = _Layout(text_a=1, index=0)


class Sst2Processor(DataProcessor):
    """SST-2: train/dev `sentence label`; test `index sentence`."""

    name, labels, leaderboard_name = "sst-2", ["0", "1"], "SST-2"
    test_files = (("test", ("test.tsv",), "SST-2"),)
    train_layout = _Layout(text_a=0, label=1)
    test_layout = _Layout(text_a=1, index=0)


class MrpcProcessor(DataProcessor):
    """MRPC: `Quality #1 ID #2 ID #1 String #2 String` (header with a BOM); test has `index`
    in place of `Quality`."""

    name, labels, leaderboard_name, metric_key = "mrpc", ["0", "1"], "MRPC", "f1"
    test_files = (("test", ("test.tsv",), "MRPC"),)
    train_layout = _Layout(text_a=3, text_b=4, label=0)
    test_layout = _Layout(text_a=3, text_b=4, index=0)


class StsbProcessor(DataProcessor):
    """STS-B (regression 0-5): `index genre filename year old_index source1 source2 sentence1
    sentence2 score`; test without score."""

    name, labels, leaderboard_name, metric_key = "sts-b", None, "STS-B", "spearmanr"
    test_files = (("test", ("test.tsv",), "STS-B"),)
    train_layout = _Layout(text_a=7, text_b=8, label=9, index=0)
    test_layout = _Layout(text_a=7, text_b=8, index=0)


class QqpProcessor(DataProcessor):
    """QQP: `id qid1 qid2 question1 question2 is_duplicate`; test `id question1 question2`."""

    name, labels, leaderboard_name, metric_key = "qqp", ["0", "1"], "QQP", "f1"
    test_files = (("test", ("test.tsv",), "QQP"),)
    train_layout = _Layout(text_a=3, text_b=4, label=5, index=0)
    test_layout = _Layout(text_a=1, text_b=2, index=0)


class MnliProcessor(DataProcessor):
    """MNLI: `index promptID pairID genre sentence1_binary_parse sentence2_binary_parse
    sentence1_parse sentence2_parse sentence1 sentence2 [label1 ...] gold_label`; sentences in
    columns 8 and 9, gold label last (as the original). Dev and test: matched and mismatched."""

    name, labels = "mnli", ["contradiction", "entailment", "neutral"]
    leaderboard_name = "MNLI-m"
    dev_files = (("dev_matched", ("dev_matched.tsv",), None),
                 ("dev_mismatched", ("dev_mismatched.tsv",), None))
    test_files = (("test_matched", ("test_matched.tsv",), "MNLI-m"),
                  ("test_mismatched", ("test_mismatched.tsv",), "MNLI-mm"))
    train_layout = _Layout(text_a=8, text_b=9, label=-1, index=0)
    test_layout = _Layout(text_a=8, text_b=9, index=0)


class QnliProcessor(DataProcessor):
    """QNLI: `index question sentence label`."""

    name, labels, leaderboard_name = "qnli", ["entailment", "not_entailment"], "QNLI"
    test_files = (("test", ("test.tsv",), "QNLI"),)
    train_layout = _Layout(text_a=1, text_b=2, label=-1, index=0)
    test_layout = _Layout(text_a=1, text_b=2, index=0)


class RteProcessor(QnliProcessor):
    """RTE: `index sentence1 sentence2 label`."""

    name, leaderboard_name = "rte", "RTE"
    test_files = (("test", ("test.tsv",), "RTE"),)


class WnliProcessor(QnliProcessor):
    """WNLI: `index sentence1 sentence2 label` with labels 0/1."""

    name, labels, leaderboard_name = "wnli", ["0", "1"], "WNLI"
    test_files = (("test", ("test.tsv",), "WNLI"),)


class XnliProcessor(DataProcessor):
    """XNLI as the original: train on the machine-translated MultiNLI
    `multinli/multinli.train.<language>.tsv` (`premise hypo label`, header; "contradictory" read
    as "contradiction"), evaluate on the `xnli.dev.tsv` rows of that language (language in
    column 0, gold label in 1, sentences in 6 and 7). No test split (as the original)."""

    name, labels = "xnli", ["contradiction", "entailment", "neutral"]
    test_files = ()

    def __init__(self, language: str = "zh"):
        self.language = language

    def parse_label(self, value: str, path: str, line_num: int) -> str | float:
        return super().parse_label("contradiction" if value == "contradictory" else value,
                                   path, line_num)

    def get_train_examples(self, data_dir: str, dev_file: str | None = None
                           ) -> list[InputExample]:
        path = find_file(data_dir, [f"multinli/multinli.train.{self.language}.tsv"])
        return self.read_examples(path, "train", _Layout(text_a=0, text_b=1, label=2))

    def get_dev_splits(self, data_dir: str, dev_file: str | None = None) -> list[EvalSplit]:
        path = dev_file or find_file(data_dir, ["xnli.dev.tsv"])
        examples = []
        for n, (line_num, row) in enumerate(read_tsv(path)):
            if n == 0 or not row or row == [""]:
                continue
            if len(row) < 8:
                raise GlueDataError(f"{path}:{line_num}: {len(row)} tab-separated column(s), "
                                    "expected at least 8 (xnli.dev.tsv: language in column 0, "
                                    "gold_label in 1, sentence1 in 6, sentence2 in 7)")
            if row[0] != self.language:
                continue
            examples.append(InputExample(
                guid=f"dev-{len(examples)}", text_a=row[6], text_b=row[7],
                label=self.parse_label(row[1], path, line_num), index=str(line_num)))
        if not examples:
            raise GlueDataError(f"{path} has no rows for language {self.language!r}")
        return [EvalSplit("dev", examples)]

    def get_test_splits(self, data_dir: str) -> list[EvalSplit]:
        raise GlueDataError("XNLI has no test split (as in the original); use --do_eval on "
                            "xnli.dev.tsv")


IMDB_HELDOUT_PERCENT = 10


def imdb_is_heldout(file_name: str, percent: int = IMDB_HELDOUT_PERCENT) -> bool:
    """Whether an IMDb review (by its `file` column, e.g. "train/pos/0_9.txt") belongs to the
    held-out dev split: CRC32 of the name modulo 100 below `percent`. Depends on the name only,
    so the split is the same whatever the order or subset of the file."""
    return zlib.crc32(file_name.encode("utf-8")) % 100 < percent


class ImdbProcessor(DataProcessor):
    """IMDb sentiment: a tsv with header `file rating label text` (label 1 = positive), plain or
    gzip: `train.tsv[.gz]`, optional `dev.tsv[.gz]` and `test.tsv[.gz]` (e.g. the official test
    reviews, labelled). Without a dev file (and without --dev_file), 10 % of `train` (the reviews
    whose file name's CRC32 mod 100 < 10, see `imdb_is_heldout`) is held out as the dev set and
    left out of training."""

    name, labels = "imdb", ["0", "1"]
    train_layout = _Layout(text_a=3, label=2, index=0)
    test_files = (("test", ("test.tsv", "test.tsv.gz"), None),)

    def _train_all(self, data_dir: str) -> list[InputExample]:
        return self.read_examples(find_file(data_dir, ["train.tsv", "train.tsv.gz"]), "train",
                                  self.train_layout)

    def _has_dev(self, data_dir: str) -> bool:
        return any(io_utils.exists(os.path.join(data_dir, n)) for n in ("dev.tsv", "dev.tsv.gz"))

    def get_train_examples(self, data_dir: str, dev_file: str | None = None
                           ) -> list[InputExample]:
        examples = self._train_all(data_dir)
        if dev_file or self._has_dev(data_dir):
            return examples
        kept = [e for e in examples if not imdb_is_heldout(e.index or "")]
        logging.info("IMDb: no dev file; %d of %d training reviews held out as dev "
                     "(CRC32(file) %% 100 < %d)", len(examples) - len(kept), len(examples),
                     IMDB_HELDOUT_PERCENT)
        return kept

    def get_dev_splits(self, data_dir: str, dev_file: str | None = None) -> list[EvalSplit]:
        if dev_file:
            return [EvalSplit("dev", self.read_examples(dev_file, "dev", self.train_layout))]
        if self._has_dev(data_dir):
            path = find_file(data_dir, ["dev.tsv", "dev.tsv.gz"])
            return [EvalSplit("dev", self.read_examples(path, "dev", self.train_layout))]
        heldout = [e for e in self._train_all(data_dir) if imdb_is_heldout(e.index or "")]
        if not heldout:
            raise GlueDataError(f"IMDb: no dev file in {data_dir} and no review of train falls "
                                "in the held-out split; pass --dev_file")
        for i, e in enumerate(heldout):
            e.guid = f"dev-{i}"
        return [EvalSplit("dev", heldout)]


PROCESSORS: dict[str, type[DataProcessor]] = {
    "cola": ColaProcessor, "sst-2": Sst2Processor, "mrpc": MrpcProcessor,
    "sts-b": StsbProcessor, "qqp": QqpProcessor, "mnli": MnliProcessor, "qnli": QnliProcessor,
    "rte": RteProcessor, "wnli": WnliProcessor, "xnli": XnliProcessor, "imdb": ImdbProcessor,
}
_ALIASES = {"sst2": "sst-2", "sst_2": "sst-2", "stsb": "sts-b", "sts_b": "sts-b"}


def task_names() -> list[str]:
    """Task names accepted by `get_processor` (and --task_name)."""
    return sorted(PROCESSORS)


def canonical_task_name(task_name: str) -> str:
    """Lower-cased name with aliases resolved; ValueError listing the tasks if unknown."""
    key = task_name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in PROCESSORS:
        raise GlueDataError(f"Task not found: {task_name!r} (--task_name must be one of "
                         f"{', '.join(task_names())})")
    return key


def get_processor(task_name: str, xnli_language: str = "zh") -> DataProcessor:
    """The processor of a task (case-insensitive; see `task_names`)."""
    key = canonical_task_name(task_name)
    if key == "xnli":
        return XnliProcessor(xnli_language)
    return PROCESSORS[key]()


# ---------------------------------------------------------------------------------------------
# Features
# ---------------------------------------------------------------------------------------------
def convert_single_example(ex_index: int, example: InputExample, label_list: list[str] | None,
                           max_seq_length: int, tokenizer, log: bool = False) -> InputFeatures:
    """The original `convert_single_example`: WordPiece, longest-first truncation, packing.

    Args:
      ex_index: position of the example (for logging).
      example: the example.
      label_list: class names in id order; None for regression.
      max_seq_length: packed length.
      tokenizer: a `FullTokenizer`.
      log: log the example in full (the original logs the first five).
    """
    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = tokenizer.tokenize(example.text_b) if example.text_b is not None else None
    packed = pack_tokens(tokens_a, tokens_b, max_seq_length, tokenizer.vocab)
    if example.label is None:
        label_id: int | float = 0.0 if label_list is None else 0
    elif label_list is None:
        label_id = float(example.label)
    else:
        label_id = label_list.index(example.label)
    if log:
        logging.info("*** Example ***")
        logging.info("guid: %s", example.guid)
        logging.info("tokens: %s", " ".join(printable_text(t) for t in packed.tokens))
        logging.info("input_ids: %s", " ".join(str(x) for x in packed.input_ids))
        logging.info("input_mask: %s", " ".join(str(x) for x in packed.input_mask))
        logging.info("segment_ids: %s", " ".join(str(x) for x in packed.segment_ids))
        logging.info("label: %s (id = %s)", example.label, label_id)
    return InputFeatures(input_ids=packed.input_ids, input_mask=packed.input_mask,
                         segment_ids=packed.segment_ids, label_id=label_id,
                         truncated=packed.truncated)


def convert_examples_to_features(examples: Sequence[InputExample], label_list: list[str] | None,
                                 max_seq_length: int, tokenizer, split: str = "",
                                 log_examples: int = 5) -> list[InputFeatures]:
    """Converts every example (in order); logs the first `log_examples` and how many were
    truncated to `max_seq_length`."""
    from bert_tf.progress import progress_bar

    features = []
    # WordPiece on a large split takes minutes: a progress bar (with ETA) from 1,000 examples
    bar = progress_bar(len(examples), "example", enabled=len(examples) >= 1000)
    for i, example in enumerate(examples):
        if i % 10000 == 0 and i:
            logging.info("Writing example %d of %d", i, len(examples))
        features.append(convert_single_example(i, example, label_list, max_seq_length,
                                                tokenizer, log=i < log_examples))
        if bar is not None and ((i + 1) % 100 == 0 or i + 1 == len(examples)):
            bar.update(i + 1)
    truncated = sum(f.truncated for f in features)
    if truncated:
        logging.info("%s: %d of %d examples (%.1f%%) were longer than max_seq_length=%d "
                     "WordPiece tokens and were truncated", split or "examples", truncated,
                     len(features), 100.0 * truncated / max(len(features), 1), max_seq_length)
    return features


def features_to_arrays(features: Sequence[InputFeatures], regression: bool) -> dict:
    """Stacks features: {"input_word_ids", "input_mask", "input_type_ids"} int32 [N, S] and
    "label_ids" [N] (int32, or float32 for regression)."""
    import numpy as np

    return {
        "input_word_ids": np.array([f.input_ids for f in features], dtype=np.int32),
        "input_mask": np.array([f.input_mask for f in features], dtype=np.int32),
        "input_type_ids": np.array([f.segment_ids for f in features], dtype=np.int32),
        "label_ids": np.array([f.label_id for f in features],
                              dtype=np.float32 if regression else np.int32),
    }
