#!/usr/bin/env python3
"""TF Serving's loader under load: N threads x M requests against ONE loaded session.

Builds (or takes) a raw-text SavedModel, compiles the C harness (bert_tf/export/c/
serving_harness.c: TF_LoadSessionFromSavedModel + the tensorflow-text kernel libraries, i.e. what
tensorflow_model_server runs), checks a few requests against Python first, then runs
`--threads` threads x `--requests` requests each (TF_SessionRun is thread-safe; one session, as
the server shares one per model version) and prints ONE JSON line: p50/p99/max latency (ms),
QPS, errors (must be 0), plus the setup.

  python bench/bench_serving.py                                # classifier, fixture checkpoint
  python bench/bench_serving.py --threads 8 --requests 500 --batch 1 --seq_length 128
  python bench/bench_serving.py --export_dir /models/sentiment/1 --signature serving_default
  python bench/bench_serving.py --bert_config_file $M/bert_config.json \
      --init_checkpoint $M/bert_model.ckpt --vocab_file $M/vocab.txt   # e.g. BERT-base

Request texts: IMDb reviews (../shared/data/imdb/train.tsv.gz) when present, else the original
release's sample_text.txt, one text per example, cycled. Quick smoke run: --requests 5.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import os
import sys
import tempfile

from host import cpu_description

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.environ.get("BERT_TF_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))
FIXTURES = os.path.join(SHARED, "fixtures", "original")
sys.path.insert(0, ROOT)


def _texts(limit: int) -> tuple[list[str], str]:
    imdb = os.path.join(SHARED, "data", "imdb", "train.tsv.gz")
    if os.path.exists(imdb):
        texts = []
        with gzip.open(imdb, "rt", encoding="utf-8") as f:
            reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            header = next(reader)
            column = header.index("text") if "text" in header else -1
            for row in reader:
                texts.append(row[column])
                if len(texts) >= limit:
                    break
        return texts, imdb
    path = os.path.join(FIXTURES, "sample_text.txt")
    with io.open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()][:limit], path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export_dir", help="An existing SavedModel version folder to load.")
    parser.add_argument("--signature", default="serving_default")
    parser.add_argument("--model_type", default="classifier",
                        choices=["classifier", "ner", "preprocessor"],
                        help="What to export when --export_dir is not given (one `text` input).")
    parser.add_argument("--bert_config_file", default=os.path.join(FIXTURES, "checkpoint",
                                                                   "bert_config.json"))
    parser.add_argument("--init_checkpoint", default=os.path.join(FIXTURES, "checkpoint",
                                                                  "bert_model.ckpt"))
    parser.add_argument("--vocab_file", default=os.path.join(FIXTURES, "vocab_uncased.txt"))
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--requests", type=int, default=500, help="Requests per thread.")
    parser.add_argument("--batch", type=int, default=1, help="Texts per request.")
    parser.add_argument("--distinct_requests", type=int, default=64,
                        help="Distinct requests, cycled by the threads.")
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from bert_tf.export import loader_harness as lh

    with tempfile.TemporaryDirectory(prefix="bench_serving_") as tmp:
        export_dir = args.export_dir
        if export_dir is None:
            from bert_tf.export.exporter import ExportOptions, export_savedmodel

            export_dir = export_savedmodel(ExportOptions(
                model_type=args.model_type, export_dir=os.path.join(tmp, "model"), version=1,
                bert_config_file=args.bert_config_file, init_checkpoint=args.init_checkpoint,
                vocab_file=args.vocab_file, seq_length=args.seq_length, num_labels=2,
                allow_untrained_head=True))
        texts, source = _texts(args.distinct_requests * args.batch)
        while len(texts) < args.distinct_requests * args.batch:
            texts = texts + texts
        requests = [{"text": np.array(texts[i * args.batch:(i + 1) * args.batch], dtype=object)}
                    for i in range(args.distinct_requests)]
        harness = lh.build_harness(os.path.join(tmp, "harness"))

        # Correctness first: the harness's answers equal Python's on a few requests.
        import tensorflow_text  # noqa: F401

        fn = tf.saved_model.load(export_dir).signatures[args.signature]
        responses, proc = lh.run_signature(harness, export_dir, requests[:4], args.signature)
        if proc.returncode != 0:
            sys.exit(f"bench_serving: the harness failed:\n{proc.stderr[-3000:]}")
        max_diff = 0.0
        for request, response in zip(requests[:4], responses):
            if isinstance(response, str):
                sys.exit(f"bench_serving: request failed: {response}")
            expected = fn(text=tf.constant(request["text"].astype(str)))
            for name, value in expected.items():
                value = value.numpy()
                if value.dtype.kind in "fi":
                    max_diff = max(max_diff, float(np.max(np.abs(
                        value.astype(np.float64) - response[name].astype(np.float64)))))

        result = lh.bench_signature(harness, export_dir, requests, threads=args.threads,
                                    iterations=args.requests, signature=args.signature)
    result.update({
        "export": args.export_dir or f"{args.model_type} (seq_length {args.seq_length}, from "
                                     f"{args.bert_config_file})",
        "signature": args.signature, "batch": args.batch, "texts": source,
        "max_abs_diff_vs_python": max_diff, "cpu": cpu_description(),
        "tensorflow": tf.__version__,
    })
    print(json.dumps(result))
    if result["errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
