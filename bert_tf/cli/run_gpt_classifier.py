"""`tools/run_gpt_classifier.py`: GPT-1 fine-tuning on a classification / entailment / similarity /
multiple-choice task as the paper does it (run_classifier.py's flags where the meaning is the
same, plus --lm_coef, --clf_pdrop and the original optimizer's flags); your own csv/tsv/jsonl
files with `--task_name=csv|tsv|jsonl`, as run_classifier.py (docs/gpt.md).

Flags: the fields of `bert_tf.tasks.gpt_classifier.GptClassifierRunOptions`.
"""
from __future__ import annotations

from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.tasks.gpt_classifier import GptClassifierRunOptions, run_gpt_classifier


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(run_gpt_classifier, GptClassifierRunOptions, argv)


if __name__ == "__main__":
    main()
