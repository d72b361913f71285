"""Score SQuAD predictions with the official v1.1 / v2.0 metrics (the official scripts' command
line: positional data and prediction files, argparse options).

  python tools/evaluate_squad.py dev-v1.1.json predictions.json
  python tools/evaluate_squad.py dev-v2.0.json predictions.json --na-prob-file null_odds.json

See `bert_tf.cli.evaluate_squad` (also the console script `bert-tf-evaluate-squad`).
"""
import pathlib
import sys

try:
    from bert_tf.cli.evaluate_squad import main
except ImportError:  # run from a source checkout without installing the package
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    from bert_tf.cli.evaluate_squad import main

if __name__ == "__main__":
    sys.exit(main())
