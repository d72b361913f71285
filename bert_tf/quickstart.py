"""The main job on embedded data: corpus -> WordPiece vocab -> small BERT -> original checkpoint ->
features. Runs with no download and no ../shared: the text is Python's own documentation topics.

Each later stage of the project (pretraining, fine-tuning, export) adds a step here.
"""
from __future__ import annotations

import json
import os
import time

import keras

from bert_tf import corpora, feature_extraction
from bert_tf.checkpoints import save_original_checkpoint
from bert_tf.io_utils import atomic_write_text
from bert_tf.modeling import BertConfig, BertPretrainer
from bert_tf.pretrained import load_bert

MARKER = ".bert_tf_quickstart"

SAMPLE_SENTENCES = [
    "The assert statement is a convenient way to insert debugging assertions into a program.",
    "A for loop iterates over the items of a sequence ||| The while loop repeats while a condition is true.",
    "Exceptions are raised when an error is detected during execution.",
]


def _prepare_output_dir(output_dir: str) -> None:
    """Creates `output_dir`; refuses a non-empty folder that a previous quickstart did not make."""
    if os.path.isdir(output_dir) and os.listdir(output_dir):
        if not os.path.exists(os.path.join(output_dir, MARKER)):
            raise FileExistsError(
                f"{output_dir} is not empty and was not written by the quickstart; choose another "
                "--output_dir (nothing was changed)")
    os.makedirs(output_dir, exist_ok=True)
    atomic_write_text(os.path.join(output_dir, MARKER), "written by tools/quickstart.py\n")


def run_quickstart(output_dir: str, vocab_size: int = 4000, num_layers: int = 2,
                   hidden_size: int = 128, num_heads: int = 2, max_seq_length: int = 64,
                   seed: int = 12345) -> dict:
    """Runs every stage on the embedded corpus and returns a summary dict (also written as
    `summary.json`). Files written to `output_dir`: corpus.txt, vocab.txt, bert_config.json,
    bert_model.ckpt.{index,data-*}, input.txt, features.jsonl."""
    from bert_tf.tokenization import build_wordpiece_vocab

    _prepare_output_dir(output_dir)
    timings, t0 = {}, time.perf_counter()
    path = lambda name: os.path.join(output_dir, name)  # noqa: E731

    n_docs, n_sentences = corpora.write_pydoc_corpus(path("corpus.txt"))
    timings["corpus_s"] = time.perf_counter() - t0

    t = time.perf_counter()
    vocab = build_wordpiece_vocab([path("corpus.txt")], path("vocab.txt"), vocab_size=vocab_size,
                                  do_lower_case=True)
    timings["vocab_s"] = time.perf_counter() - t

    t = time.perf_counter()
    keras.utils.set_random_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=hidden_size,
                        num_hidden_layers=num_layers, num_attention_heads=num_heads,
                        intermediate_size=4 * hidden_size, max_position_embeddings=512,
                        type_vocab_size=2)
    config.to_json_file(path("bert_config.json"))
    model = BertPretrainer(config).build_from_config_shapes()
    save_original_checkpoint(model, path("bert_model.ckpt"), overwrite=True)
    timings["model_s"] = time.perf_counter() - t

    t = time.perf_counter()
    _, tokenizer, encoder = load_bert(path("bert_config.json"), path("vocab.txt"),
                                      path("bert_model.ckpt"), do_lower_case=True)
    atomic_write_text(path("input.txt"), "\n".join(SAMPLE_SENTENCES) + "\n")
    examples = feature_extraction.read_examples(path("input.txt"))
    records = feature_extraction.extract_features(encoder, tokenizer, examples, [-1, -2],
                                                  max_seq_length=max_seq_length, batch_size=8)
    n_records = feature_extraction.write_features(records, path("features.jsonl"))
    timings["features_s"] = time.perf_counter() - t

    with open(path("features.jsonl"), encoding="utf-8") as f:
        first = json.loads(f.readline())
    summary = {
        "output_dir": os.path.abspath(output_dir),
        "corpus": {"documents": n_docs, "sentences": n_sentences},
        "vocab_size": len(vocab),
        "model": {"layers": num_layers, "hidden": hidden_size, "heads": num_heads,
                  "parameters": int(sum(int(v.numpy().size) for v in model.trainable_variables))},
        "features": {"examples": n_records,
                     "first_example_tokens": [f["token"] for f in first["features"]]},
        "seconds": {k: round(v, 2) for k, v in timings.items()},
    }
    atomic_write_text(path("summary.json"), json.dumps(summary, indent=2) + "\n")
    return summary
