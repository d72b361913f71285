"""`bert-tf-run-pretraining` / tools/run_pretraining.py: the original run_pretraining.py command
line plus --distribution_strategy, --mixed_precision, --jit_compile, --optimizer, --export_dir.

Flags: the fields of `bert_tf.runs.bert_pretraining.PretrainingRun`.
"""
from __future__ import annotations

from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.runs.bert_pretraining import PretrainingRun, run_pretraining


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(run_pretraining, PretrainingRun, argv)


if __name__ == "__main__":
    main()
