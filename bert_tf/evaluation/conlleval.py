"""Entity-level precision / recall / F1 exactly as the CoNLL ``conlleval`` perl script counts them.

The perl script reads one token a line (gold tag and predicted tag in the last two columns,
a blank line between sentences), splits each tag at its first hyphen into a prefix (``B``,
``I``, ``E``, ``O``, ...) and a type, and finds chunks with two small rules on the previous and
current tag of the same column:

* a chunk *ends* before the current token after ``B``/``I`` followed by ``B``/``O``, after ``E``
  followed by ``E``/``I``/``O``, after ``[``/``]``, and whenever the previous tag is inside a
  chunk (not ``O``/``.``) and the type changes;
* a chunk *starts* at ``B`` (after ``B``/``I``/``O``), at ``I``/``E`` after ``O``, after ``E``
  at ``E``/``I``, at ``[``/``]``, and whenever the tag is not ``O``/``.`` and the type changes.

With these rules IOB1 and IOB2 (BIO) need no separate handling: in IOB1 (the raw CoNLL-2003
files) ``I-X`` opens a chunk after ``O`` or after a different type, and ``B-X`` only appears
to split two adjacent ``X`` chunks; in IOB2 every chunk opens with ``B-X``. An ``I-X`` after
``B-X``/``I-X`` continues the chunk in both. (IOBES ``S-`` tags are *not* understood by
conlleval; they are counted as the script would count them.)

A predicted chunk is correct when it starts and ends at the same tokens as a gold chunk and has
the same type. A sentence boundary ends every chunk and is not a token. Scores are percentages
(conlleval's convention): precision = correct / found guessed, recall = correct / found gold,
FB1 their harmonic mean, each 0.0 when undefined; accuracy counts tokens whose full tag matches.
"""
from __future__ import annotations

from bert_tf.errors import UserInputError
import dataclasses
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

PathLike = Union[str, "os.PathLike[str]"]
_BOUNDARY = "-X-"


class ConllFileError(UserInputError):
    """A conlleval input file that cannot be read (the message names file and line)."""


def split_tag(tag: str) -> Tuple[str, str]:
    """``"B-PER" -> ("B", "PER")``, ``"I-ORG-X" -> ("I", "ORG-X")``, ``"O" -> ("O", "")``.

    As conlleval: split at the first hyphen; a type that perl reads as false ("" or "0") is "".
    """
    prefix, hyphen, chunk_type = tag.partition("-")
    if not hyphen:
        return tag, ""
    return prefix, ("" if chunk_type in ("", "0") else chunk_type)


def end_of_chunk(prev_tag: str, tag: str, prev_type: str, chunk_type: str) -> bool:
    """Whether a chunk ended between the previous token and the current one (conlleval)."""
    if (prev_tag, tag) in (("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"),
                           ("E", "E"), ("E", "I"), ("E", "O")):
        return True
    if prev_tag not in ("O", ".") and prev_type != chunk_type:
        return True
    return prev_tag in ("]", "[")


def start_of_chunk(prev_tag: str, tag: str, prev_type: str, chunk_type: str) -> bool:
    """Whether a chunk starts at the current token (conlleval)."""
    if (prev_tag, tag) in (("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"),
                           ("E", "E"), ("E", "I"), ("O", "E")):
        return True
    if tag not in ("O", ".") and prev_type != chunk_type:
        return True
    return tag in ("[", "]")


@dataclasses.dataclass
class ChunkCounts:
    """Chunk counts of one type (or overall) and the scores derived from them (in %)."""

    correct: int = 0
    found_gold: int = 0
    found_guessed: int = 0

    @property
    def precision(self) -> float:
        return 100.0 * self.correct / self.found_guessed if self.found_guessed else 0.0

    @property
    def recall(self) -> float:
        return 100.0 * self.correct / self.found_gold if self.found_gold else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2.0 * p * r / (p + r) if p + r > 0 else 0.0


@dataclasses.dataclass
class ConllEvalResult:
    """What conlleval reports: token counts, overall and per-type chunk counts."""

    tokens: int = 0
    correct_tags: int = 0
    overall: ChunkCounts = dataclasses.field(default_factory=ChunkCounts)
    by_type: Dict[str, ChunkCounts] = dataclasses.field(default_factory=dict)

    @property
    def accuracy(self) -> float:
        """Token accuracy in % (full tag equal), 0.0 without tokens."""
        return 100.0 * self.correct_tags / self.tokens if self.tokens else 0.0

    @property
    def precision(self) -> float:
        return self.overall.precision

    @property
    def recall(self) -> float:
        return self.overall.recall

    @property
    def f1(self) -> float:
        return self.overall.f1

    def as_dict(self) -> Dict[str, object]:
        """Plain numbers: overall scores, counts and a ``by_type`` mapping."""
        return {
            "accuracy": self.accuracy, "precision": self.precision, "recall": self.recall,
            "f1": self.f1, "tokens": self.tokens, "found_gold": self.overall.found_gold,
            "found_guessed": self.overall.found_guessed, "correct": self.overall.correct,
            "by_type": {t: {"precision": c.precision, "recall": c.recall, "f1": c.f1,
                            "found_gold": c.found_gold, "found_guessed": c.found_guessed,
                            "correct": c.correct}
                        for t, c in sorted(self.by_type.items())},
        }


