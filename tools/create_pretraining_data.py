"""Create masked-LM / next-sentence pretraining TFRecords from raw text.

Same flags, defaults, input format and output as the original release's
create_pretraining_data.py. Input: one sentence per line, a blank line between documents
(comma-separated files or globs, `.gz` allowed).

Faithful mode (the default) writes exactly the original's examples, in the original's order:

  python tools/create_pretraining_data.py --input_file=sample_text.txt \
    --output_file=/tmp/tf_examples.tfrecord --vocab_file=vocab.txt --do_lower_case=True \
    --max_seq_length=128 --max_predictions_per_seq=20 --masked_lm_prob=0.15 \
    --random_seed=12345 --dupe_factor=5

Scalable mode streams the corpus into shards `<output_file>-NNNNN.tfrecord` with several
processes, bounded memory, and resumes after a crash (re-run the same command):

  python tools/create_pretraining_data.py --mode=scalable --num_workers=8 \
    --input_file='corpus/*.txt.gz' --output_file=/data/pretrain/wiki --vocab_file=vocab.txt

See docs/pretraining_data.md (what scalable mode does differently, the extra options).
"""
import sys

from absl import app, flags, logging

from bert_tf.pretraining_data import PretrainingDataError, PretrainingDataOptions, \
    create_pretraining_data, create_pretraining_data_sharded, load_tokenizer

FLAGS = flags.FLAGS

# The original's flags, names and defaults unchanged.
flags.DEFINE_string("input_file", None,
                    "Input raw text file (or comma-separated list of files, globs allowed).")
flags.DEFINE_string("output_file", None,
                    "Output TF example file (or comma-separated list of files). In scalable "
                    "mode: the shard prefix.")
flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be True "
                  "for uncased models and False for cased models.")
flags.DEFINE_bool("do_whole_word_mask", False,
                  "Whether to use whole word masking rather than per-WordPiece masking.")
flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 20,
                     "Maximum number of masked LM predictions per sequence.")
flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
flags.DEFINE_integer("dupe_factor", 10,
                     "Number of times to duplicate the input data (with different masks).")
flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
flags.DEFINE_float("short_seq_prob", 0.1, "Probability of creating sequences which are shorter "
                   "than the maximum length.")

# Added: scalable mode.
flags.DEFINE_enum("mode", "faithful", ["faithful", "scalable"],
                  "faithful: the original's exact output (one process, all instances in memory). "
                  "scalable: sharded, multi-process, bounded memory, resumable.")
flags.DEFINE_integer("num_workers", 1, "Scalable mode: worker processes.")
flags.DEFINE_integer("docs_per_shard", 1000, "Scalable mode: documents per output shard.")
flags.DEFINE_bool("overwrite", False, "Scalable mode: replace shards of an earlier run with "
                  "other settings under the same --output_file prefix.")
flags.DEFINE_float("progress_interval", 10.0, "Scalable mode: seconds between progress lines.")
# Added: input handling.
flags.DEFINE_bool("skip_invalid_lines", False, "Skip lines that are not valid UTF-8 (counted "
                  "in the summary) instead of stopping with an error naming file and line.")
flags.DEFINE_bool("allow_prediction_cap", False, "Deprecated, ignored: --max_predictions_per_seq "
                  "below round(masked_lm_prob * max_seq_length) is always accepted and caps the "
                  "predictions as the original does (with a warning).")
# Added: options users asked for, all off by default.
flags.DEFINE_bool("whole_word_mask_per_word", False, "With --do_whole_word_mask: draw the "
                  "80/10/10 decision once per word instead of once per WordPiece.")
flags.DEFINE_bool("random_replacement_excludes_special", False, "Never draw [PAD]/[UNK]/[CLS]/"
                  "[SEP]/[MASK]/[unusedN] (any [...] token) as the random replacement word.")
flags.DEFINE_bool("next_sentence_prediction", True, "False: single-segment examples "
                  "[CLS] A [SEP] without NSP (next_sentence_labels always 0), for the No-NSP "
                  "ablation.")


def main(_):
    options = PretrainingDataOptions(
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        masked_lm_prob=FLAGS.masked_lm_prob,
        short_seq_prob=FLAGS.short_seq_prob,
        dupe_factor=FLAGS.dupe_factor,
        random_seed=FLAGS.random_seed,
        do_whole_word_mask=FLAGS.do_whole_word_mask,
        whole_word_mask_per_word=FLAGS.whole_word_mask_per_word,
        random_replacement_excludes_special=FLAGS.random_replacement_excludes_special,
        next_sentence_prediction=FLAGS.next_sentence_prediction)
    try:
        if FLAGS.mode == "faithful":
            if FLAGS.num_workers != 1:
                raise PretrainingDataError(
                    f"--num_workers={FLAGS.num_workers} needs --mode=scalable (faithful mode "
                    "reproduces the original's single-process order)")
            tokenizer = load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case)
            create_pretraining_data(FLAGS.input_file, FLAGS.output_file, tokenizer, options,
                                    skip_invalid_lines=FLAGS.skip_invalid_lines,
                                    allow_prediction_cap=FLAGS.allow_prediction_cap,
                                    vocab_file=FLAGS.vocab_file)
        else:
            create_pretraining_data_sharded(
                FLAGS.input_file, FLAGS.output_file, FLAGS.vocab_file, FLAGS.do_lower_case,
                options, num_workers=FLAGS.num_workers, docs_per_shard=FLAGS.docs_per_shard,
                skip_invalid_lines=FLAGS.skip_invalid_lines,
                allow_prediction_cap=FLAGS.allow_prediction_cap, overwrite=FLAGS.overwrite,
                progress_interval=FLAGS.progress_interval)
    except PretrainingDataError as e:
        logging.error("%s", e)
        sys.exit(f"create_pretraining_data: error: {e}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["input_file", "output_file", "vocab_file"])
    app.run(main)
