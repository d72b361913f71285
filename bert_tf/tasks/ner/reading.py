"""CoNLL-2003 column files -> `NerSentence`s, and the label list (see `bert_tf.tasks.ner`)."""
from __future__ import annotations

import dataclasses
import os
from typing import Sequence

from bert_tf import io_utils
from bert_tf.errors import UserInputError

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
        f = io_utils.open_file(source, "rb")
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


def build_label_list(sentences: Sequence[NerSentence],
                     tag_set: Sequence[str] = CONLL2003_LABELS) -> list[str]:
    """The model's labels for training on `sentences`: `tag_set` (the nine CoNLL-2003 tags by
    default), in that order.

    A tag outside `tag_set` (e.g. a typo such as `B-FOO`) is an error, as README says, not a new
    class: pass `tag_set` to train on another tag set.

    Raises NerDataError naming file and line of a sentence without tags or of the first tag not
    in `tag_set`.
    """
    for s in sentences:
        if s.labels is None:
            raise NerDataError(f"{s.source}:{s.lines[0]}: training sentences need a tag column")
    known = set(tag_set)
    for s in sentences:
        for label, line in zip(s.labels, s.lines):
            if label not in known:
                raise NerDataError(
                    f"{s.source}:{line}: unknown tag {label!r}; expected one of the "
                    f"{len(tag_set)} tags {', '.join(tag_set)}")
    return list(tag_set)


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
    with io_utils.open_file(path, encoding="utf-8") as f:
        labels = [line.strip() for line in f if line.strip()]
    if not labels or len(set(labels)) != len(labels):
        raise NerDataError(f"{os.fspath(path)}: expected distinct labels, one a line")
    return labels
