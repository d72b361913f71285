"""Built-in text for runs without downloads: Python's own documentation topics (`pydoc_data`).

Every CPython ships `pydoc_data.topics` (~80 help topics, ~465k characters of English prose and
code). `write_pydoc_corpus` turns it into the pretraining input format: one sentence per line,
a blank line between documents (one document per topic).
"""
from __future__ import annotations

import re
from typing import Iterator

from bert_tf import io_utils
from bert_tf.io_utils import atomic_output_path

_UNDERLINE = re.compile(r"^\s*([*=\-~^])\1{2,}\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def pydoc_topics() -> dict[str, str]:
    """{topic name: help text} from the standard library's `pydoc_data.topics`."""
    from pydoc_data.topics import topics

    return dict(topics)


def _sentences(text: str) -> Iterator[str]:
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [ln for ln in paragraph.splitlines() if ln.strip() and not _UNDERLINE.match(ln)]
        if not lines:
            continue
        if all(ln.startswith(" ") for ln in lines):  # a code block: one line each
            yield from (ln.strip() for ln in lines)
            continue
        joined = " ".join(ln.strip() for ln in lines)
        yield from (s.strip() for s in _SENTENCE_END.split(joined) if s.strip())


def pydoc_documents() -> list[list[str]]:
    """The topics as documents, each a list of sentences (documents with < 2 sentences dropped)."""
    docs = [list(_sentences(text)) for _, text in sorted(pydoc_topics().items())]
    return [d for d in docs if len(d) >= 2]


def write_pydoc_corpus(path: str) -> tuple[int, int]:
    """Writes the pydoc topics corpus to `path` (atomically). Returns (documents, sentences)."""
    docs = pydoc_documents()
    with atomic_output_path(path) as tmp:
        with io_utils.open_file(tmp, "w", encoding="utf-8") as f:
            f.write("\n\n".join("\n".join(d) for d in docs) + "\n")
    return len(docs), sum(len(d) for d in docs)
