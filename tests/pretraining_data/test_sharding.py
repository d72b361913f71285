"""The sharding/worker engine (bert_tf.pretraining_data.sharding) on its own, with a toy worker:
shard cutting, the refusal rules, finished-shard detection, the shard writer's marker, the pool
(same files and the same accounting with 1 and 2 workers) and the progress line. BERT's and
GPT-1's tools on the engine are tested in test_pretraining_scalable.py and
tests/gpt/test_lm_data.py."""
from __future__ import annotations

import functools
import json
import os
import time

import pytest

from bert_tf.pretraining_data import PretrainingDataError
from bert_tf.pretraining_data.sharding import Shard, ShardProgress, atomic_write_json, \
    check_num_workers, finished_shard, iter_shards, output_prefix, prepare_output, run_shards, \
    sha256_file, shard_path, write_shard
from bert_tf.pretraining_data.text_reader import LineSource, ReadStats
from bert_tf.pretraining_data.writer import read_tfrecord

FINGERPRINT = {"format_version": 1, "settings": "a"}


def _corpus(path, n_docs: int) -> str:
    path.write_text("\n\n".join(f"doc {i} line 1\ndoc {i} line 2" for i in range(n_docs)) + "\n",
                    encoding="utf-8")
    return str(path)


def _shards(corpus: str, docs_per_shard: int) -> list[Shard]:
    return list(iter_shards([LineSource(corpus)], ReadStats(), docs_per_shard, False))


class ToyWorker:
    """Writes one record per document (its first line) and a checksummed marker."""

    def __init__(self, prefix: str, fingerprint: dict):
        self.prefix, self.fingerprint = prefix, fingerprint

    def __call__(self, index, documents):
        records = [doc.lines[0].encode() for doc in documents]
        return write_shard(shard_path(self.prefix, index), records,
                           {"shard": index, "fingerprint": self.fingerprint},
                           started=time.time(), checksum=True)


def _run(corpus, prefix, num_workers, docs_per_shard=3):
    accounted = []
    run_shards(iter_shards([LineSource(corpus)], ReadStats(), docs_per_shard, False),
               lambda index: finished_shard(prefix, index, FINGERPRINT, require_checksum=True),
               lambda result, skipped, span: accounted.append((result["shard"], skipped, span)),
               functools.partial(ToyWorker, prefix, FINGERPRINT), num_workers=num_workers,
               max_pending_shards=None, prefix=prefix)
    return sorted(accounted)


def test_iter_shards_cuts_and_merges_a_small_last_shard(tmp_path):
    corpus = _corpus(tmp_path / "c.txt", 10)
    shards = _shards(corpus, 4)  # 4, 4, 2: the last (2 >= 4 // 2) stays a shard
    assert [(s.index, len(s.documents)) for s in shards] == [(0, 4), (1, 4), (2, 2)]
    assert shards[-1].input_bytes_end == os.path.getsize(corpus)
    shards = _shards(corpus, 6)  # 6, 4: 4 >= 3 stays
    assert [len(s.documents) for s in shards] == [6, 4]
    shards = _shards(corpus, 8)  # 8, 2: 2 < 4 is merged into the one before
    assert [(s.index, len(s.documents)) for s in shards] == [(0, 10)]
    assert [s.documents[0].lines[0] for s in _shards(corpus, 4)] == \
        ["doc 0 line 1", "doc 4 line 1", "doc 8 line 1"]


def test_names_hash_json_and_workers(tmp_path):
    assert output_prefix("out/x.tfrecord") == "out/x"
    assert output_prefix(str(tmp_path)) == os.path.join(str(tmp_path), "pretraining_data")
    with pytest.raises(PretrainingDataError, match="one output prefix"):
        output_prefix("a,b")
    assert shard_path("out/x", 7) == "out/x-00007.tfrecord"
    (tmp_path / "f").write_bytes(b"abc")
    assert sha256_file(str(tmp_path / "f")) == \
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    atomic_write_json(str(tmp_path / "o.json"), {"b": 1, "a": [2]})
    assert (tmp_path / "o.json").read_text() == '{\n "a": [\n  2\n ],\n "b": 1\n}'
    assert sorted(os.listdir(tmp_path)) == ["f", "o.json"]  # no temporary file left
    check_num_workers(1)
    with pytest.raises(PretrainingDataError, match=r"--num_workers=0 must be >= 1"):
        check_num_workers(0)


