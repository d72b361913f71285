"""Run the BERT paper's learning-rate grid for a fine-tuning config and keep the best dev score.

  python tools/sweep_learning_rate.py --script=run_classifier --output_dir=/tmp/mrpc_sweep -- \
    --flagfile=official_configs/tasks/mrpc.flags --data_dir=$GLUE_DIR/MRPC \
    --vocab_file=$BERT_DIR/vocab.txt --bert_config_file=$BERT_DIR/bert_config.json \
    --init_checkpoint=$BERT_DIR/bert_model.ckpt

Everything after `--` goes to the script (tools/<script>.py); the sweep adds --learning_rate and
--output_dir=<output_dir>/lr_<lr> (and --seed with --seeds). Prints a JSON summary (also written
to <output_dir>/sweep_results.json) with every run's dev results and the best one.
"""
import json
import sys

from absl import app, flags

from bert_tf.tasks.sweep import PAPER_LEARNING_RATES, SweepOptions, run_sweep

FLAGS = flags.FLAGS
flags.DEFINE_string("script", "run_classifier", "tools/ script to run (run_classifier, "
                    "run_squad, run_ner, run_swag) or a path to one.")
flags.DEFINE_string("output_dir", None, "Root directory; one sub-directory per run.")
flags.DEFINE_list("learning_rates", [repr(x) for x in PAPER_LEARNING_RATES],
                  "Learning rates to try (the paper's grid by default).")
flags.DEFINE_list("seeds", [], "Optional seeds: one run per (learning rate, seed).")
flags.DEFINE_string("metric", None, "Dev result key to maximise (default: the task's reported "
                    "metric: mcc, spearmanr, f1 or acc, whichever the results have).")
flags.DEFINE_bool("rerun", False, "Run again where a run's directory already has dev results.")


def main(argv):
    try:
        learning_rates = [float(x) for x in FLAGS.learning_rates]
        seeds = [int(x) for x in FLAGS.seeds] or None
    except ValueError as e:
        sys.exit(f"sweep_learning_rate.py: error: --learning_rates/--seeds: {e}")
    opts = SweepOptions(script=FLAGS.script, script_args=argv[1:], output_dir=FLAGS.output_dir,
                        learning_rates=learning_rates, seeds=seeds, metric=FLAGS.metric,
                        rerun=FLAGS.rerun)
    try:
        summary = run_sweep(opts)
    except (ValueError, KeyError, OSError) as e:
        sys.exit(f"sweep_learning_rate.py: error: {e}")
    print(json.dumps(summary, indent=2, sort_keys=True))
    if summary["best"] is None:
        sys.exit("sweep_learning_rate.py: error: no run produced a dev score")


if __name__ == "__main__":
    flags.mark_flags_as_required(["output_dir"])
    app.run(main)
