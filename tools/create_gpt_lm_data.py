"""Create GPT-1 language-model pretraining TFRecords: contiguous `n_ctx`-token windows of raw text.

Input: the same format as create_pretraining_data.py (one sentence per line, a blank line
between documents; comma-separated files or globs, `.gz` allowed). Output: shards
`<output_file>-NNNNN.tfrecord` of `tf.train.Example`s with one feature `input_ids` [n_ctx]
(contiguous text; every document is followed by a separator token: `\\n</w>` for the BPE,
`[SEP]` for WordPiece), written by several processes, deterministic for a seed and resumable
(re-run the same command after a crash).

  # The original GPT-1 BPE (needs the [gpt] extra: ftfy, spaCy)
  python tools/create_gpt_lm_data.py --input_file='corpus/*.txt.gz' --output_file=/data/gpt/lm \
    --encoder_path=model/encoder_bpe_40000.json --bpe_path=model/vocab_40000.bpe \
    --n_ctx=512 --held_out_fraction=0.01 --num_workers=8

  # BERT's WordPiece vocabulary (the BERT paper's LTR model)
  python tools/create_gpt_lm_data.py --input_file=corpus.txt --output_file=/data/ltr/lm \
    --vocab_file=vocab.txt --do_lower_case=True --n_ctx=128

Read the windows with `bert_tf.gpt.lm_data.lm_dataset("/data/gpt/lm-*.tfrecord", n_ctx=512)`.
See docs/gpt_tokenization.md.
"""
import sys

from absl import app, flags, logging

from bert_tf.gpt.lm_data import EncoderSpec, LmDataOptions, create_gpt_lm_data
from bert_tf.errors import UserInputError

FLAGS = flags.FLAGS

# Named as create_pretraining_data.py's flags where the meaning is the same.
flags.DEFINE_string("input_file", None,
                    "Input raw text file (or comma-separated list of files, globs allowed).")
flags.DEFINE_string("output_file", None, "Output prefix: shards <output_file>-NNNNN.tfrecord.")
flags.DEFINE_string("vocab_file", None, "A WordPiece vocab (instead of the BPE files).")
flags.DEFINE_bool("do_lower_case", True, "With --vocab_file: lower-case the input text.")
flags.DEFINE_string("encoder_path", None, "The original BPE encoder, encoder_bpe_40000.json.")
flags.DEFINE_string("bpe_path", None, "The original BPE merges, vocab_40000.bpe.")
flags.DEFINE_integer("n_ctx", 512, "Tokens per window (the model's context length).")
flags.DEFINE_integer("random_seed", 12345, "Random seed (decides the held-out split).")
flags.DEFINE_float("held_out_fraction", 0.0, "Share of documents written to the held-out split "
                   "<output_file>_heldout-NNNNN.tfrecord (0: none).")
flags.DEFINE_string("document_separator", "auto", "Token appended after every document: 'auto' "
                    "(\\n</w> for the BPE, [SEP] for WordPiece), 'none', or a vocabulary token.")
flags.DEFINE_integer("num_workers", 1, "Worker processes (the output does not depend on it).")
flags.DEFINE_integer("docs_per_shard", 1000, "Documents per output shard.")
flags.DEFINE_bool("overwrite", False, "Replace the shards of an earlier run with other settings "
                  "under the same --output_file.")
flags.DEFINE_bool("skip_invalid_lines", False, "Skip lines that are not valid UTF-8 (counted "
                  "in the summary) instead of stopping.")


def main(_):
    spec = EncoderSpec(encoder_path=FLAGS.encoder_path, bpe_path=FLAGS.bpe_path,
                       vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case)
    options = LmDataOptions(n_ctx=FLAGS.n_ctx, random_seed=FLAGS.random_seed,
                            held_out_fraction=FLAGS.held_out_fraction,
                            document_separator=FLAGS.document_separator,
                            docs_per_shard=FLAGS.docs_per_shard)
    try:
        create_gpt_lm_data(FLAGS.input_file, FLAGS.output_file, spec, options,
                           num_workers=FLAGS.num_workers,
                           skip_invalid_lines=FLAGS.skip_invalid_lines, overwrite=FLAGS.overwrite)
    except UserInputError as e:
        logging.error("%s", e)
        sys.exit(f"create_gpt_lm_data: error: {e}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["input_file", "output_file"])
    app.run(main)
