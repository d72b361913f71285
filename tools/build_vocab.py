"""Learns a WordPiece vocab from text files (one text per line) for `FullTokenizer`.

  python tools/build_vocab.py --input_file=corpus/*.txt --output_file=vocab.txt \
      --vocab_size=30522 --do_lower_case=True [--num_reserved_unused=0] [--max_lines=N]

Words are split with the original BasicTokenizer, pieces learned with tensorflow-text's WordPiece
learner; the vocab starts with [PAD], the optional [unusedN] tokens, [UNK], [CLS], [SEP], [MASK].
The file is written atomically. See bert_tf.tokenization.vocab_builder.
"""
from absl import app, flags

from bert_tf.tokenization.vocab_builder import build_wordpiece_vocab

FLAGS = flags.FLAGS
flags.DEFINE_string("input_file", None, "Input text file(s): comma-separated paths or globs.")
flags.DEFINE_string("output_file", None, "Where to write the vocab (one token per line).")
flags.DEFINE_integer("vocab_size", 30522, "Maximum vocab size, reserved tokens included.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents, as FullTokenizer will.")
flags.DEFINE_integer("num_reserved_unused", 0, "Number of [unusedN] tokens after [PAD].")
flags.DEFINE_integer("max_lines", None, "Read at most this many lines in total (default: all).")
flags.mark_flags_as_required(["input_file", "output_file"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    vocab = build_wordpiece_vocab(FLAGS.input_file, FLAGS.output_file,
                                  vocab_size=FLAGS.vocab_size, do_lower_case=FLAGS.do_lower_case,
                                  num_reserved_unused=FLAGS.num_reserved_unused,
                                  max_lines=FLAGS.max_lines)
    print(f"wrote {len(vocab)} tokens to {FLAGS.output_file}")


if __name__ == "__main__":
    app.run(main)