class _Counter:
    """The state machine of conlleval's main loop, one (gold, guessed) tag pair at a time."""

    def __init__(self) -> None:
        self.result = ConllEvalResult()
        self.in_correct = False
        self.last_correct, self.last_correct_type = "O", ""
        self.last_guessed, self.last_guessed_type = "O", ""

    def _type(self, chunk_type: str) -> ChunkCounts:
        return self.result.by_type.setdefault(chunk_type, ChunkCounts())

    def step(self, gold_tag: str, guessed_tag: str, boundary: bool = False) -> None:
        correct, correct_type = split_tag(gold_tag)
        guessed, guessed_type = split_tag(guessed_tag)
        if boundary:
            correct, correct_type, guessed, guessed_type = "O", "", "O", ""
        lc, lct = self.last_correct, self.last_correct_type
        lg, lgt = self.last_guessed, self.last_guessed_type
        gold_end = end_of_chunk(lc, correct, lct, correct_type)
        guess_end = end_of_chunk(lg, guessed, lgt, guessed_type)
        gold_start = start_of_chunk(lc, correct, lct, correct_type)
        guess_start = start_of_chunk(lg, guessed, lgt, guessed_type)
        res = self.result

        if self.in_correct:
            if gold_end and guess_end and lgt == lct:
                self.in_correct = False
                res.overall.correct += 1
                self._type(lct).correct += 1
            elif gold_end != guess_end or guessed_type != correct_type:
                self.in_correct = False
        if gold_start and guess_start and guessed_type == correct_type:
            self.in_correct = True
        if gold_start:
            res.overall.found_gold += 1
            self._type(correct_type).found_gold += 1
        if guess_start:
            res.overall.found_guessed += 1
            self._type(guessed_type).found_guessed += 1
        if not boundary:
            if correct == guessed and guessed_type == correct_type:
                res.correct_tags += 1
            res.tokens += 1
        self.last_correct, self.last_correct_type = correct, correct_type
        self.last_guessed, self.last_guessed_type = guessed, guessed_type

    def finish(self) -> ConllEvalResult:
        if self.in_correct:
            self.result.overall.correct += 1
            self._type(self.last_correct_type).correct += 1
            self.in_correct = False
        return self.result


def evaluate_sentences(sentences: Iterable[Sequence[Tuple[str, str]]]) -> ConllEvalResult:
    """conlleval counts for sentences given as sequences of ``(gold_tag, predicted_tag)``.

    Each sentence is followed by a boundary (conlleval's blank line), so no chunk spans two
    sentences.
    """
    counter = _Counter()
    for sentence in sentences:
        for pair in sentence:
            if len(pair) != 2:
                raise ValueError(f"expected (gold, predicted) tag pairs, got {pair!r}")
            counter.step(pair[0], pair[1])
        counter.step("O", "O", boundary=True)
    return counter.finish()


def evaluate(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
             ) -> ConllEvalResult:
    """conlleval counts for parallel lists of gold and predicted tag sequences (one per
    sentence), e.g. ``evaluate([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])``."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    pairs = []
    for i, (g, p) in enumerate(zip(gold, predicted)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
        pairs.append(list(zip(g, p)))
    return evaluate_sentences(pairs)


def read_conlleval_file(path: PathLike, delimiter: Optional[str] = None
                        ) -> List[List[Tuple[str, str]]]:
    """Reads conlleval input: tokens one a line, gold and predicted tag in the last two
    columns, blank lines (or lines whose first column is ``-X-``) between sentences.

    Raises:
      ConllFileError: a line with fewer than 3 columns or a column count different from the
        first line's, naming file and line.
    """
    sentences: List[List[Tuple[str, str]]] = []
    current: List[Tuple[str, str]] = []
    n_fields: Optional[int] = None
    from bert_tf import io_utils  # any TensorFlow file system (gs://, ram://) or local

    with io_utils.open_file(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            fields = line.rstrip("\r\n").split(delimiter)
            if delimiter is not None and fields == [""]:
                fields = []
            if not fields or fields[0] == _BOUNDARY:
                if current:
                    sentences.append(current)
                    current = []
                continue
            if n_fields is None:
                n_fields = len(fields)
            elif len(fields) != n_fields:
                raise ConllFileError(f"{os.fspath(path)}:{lineno}: unexpected number of "
                                     f"features: {len(fields)} ({n_fields})")
            if len(fields) < 3:
                raise ConllFileError(f"{os.fspath(path)}:{lineno}: expected a token and two "
                                     f"tags, got {line.rstrip()!r}")
            current.append((fields[-2], fields[-1]))
    if current:
        sentences.append(current)
    return sentences


def format_report(result: ConllEvalResult) -> str:
    """The report conlleval prints (overall line, then one line per chunk type, sorted)."""
    o = result.overall
    lines = [f"processed {result.tokens} tokens with {o.found_gold} phrases; "
             f"found: {o.found_guessed} phrases; correct: {o.correct}."]
    if result.tokens > 0:
        lines.append(f"accuracy: {result.accuracy:6.2f}%; precision: {o.precision:6.2f}%; "
                     f"recall: {o.recall:6.2f}%; FB1: {o.f1:6.2f}")
    for chunk_type in sorted(result.by_type):
        c = result.by_type[chunk_type]
        if c.found_gold == 0 and c.found_guessed == 0:
            continue
        # conlleval's de-duplication of the sorted type names tests the previous name for
        # truth, so the empty type (tags without "-TYPE") is printed twice when it occurs in
        # both columns; reproduced for byte-identical reports.
        repeat = 2 if chunk_type == "" and c.found_gold and c.found_guessed else 1
        for _ in range(repeat):
            lines.append(f"{chunk_type:>17s}: precision: {c.precision:6.2f}%; "
                         f"recall: {c.recall:6.2f}%; FB1: {c.f1:6.2f}  {c.found_guessed}")
    return "\n".join(lines) + "\n"
