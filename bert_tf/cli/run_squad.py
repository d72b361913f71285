"""`bert-tf-run-squad` / tools/run_squad.py: the original run_squad.py command line.

Flags: the fields of `bert_tf.tasks.squad.SquadRunOptions` (see docs/squad.md).
"""
from __future__ import annotations

from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.tasks.squad import SquadRunOptions, run_squad


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(run_squad, SquadRunOptions, argv)


if __name__ == "__main__":
    main()
