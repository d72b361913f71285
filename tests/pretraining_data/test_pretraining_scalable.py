"""Scalable mode: same output for any number of workers, shard = faithful algorithm on the
shard's documents, resume after a hard crash, settings guard."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from bert_tf.pretraining_data import PretrainingDataError, PretrainingDataOptions, ScalableRandom, \
    create_pretraining_data, create_pretraining_data_sharded, parse_example, read_tfrecord, \
    shard_seed

OPTIONS = PretrainingDataOptions(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=2,
                                 random_seed=99)
DOCS_PER_SHARD = 25  # 120 documents -> shards of 25, 25, 25, 25, 20


def _run(corpus, out, vocab_file, **kwargs):
    kwargs.setdefault("docs_per_shard", DOCS_PER_SHARD)
    kwargs.setdefault("progress", False)
    return create_pretraining_data_sharded(corpus, str(out), vocab_file, True, OPTIONS, **kwargs)


def _shards(directory) -> dict:
    return {n: (directory / n).read_bytes() for n in sorted(os.listdir(directory))
            if n.endswith(".tfrecord")}


@pytest.fixture(scope="module")
def one_worker(synthetic_corpus, vocab_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("w1")
    summary = _run(synthetic_corpus, out / "data", vocab_file, num_workers=1)
    return out, summary


def test_shards_and_summary(one_worker):
    out, summary = one_worker
    shards = _shards(out)
    assert list(shards) == [f"data-{i:05d}.tfrecord" for i in range(5)]
    assert summary["documents"] == 120 and summary["shards_written"] == 5
    assert summary["instances"] == sum(len(read_tfrecord(out / n)) for n in shards)
    assert 0 < summary["not_next_share"] < 1
    assert summary["is_next_share"] + summary["not_next_share"] == pytest.approx(1.0)
    assert summary["single_sentence_documents"] == 8  # Every 17th document.
    assert summary["masked_positions"] > 0 and summary["truncated_instances"] > 0
    assert json.loads((out / "data.summary.json").read_text())["instances"] == \
        summary["instances"]
    assert not [n for n in os.listdir(out) if ".tmp-" in n]


@pytest.mark.long
def test_same_output_with_two_workers(one_worker, synthetic_corpus, vocab_file, tmp_path):
    out1, summary1 = one_worker
    summary2 = _run(synthetic_corpus, tmp_path / "data", vocab_file, num_workers=2)
    assert _shards(tmp_path) == _shards(out1)
    for key in ("documents", "instances", "tokens", "masked_positions", "truncated_tokens"):
        assert summary2[key] == summary1[key]


def test_a_shard_is_the_faithful_algorithm_on_its_documents(one_worker, synthetic_corpus,
                                                            tokenizer, vocab_file, tmp_path):
    """With one shard holding every document, scalable mode = faithful mode run with the
    shard's generator."""
    _run(synthetic_corpus, tmp_path / "all", vocab_file, docs_per_shard=1000)
    faithful = tmp_path / "faithful.tfrecord"
    create_pretraining_data(synthetic_corpus, str(faithful), tokenizer, OPTIONS,
                            rng=ScalableRandom(shard_seed(OPTIONS.random_seed, 0)),
                            log_examples=0)
    assert (tmp_path / "all-00000.tfrecord").read_bytes() == faithful.read_bytes()


_CRASH_SCRIPT = textwrap.dedent("""
    import sys
    from bert_tf.pretraining_data import PretrainingDataOptions, create_pretraining_data_sharded
    options = PretrainingDataOptions(max_seq_length=64, max_predictions_per_seq=10,
                                     dupe_factor=2, random_seed=99)
    create_pretraining_data_sharded(sys.argv[1], sys.argv[2], sys.argv[3], True, options,
                                    num_workers=int(sys.argv[4]), docs_per_shard=25,
                                    progress=False, _crash_in_shard=int(sys.argv[5]))
""")


