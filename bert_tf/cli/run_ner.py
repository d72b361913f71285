"""`bert-tf-run-ner` / tools/run_ner.py: NER fine-tuning (or the feature-based tagger) on CoNLL-2003
or your own CoNLL-format files with any tag set (`--label_list`, docs/ner_swag.md).

Flags: the fields of `bert_tf.tasks.ner.NerRunOptions` (see docs/ner_swag.md).
"""
from __future__ import annotations

from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.tasks.ner import NerRunOptions, run_ner


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(run_ner, NerRunOptions, argv)


if __name__ == "__main__":
    main()
