"""Fine-tune BERT for CoNLL-2003 NER (or train the paper's feature-based BiLSTM tagger on frozen
BERT), evaluate with conlleval and write predictions.

  python tools/run_ner.py --data_dir=$CONLL_DIR --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --do_lower_case=False \
    --do_train=True --do_eval=True --max_seq_length=128 --train_batch_size=32 \
    --learning_rate=5e-5 --num_train_epochs=3.0 --output_dir=/tmp/ner_base/

  # feature-based (paper section 5.3): frozen BERT, last four layers concatenated, 2-layer BiLSTM
  python tools/run_ner.py ... --feature_based=True --feature_layers=concat_last_four \
    --learning_rate=1e-3

--data_dir holds eng.train / eng.testa / eng.testb (or give --train_file/--eval_file/
--predict_file). Writes label_list.txt, model.ckpt-<step>, eval_predictions.txt (conlleval input:
token gold predicted), eval_results.txt (entity-level precision/recall/F1 in %) and
eval_conlleval.txt; --do_predict writes test_* files. See docs/ner_swag.md.
"""
import sys

from absl import app, flags, logging

from bert_tf.tasks.ner import NerRunOptions, resolve_data_files, run_ner

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "Folder with eng.train, eng.testa, eng.testb (CoNLL-2003).")
flags.DEFINE_string("train_file", None, "Training file (CoNLL columns); default "
                    "data_dir/eng.train.")
flags.DEFINE_string("eval_file", None, "Evaluation file; default data_dir/eng.testa.")
flags.DEFINE_string("predict_file", None, "Prediction file (tags optional); default "
                    "data_dir/eng.testb.")
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the pretrained model.")
flags.DEFINE_string("vocab_file", None, "The vocabulary file the model was trained on.")
flags.DEFINE_string("output_dir", None, "Where checkpoints, predictions and results are written.")
flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (original TF1 names) or an "
                    "encoder SavedModel directory.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (True for uncased models; NER "
                  "usually uses a cased model with False).")
flags.DEFINE_integer("max_seq_length", 128, "WordPiece tokens per window, [CLS] and [SEP] "
                     "included; longer sentences are split into windows.")
flags.DEFINE_integer("doc_stride", 64, "Sub-tokens between the starts of the windows of a long "
                     "sentence.")
flags.DEFINE_bool("document_context", False, "Fill each window with the neighbouring sentences "
                  "of the same -DOCSTART- document, the sentence in the middle (the paper's "
                  "\"maximal document context\"); only the sentence's own words are labelled.")
flags.DEFINE_bool("do_train", False, "Whether to run training.")
flags.DEFINE_bool("do_eval", False, "Whether to evaluate on --eval_file.")
flags.DEFINE_bool("do_predict", False, "Whether to predict --predict_file.")
flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.")
flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for evaluation.")
flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for prediction.")
flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.")
flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.")
flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training with linear warm-up.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save a checkpoint.")
flags.DEFINE_integer("keep_checkpoint_max", 5, "How many recent checkpoints to keep.")
flags.DEFINE_integer("seed", 12345, "Seed of the sentence shuffle, input pipeline, new weights "
                     "and dropout.")
flags.DEFINE_bool("feature_based", False, "Train a BiLSTM tagger on frozen BERT features "
                  "instead of fine-tuning BERT (the paper's section 5.3 ablation).")
flags.DEFINE_enum("feature_layers", "concat_last_four",
                  ["embeddings", "second_to_last", "last", "sum_last_four",
                   "weighted_sum_last_four", "concat_last_four", "sum_all", "weighted_sum_all"],
                  "Which BERT layers feed the feature-based tagger.")
flags.DEFINE_integer("lstm_units", 768, "Feature-based: units per direction of each BiLSTM.")
flags.DEFINE_integer("lstm_layers", 2, "Feature-based: number of BiLSTM layers.")


def main(_):
    train_file, eval_file, predict_file = resolve_data_files(
        FLAGS.data_dir, FLAGS.train_file, FLAGS.eval_file, FLAGS.predict_file)
    opts = NerRunOptions(
        bert_config_file=FLAGS.bert_config_file, vocab_file=FLAGS.vocab_file,
        output_dir=FLAGS.output_dir, train_file=train_file, eval_file=eval_file,
        predict_file=predict_file, init_checkpoint=FLAGS.init_checkpoint,
        do_lower_case=FLAGS.do_lower_case, max_seq_length=FLAGS.max_seq_length,
        doc_stride=FLAGS.doc_stride, document_context=FLAGS.document_context,
        do_train=FLAGS.do_train, do_eval=FLAGS.do_eval,
        do_predict=FLAGS.do_predict, train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size, predict_batch_size=FLAGS.predict_batch_size,
        learning_rate=FLAGS.learning_rate, num_train_epochs=FLAGS.num_train_epochs,
        warmup_proportion=FLAGS.warmup_proportion,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max, seed=FLAGS.seed,
        feature_based=FLAGS.feature_based, feature_layers=FLAGS.feature_layers,
        lstm_units=FLAGS.lstm_units, lstm_layers=FLAGS.lstm_layers)
    try:
        run_ner(opts)
    except (ValueError, OSError) as e:  # NerDataError, CheckpointError, flag errors
        logging.error("%s", e)
        sys.exit(f"run_ner.py: error: {e}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["bert_config_file", "vocab_file", "output_dir"])
    app.run(main)
