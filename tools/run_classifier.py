"""Fine-tune BERT on a GLUE task (or XNLI, IMDb), evaluate on dev, predict test: the original
run_classifier.py flags.

  python tools/run_classifier.py --task_name=MRPC --do_train=true --do_eval=true \
    --data_dir=$GLUE_DIR/MRPC --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --max_seq_length=128 \
    --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3.0 --output_dir=/tmp/mrpc_output/

The paper's settings per task are flagfiles: `--flagfile=official_configs/tasks/mrpc.flags`
(or `--config=...`, the same thing). Writes checkpoints, eval_results.txt (the task's official
metric + eval_loss + global_step), test_results.tsv and the GLUE submission file <TASK>.tsv.
See docs/classifier.md.
"""
import sys

from absl import app, flags, logging

from bert_tf.tasks.classifier import ClassifierRunOptions, run_classifier, summarize

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "The input data dir: the task's .tsv files (GLUE layout).")
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the pretrained model.")
flags.DEFINE_string("task_name", None, "cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli, "
                    "xnli or imdb (case-insensitive).")
flags.DEFINE_string("vocab_file", None, "The vocabulary file the model was trained on.")
flags.DEFINE_string("output_dir", None, "Where checkpoints, eval results and predictions go.")
flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (original TF1 names, e.g. "
                    "bert_model.ckpt) or a directory with a bert_tf encoder SavedModel.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (True for uncased models).")
flags.DEFINE_integer("max_seq_length", 128, "Maximum total input length after WordPiece "
                     "tokenization; longer sequences are truncated, shorter padded.")
flags.DEFINE_bool("do_train", False, "Whether to run training.")
flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.")
flags.DEFINE_bool("do_predict", False, "Whether to run the model on the test set.")
flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.")
flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.")
flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predict.")
flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.")
flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.")
flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training with linear warm-up.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save a checkpoint.")
flags.DEFINE_integer("keep_checkpoint_max", 5, "How many recent checkpoints to keep.")
flags.DEFINE_integer("seed", 12345, "Seed of the example shuffle, input pipeline, new weights "
                     "and dropout.")
flags.DEFINE_string("dev_file", None, "Evaluate on this tsv (the task's train/dev layout) "
                    "instead of the task's dev set (IMDb: instead of the held-out 10%).")
flags.DEFINE_string("xnli_language", "zh", "XNLI: the language trained and evaluated.")
flags.DEFINE_string("diagnostic_file", None, "MNLI --do_predict: the GLUE diagnostic tsv for "
                    "AX.tsv (default: diagnostic.tsv in --data_dir or ../diagnostic/).")


def expand_config_flag(argv: list) -> list:
    """`--config=FILE` / `--config FILE` is an alias of absl's `--flagfile=FILE`."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--config="):
            out.append("--flagfile=" + arg[len("--config="):])
        elif arg == "--config" and i + 1 < len(argv):
            out.append("--flagfile=" + argv[i + 1])
            i += 1
        else:
            out.append(arg)
        i += 1
    return out


def main(_):
    opts = ClassifierRunOptions(
        task_name=FLAGS.task_name, data_dir=FLAGS.data_dir,
        bert_config_file=FLAGS.bert_config_file, vocab_file=FLAGS.vocab_file,
        output_dir=FLAGS.output_dir, init_checkpoint=FLAGS.init_checkpoint,
        do_lower_case=FLAGS.do_lower_case, max_seq_length=FLAGS.max_seq_length,
        do_train=FLAGS.do_train, do_eval=FLAGS.do_eval, do_predict=FLAGS.do_predict,
        train_batch_size=FLAGS.train_batch_size, eval_batch_size=FLAGS.eval_batch_size,
        predict_batch_size=FLAGS.predict_batch_size, learning_rate=FLAGS.learning_rate,
        num_train_epochs=FLAGS.num_train_epochs, warmup_proportion=FLAGS.warmup_proportion,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max, seed=FLAGS.seed,
        dev_file=FLAGS.dev_file, xnli_language=FLAGS.xnli_language,
        diagnostic_file=FLAGS.diagnostic_file)
    try:
        result = run_classifier(opts)
    except (ValueError, OSError, FloatingPointError) as e:  # data, checkpoint and flag errors
        logging.error("%s", e)
        sys.exit(f"run_classifier.py: error: {e}")
    print(summarize(result))


if __name__ == "__main__":
    flags.mark_flags_as_required(["task_name", "data_dir", "vocab_file", "bert_config_file",
                                  "output_dir"])
    app.run(main, argv=expand_config_flag(sys.argv))
