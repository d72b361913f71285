"""tools/extract_features.py on the original fixture checkpoint, as the README runs it, checked
against a recomputation in the test (tokenize + pack by hand, encoder forward)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.checkpoints import load_original_checkpoint
from bert_tf.modeling import BertConfig, BertEncoder
from bert_tf.tokenization import FullTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINES = [
    "Hello, World! The man went to the store.",
    "Who was Jim Henson ? ||| Jim Henson was a puppeteer",
    "a very long line " * 10,
    "Jim ||| " + "henson " * 20,
]


def _run_tool(tmp_path, original_fixtures, extra=(), vocab=None):
    ckpt = original_fixtures / "checkpoint"
    (tmp_path / "input.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    cmd = [sys.executable, os.path.join(ROOT, "tools", "extract_features.py"),
           f"--input_file={tmp_path / 'input.txt'}", f"--output_file={tmp_path / 'out.jsonl'}",
           f"--vocab_file={vocab or original_fixtures / 'vocab_uncased.txt'}",
           f"--bert_config_file={ckpt / 'bert_config.json'}",
           f"--init_checkpoint={ckpt / 'bert_model.ckpt'}",
           "--layers=-1,-2", "--max_seq_length=16", "--batch_size=3", "--do_lower_case=True",
           *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.mark.long
def test_matches_recomputation(tmp_path, original_fixtures):
    proc = _run_tool(tmp_path, original_fixtures)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["linex_index"] for r in records] == [0, 1, 2, 3]
    assert list(records[0]) == ["linex_index", "features"]
    assert list(records[0]["features"][0]) == ["token", "layers"]
    assert list(records[0]["features"][0]["layers"][0]) == ["index", "values"]

    tokenizer = FullTokenizer(str(original_fixtures / "vocab_uncased.txt"), do_lower_case=True)
    config = BertConfig.from_json_file(original_fixtures / "checkpoint" / "bert_config.json")
    encoder = BertEncoder(config).build_from_config_shapes()
    load_original_checkpoint(encoder, original_fixtures / "checkpoint" / "bert_model.ckpt")
    for record, line in zip(records, LINES):
        a, _, b = line.strip().partition(" ||| ")
        ta, tb = tokenizer.tokenize(a), tokenizer.tokenize(b) if b else None
        if tb is None:
            ta = ta[:14]
            tokens, types = ["[CLS]"] + ta + ["[SEP]"], [0] * (len(ta) + 2)
        else:
            while len(ta) + len(tb) > 13:
                (ta if len(ta) > len(tb) else tb).pop()
            tokens = ["[CLS]"] + ta + ["[SEP]"] + tb + ["[SEP]"]
            types = [0] * (len(ta) + 2) + [1] * (len(tb) + 1)
        assert [f["token"] for f in record["features"]] == tokens
        n = len(tokens)
        ids = tokenizer.convert_tokens_to_ids(tokens) + [0] * (16 - n)
        out = encoder({"input_word_ids": tf.constant([ids]),
                       "input_mask": tf.constant([[1] * n + [0] * (16 - n)]),
                       "input_type_ids": tf.constant([types + [0] * (16 - n)])}, training=False)
        for j, layer in enumerate([-1, -2]):
            got = np.array([f["layers"][j]["values"] for f in record["features"]])
            assert all(f["layers"][j]["index"] == layer for f in record["features"])
            want = np.asarray(out["encoder_outputs"][layer])[0, :n]
            # 6-decimal rounding (5e-7) + float32 rounding of the fused oneDNN kernels, which
            # differs with the batch composition (a few ulps of values around 2)
            np.testing.assert_allclose(got, want, atol=5e-6, rtol=0)
            # values are rounded to 6 decimals as the original writes them
            assert np.all(np.abs(got * 1e6 - np.round(got * 1e6)) < 1e-3)


def test_vocab_size_mismatch_is_named_and_writes_nothing(tmp_path, original_fixtures):
    small_vocab = tmp_path / "vocab.txt"
    small_vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")
    proc = _run_tool(tmp_path, original_fixtures, vocab=small_vocab)
    assert proc.returncode != 0
    assert f"vocab file {small_vocab} has 5 tokens but vocab_size is 30522" in proc.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_bad_layer_index(tmp_path, original_fixtures):
    proc = _run_tool(tmp_path, original_fixtures, extra=["--layers=-3"])
    assert proc.returncode != 0 and "--layers index -3 is out of range" in proc.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_init_checkpoint_is_required(tmp_path, original_fixtures):
    """As the original: no --init_checkpoint is an error (never features of random weights)."""
    ckpt = original_fixtures / "checkpoint"
    (tmp_path / "input.txt").write_text("hello world\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "extract_features.py"),
         f"--input_file={tmp_path / 'input.txt'}", f"--output_file={tmp_path / 'out.jsonl'}",
         f"--vocab_file={original_fixtures / 'vocab_uncased.txt'}",
         f"--bert_config_file={ckpt / 'bert_config.json'}"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "--init_checkpoint must have a value other than None" in proc.stderr
    assert not (tmp_path / "out.jsonl").exists()