def test_prepare_output_refusal_rules(tmp_path):
    prefix = str(tmp_path / "data")
    (tmp_path / "data-00000.tfrecord").write_bytes(b"x")
    (tmp_path / "data-old-00000.tfrecord").write_bytes(b"not ours")
    with pytest.raises(PretrainingDataError, match=r"1 file\(s\) named data-NNNNN.tfrecord exist "
                       r"but no data.run.json; pass --overwrite"):
        prepare_output(prefix, FINGERPRINT, overwrite=False)
    (tmp_path / ".data-00001.tfrecord.tmp-123").write_bytes(b"leftover")
    prepare_output(prefix, FINGERPRINT, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["data-old-00000.tfrecord", "data.run.json"]
    assert json.loads((tmp_path / "data.run.json").read_text()) == FINGERPRINT
    prepare_output(prefix, FINGERPRINT, overwrite=False)  # the same settings: resumable
    with pytest.raises(PretrainingDataError, match=r"records a run with other settings "
                       r"\(differs in: settings\); its shards cannot be resumed"):
        prepare_output(prefix, {**FINGERPRINT, "settings": "b"}, overwrite=False)


def test_write_shard_and_finished_shard(tmp_path):
    prefix = str(tmp_path / "data")
    path = shard_path(prefix, 3)
    result = write_shard(path, [b"r1", b"r2"], {"shard": 3, "fingerprint": FINGERPRINT},
                         started=time.time(), checksum=True)
    assert read_tfrecord(path) == [b"r1", b"r2"]
    marker = json.loads(open(path + ".json").read())
    assert marker == result
    assert set(marker) == {"shard", "fingerprint", "path", "records", "bytes", "sha256",
                           "seconds"}
    assert (marker["path"], marker["records"], marker["bytes"]) == \
        ("data-00003.tfrecord", 2, os.path.getsize(path))
    assert finished_shard(prefix, 3, FINGERPRINT) == marker
    assert finished_shard(prefix, 3, {"other": 1}) is None
    assert finished_shard(prefix, 4, FINGERPRINT) is None
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 1  # same size, other bytes: the checksum finds it
    open(path, "wb").write(bytes(data))
    assert finished_shard(prefix, 3, FINGERPRINT) is None
    unchecked = write_shard(shard_path(prefix, 5), [b"r"], {"fingerprint": FINGERPRINT},
                            started=time.time())
    assert "sha256" not in unchecked
    assert finished_shard(prefix, 5, FINGERPRINT) == unchecked
    assert finished_shard(prefix, 5, FINGERPRINT, require_checksum=True) is None
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


@pytest.mark.long
def test_run_shards_same_files_whatever_the_workers_and_resumes(tmp_path):
    corpus = _corpus(tmp_path / "c.txt", 14)  # shards of 3: 3, 3, 3, 3, 2
    one = _run(corpus, str(tmp_path / "w1" / "data"), num_workers=1)
    two = _run(corpus, str(tmp_path / "w2" / "data"), num_workers=2)
    assert [(i, skipped) for i, skipped, _ in one] == [(i, False) for i in range(5)]
    assert one == two
    assert sum(span for *_, span in one) == os.path.getsize(corpus)
    for i in range(5):
        name = f"data-{i:05d}.tfrecord"
        assert (tmp_path / "w1" / name).read_bytes() == (tmp_path / "w2" / name).read_bytes()
    os.remove(tmp_path / "w2" / "data-00002.tfrecord")
    again = _run(corpus, str(tmp_path / "w2" / "data"), num_workers=2)
    assert [(i, skipped) for i, skipped, _ in again] == \
        [(0, True), (1, True), (2, False), (3, True), (4, True)]
    assert [span for *_, span in again] == [span for *_, span in one]


def _die(index, documents):
    os._exit(3)


def _dying_worker():
    return _die


def test_a_dying_worker_process_is_one_clear_error(tmp_path):
    corpus = _corpus(tmp_path / "c.txt", 4)
    with pytest.raises(PretrainingDataError, match="a worker process died while writing shards "
                       "of out; finished shards are kept"):
        run_shards(iter_shards([LineSource(corpus)], ReadStats(), 2, False), lambda index: None,
                   lambda *a: None, _dying_worker, num_workers=2,
                   max_pending_shards=None, prefix="out")


def test_progress_line(caplog):
    # The lines go through absl's logger, whose own level an earlier test in the same worker may
    # have set to WARNING (absl's default verbosity once flags are parsed): set it, not the root's.
    caplog.set_level("INFO", logger="absl")
    progress = ShardProgress("tool", 200, interval=3600, enabled=True,
                             describe=lambda elapsed: "7 things")
    progress.update(100, skipped=True)  # the first line is logged at once
    progress.update(50, skipped=False)  # within the interval: no line
    progress.log(force=True)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[tool]")]
    assert len(lines) == 2
    assert lines[0].startswith("[tool] 1 shards | 7 things | input 50.0% | elapsed ")
    assert lines[0].endswith("| ETA ?")  # only skipped shards so far: no rate yet
    assert lines[1].startswith("[tool] 2 shards | 7 things | input 75.0% |")
    assert "ETA ?" not in lines[1]
    caplog.clear()
    ShardProgress("tool", 1, 0, enabled=False, describe=str).log(force=True)
    assert not caplog.records
