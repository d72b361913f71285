"""Fine-tune BERT on SQuAD v1.1 / v2.0 and write predictions, with the original run_squad.py flags.

  python tools/run_squad.py --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --do_train=True \
    --train_file=$SQUAD_DIR/train-v1.1.json --do_predict=True \
    --predict_file=$SQUAD_DIR/dev-v1.1.json --train_batch_size=12 --learning_rate=3e-5 \
    --num_train_epochs=2.0 --max_seq_length=384 --doc_stride=128 --output_dir=/tmp/squad_base/

Writes predictions.json, nbest_predictions.json, null_odds.json (--version_2_with_negative) and,
when the predict file has answers, eval_results.json with the official metrics (v2.0 also the
best_f1_thresh to pass back as --null_score_diff_threshold). See docs/squad.md.
"""
import sys

from absl import app, flags, logging

from bert_tf.tasks.squad import SquadRunOptions, run_squad

FLAGS = flags.FLAGS
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the pretrained model.")
flags.DEFINE_string("vocab_file", None, "The vocabulary file the model was trained on.")
flags.DEFINE_string("output_dir", None, "Where checkpoints and predictions are written.")
flags.DEFINE_string("train_file", None, "SQuAD json for training, e.g. train-v1.1.json.")
flags.DEFINE_string("predict_file", None, "SQuAD json for predictions, e.g. dev-v1.1.json.")
flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (original TF1 names).")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (True for uncased models).")
flags.DEFINE_integer("max_seq_length", 384, "Maximum WordPiece sequence length after "
                     "tokenization; longer documents are split into windows.")
flags.DEFINE_integer("doc_stride", 128, "Tokens between the starts of consecutive windows.")
flags.DEFINE_integer("max_query_length", 64, "Questions are cut to this many tokens.")
flags.DEFINE_bool("do_train", False, "Whether to run training.")
flags.DEFINE_bool("do_predict", False, "Whether to run prediction on --predict_file.")
flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.")
flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predictions.")
flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.")
flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.")
flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training with linear warm-up.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save a checkpoint.")
flags.DEFINE_integer("n_best_size", 20, "Size of the n-best lists in nbest_predictions.json.")
flags.DEFINE_integer("max_answer_length", 30, "Longest answer in WordPiece tokens.")
flags.DEFINE_bool("verbose_logging", False, "Log alignment failures of the post-processing.")
flags.DEFINE_bool("version_2_with_negative", False, "SQuAD v2.0: some questions have no answer.")
flags.DEFINE_float("null_score_diff_threshold", 0.0,
                   "v2.0: predict no answer when null score - best non-null score > this.")
flags.DEFINE_enum("bad_answers", "skip", ["skip", "raise"],
                  "Training answers whose text does not match their context span: skip them "
                  "(logged by question id, as the original) or stop with an error.")
flags.DEFINE_integer("seed", 12345, "Seed of the example shuffle and the input pipeline.")


def main(_):
    opts = SquadRunOptions(
        bert_config_file=FLAGS.bert_config_file, vocab_file=FLAGS.vocab_file,
        output_dir=FLAGS.output_dir, train_file=FLAGS.train_file,
        predict_file=FLAGS.predict_file, init_checkpoint=FLAGS.init_checkpoint,
        do_lower_case=FLAGS.do_lower_case, max_seq_length=FLAGS.max_seq_length,
        doc_stride=FLAGS.doc_stride, max_query_length=FLAGS.max_query_length,
        do_train=FLAGS.do_train, do_predict=FLAGS.do_predict,
        train_batch_size=FLAGS.train_batch_size, predict_batch_size=FLAGS.predict_batch_size,
        learning_rate=FLAGS.learning_rate, num_train_epochs=FLAGS.num_train_epochs,
        warmup_proportion=FLAGS.warmup_proportion,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps, n_best_size=FLAGS.n_best_size,
        max_answer_length=FLAGS.max_answer_length, verbose_logging=FLAGS.verbose_logging,
        version_2_with_negative=FLAGS.version_2_with_negative,
        null_score_diff_threshold=FLAGS.null_score_diff_threshold, seed=FLAGS.seed,
        on_bad_answer=FLAGS.bad_answers)
    try:
        run_squad(opts)
    except (ValueError, OSError) as e:  # SquadDataError, CheckpointError, flag errors
        logging.error("%s", e)
        sys.exit(f"run_squad.py: error: {e}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["bert_config_file", "vocab_file", "output_dir"])
    app.run(main)
