"""Export BERT as a SavedModel for fine-tuning (encoder) or TF Serving (preprocessor, task models).

  python tools/export_savedmodel.py --model_type=classifier \
    --bert_config_file=$MODEL/bert_config.json --init_checkpoint=$OUT/model.ckpt-1000 \
    --vocab_file=$MODEL/vocab.txt --do_lower_case=True --seq_length=128 \
    --label_list=negative,positive --export_dir=/models/sentiment --version=1

Writes <export_dir>/<version>/ atomically (a failed export leaves earlier versions untouched; an
existing version is an error unless --overwrite) and checks that every op is one TF Serving
links, outputs are dense and nothing is XLA-compiled. See docs/serving.md.
"""
import sys

from absl import app, flags

from bert_tf.export.exporter import MODEL_TYPES, ExportOptions, export_savedmodel, validate_options

FLAGS = flags.FLAGS
flags.DEFINE_enum("model_type", None, list(MODEL_TYPES), "What to export.")
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model.")
flags.DEFINE_string("init_checkpoint", None, "Original-format checkpoint (for task models: the "
                    "fine-tuned one, head included).")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab; copied into the export as an asset.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (True for uncased models).")
flags.DEFINE_integer("seq_length", 128, "Packed length of the raw-text signatures.")
flags.DEFINE_string("export_dir", None, "Model base path; the export is <export_dir>/<version>/.")
flags.DEFINE_integer("version", 1, "Model version (positive integer, the folder name).")
flags.DEFINE_integer("num_labels", None, "classifier/ner: number of labels (or --label_list).")
flags.DEFINE_list("label_list", None, "classifier/ner: label names in id order, e.g. "
                  "O,B-PER,I-PER (exported as the `labels` output).")
flags.DEFINE_integer("num_choices", 4, "multiple_choice: choices per example.")
flags.DEFINE_integer("max_query_length", 64, "squad: questions are cut to this many pieces.")
flags.DEFINE_integer("max_answer_length", 30, "squad: longest answer span in pieces.")
flags.DEFINE_bool("allow_untrained_head", False, "Export a task model from a checkpoint without "
                  "head weights (random head; for trying the serving path only).")
flags.DEFINE_bool("overwrite", False, "Replace an existing <export_dir>/<version>/.")


def main(_):
    opts = ExportOptions(
        model_type=FLAGS.model_type, export_dir=FLAGS.export_dir, version=FLAGS.version,
        bert_config_file=FLAGS.bert_config_file, init_checkpoint=FLAGS.init_checkpoint,
        vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case,
        seq_length=FLAGS.seq_length, num_labels=FLAGS.num_labels, label_list=FLAGS.label_list,
        num_choices=FLAGS.num_choices, max_query_length=FLAGS.max_query_length,
        max_answer_length=FLAGS.max_answer_length,
        allow_untrained_head=FLAGS.allow_untrained_head, overwrite=FLAGS.overwrite)
    try:
        validate_options(opts)
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        sys.exit(f"export_savedmodel: {e}")
    path = export_savedmodel(opts)
    print(path)


if __name__ == "__main__":
    flags.mark_flags_as_required(["model_type", "export_dir"])
    app.run(main)
