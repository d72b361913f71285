"""Faithful mode against the original's two fixture runs: every example, the file bytes, the RNG
call trace and the logged examples."""
from __future__ import annotations

import gzip
import hashlib
import json
import logging
import random
import shutil

import pytest

from bert_tf.pretraining_data import FEATURE_NAMES, TracingRandom, create_pretraining_data, \
    parse_example, read_tfrecord
from bert_tf.pretraining_data.instances import truncate_seq_pair
from bert_tf.pretraining_data.masking import num_to_predict
from conftest import FIXTURE_RUNS, read_jsonl


@pytest.fixture(scope="module")
def traced_runs(original_fixtures, tokenizer, sample_text, tmp_path_factory):
    """Both fixture runs made by faithful mode with a TracingRandom (output path, rng)."""
    out = tmp_path_factory.mktemp("faithful")
    runs = {}
    for name, options in FIXTURE_RUNS.items():
        rng = TracingRandom(options.random_seed)
        path = out / f"{name}.tfrecord"
        summary = create_pretraining_data(sample_text, str(path), tokenizer, options, rng=rng)
        runs[name] = (path, rng, summary)
    return runs


@pytest.mark.parametrize("run", ["run1", "run2"])
def test_examples_match_the_original(traced_runs, original_fixtures, run):
    path, _, summary = traced_runs[run]
    expected = read_jsonl(original_fixtures / "pretraining_data" / f"{run}.jsonl")
    records = read_tfrecord(path)
    assert len(records) == len(expected) == summary["instances"]
    for record, want in zip(records, expected):
        got = parse_example(record)
        assert list(got) == list(FEATURE_NAMES)
        for name in FEATURE_NAMES:
            assert got[name] == want[name], (want["index"], name)
    canonical = json.loads((original_fixtures / "pretraining_data" / "sha256.json").read_text())
    # Our encoder writes the features in the original's order, so the file is byte-identical
    # to the original's run with the pure-Python protobuf backend.
    assert hashlib.sha256(path.read_bytes()).hexdigest() == canonical[run]["sha256_file"]


@pytest.mark.parametrize("run", ["run1", "run2"])
def test_rng_trace_matches_call_for_call(traced_runs, original_fixtures, run):
    _, rng, _ = traced_runs[run]
    expected = read_jsonl(original_fixtures / "pretraining_data" / f"{run}_rng_trace.jsonl")
    assert len(rng.calls) == len(expected)
    for got, want in zip(rng.calls, expected):
        assert got == want  # fn, args, result/perm, n and site label


def test_first_20_examples_are_logged_as_the_original(original_fixtures, tokenizer, sample_text,
                                                      tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="absl")
    create_pretraining_data(sample_text, str(tmp_path / "run2.tfrecord"), tokenizer,
                            FIXTURE_RUNS["run2"])
    log = (original_fixtures / "pretraining_data" / "run2.log").read_text(encoding="utf-8")
    def is_example_line(message: str) -> bool:
        return (message.startswith(("*** Example", "tokens:"))
                or message.split(":")[0] in FEATURE_NAMES)

    want = [line.split("] ", 1)[1] for line in log.splitlines()
            if "create_pretraining_data.py:" in line and "] " in line]
    want = [m for m in want if is_example_line(m)]
    got = [r.getMessage() for r in caplog.records if is_example_line(r.getMessage())]
    assert len(got) == 20 * 9
    assert got == want
    assert "Wrote 38 total instances" in caplog.text


def test_round_robin_over_several_output_files(traced_runs, tokenizer, sample_text, tmp_path):
    paths = [str(tmp_path / f"part{i}.tfrecord") for i in range(3)]
    create_pretraining_data(sample_text, ",".join(paths), tokenizer, FIXTURE_RUNS["run1"],
                            log_examples=0)
    single = read_tfrecord(traced_runs["run1"][0])
    for i, p in enumerate(paths):
        assert read_tfrecord(p) == single[i::3]


