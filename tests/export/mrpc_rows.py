"""Real MRPC dev rows packed into token ids, for the quantization and TFLite tests."""
from __future__ import annotations

import csv
import pathlib

import numpy as np
import pytest


def mrpc_dev_rows(shared: pathlib.Path, limit: int | None = None) -> list[tuple[str, str, int]]:
    """(sentence 1, sentence 2, label) of GLUE MRPC dev.tsv; skips when it is absent."""
    path = shared / "glue" / "MRPC" / "dev.tsv"
    if not path.is_file():
        pytest.skip(f"needs {path} (GLUE MRPC in ../shared/data)")
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [(r[3], r[4], int(r[0])) for r in rows[:limit]]


def pack_pairs(tokenizer, rows, seq_length: int) -> dict[str, np.ndarray]:
    """int32 [len(rows), seq_length] input_word_ids / input_mask / input_type_ids."""
    from bert_tf.tokenization.packing import pack_tokens

    packed = [pack_tokens(tokenizer.tokenize(a), tokenizer.tokenize(b), seq_length,
                          tokenizer.vocab) for a, b, _ in rows]
    return {"input_word_ids": np.array([p.input_ids for p in packed], np.int32),
            "input_mask": np.array([p.input_mask for p in packed], np.int32),
            "input_type_ids": np.array([p.segment_ids for p in packed], np.int32)}
