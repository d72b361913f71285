"""The main job, end to end on embedded data (no download): Python's documentation topics ->
WordPiece vocab -> pretraining data -> small BERT pretrained a few steps -> original-format
checkpoint -> extracted features -> SavedModels (preprocessor + encoder) reloaded on raw text.

  python tools/quickstart.py [--output_dir=quickstart_output]
"""
import json

from absl import app, flags

from bert_tf.quickstart import run_quickstart

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "quickstart_output", "Where every artefact is written.")
flags.DEFINE_integer("vocab_size", 4000, "Target WordPiece vocab size.")
flags.DEFINE_integer("num_layers", 2, "Transformer blocks of the small BERT.")
flags.DEFINE_integer("hidden_size", 128, "Hidden size of the small BERT.")
flags.DEFINE_integer("num_heads", 2, "Attention heads of the small BERT.")
flags.DEFINE_integer("seed", 12345, "Random seed for the data, the weights and the input order.")
flags.DEFINE_integer("pretrain_steps", 100, "MLM + NSP pretraining steps (batch 16).")


def main(_):
    summary = run_quickstart(FLAGS.output_dir, vocab_size=FLAGS.vocab_size,
                             num_layers=FLAGS.num_layers, hidden_size=FLAGS.hidden_size,
                             num_heads=FLAGS.num_heads, seed=FLAGS.seed,
                             pretrain_steps=FLAGS.pretrain_steps)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    app.run(main)