@pytest.mark.long
@pytest.mark.parametrize("num_workers", [1, 2])
def test_killed_run_resumes_without_duplicates(one_worker, synthetic_corpus, vocab_file,
                                               tmp_path, num_workers):
    out1, _ = one_worker
    prefix = tmp_path / "data"
    proc = subprocess.run([sys.executable, "-c", _CRASH_SCRIPT, synthetic_corpus, str(prefix),
                           vocab_file, str(num_workers), "2"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    names = os.listdir(tmp_path)
    assert "data-00002.tfrecord" not in names  # The shard being written when it died.
    finished_before = {n for n in names if n.endswith(".tfrecord")}
    if num_workers == 1:  # Died in this very process: its half-written file is left behind.
        assert [n for n in names if n.startswith(".data-00002.tfrecord.tmp-")]
        assert finished_before == {"data-00000.tfrecord", "data-00001.tfrecord"}
    # With 2 workers, shards in flight on the other worker when the pool broke are lost too
    # (which ones depends on timing); whatever was finished must be complete and is kept.
    for name in finished_before:
        assert (tmp_path / name).read_bytes() == (out1 / name).read_bytes()

    summary = _run(synthetic_corpus, prefix, vocab_file, num_workers=num_workers)
    assert summary["shards_skipped"] == len(finished_before)
    assert summary["shards_written"] == 5 - len(finished_before)
    assert _shards(tmp_path) == _shards(out1)  # Complete, identical, nothing twice.
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]
    records = [r for n, data in _shards(tmp_path).items() for r in read_tfrecord(tmp_path / n)]
    assert len(records) == summary["instances"]


def test_rerun_with_other_settings_is_refused(one_worker, synthetic_corpus, vocab_file,
                                              tmp_path):
    _run(synthetic_corpus, tmp_path / "data", vocab_file)
    sibling = tmp_path / "data-old-00000.tfrecord"  # Another prefix's file: never touched.
    sibling.write_bytes(b"x")
    (tmp_path / ".data-old-00001.tfrecord.tmp-1").write_bytes(b"x")
    other = PretrainingDataOptions(max_seq_length=64, max_predictions_per_seq=10,
                                   dupe_factor=3, random_seed=99)
    with pytest.raises(PretrainingDataError, match="dupe_factor|options"):
        create_pretraining_data_sharded(synthetic_corpus, str(tmp_path / "data"), vocab_file,
                                        True, other, docs_per_shard=DOCS_PER_SHARD,
                                        progress=False)
    summary = create_pretraining_data_sharded(synthetic_corpus, str(tmp_path / "data"),
                                              vocab_file, True, other,
                                              docs_per_shard=DOCS_PER_SHARD, progress=False,
                                              overwrite=True)
    assert summary["shards_written"] == 5
    rerun = create_pretraining_data_sharded(synthetic_corpus, str(tmp_path / "data"),
                                            vocab_file, True, other,
                                            docs_per_shard=DOCS_PER_SHARD, progress=False)
    assert rerun["shards_skipped"] == 5 and rerun["instances"] == summary["instances"]
    assert sibling.read_bytes() == b"x" and (tmp_path / ".data-old-00001.tfrecord.tmp-1").exists()


def test_scalable_random_randint_is_random_randint():
    a, b = ScalableRandom(3), __import__("random").Random(3)
    assert [a.randint(0, n) for n in range(1, 300)] == [b.randint(0, n) for n in range(1, 300)]


def test_no_nsp_and_extra_options(synthetic_corpus, vocab_file, tmp_path):
    options = PretrainingDataOptions(max_seq_length=64, max_predictions_per_seq=10,
                                     dupe_factor=1, random_seed=5, do_whole_word_mask=True,
                                     whole_word_mask_per_word=True,
                                     random_replacement_excludes_special=True,
                                     next_sentence_prediction=False)
    create_pretraining_data_sharded(synthetic_corpus, str(tmp_path / "x"), vocab_file, True,
                                    options, docs_per_shard=1000, progress=False)
    records = [parse_example(r) for r in read_tfrecord(tmp_path / "x-00000.tfrecord")]
    assert records
    for ex in records:
        n = sum(ex["input_mask"])
        assert ex["input_ids"][0] == 101 and ex["input_ids"][n - 1] == 102
        assert ex["input_ids"][:n].count(102) == 1  # One segment.
        assert set(ex["segment_ids"]) == {0} and ex["next_sentence_labels"] == [0]
        k = int(sum(ex["masked_lm_weights"]))
        for pos in ex["masked_lm_positions"][:k]:
            token = ex["input_ids"][pos]
            assert token == 103 or token >= 999  # [MASK], or not a [...] special token.


def test_a_damaged_finished_shard_is_written_again(one_worker, synthetic_corpus, vocab_file,
                                                   tmp_path):
    """One byte flipped in a finished shard (same size): resume checks the SHA-256 recorded in
    its done-marker and rewrites it; the others are skipped."""
    out1, _ = one_worker
    _run(synthetic_corpus, tmp_path / "data", vocab_file)
    marker = json.loads((tmp_path / "data-00001.tfrecord.json").read_text())
    assert len(marker["sha256"]) == 64
    shard = tmp_path / "data-00001.tfrecord"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    summary = _run(synthetic_corpus, tmp_path / "data", vocab_file)
    assert summary["shards_written"] == 1 and summary["shards_skipped"] == 4
    assert _shards(tmp_path) == _shards(out1)


def test_output_file_that_is_a_folder(synthetic_corpus, vocab_file, tokenizer, tmp_path):
    """Faithful mode: a folder as --output_file fails before any work, leaving nothing; scalable
    mode writes its shards inside the folder."""
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(PretrainingDataError, match=r"--output_file=.*out is a folder"):
        create_pretraining_data(synthetic_corpus, str(folder), tokenizer, OPTIONS, log_examples=0)
    assert os.listdir(folder) == [] and sorted(os.listdir(tmp_path)) == ["out"]
    _run(synthetic_corpus, folder, vocab_file)
    assert "pretraining_data-00000.tfrecord" in os.listdir(folder)


def test_faithful_mode_removes_temporaries_of_killed_runs(synthetic_corpus, tokenizer, tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f".x.tfrecord.tmp-{dead}"
    stale.write_bytes(b"half a record")
    other = tmp_path / ".y.tfrecord.tmp-1"  # another output's (pid 1 runs): not ours, kept
    other.write_bytes(b"")
    create_pretraining_data(synthetic_corpus, str(tmp_path / "x.tfrecord"), tokenizer, OPTIONS,
                            log_examples=0)
    assert sorted(os.listdir(tmp_path)) == [".y.tfrecord.tmp-1", "x.tfrecord"]
