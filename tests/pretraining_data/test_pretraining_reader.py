"""bert_tf.pretraining_data.tfrecord_reader: the original run_pretraining input_fn semantics over our TFRecords."""
from __future__ import annotations

import numpy as np
import pytest

from bert_tf.pretraining_data import create_pretraining_data
from conftest import FIXTURE_RUNS, read_jsonl

tf = pytest.importorskip("tensorflow")
from bert_tf.pretraining_data import tfrecord_reader as bert_data  # noqa: E402


@pytest.fixture(scope="module")
def three_files(tokenizer, sample_text, tmp_path_factory):
    """run1 (60 examples) written round-robin into 3 files of 20."""
    out = tmp_path_factory.mktemp("reader")
    paths = [str(out / f"part-{i}.tfrecord") for i in range(3)]
    create_pretraining_data(sample_text, ",".join(paths), tokenizer, FIXTURE_RUNS["run1"],
                            log_examples=0)
    return paths


def _rows(original_fixtures):
    return read_jsonl(original_fixtures / "pretraining_data" / "run1.jsonl")


def test_eval_reads_in_order_with_original_dtypes(three_files, original_fixtures):
    ds = bert_data.pretraining_dataset(three_files[0], 128, 20, batch_size=8, is_training=False,
                                       repeat=False)
    batches = list(ds.as_numpy_iterator())
    assert len(batches) == 2  # 20 records, drop_remainder=True
    rows = _rows(original_fixtures)[0::3]
    b = batches[0]
    assert set(b) == {"input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                      "masked_lm_ids", "masked_lm_weights", "next_sentence_labels"}
    assert b["input_ids"].dtype == np.int32 and b["input_ids"].shape == (8, 128)
    assert b["masked_lm_weights"].dtype == np.float32 and b["masked_lm_ids"].shape == (8, 20)
    assert b["next_sentence_labels"].shape == (8, 1)
    for i in range(8):
        for name in b:
            assert np.array_equal(b[name][i], np.asarray(rows[i][name])), name


def test_eval_repeats_by_default_like_the_original(three_files):
    ds = bert_data.pretraining_dataset(three_files[:1], 128, 20, batch_size=8,
                                       is_training=False)
    assert len(list(ds.take(6).as_numpy_iterator())) == 6  # More than one pass.


def test_training_is_shuffled_repeated_and_seeded(three_files, original_fixtures):
    def first(seed, n=12):
        ds = bert_data.pretraining_dataset(",".join(three_files), 128, 20, batch_size=10,
                                           is_training=True, seed=seed)
        return [b["input_ids"] for b in ds.take(n).as_numpy_iterator()]

    a, b, c = first(1), first(1), first(2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    known = {tuple(r["input_ids"]) for r in _rows(original_fixtures)}
    seen = {tuple(row) for batch in a for row in batch}
    # Files are shuffled after repeat (as the original), so epochs blur: 120 draws cover more
    # than one file's 20 examples, all from the data.
    assert seen <= known and len(seen) > 20


def test_input_context_shards_files_per_pipeline(three_files, original_fixtures):
    seen = []
    for pipeline in range(2):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline,
                                         num_replicas_in_sync=2)
        ds = bert_data.pretraining_dataset(three_files, 128, 20, batch_size=4,
                                           is_training=False, repeat=False, input_context=ctx)
        seen.append({tuple(r) for b in ds.as_numpy_iterator() for r in b["input_ids"]})
    assert not seen[0] & seen[1]
    assert len(seen[0]) == 40 and len(seen[1]) == 20  # Files 0, 2 and file 1.


def test_input_fn_builder(three_files):
    input_fn = bert_data.input_fn_builder(three_files, 128, 20, is_training=True)
    batch = next(iter(input_fn({"batch_size": 4})))
    assert batch["input_ids"].shape == (4, 128)


@pytest.mark.parametrize("case,flags,fragments", [
    ("run2", (128, 20), ["run2.tfrecord: record 0: feature 'input_ids' has 64 values; "
                         "expected 128 (--max_seq_length=128"]),
    ("run1", (128, 10), ["run1.tfrecord: record 0: feature 'masked_lm_positions' has 20 "
                         "values; expected 10 (--max_predictions_per_seq=10"]),
    ("truncated", (128, 20), ["truncated.tfrecord: record 6: truncated"]),
    ("empty", (128, 20), ["empty.tfrecord: contains no records"]),
    ("text", (128, 20), ["text.tfrecord: record 0: bad header checksum"]),
])
def test_files_that_do_not_fit_the_flags_are_named_before_training(
        original_fixtures, tmp_path, case, flags, fragments):
    """A TFRecord of another max_seq_length, --max_predictions_per_seq=10 on records written
    with 20, a truncated file, an empty file, a text file: one UserInputError line naming file,
    record and flag, raised when the dataset is built (before any step)."""
    from bert_tf.errors import UserInputError

    data = original_fixtures / "pretraining_data"
    paths = {"run1": data / "run1.tfrecord", "run2": data / "run2.tfrecord"}
    paths["truncated"] = tmp_path / "truncated.tfrecord"
    paths["truncated"].write_bytes((data / "run1.tfrecord").read_bytes()[:5000])
    paths["empty"] = tmp_path / "empty.tfrecord"
    paths["empty"].write_bytes(b"")
    paths["text"] = tmp_path / "text.tfrecord"
    paths["text"].write_text("hello\n" * 10)
    with pytest.raises(UserInputError) as info:
        bert_data.pretraining_dataset(str(paths[case]), *flags, batch_size=2, is_training=True)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message
    bert_data.check_pretraining_files([str(data / "run2.tfrecord")], 64, 10)  # fits: no error
