"""`bert-tf-sweep-learning-rate` / tools/sweep_learning_rate.py: the BERT paper's learning-rate
grid for a fine-tuning config; keeps the best dev score.

  bert-tf-sweep-learning-rate --script=run_classifier --output_dir=/tmp/mrpc_sweep -- \
    --flagfile=official_configs/tasks/mrpc.flags --data_dir=$GLUE_DIR/MRPC ...

Everything after `--` goes to the script; the sweep adds --learning_rate and
--output_dir=<output_dir>/lr_<lr> (and --seed with --seeds). Prints a JSON summary (also written
to <output_dir>/sweep_results.json). Flags: the fields of `bert_tf.tasks.sweep.SweepOptions`.
"""
from __future__ import annotations

import json
from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.errors import UserInputError
from bert_tf.tasks.sweep import SweepOptions, run_sweep


def sweep(opts: SweepOptions) -> dict:
    """Runs the grid; prints the summary; a sweep without any dev score is an error."""
    try:
        summary = run_sweep(opts)
    except KeyError as e:
        raise UserInputError(f"no such result key: {e}") from e
    print(json.dumps(summary, indent=2, sort_keys=True))
    if summary["best"] is None:
        raise UserInputError("no run produced a dev score")
    return summary


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(sweep, SweepOptions, argv)


if __name__ == "__main__":
    main()
