"""Your own classification or regression data: csv, tsv or jsonl files for run_classifier.

`--task_name=csv|tsv|jsonl` reads `--train_file`, `--dev_file`, `--test_file` (or
`train.<ext>`, `dev.<ext>`, `test.<ext>` in `--data_dir`, `<ext>` = the task name) with
Python's `csv` module (csv: comma-separated, `"` quoting, so commas and quotes inside a quoted
text or column name are read as text; tsv: tab-separated, same quoting) or `json` (jsonl: one
object per line). The columns are named by `--text_a_column`, `--text_b_column` (optional, for
sentence pairs) and `--label_column`: a column name (from the header line; jsonl: a key) or a
0-based column index (a number that is not a column name). `--has_header=false`: the csv/tsv
files have no header line, columns are indexes only.

Labels (`--task_type=classification`, the default): the label set is every label value of the
training file, in sorted (string) order, so ids do not depend on the order of the rows. It is
written to `output_dir/labels.json` (a JSON list of the names, in id order) and used for
evaluation and prediction; a run without `--do_train` reads it back from there. A dev or test
label not in that set is an error. `--task_type=regression`: labels are numbers, one output,
mean squared error, and evaluation reports Pearson/Spearman (as STS-B).

Bad input raises `GlueDataError` with one line naming the file, the line and the column.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
from typing import Iterator

from bert_tf import io_utils
from bert_tf.options import option
from bert_tf.tasks.glue import (DataProcessor, EvalSplit, GlueDataError, InputExample,
                                find_file)

OWN_DATA_TASKS = ("csv", "tsv", "jsonl")
LABELS_FILE = "labels.json"


@dataclasses.dataclass(kw_only=True)
class OwnDataOptions:
    """The flags of `--task_name=csv|tsv|jsonl` (a mixin of `ClassifierRunOptions`)."""

    train_file: str | None = option(None, "--task_name=csv|tsv|jsonl: the training file "
                                    "(default: train.<ext> in --data_dir).")
    test_file: str | None = option(None, "--task_name=csv|tsv|jsonl: the file predicted with "
                                   "--do_predict (default: test.<ext> in --data_dir).")
    text_a_column: str | None = option(None, "--task_name=csv|tsv|jsonl: the column of the "
                                       "text (first text of a pair): a header name (jsonl: a "
                                       "key) or a 0-based index.")
    text_b_column: str | None = option(None, "--task_name=csv|tsv|jsonl: the column of the "
                                       "second text of a pair (optional).")
    label_column: str | None = option(None, "--task_name=csv|tsv|jsonl: the column of the "
                                      "label (optional in the test file).")
    has_header: bool = option(True, "--task_name=csv|tsv: the first line of each file names "
                              "the columns. False: columns are given by 0-based index.")
    task_type: str = option("classification", "--task_name=csv|tsv|jsonl: classification "
                            "(label set from the training file, written to "
                            "output_dir/labels.json) or regression (numeric labels, mean "
                            "squared error, Pearson/Spearman).",
                            choices=("classification", "regression"))


def is_own_data_task(task_name: str) -> bool:
    return task_name.strip().lower() in OWN_DATA_TASKS


def _read_rows(path: str, fmt: str, has_header: bool
               ) -> Iterator[tuple[int, list[str] | dict]]:
    """Yields (line number, row): a list of strings (csv/tsv; the header line too when
    `has_header`) or a dict (jsonl)."""
    if not io_utils.exists(path):
        raise GlueDataError(f"{path} does not exist")
    try:
        with io_utils.open_file(path, encoding="utf-8-sig", newline="") as f:
            if fmt == "jsonl":
                for line_num, line in enumerate(f, start=1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise GlueDataError(f"{path}:{line_num}: not a JSON object: {e}") from None
                    if not isinstance(row, dict):
                        raise GlueDataError(f"{path}:{line_num}: expected a JSON object, got "
                                            f"{type(row).__name__}")
                    yield line_num, row
                return
            reader = csv.reader(f, delimiter="," if fmt == "csv" else "\t", strict=True)
            line_num = 1
            for row in reader:
                yield line_num, row
                line_num = reader.line_num + 1
    except UnicodeDecodeError as e:
        raise GlueDataError(f"{path} is not UTF-8 text: {e}") from e
    except csv.Error as e:
        raise GlueDataError(f"{path}:{line_num}: malformed {fmt} row: {e}") from e
    except (OSError, EOFError) as e:
        raise GlueDataError(f"cannot read {path}: {e}") from e


class OwnDataProcessor(DataProcessor):
    """Reads csv/tsv/jsonl files with the columns named on the command line.

    Args:
      fmt: "csv", "tsv" or "jsonl".
      text_a_column, text_b_column, label_column: column names or 0-based indexes (strings, as
        the flags give them); text_b_column may be None.
      has_header: csv/tsv files start with a header line.
      regression: numeric labels, one output.
      train_file, dev_file, test_file: explicit files (else `<split>.<fmt>` in data_dir).
      labels: the label names in id order when known (e.g. from labels.json); else
        `read_label_set` sets them from the training file.
    """

    def __init__(self, fmt: str, text_a_column: str, text_b_column: str | None = None,
                 label_column: str | None = None, has_header: bool = True,
                 regression: bool = False, train_file: str | None = None,
                 dev_file: str | None = None, test_file: str | None = None,
                 labels: list[str] | None = None):
        fmt = fmt.strip().lower()
        if fmt not in OWN_DATA_TASKS:
            raise GlueDataError(f"--task_name={fmt}: own data is one of {OWN_DATA_TASKS}")
        if not text_a_column:
            raise GlueDataError(f"--task_name={fmt} needs --text_a_column (a column name or "
                                "0-based index)")
        if fmt == "jsonl":
            has_header = True  # keys name the fields
        elif not has_header:
            for flag, value in (("text_a_column", text_a_column),
                                ("text_b_column", text_b_column),
                                ("label_column", label_column)):
                if value is not None and not str(value).strip().isdigit():
                    raise GlueDataError(f"--{flag}={value!r}: with --has_header=false columns "
                                        "are 0-based indexes")
        self.name = fmt
        self.fmt = fmt
        self.columns = {"text_a": text_a_column, "text_b": text_b_column, "label": label_column}
        self.has_header = has_header
        self.regression = regression
        self.files = {"train": train_file, "dev": dev_file, "test": test_file}
        self.labels = None if regression else labels
        self.metric_key = "spearmanr" if regression else "acc"
        self.metrics_task = "sts-b" if regression else "sst-2"  # the glue_metrics key set

    @property
    def is_regression(self) -> bool:
        return self.regression

    @property
    def num_labels(self) -> int:
        if self.regression:
            return 1
        if self.labels is None:
            raise GlueDataError("the label set is not known yet (read the training file or "
                                f"output_dir/{LABELS_FILE})")
        return len(self.labels)

    def path(self, split: str, data_dir: str | None) -> str:
        if self.files.get(split):
            return self.files[split]
        if not data_dir:
            raise GlueDataError(f"--task_name={self.fmt}: give --{split}_file or --data_dir "
                                f"holding {split}.{self.fmt}")
        return find_file(data_dir, [f"{split}.{self.fmt}"])

    # -- reading ----------------------------------------------------------------------------
    def _resolve(self, path: str, header: list[str] | None, which: str, width: int | None
                 ) -> int | str | None:
        """The index (csv/tsv) or key (jsonl) of a column; None if absent and optional."""
        value = self.columns[which]
        if value is None:
            return None
        if self.fmt == "jsonl":
            return value
        if header is not None and value in header:
            return header.index(value)
        if str(value).strip().isdigit():
            return int(value)
        raise GlueDataError(f"{path}:1: no column {value!r} (--{which}_column) in the header "
                            f"{header}")

    def read_split(self, path: str, set_type: str) -> list[InputExample]:
        """The examples of one file; the label is optional in the test file."""
        examples: list[InputExample] = []
        cols: dict = {}
        for line_num, row in _read_rows(path, self.fmt, self.has_header):
            if self.fmt != "jsonl":
                if not cols:
                    header = row if self.has_header else None
                    cols = {w: self._resolve(path, header, w, len(row))
                            for w in ("text_a", "text_b")}
                    try:
                        cols["label"] = self._resolve(path, header, "label", len(row))
                    except GlueDataError:
                        if set_type != "test":  # the test file may have no label column
                            raise
                        cols["label"] = None
                    if self.has_header:
                        continue
                if not row or row == [""]:
                    continue
            elif not cols:
                cols = {w: self.columns[w] for w in ("text_a", "text_b", "label")}
            values = {}
            for which, col in cols.items():
                if col is None:
                    values[which] = None
                    continue
                missing = (col not in row) if self.fmt == "jsonl" else (col >= len(row))
                if missing and which == "label" and set_type == "test":
                    values[which] = None
                    continue
                if missing:
                    where = (f"key {col!r}" if self.fmt == "jsonl" else
                             f"column {col} ({self.columns[which]!r}); the row has {len(row)} "
                             f"{self.fmt} column(s)")
                    raise GlueDataError(f"{path}:{line_num}: no {where} (--{which}_column)")
                value = row[col]
                if self.fmt == "jsonl" and not isinstance(value, str):
                    if which != "label" or isinstance(value, (dict, list)) or value is None:
                        raise GlueDataError(f"{path}:{line_num}: key {col!r} "
                                            f"(--{which}_column): expected a string, got "
                                            f"{json.dumps(value)}")
                    value = json.dumps(value) if isinstance(value, bool) else str(value)
                values[which] = value
            label = values["label"]
            if label is not None:
                label = self.parse_own_label(label, path, line_num, cols["label"], set_type)
            examples.append(InputExample(guid=f"{set_type}-{len(examples)}",
                                         text_a=values["text_a"], text_b=values["text_b"],
                                         label=label, index=str(len(examples))))
        if not examples:
            raise GlueDataError(f"{path} holds no examples")
        return examples

    def parse_own_label(self, value: str, path: str, line_num: int, col, set_type: str):
        where = f"{path}:{line_num}: column {col!r} (--label_column)"
        if self.regression:
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not math.isfinite(number):
                raise GlueDataError(f"{where}: label {value!r} is not a finite number "
                                    "(--task_type=regression)")
            return number
        value = value.strip()
        if not value:
            raise GlueDataError(f"{where}: empty label")
        if self.labels is not None and set_type != "train" and value not in self.labels:
            raise GlueDataError(f"{where}: label {value!r} is not in the training labels "
                                f"{self.labels}")
        return value

    def read_label_set(self, examples: list[InputExample], path: str = "the training file"
                       ) -> list[str]:
        """Sets and returns `labels`: the sorted distinct labels of the training examples."""
        labels = sorted({e.label for e in examples})
        if len(labels) < 2:
            raise GlueDataError(f"{path}: {len(labels)} distinct label(s) "
                                f"{labels}; classification needs at least 2 (numbers? use "
                                "--task_type=regression)")
        self.labels = labels
        return labels

    # -- DataProcessor interface ------------------------------------------------------------
    def get_train_examples(self, data_dir: str | None, dev_file: str | None = None
                           ) -> list[InputExample]:
        path = self.path("train", data_dir)
        if self.columns["label"] is None:
            raise GlueDataError(f"--task_name={self.fmt} needs --label_column for training")
        examples = self.read_split(path, "train")
        if not self.regression:
            self.read_label_set(examples, path)
        return examples

    def get_dev_splits(self, data_dir: str | None, dev_file: str | None = None
                       ) -> list[EvalSplit]:
        if self.columns["label"] is None:
            raise GlueDataError(f"--task_name={self.fmt} needs --label_column for --do_eval")
        path = dev_file or self.path("dev", data_dir)
        return [EvalSplit("dev", self.read_split(path, "dev"))]

    def get_test_splits(self, data_dir: str | None) -> list[EvalSplit]:
        return [EvalSplit("test", self.read_split(self.path("test", data_dir), "test"))]


def check_unused_flags(opts) -> None:
    """A GLUE/XNLI/IMDb task given own-data flags: UserInputError naming them (they would be
    ignored)."""
    given = [f"--{f.name}" for f in dataclasses.fields(OwnDataOptions)
             if getattr(opts, f.name, f.default) != f.default]
    if given:
        raise GlueDataError(f"{', '.join(given)} only apply to --task_name=csv|tsv|jsonl "
                            f"(got --task_name={opts.task_name})")


def processor_from_options(opts) -> OwnDataProcessor:
    """The processor of a run's `--task_name=csv|tsv|jsonl` flags (`OwnDataOptions` fields)."""
    return OwnDataProcessor(
        opts.task_name, opts.text_a_column, opts.text_b_column, opts.label_column,
        has_header=opts.has_header, regression=opts.task_type == "regression",
        train_file=opts.train_file, dev_file=opts.dev_file, test_file=opts.test_file)


