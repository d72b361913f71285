"""Drill: kill -9 real tools mid-write, run them again, and find no temporary file left and the
same output as an uninterrupted run: data generation (scalable mode, 2 workers: 3 kills) and
export (2 kills, and an --overwrite that never lets `<export_dir>/1/` go missing). Pretraining's
5 kills are in test_kill_resume.py (which also checks for temporaries)."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import threading

import pytest

from drill_tools import KilledRun, run_tool, temporaries

pytestmark = pytest.mark.drills


@pytest.fixture(scope="module")
def corpus(original_fixtures, tmp_path_factory):
    """~240 documents of 1-6 sentences of sample_text.txt (fixed seed)."""
    sentences = [s.strip() for s in (original_fixtures / "sample_text.txt").read_text(
        encoding="utf-8").splitlines() if s.strip()]
    rng = random.Random(5)
    docs = ["\n".join(rng.choice(sentences) for _ in range(rng.randint(1, 6)))
            for _ in range(240)]
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def _data_flags(corpus, vocab, prefix):
    return [f"--input_file={corpus}", f"--output_file={prefix}", f"--vocab_file={vocab}",
            "--mode=scalable", "--num_workers=2", "--docs_per_shard=8", "--dupe_factor=3",
            "--max_seq_length=64", "--max_predictions_per_seq=10", "--random_seed=3"]


def _shards(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.tfrecord"))}


def test_data_generation_killed_three_times(corpus, original_fixtures, tmp_path):
    vocab = original_fixtures / "vocab_uncased.txt"
    full, drill = tmp_path / "full", tmp_path / "drill"
    done = run_tool("create_pretraining_data", *_data_flags(corpus, vocab, full / "data"))
    assert done.returncode == 0, done.stderr[-3000:]
    expected = _shards(full)
    assert len(expected) == 30
    drill.mkdir()
    kills = 0
    for i, at_least in enumerate((2, 10, 20)):
        run = KilledRun("create_pretraining_data", *_data_flags(corpus, vocab, drill / "data"),
                        log_path=tmp_path / f"data{i}.log")
        if run.kill_when(lambda: len(list(drill.glob("data-*.tfrecord"))) >= at_least,
                         poll=0.005):
            kills += 1
        for name, data in _shards(drill).items():  # whatever is under a final name is whole
            assert data == expected[name], name
    assert kills >= 2, "the generation finished before it could be killed"
    again = run_tool("create_pretraining_data", *_data_flags(corpus, vocab, drill / "data"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert _shards(drill) == expected
    assert temporaries(drill) == []


def _export_flags(original_fixtures, export_dir, *extra):
    checkpoint = original_fixtures / "checkpoint"
    return ["--model_type=encoder", f"--bert_config_file={checkpoint / 'bert_config.json'}",
            f"--init_checkpoint={checkpoint / 'bert_model.ckpt'}", f"--export_dir={export_dir}",
            "--version=1", *extra]


def test_export_killed_and_overwritten_without_a_gap(original_fixtures, tmp_path):
    export_dir = tmp_path / "models" / "encoder"
    version = export_dir / "1"

    def writing():
        return export_dir.exists() and any(".tmp-" in n for n in os.listdir(export_dir))

    # 1. killed while writing the first version: nothing under the final name.
    run = KilledRun("export_savedmodel", *_export_flags(original_fixtures, export_dir),
                    log_path=tmp_path / "export0.log")
    assert run.kill_when(writing, poll=0.005), run.log()[-3000:]
    assert not version.exists()
    # 2. the same command again: the version, and the killed run's temporary folder is gone.
    first = run_tool("export_savedmodel", *_export_flags(original_fixtures, export_dir))
    assert first.returncode == 0, first.stderr[-3000:]
    assert (version / "saved_model.pb").exists() and temporaries(export_dir) == []
    stamp = (version / "saved_model.pb").stat().st_mtime_ns

    # 3. an --overwrite killed mid-write leaves the old version whole.
    run = KilledRun("export_savedmodel", *_export_flags(original_fixtures, export_dir,
                                                        "--overwrite"),
                    log_path=tmp_path / "export1.log")
    assert run.kill_when(writing, poll=0.005), run.log()[-3000:]
    assert (version / "saved_model.pb").stat().st_mtime_ns == stamp

    # 4. an --overwrite that completes: `1/saved_model.pb` exists at every moment of it.
    missing = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            if not (version / "saved_model.pb").exists():
                missing.append(1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        again = run_tool("export_savedmodel", *_export_flags(original_fixtures, export_dir,
                                                             "--overwrite"))
    finally:
        stop.set()
        watcher.join()
    assert again.returncode == 0, again.stderr[-3000:]
    assert not missing, f"{version} was missing {len(missing)} times during the swap"
    assert (version / "saved_model.pb").stat().st_mtime_ns != stamp
    assert temporaries(export_dir) == [] and sorted(os.listdir(export_dir)) == ["1"]


def test_export_killed_between_the_two_renames_is_repaired(tmp_path, monkeypatch):
    """Where no atomic exchange exists, an --overwrite moves the old version aside and the new
    one in; a process killed between the two renames leaves `.1.old-<pid>-*` and no `1/`: the
    next export to that folder puts the old version back before anything else."""
    from bert_tf.export.savedmodel_io import recover_and_clean, write_atomically

    export_dir = tmp_path / "m"
    (export_dir / "1").mkdir(parents=True)
    (export_dir / "1" / "saved_model.pb").write_text("old")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    os.replace(export_dir / "1", export_dir / f".1.old-{dead}-abc")   # the state after a kill
    (export_dir / f".1.tmp-{dead}-def").mkdir()                        # the new, half written
    recover_and_clean(export_dir / "1")
    assert sorted(os.listdir(export_dir)) == ["1"]
    assert (export_dir / "1" / "saved_model.pb").read_text() == "old"
    monkeypatch.setenv("BERT_TF_NO_RENAME_EXCHANGE", "1")  # the two-rename path completes too
    write_atomically(export_dir / "1", lambda d: open(os.path.join(d, "saved_model.pb"), "w")
                     .write("new"), overwrite=True)
    assert (export_dir / "1" / "saved_model.pb").read_text() == "new"
    assert sorted(os.listdir(export_dir)) == ["1"]
