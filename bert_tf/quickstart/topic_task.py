"""The quickstart's fine-tuning task, built from the embedded corpus: which part of Python's
reference a paragraph of its documentation comes from.

The `pydoc_data` help topics are grouped into three classes (`TOPIC_GROUPS`): *statements*
(`for`, `try`, `import`, ...), *expressions* (operators, literals, calls, ...) and *data model*
(special methods, built-in types, ...). Honest evaluation on such a small corpus needs care:

* **no duplicated text**: several topics repeat others (`compound` holds `for`, `while`,
  `try`...), so every paragraph is kept once, in the first topic (sorted by name) that has it;
* **split by document**: whole topics go to the held-out split (seeded, per class, until it holds
  about `held_out_fraction` of the class's paragraphs), so no held-out paragraph and no held-out
  topic is seen in training; the pretraining corpus and the vocabulary are also made from the
  training topics only, and the held-out topics measure the pretraining (MLM accuracy, LM
  perplexity) as well;
* **balanced classes**: each split is subsampled (seeded) to the same number of paragraphs per
  class, so chance is 1/3.
"""
from __future__ import annotations

import dataclasses
import random
import re

from bert_tf import corpora

TOPIC_GROUPS: dict[str, tuple[str, ...]] = {
    "statements": (
        "assert", "assignment", "async", "augassign", "break", "class", "compound", "continue",
        "del", "else", "exceptions", "execmodel", "for", "function", "global", "if", "import",
        "naming", "nonlocal", "pass", "raise", "return", "try", "while", "with", "yield"),
    "expressions": (
        "atom-identifiers", "atom-literals", "attribute-references", "await", "binary",
        "bitwise", "booleans", "calls", "comparisons", "conversions", "exprlists", "floating",
        "id-classes", "identifiers", "imaginary", "in", "integers", "lambda", "lists", "numbers",
        "operator-summary", "power", "shifting", "slicings", "strings", "subscriptions", "unary",
        "formatstrings"),
    "data model": (
        "attribute-access", "bltin-code-objects", "bltin-ellipsis-object", "bltin-null-object",
        "bltin-type-objects", "callable-types", "context-managers", "customization", "dict",
        "numeric-types", "objects", "sequence-types", "specialattrs", "specialnames",
        "string-methods", "truth", "types", "typesfunctions", "typesmapping", "typesmethods",
        "typesmodules", "typesseq", "typesseq-mutable"),
}
LABELS: tuple[str, ...] = tuple(TOPIC_GROUPS)
MIN_WORDS = 12
"""Paragraphs with fewer words (headings, one-line code) are not classification examples."""


@dataclasses.dataclass
class TopicSplit:
    """The task's data.

    Attributes:
      train_topics, held_out_topics: topic names per split (disjoint).
      train_documents, held_out_documents: the topics' deduplicated paragraphs (all of them,
        code included), one list per topic: the pretraining text of each split.
      train, held_out: balanced classification examples, (paragraph text, label id) pairs.
    """

    train_topics: list[str]
    held_out_topics: list[str]
    train_documents: list[list[str]]
    held_out_documents: list[list[str]]
    train: list[tuple[str, int]]
    held_out: list[tuple[str, int]]


def _paragraphs(text: str) -> list[str]:
    return [p.strip("\n") for p in re.split(r"\n\s*\n", text) if p.strip()]


def _is_prose(paragraph: str) -> bool:
    lines = paragraph.splitlines()
    return (len(paragraph.split()) >= MIN_WORDS
            and not all(line.startswith(" ") for line in lines))


def _balanced(examples: list[tuple[str, int]], rng: random.Random) -> list[tuple[str, int]]:
    by_label: dict[int, list[tuple[str, int]]] = {}
    for example in examples:
        by_label.setdefault(example[1], []).append(example)
    n = min(len(v) for v in by_label.values()) if len(by_label) == len(LABELS) else 0
    out = [e for label in sorted(by_label) for e in rng.sample(by_label[label], n)]
    rng.shuffle(out)
    return out


def topic_split(seed: int = 12345, held_out_fraction: float = 0.25) -> TopicSplit:
    """Builds the task (see the module docstring); deterministic for `seed`."""
    topics = corpora.pydoc_topics()
    seen: set[str] = set()
    documents: dict[str, list[str]] = {}
    for name in sorted(topics):
        kept = []
        for paragraph in _paragraphs(topics[name]):
            key = " ".join(paragraph.split())
            if key not in seen:
                seen.add(key)
                kept.append(paragraph)
        documents[name] = kept
    rng = random.Random(seed)
    train_topics, held_out_topics = [], []
    for label in LABELS:
        names = [n for n in TOPIC_GROUPS[label] if documents.get(n)]
        rng.shuffle(names)
        total = sum(sum(map(_is_prose, documents[n])) for n in names)
        taken = 0
        for name in names:
            count = sum(map(_is_prose, documents[name]))
            # The last topic that keeps the held-out share under the target (at least one).
            if taken == 0 or taken + count <= held_out_fraction * total:
                held_out_topics.append(name)
                taken += count
            else:
                train_topics.append(name)
    others = sorted(set(documents) - set(train_topics) - set(held_out_topics))
    label_of = {n: i for i, label in enumerate(LABELS) for n in TOPIC_GROUPS[label]}

    def examples(names: list[str]) -> list[tuple[str, int]]:
        return [(" ".join(p.split()), label_of[n]) for n in names for p in documents[n]
                if _is_prose(p)]

    # Topics in no group are unlabelled text: pretraining text of the training split.
    return TopicSplit(
        train_topics=sorted(train_topics), held_out_topics=sorted(held_out_topics),
        train_documents=[documents[n] for n in sorted(train_topics + others) if documents[n]],
        held_out_documents=[documents[n] for n in sorted(held_out_topics)],
        train=_balanced(examples(train_topics), rng),
        held_out=_balanced(examples(held_out_topics), rng))


def write_corpus(documents: list[list[str]], path: str) -> tuple[int, int]:
    """Writes paragraphs-per-document as pretraining input (one sentence per line, a blank line
    between documents; sentences as `bert_tf.corpora` splits them). Returns (documents,
    sentences)."""
    from bert_tf import io_utils

    docs = [s for s in ([sentence for paragraph in doc
                         for sentence in corpora._sentences(paragraph)] for doc in documents)
            if len(s) >= 2]
    io_utils.atomic_write_text(path, "\n\n".join("\n".join(d) for d in docs) + "\n")
    return len(docs), sum(len(d) for d in docs)
