"""Fine-tune BERT on SWAG (four-way multiple choice), evaluate its accuracy and write predictions.

  python tools/run_swag.py --data_dir=$SWAG_DIR --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --do_train=True --do_eval=True \
    --max_seq_length=128 --train_batch_size=16 --learning_rate=2e-5 --num_train_epochs=3.0 \
    --output_dir=/tmp/swag_base/

--data_dir holds swagaf's train.csv / val.csv / test.csv (or give --train_file/--eval_file/
--predict_file). Writes model.ckpt-<step>, eval_predictions.tsv, eval_results.txt (acc,
eval_loss) and, with --do_predict, test_predictions.tsv. See docs/ner_swag.md.
"""
import sys

from absl import app, flags, logging

from bert_tf.tasks.multiple_choice import SwagRunOptions, resolve_data_files, run_swag

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "Folder with SWAG's train.csv, val.csv, test.csv.")
flags.DEFINE_string("train_file", None, "Training csv; default data_dir/train.csv.")
flags.DEFINE_string("eval_file", None, "Evaluation csv; default data_dir/val.csv.")
flags.DEFINE_string("predict_file", None, "Prediction csv (label optional); default "
                    "data_dir/test.csv.")
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the pretrained model.")
flags.DEFINE_string("vocab_file", None, "The vocabulary file the model was trained on.")
flags.DEFINE_string("output_dir", None, "Where checkpoints, predictions and results are written.")
flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (original TF1 names) or an "
                    "encoder SavedModel directory.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (True for uncased models).")
flags.DEFINE_integer("max_seq_length", 128, "WordPiece tokens per choice ([CLS] context [SEP] "
                     "ending [SEP]); longer pairs are truncated.")
flags.DEFINE_bool("do_train", False, "Whether to run training.")
flags.DEFINE_bool("do_eval", False, "Whether to evaluate on --eval_file.")
flags.DEFINE_bool("do_predict", False, "Whether to predict --predict_file.")
flags.DEFINE_integer("train_batch_size", 16, "Total batch size for training (questions).")
flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for evaluation.")
flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for prediction.")
flags.DEFINE_float("learning_rate", 2e-5, "The initial learning rate for Adam.")
flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.")
flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training with linear warm-up.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save a checkpoint.")
flags.DEFINE_integer("keep_checkpoint_max", 5, "How many recent checkpoints to keep.")
flags.DEFINE_integer("seed", 12345, "Seed of the example shuffle, input pipeline, new weights "
                     "and dropout.")


def main(_):
    train_file, eval_file, predict_file = resolve_data_files(
        FLAGS.data_dir, FLAGS.train_file, FLAGS.eval_file, FLAGS.predict_file)
    opts = SwagRunOptions(
        bert_config_file=FLAGS.bert_config_file, vocab_file=FLAGS.vocab_file,
        output_dir=FLAGS.output_dir, train_file=train_file, eval_file=eval_file,
        predict_file=predict_file, init_checkpoint=FLAGS.init_checkpoint,
        do_lower_case=FLAGS.do_lower_case, max_seq_length=FLAGS.max_seq_length,
        do_train=FLAGS.do_train, do_eval=FLAGS.do_eval, do_predict=FLAGS.do_predict,
        train_batch_size=FLAGS.train_batch_size, eval_batch_size=FLAGS.eval_batch_size,
        predict_batch_size=FLAGS.predict_batch_size, learning_rate=FLAGS.learning_rate,
        num_train_epochs=FLAGS.num_train_epochs, warmup_proportion=FLAGS.warmup_proportion,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max, seed=FLAGS.seed)
    try:
        run_swag(opts)
    except (ValueError, OSError) as e:  # SwagDataError, CheckpointError, flag errors
        logging.error("%s", e)
        sys.exit(f"run_swag.py: error: {e}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["bert_config_file", "vocab_file", "output_dir"])
    app.run(main)
