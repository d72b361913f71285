"""Extract fixed contextual features (chosen encoder layers) for each input line.

Same flags, input and output format as the original release's extract_features.py:
input lines are `text` or `text_a ||| text_b`; output is one JSON object per line with
`linex_index` and, per token, the values of each requested layer (rounded to 6 decimals).

  python tools/extract_features.py --input_file=in.txt --output_file=out.jsonl \
    --vocab_file=vocab.txt --bert_config_file=bert_config.json \
    --init_checkpoint=bert_model.ckpt --layers=-1,-2,-3,-4 --max_seq_length=128 --batch_size=8
"""
from absl import app, flags, logging

from bert_tf import feature_extraction
from bert_tf.pretrained import load_bert

FLAGS = flags.FLAGS
flags.DEFINE_string("input_file", None, "Text file, one example per line (`a` or `a ||| b`).")
flags.DEFINE_string("output_file", None, "JSON-lines output file.")
flags.DEFINE_string("layers", "-1,-2,-3,-4", "Comma-separated encoder layer indexes.")
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the pretrained model.")
flags.DEFINE_integer("max_seq_length", 128, "Maximum total input length after WordPiece.")
flags.DEFINE_string("init_checkpoint", None, "Checkpoint (original TF1 names) to load.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab of the model.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (True for uncased models).")
flags.DEFINE_integer("batch_size", 32, "Batch size for inference.")
# Accepted for drop-in compatibility with the original command lines; they change nothing here.
flags.DEFINE_bool("use_tpu", False, "Ignored (TPU is chosen by the TF runtime).")
flags.DEFINE_string("master", None, "Ignored.")
flags.DEFINE_integer("num_tpu_cores", 8, "Ignored.")
flags.DEFINE_bool("use_one_hot_embeddings", False, "Ignored (embeddings are gathered).")


def main(_):
    if FLAGS.use_tpu:
        logging.warning("--use_tpu is ignored by extract_features; running on the local devices")
    config, tokenizer, encoder = load_bert(FLAGS.bert_config_file, FLAGS.vocab_file,
                                           FLAGS.init_checkpoint, FLAGS.do_lower_case)
    if FLAGS.max_seq_length > config.max_position_embeddings:
        raise app.UsageError(f"--max_seq_length={FLAGS.max_seq_length} is longer than "
                             f"max_position_embeddings={config.max_position_embeddings}")
    layer_indexes = feature_extraction.parse_layer_indexes(FLAGS.layers, config.num_hidden_layers)
    examples = feature_extraction.read_examples(FLAGS.input_file)
    records = feature_extraction.extract_features(encoder, tokenizer, examples, layer_indexes,
                                                  FLAGS.max_seq_length, FLAGS.batch_size)
    n = feature_extraction.write_features(records, FLAGS.output_file)
    logging.info("Wrote features of %d examples to %s", n, FLAGS.output_file)


if __name__ == "__main__":
    flags.mark_flags_as_required([
        "input_file", "output_file", "vocab_file", "bert_config_file", "init_checkpoint"])
    app.run(main)
