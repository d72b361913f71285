"""`tools/generate.py`: GPT-1 continuations of prompts (flags, a text file or a JSONL file), one
JSON line per prompt.

Flags: the fields of `bert_tf.tasks.gpt_causal_lm.GenerateOptions`.
"""
from __future__ import annotations

from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.tasks.gpt_causal_lm import GenerateOptions, run_generate


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(run_generate, GenerateOptions, argv)


if __name__ == "__main__":
    main()