def test_gzip_input_and_split_files_give_the_same_output(traced_runs, tokenizer, sample_text,
                                                         tmp_path):
    """A .gz copy reads the same; two files are concatenated without resetting the document
    (the original carries a document across a file boundary)."""
    text = open(sample_text, "rb").read()
    gz = tmp_path / "sample.txt.gz"
    gz.write_bytes(gzip.compress(text))
    cut = text.index(b"\n", len(text) // 3) + 1  # Mid-document, at a line boundary.
    (tmp_path / "a.txt").write_bytes(text[:cut])
    (tmp_path / "b.txt").write_bytes(text[cut:])
    want = read_tfrecord(traced_runs["run1"][0])
    for inputs in (str(gz), f"{tmp_path}/a.txt,{tmp_path}/b.txt"):
        out = tmp_path / "out.tfrecord"
        create_pretraining_data(inputs, str(out), tokenizer, FIXTURE_RUNS["run1"],
                                log_examples=0)
        assert read_tfrecord(out) == want, inputs


def test_carriage_returns_are_dropped_like_gfile(traced_runs, tokenizer, sample_text, tmp_path):
    """tf.gfile's readline drops every \\r, so CRLF files give the same examples."""
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(open(sample_text, "rb").read().replace(b"\n", b"\r\n"))
    out = tmp_path / "out.tfrecord"
    create_pretraining_data(str(crlf), str(out), tokenizer, FIXTURE_RUNS["run1"], log_examples=0)
    assert read_tfrecord(out) == read_tfrecord(traced_runs["run1"][0])


def test_num_to_predict_uses_bankers_rounding():
    options = FIXTURE_RUNS["run1"]
    assert num_to_predict(30, options) == 4  # round(4.5) == 4 (run1 instance #41)
    assert num_to_predict(50, options) == 8  # round(7.5) == 8
    assert num_to_predict(3, options) == 1
    assert num_to_predict(128, options) == 19


def _naive_truncate(a, b, max_num_tokens, rng):
    while len(a) + len(b) > max_num_tokens:
        trunc = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()


def test_truncate_seq_pair_equals_token_by_token_removal():
    cases = random.Random(0)
    for _ in range(500):
        a = list(range(cases.randint(1, 60)))
        b = list(range(100, 100 + cases.randint(1, 60)))
        max_tokens = cases.randint(2, 70)
        seed = cases.random()
        r1, r2 = random.Random(seed), random.Random(seed)
        a1, b1, a2, b2 = list(a), list(b), list(a), list(b)
        _naive_truncate(a1, b1, max_tokens, r1)
        removed = truncate_seq_pair(a2, b2, max_tokens, r2)
        assert (a1, b1) == (a2, b2)
        assert removed == len(a) + len(b) - len(a1) - len(b1)
        assert r1.random() == r2.random()  # Same number of draws.


def test_vocab_and_example_round_trip_through_tensorflow(traced_runs):
    """The records parse with TensorFlow's own proto (independent of our decoder)."""
    tf = pytest.importorskip("tensorflow")
    path = traced_runs["run2"][0]
    ours = [parse_example(r) for r in read_tfrecord(path)]
    for raw, want in zip(tf.data.TFRecordDataset(str(path)).as_numpy_iterator(), ours):
        ex = tf.train.Example.FromString(raw)
        for name in FEATURE_NAMES:
            feature = ex.features.feature[name]
            values = list(feature.float_list.value) if name == "masked_lm_weights" \
                else list(feature.int64_list.value)
            assert values == want[name]


def test_copy_of_fixture_is_unchanged_by_reading(original_fixtures, tmp_path):
    """read_tfrecord verifies the CRCs of the original's own file."""
    src = original_fixtures / "pretraining_data" / "run1.tfrecord"
    shutil.copy(src, tmp_path / "x.tfrecord")
    assert len(read_tfrecord(tmp_path / "x.tfrecord")) == 60
    data = bytearray(src.read_bytes())
    data[100] ^= 1
    (tmp_path / "bad.tfrecord").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="CRC mismatch"):
        read_tfrecord(tmp_path / "bad.tfrecord")
