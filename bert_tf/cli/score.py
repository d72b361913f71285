"""`tools/score.py`: the perplexity of a text file under GPT-1 (the original LM loss's softmax
over the whole table, and over tokens + specials / tokens only), as a JSON summary.

Flags: the fields of `bert_tf.tasks.gpt_causal_lm.ScoreOptions`.
"""
from __future__ import annotations

from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.tasks.gpt_causal_lm import ScoreOptions, run_score


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(run_score, ScoreOptions, argv)


if __name__ == "__main__":
    main()