def labels_path(output_dir: str) -> str:
    return os.path.join(output_dir, LABELS_FILE)


def read_saved_labels(output_dir: str) -> list[str] | None:
    """The label names of `output_dir/labels.json`, or None if there is none."""
    path = labels_path(output_dir)
    if not io_utils.exists(path):
        return None
    try:
        labels = json.loads(io_utils.read_text(path))
    except ValueError as e:
        raise GlueDataError(f"{path}: not JSON: {e}") from None
    if not (isinstance(labels, list) and all(isinstance(x, str) for x in labels)):
        raise GlueDataError(f"{path}: expected a JSON list of label names")
    return labels


def resolve_labels(processor: OwnDataProcessor, output_dir: str, training: bool) -> None:
    """Makes the processor's label set final before dev/test are read: the training file's
    (checked against an existing `output_dir/labels.json`), else the saved one."""
    if processor.regression:
        return
    saved = read_saved_labels(output_dir)
    if training:
        if saved is not None and saved != processor.labels:
            raise GlueDataError(f"{labels_path(output_dir)} holds labels {saved}, the training "
                                f"file {processor.labels}; use another --output_dir")
    elif saved is None:
        raise GlueDataError(f"no {labels_path(output_dir)} (the label set of a training run); "
                            "add --do_train")
    else:
        processor.labels = saved


def write_labels(processor: OwnDataProcessor, output_dir: str) -> str | None:
    """Writes `output_dir/labels.json` (classification; atomically). Returns its path."""
    if processor.regression:
        return None
    path = labels_path(output_dir)
    io_utils.atomic_write_text(path, json.dumps(processor.labels, ensure_ascii=False) + "\n")
    return path


__all__ = ["OWN_DATA_TASKS", "OwnDataOptions", "OwnDataProcessor", "check_unused_flags",
           "is_own_data_task", "processor_from_options", "read_saved_labels", "resolve_labels",
           "write_labels"]
