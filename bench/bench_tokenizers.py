"""Tokenizer throughput on IMDb reviews: bert_tf's in-graph modes beside tensorflow-text's
FastBertTokenizer, Hugging Face's Rust tokenizer and the Python `FullTokenizer`.

  python bench/bench_tokenizers.py [--num_reviews=2000] [--repeats=15] [--batch_size=64]
      [--tokenizers=in_graph_fast,in_graph_fast_1part,fast_bert,in_graph_exact,hf_rust,python]

Prints one JSON object. Every tokenizer runs in this one process, interleaved pass by pass
(A B C D A B C D ...; after one untimed warm-up pass each), so that load from other jobs on a
shared machine falls on all of them alike; per tokenizer: median seconds of the `--repeats`
timed passes, reviews/s, word pieces/s, every pass's seconds, the ratio of word pieces/s to
FastBertTokenizer's and to the exact in-graph mode's (medians of the per-round ratios), and how
many reviews got ids different from `FullTokenizer` (the original's tokenizer).

  * in_graph_fast / in_graph_exact: `InGraphTokenizer(mode=...)`, batches of `--batch_size`
    inside one `tf.function` each; in_graph_fast cuts each batch into min(2, cores) parts
    tokenized at the same time (its default), in_graph_fast_1part is the same mode on one
    thread (`num_shards=1`), i.e. its CPU cost beside FastBertTokenizer's single-threaded kernels;
    the timed call fetches the ids as NumPy (flat values and row splits), the correctness pass
    turns them into lists;
  * fast_bert: `tensorflow_text.FastBertTokenizer(vocab, lower_case_nfd_strip_accents=True)`,
    same batches, same `tf.function` use;
  * hf_rust: Hugging Face's Rust tokenizer (`tokenizers.BertWordPieceTokenizer`, the pipeline
    behind transformers' `BertTokenizerFast`: lowercase, clean_text, handle_chinese_chars,
    strip_accents=None), `encode_batch` of `--batch_size` reviews without special tokens (it
    uses its own thread pool); skipped with a note if `tokenizers` is missing;
  * python: `FullTokenizer`, one review at a time, tokens -> ids.

Data: the first `--num_reviews` reviews of ../shared/data/imdb/train.tsv.gz (columns file,
rating, label, text) with the bert-base-uncased vocab from
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
from host import cpu_description

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ALL_TOKENIZERS = ("in_graph_fast", "in_graph_fast_1part", "fast_bert", "in_graph_exact", "hf_rust",
                  "python")

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_reviews", 2000, "How many reviews (from the start of the file).")
flags.DEFINE_integer("repeats", 15, "Timed passes per tokenizer (interleaved); medians reported.")
flags.DEFINE_integer("batch_size", 64, "Batch size of the batched tokenizers.")
flags.DEFINE_list("tokenizers", list(ALL_TOKENIZERS), f"Which of {ALL_TOKENIZERS} to run.")
flags.DEFINE_string("shared_dir", os.environ.get("BERT_TF_SHARED", str(ROOT.parent / "shared")),
                    "The project's ../shared folder (fixtures and data).")
flags.DEFINE_float("settle_s", 0.3, "Idle pause before each timed pass (other pools settle).")
flags.DEFINE_string("out", None, "Also write the JSON report to this file.")


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


def build_runners(names: list[str], vocab: str, texts: list[str], batch_size: int):
    """name -> run(collect) (collect=True: list of id lists, for the correctness check;
    False: the timed call, the tokenizer's own output form); names that cannot run -> note."""
    import tensorflow as tf
    import tensorflow_text

    from bert_tf.tokenization import FullTokenizer, InGraphTokenizer

    runners, notes = {}, {}
    text_batches = [texts[i:i + batch_size] for i in range(0, len(texts), batch_size)]
    tensor_batches = [tf.constant(batch) for batch in text_batches]
    spec = [tf.TensorSpec([None], tf.string)]

    def graph_runner(tokenize):
        fn = tf.function(tokenize, input_signature=spec)

        def run(collect: bool):
            if collect:
                return [row for batch in tensor_batches for row in fn(batch).to_list()]
            # Timed: the ids as NumPy (flat values + row splits), what a model input pipeline
            # takes; building Python lists (to_list) is not the tokenizer's work.
            for batch in tensor_batches:
                ids = fn(batch)
                ids.flat_values.numpy(), ids.row_splits.numpy()
        return run

    for name in names:
        if name in ("in_graph_fast", "in_graph_fast_1part", "in_graph_exact"):
            mode = name.split("_")[2]
            shards = 1 if name.endswith("_1part") else None
            runners[name] = graph_runner(InGraphTokenizer(vocab, True, mode=mode,
                                                          num_shards=shards).tokenize)
        elif name == "fast_bert":
            tokens = FullTokenizer(vocab, True).inv_vocab
            fast_bert = tensorflow_text.FastBertTokenizer(
                vocab=[tokens[i] for i in range(len(tokens))], token_out_type=tf.int32,
                lower_case_nfd_strip_accents=True, max_bytes_per_word=800)
            runners[name] = graph_runner(fast_bert.tokenize)
        elif name == "hf_rust":
            try:
                from tokenizers import BertWordPieceTokenizer
            except ImportError as e:
                notes[name] = f"skipped: {e}"
                continue
            # What transformers' BertTokenizerFast runs: BertNormalizer + BertPreTokenizer +
            # WordPiece (200 characters per word), in Rust.
            hf = BertWordPieceTokenizer(vocab, clean_text=True, handle_chinese_chars=True,
                                        strip_accents=None, lowercase=True)

            def run_hf(collect: bool, hf=hf):
                out = []
                for batch in text_batches:
                    out.extend(e.ids for e in hf.encode_batch(batch, add_special_tokens=False))
                return out
            runners[name] = run_hf
        elif name == "python":
            python = FullTokenizer(vocab, True)
            runners[name] = lambda collect: [python.convert_tokens_to_ids(python.tokenize(t))
                                             for t in texts]
        else:
            raise ValueError(f"--tokenizers: unknown {name!r}; expected some of {ALL_TOKENIZERS}")
    return runners, notes


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

    from bert_tf.tokenization import FullTokenizer

    texts = read_reviews(data, FLAGS.num_reviews)
    reference = FullTokenizer(str(vocab), do_lower_case=True)
    want = [reference.convert_tokens_to_ids(reference.tokenize(t)) for t in texts]
    pieces = sum(len(ids) for ids in want)
    runners, notes = build_runners(FLAGS.tokenizers, str(vocab), texts, FLAGS.batch_size)

    seconds: dict[str, list[float]] = {name: [] for name in runners}
    different: dict[str, int] = {}
    for name, run in runners.items():  # Warm-up (tracing) pass, also the correctness check.
        got = run(True)
        different[name] = sum(g != w for g, w in zip(got, want))
    for _ in range(FLAGS.repeats):
        for name, run in runners.items():
            # Let the previous tokenizer's worker threads go idle first: HF's Rust pool keeps
            # spinning for a while after encode_batch and took a core from the next runner
            # (in_graph_fast measured 0.95x FastBertTokenizer right after hf_rust, 1.23x without).
            time.sleep(FLAGS.settle_s)
            start = time.perf_counter()
            run(False)
            seconds[name].append(time.perf_counter() - start)

    def ratio_to(name: str, base: str):
        if base not in seconds:
            return None
        return round(statistics.median(b / a for a, b in zip(seconds[name], seconds[base])), 3)

    results = {}
    for name, passes in seconds.items():
        median = statistics.median(passes)
        results[name] = {
            "seconds": round(median, 4), "reviews_per_s": round(len(texts) / median, 1),
            "word_pieces_per_s": round(pieces / median),
            "seconds_per_pass": [round(s, 4) for s in passes],
            "vs_fast_bert": ratio_to(name, "fast_bert"),
            "vs_in_graph_exact": ratio_to(name, "in_graph_exact"),
            "texts_with_ids_different_from_full_tokenizer": different[name]}
    results.update({name: {"note": note} for name, note in notes.items()})
    versions = {"python": platform.python_version(), "tensorflow": tf.__version__,
                "tensorflow_text": tensorflow_text.__version__}
    try:
        import tokenizers
        import transformers
        versions.update(tokenizers=tokenizers.__version__, transformers=transformers.__version__)
    except ImportError:
        pass
    report = {
        "data": {"file": str(data), "reviews": len(texts),
                 "characters": sum(len(t) for t in texts), "word_pieces": pieces,
                 "vocab": str(vocab), "do_lower_case": True},
        "batch_size": FLAGS.batch_size, "repeats": FLAGS.repeats,
        "statistic": ("median of the timed passes, tokenizers interleaved pass by pass in one "
                      "process; vs_* = median over rounds of (other's seconds / this one's); "
                      "one warm-up pass each (tracing) excluded"),
        "results": results,
        "environment": {**versions, "cpu": cpu_description()},
    }
    text = json.dumps(report, indent=2)
    print(text)
    if FLAGS.out:
        pathlib.Path(FLAGS.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    app.run(main)
