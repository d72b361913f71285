"""`tools/run_gpt_pretraining.py`: GPT-1 language-model pretraining with the BERT pretraining loop
(run_pretraining.py's flags where the meaning is the same, plus train.py's optimizer flags).

Flags: the fields of `bert_tf.runs.gpt_pretraining.GptPretrainingRun`.
"""
from __future__ import annotations

from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.runs.gpt_pretraining import GptPretrainingRun, run_gpt_pretraining


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(run_gpt_pretraining, GptPretrainingRun, argv)


if __name__ == "__main__":
    main()
