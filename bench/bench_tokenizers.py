"""Throughput of the Python `FullTokenizer` and the `InGraphTokenizer` on IMDb reviews.

  python bench/bench_tokenizers.py [--num_reviews=2000] [--repeats=3] [--batch_size=64]

Prints one JSON object: reviews/s and word pieces/s for each tokenizer (medians over
`--repeats` timed passes over the same reviews, after one untimed warm-up pass; the in-graph
tokenizer runs batched inside a `tf.function`), plus how many reviews got different ids
(expected 0). Data: the first `--num_reviews` reviews of ../shared/data/imdb/train.tsv.gz
(columns file, rating, label, text) with the bert-base-uncased vocab from
../shared/fixtures/original/vocab_uncased.txt, do_lower_case=True. Without ../shared it prints a
JSON object with "skipped" and exits 0.
"""
from __future__ import annotations

import gzip
import json
import os
import pathlib
import platform
import statistics
import sys
import time

from absl import app, flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_reviews", 2000, "How many reviews (from the start of the file).")
flags.DEFINE_integer("repeats", 3, "Timed passes per tokenizer; the median is reported.")
flags.DEFINE_integer("batch_size", 64, "Batch size for the in-graph tokenizer.")
flags.DEFINE_string("shared_dir", os.environ.get("BERT_TF_SHARED", str(ROOT.parent / "shared")),
                    "The project's ../shared folder (fixtures and data).")


def read_reviews(path: pathlib.Path, limit: int) -> list[str]:
    """The `text` column of the first `limit` rows of a gzipped TSV with a header line."""
    texts = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        column = header.index("text")
        for line in f:
            if len(texts) >= limit:
                break
            texts.append(line.rstrip("\n").split("\t", column)[column])
    return texts


def timed(fn, repeats: int) -> tuple[float, object]:
    """Runs `fn` once untimed, then `repeats` times; (median seconds, last result)."""
    result = fn()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def main(argv):
    del argv
    shared = pathlib.Path(FLAGS.shared_dir)
    data = shared / "data" / "imdb" / "train.tsv.gz"
    vocab = shared / "fixtures" / "original" / "vocab_uncased.txt"
    if not data.exists() or not vocab.exists():
        print(json.dumps({"skipped": f"needs {data} and {vocab} (the project's ../shared "
                                     "folder); not found"}))
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import tensorflow_text

    from bert_tf.tokenization import FullTokenizer, InGraphTokenizer

    texts = read_reviews(data, FLAGS.num_reviews)
    python = FullTokenizer(str(vocab), do_lower_case=True)
    graph = InGraphTokenizer(str(vocab), do_lower_case=True)

    def run_python():
        return [python.convert_tokens_to_ids(python.tokenize(t)) for t in texts]

    tokenize = tf.function(graph.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    batches = [tf.constant(texts[i:i + FLAGS.batch_size])
               for i in range(0, len(texts), FLAGS.batch_size)]

    def run_graph():
        return [tokenize(batch) for batch in batches]

    py_seconds, py_ids = timed(run_python, FLAGS.repeats)
    tf_seconds, tf_out = timed(run_graph, FLAGS.repeats)
    tf_ids = [row for out in tf_out for row in out.to_list()]
    pieces = sum(len(ids) for ids in py_ids)
    report = {
        "data": {"file": str(data), "reviews": len(texts),
                 "characters": sum(len(t) for t in texts), "word_pieces": pieces,
                 "vocab": str(vocab), "do_lower_case": True},
        "python_full_tokenizer": {
            "seconds": round(py_seconds, 4), "reviews_per_s": round(len(texts) / py_seconds, 1),
            "tokens_per_s": round(pieces / py_seconds)},
        "in_graph_tokenizer": {
            "batch_size": FLAGS.batch_size, "seconds": round(tf_seconds, 4),
            "reviews_per_s": round(len(texts) / tf_seconds, 1),
            "tokens_per_s": round(pieces / tf_seconds)},
        "reviews_with_different_ids": sum(a != b for a, b in zip(py_ids, tf_ids)),
        "repeats": FLAGS.repeats,
        "statistic": "median of the timed passes; one warm-up pass (tracing) excluded",
        "environment": {"python": platform.python_version(), "tensorflow": tf.__version__,
                        "tensorflow_text": tensorflow_text.__version__,
                        "cpu_count": os.cpu_count(), "machine": platform.machine()},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    app.run(main)
