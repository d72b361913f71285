"""`bert-tf-run-classifier` / tools/run_classifier.py: the original run_classifier.py command line.

Flags: the fields of `bert_tf.tasks.classifier.ClassifierRunOptions` (see docs/classifier.md).
"""
from __future__ import annotations

from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.tasks.classifier import ClassifierRunOptions, run_classifier, summarize


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(run_classifier, ClassifierRunOptions, argv, report=lambda r: print(summarize(r)))


if __name__ == "__main__":
    main()
