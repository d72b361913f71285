"""`bert-tf-run-swag` / tools/run_swag.py: SWAG (four-way multiple choice) fine-tuning.

Flags: the fields of `bert_tf.tasks.multiple_choice.SwagRunOptions` (see docs/ner_swag.md).
"""
from __future__ import annotations

from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.tasks.multiple_choice import SwagRunOptions, run_swag


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(run_swag, SwagRunOptions, argv)


if __name__ == "__main__":
    main()
