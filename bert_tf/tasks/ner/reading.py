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
                     tag_set: Sequence[str] = CONLL2003_LABELS, hint: str = "") -> list[str]:
    """The model's labels for training on `sentences`: `tag_set` (the nine CoNLL-2003 tags by
    default), in that order.

    A tag outside `tag_set` (e.g. a typo such as `B-FOO`) is an error, as README says, not a new
    class: pass `tag_set` to train on another tag set (or see `training_label_list`).

    Raises NerDataError naming file and line of a sentence without tags or of the first tag not
    in `tag_set` (`hint` is appended to that message).
    """
    _check_tagged(sentences)
    known = set(tag_set)
    for s in sentences:
        for label, line in zip(s.labels, s.lines):
            if label not in known:
                raise NerDataError(
                    f"{s.source}:{line}: unknown tag {label!r}; expected one of the "
                    f"{len(tag_set)} tags {', '.join(tag_set)}{hint}")
    return list(tag_set)


def _check_tagged(sentences: Sequence[NerSentence]) -> None:
    for s in sentences:
        if s.labels is None:
            raise NerDataError(f"{s.source}:{s.lines[0]}: training sentences need a tag column")


LABEL_LIST_FROM_TRAIN = "train"
"""`--label_list=train`: every tag of the training file, sorted."""


def parse_label_list(value: str | Sequence[str] | None) -> list[str] | str | None:
    """The `--label_list` flag: None (not given), `"train"`, or the tags in id order.

    A string is `train`, a file of tags one a line (e.g. an earlier run's label_list.txt) when
    such a file exists, else a comma-separated list (`O,B-DRUG,I-DRUG`). Raises NerDataError for
    fewer than 2 tags, an empty or duplicated tag, or what looks like a missing file.
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text == LABEL_LIST_FROM_TRAIN:
            return LABEL_LIST_FROM_TRAIN
        if io_utils.exists(text) and not io_utils.isdir(text):
            return read_label_list(text)
        tags = [t.strip() for t in text.split(",")]
        if len(tags) == 1 and ("/" in text or text.endswith(".txt")):
            raise NerDataError(f"--label_list={value}: no such file (expected a file of tags "
                               "one a line, comma-separated tags, or `train`)")
    else:
        tags = [str(t).strip() for t in value]
    if any(not t or any(c.isspace() for c in t) for t in tags):
        raise NerDataError(f"--label_list={value!r}: empty tag or a tag with a space (expected "
                           "comma-separated tags such as O,B-DRUG,I-DRUG)")
    if len(set(tags)) != len(tags):
        raise NerDataError(f"--label_list={value!r}: a tag is given twice")
    if len(tags) < 2:
        raise NerDataError(f"--label_list={value!r}: a tagger needs at least 2 tags")
    return tags


def training_label_list(sentences: Sequence[NerSentence],
                        label_list: Sequence[str] | str | None = None) -> list[str]:
    """The model's labels for training on `sentences`, for any tag set.

    Args:
      sentences: the training sentences (with tags).
      label_list: `parse_label_list`'s value:
        * None (default): the training file's tags. Only CoNLL-2003 tags: the nine
          `CONLL2003_LABELS` in their order (the original layout, whatever subset the file
          uses). A tag set of your own (no CoNLL-2003 entity tag): its tags sorted, so ids do not
          depend on the order of the rows. CoNLL-2003 entity tags mixed with others: an error
          naming the first other tag (most likely a typo such as `B-FOO`) and `--label_list`.
        * "train": every tag of the training file, sorted (mixed sets too).
        * a list: exactly these tags in this order; a training tag outside it is an error.

    Returns: the label names in id order.

    Raises NerDataError naming file and line (an untagged sentence, a tag outside the set), or
    the file for a training file with fewer than 2 distinct tags.
    """
    _check_tagged(sentences)
    if label_list is not None and label_list != LABEL_LIST_FROM_TRAIN:
        return build_label_list(sentences, list(label_list),
                                hint=" (--label_list; add it there)")
    tags = sorted({label for s in sentences for label in s.labels})
    if label_list is None:
        if set(tags) <= set(CONLL2003_LABELS):
            return list(CONLL2003_LABELS)
        if set(tags) & (set(CONLL2003_LABELS) - {"O"}):
            build_label_list(sentences, CONLL2003_LABELS, hint=(
                "; this file mixes CoNLL-2003's tags with others: to train on all of its tags "
                "pass --label_list=train (or name them: --label_list=O,B-X,...)"))
    if len(tags) < 2:
        raise NerDataError(f"{sentences[0].source}: {len(tags)} distinct tag(s) {tags}; a "
                           "tagger needs at least 2")
    return tags


def check_labels(sentences: Sequence[NerSentence], label_list: Sequence[str],
                 where: str = "") -> None:
    """Raises NerDataError naming file and line of the first tag not in `label_list` (`where`:
    e.g. " (the training file's tags, output_dir/label_list.txt)")."""
    known = set(label_list)
    for s in sentences:
        if s.labels is None:
            continue
        for label, line in zip(s.labels, s.lines):
            if label not in known:
                raise NerDataError(
                    f"{s.source}:{line}: unknown tag {label!r}; the model's {len(label_list)} "
                    f"labels{where} are {', '.join(label_list)}")


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
