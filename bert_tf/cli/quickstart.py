"""`tools/quickstart.py`: the main job on embedded data (see `bert_tf.quickstart`)."""
from __future__ import annotations

from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.quickstart.job import QuickstartOptions, run_quickstart


def quickstart(options: QuickstartOptions) -> dict:
    """Runs the job; the log (absl INFO/WARNING lines, TensorFlow's Python warnings) only with
    --verbose: without it the stage lines, progress bars and the summary table are the output."""
    import tensorflow as tf
    from absl import flags, logging

    verbose = "verbose" in flags.FLAGS and flags.FLAGS["verbose"].value
    logging.set_verbosity(logging.INFO if verbose else logging.ERROR)
    tf.get_logger().setLevel("INFO" if verbose else "ERROR")
    return run_quickstart(options)


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(quickstart, QuickstartOptions, argv)


if __name__ == "__main__":
    main()
