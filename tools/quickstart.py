"""The main job, end to end on embedded data (no download): Python's documentation text ->
WordPiece vocab -> pretraining data -> a small BERT and a small GPT-1 pretrained -> fine-tuned on
a topic task (and from scratch) -> the BERT classifier exported and served through TF Serving's
loader -> curves.png, report.md, summary.json.

  python tools/quickstart.py [--output_dir=quickstart_output] [--scale=2] [--verbose]

Flags and the library call: `bert_tf.cli.quickstart`; `--help` lists them.
"""
from bert_tf.cli.quickstart import main

if __name__ == "__main__":
    main()
