"""Drill: kill -9 real tools 10 times each at varied points (during start-up, mid-work,
mid-write of an output, just after a checkpoint), run them once more, and find no temporary
file left and exactly the output of an uninterrupted run: data generation in faithful and in
scalable mode (2 workers), pretraining (dropout 0.1; the output compared variable by variable and
file by file with an uninterrupted run's) and export (5 kills of a first export, 5 of an
--overwrite, then an --overwrite that never lets `<export_dir>/1/` go missing). For data
generation and export, whatever is under a final name is checked whole after every kill (an
export killed after its rename, while the process exits, leaves the new version, whole).
Fine-tuning's 10 kills are in
tests/training/test_finetuning_drills.py. The random delays come from `BERT_TF_DRILL_SEED`
(default: a fresh seed, named in failure messages)."""
from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from drill_tools import (PRETRAINING_STEPS, KilledRun, assert_identical, checkpoint_variables,
                         extra_files, logged_losses, pretraining_flags, run_tool, temporaries)

pytestmark = pytest.mark.drills

SEED = int(os.environ.get("BERT_TF_DRILL_SEED") or random.SystemRandom().randrange(2**31))
KILLS = 10


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


def _data_flags(corpus, vocab, output, mode):
    # Faithful mode writes its whole output at the end: 30 duplications (~17,000 instances)
    # keep that write ~0.3 s long on a quiet machine, so the mid-write kills can land in it.
    dupe_factor = 30 if mode == "faithful" else 3
    flags = [f"--input_file={corpus}", f"--output_file={output}", f"--vocab_file={vocab}",
             f"--dupe_factor={dupe_factor}", "--max_seq_length=64", "--max_predictions_per_seq=10",
             "--random_seed=3", f"--mode={mode}"]
    if mode == "scalable":
        flags += ["--num_workers=2", "--docs_per_shard=8"]
    return flags


def _records(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.tfrecord"))}


def _after(seconds):
    """A kill trigger: `seconds` after the run starts (during start-up for a few seconds)."""
    start = time.time()
    return lambda log: time.time() - start >= seconds


def _when(condition, delay=0.0):
    """A kill trigger: `delay` s after `condition(log)` first holds."""
    state = {}

    def ready(log):
        if "at" not in state and condition(log):
            state["at"] = time.time()
        return "at" in state and time.time() - state["at"] >= delay
    return ready


def _log_says(pattern, delay=0.0):
    """A kill trigger: `delay` s after `pattern` first appears in the current process's log."""
    return _when(lambda log: re.search(pattern, log) is not None, delay)


def _empty(folder) -> None:
    """Removes everything in `folder` (a drill run that finished: the next one starts over)."""
    for entry in folder.iterdir():
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def _names(folder) -> set[str]:
    return set(os.listdir(folder)) if folder.is_dir() else set()


def _exists(folder, pattern, delay=0.0):
    """A kill trigger: `delay` s after a new file (not there when the run started: a killed
    run's leftover does not count) whose name matches `pattern` is in `folder`."""
    old = _names(folder)
    return _when(lambda _: any(re.fullmatch(pattern, n) for n in _names(folder) - old), delay)


def _grown(folder, pattern, size):
    """A kill trigger: once a new file matching `pattern` in `folder` has `size` bytes."""
    old = _names(folder)

    def big_enough(_):
        for name in _names(folder) - old:
            if re.fullmatch(pattern, name):
                with contextlib.suppress(OSError):
                    if (folder / name).stat().st_size >= size:
                        return True
        return False
    return _when(big_enough)


def _kill_repeatedly(tool, flags, triggers, tmp_path, name, check_after_kill,
                     start_over=None, attempts: int = 3) -> int:
    """Runs `tool flags` once per trigger maker (() -> ready(log), made when its run starts)
    and SIGKILLs it when `ready` says so; `check_after_kill()` after each. Returns the kills.

    A run can end before its trigger fires (a fast machine writes a whole file between two
    polls). With `start_over` (which removes the finished output, so the next run has work
    again), such a trigger is tried again with a new run, up to `attempts` runs: the kill count
    stays about real kills, not about the machine's speed."""
    kills = 0
    for i, make_trigger in enumerate(triggers):
        for attempt in range(attempts if start_over else 1):
            run = KilledRun(tool, *flags, log_path=tmp_path / f"{name}{i}-{attempt}.log")
            ready = make_trigger()
            killed = run.kill_when(lambda: ready(run.log()), poll=0.003)
            check_after_kill()
            if killed:
                kills += 1
                break
            if start_over:
                start_over()
    return kills


def test_faithful_data_generation_killed_ten_times(corpus, original_fixtures, tmp_path):
    rng = random.Random(SEED)
    vocab = original_fixtures / "vocab_uncased.txt"
    full, drill = tmp_path / "full", tmp_path / "drill"
    done = run_tool("create_pretraining_data",
                    *_data_flags(corpus, vocab, full / "data.tfrecord", "faithful"))
    assert done.returncode == 0, done.stderr[-3000:]
    expected = (full / "data.tfrecord").read_bytes()
    drill.mkdir()
    output = drill / "data.tfrecord"
    temp = r"\.data\.tfrecord\.tmp-\d+"
    triggers = [
        lambda: _after(rng.uniform(0.3, 3.0)),                                   # start-up
        lambda: _log_says(r"Reading from input files", rng.uniform(0.0, 0.5)),   # reading
        lambda: _exists(drill, temp),                                           # write opens
        # mid-write: once the temporary file holds 5-50 % / 50-95 % of the output
        lambda: _grown(drill, temp, rng.uniform(0.05, 0.5) * len(expected)),
        lambda: _grown(drill, temp, rng.uniform(0.5, 0.95) * len(expected)),
    ] * 2
    what = f"faithful data generation (BERT_TF_DRILL_SEED={SEED})"

    def whole_or_absent():  # never a partial file under the final name
        assert not output.exists() or output.read_bytes() == expected, what

    kills = _kill_repeatedly("create_pretraining_data",
                             _data_flags(corpus, vocab, output, "faithful"), triggers, tmp_path,
                             "faithful", whole_or_absent, start_over=output.unlink)
    assert kills == KILLS, f"{what}: {KILLS - kills} run(s) ended before their kill"
    again = run_tool("create_pretraining_data", *_data_flags(corpus, vocab, output, "faithful"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert output.read_bytes() == expected
    assert temporaries(drill) == [] and sorted(os.listdir(drill)) == ["data.tfrecord"]


def test_scalable_data_generation_killed_ten_times(corpus, original_fixtures, tmp_path):
    rng = random.Random(SEED + 1)
    vocab = original_fixtures / "vocab_uncased.txt"
    full, drill = tmp_path / "full", tmp_path / "drill"
    done = run_tool("create_pretraining_data", *_data_flags(corpus, vocab, full / "data",
                                                            "scalable"))
    assert done.returncode == 0, done.stderr[-3000:]
    expected = _records(full)
    assert len(expected) == 30
    drill.mkdir()

    def new_shards(n, delay=0.0):
        """`delay` s after this run has finished `n` more shards (a resumed run only does the
        shards not yet done: each kill costs the drill a few of the 30)."""
        def count():
            return len(list(drill.glob("data-*.tfrecord")))
        before = count()
        return _when(lambda _: count() >= before + n, delay)

    temp_shard = r"\.data-\d{5,}\.tfrecord\.tmp-\d+"
    triggers = [
        lambda: _after(rng.uniform(0.3, 3.0)),                                   # start-up
        lambda: new_shards(1),                                                   # after a shard
        lambda: _exists(drill, temp_shard),                                      # mid-write
        lambda: new_shards(2, rng.uniform(0.0, 0.1)),
        lambda: _exists(drill, temp_shard, rng.uniform(0.0, 0.1)),               # mid-write
        lambda: _after(rng.uniform(0.3, 3.0)),                                   # start-up
        lambda: new_shards(1),
        lambda: _exists(drill, temp_shard),
        lambda: new_shards(2, rng.uniform(0.0, 0.1)),
        lambda: _exists(drill, temp_shard, rng.uniform(0.0, 0.1)),
    ]
    what = f"scalable data generation (BERT_TF_DRILL_SEED={SEED})"

    def finished_shards_whole():
        for name, data in _records(drill).items():
            assert data == expected[name], f"{what}: {name}"

    kills = _kill_repeatedly("create_pretraining_data",
                             _data_flags(corpus, vocab, drill / "data", "scalable"), triggers,
                             tmp_path, "scalable", finished_shards_whole,
                             start_over=lambda: _empty(drill))
    assert kills == KILLS, f"{what}: {KILLS - kills} run(s) ended before their kill"
    again = run_tool("create_pretraining_data", *_data_flags(corpus, vocab, drill / "data",
                                                             "scalable"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert _records(drill) == expected
    assert temporaries(drill) == []
    assert extra_files(drill, full) == ([], [])  # (left over, missing): shards, markers, summary


def test_pretraining_killed_ten_times(dropout_config, pretraining_records, pretraining_reference,
                                      tmp_path):
    rng = random.Random(SEED + 2)
    drill = tmp_path / "drill"
    checkpoints = drill / "training_checkpoints"
    flags = pretraining_flags(dropout_config, pretraining_records, drill)
    saved = r"Saved checkpoint \S*training_checkpoints\S*ckpt-\d+"

    def writing(folder, temporary, done):
        """While `temporary` is in `folder` (or, if the poll missed it, just after `done`)."""
        in_folder = _exists(folder, temporary)
        return _when(lambda log: in_folder(log) or re.search(done, log) is not None)

    triggers = [
        lambda: _after(rng.uniform(0.5, 4.0)),                                   # start-up
        lambda: _log_says(r"step \d+/10 ", 0.05),                                # mid-step
        lambda: writing(checkpoints, r"ckpt-\d+_temp.*", saved),                 # mid-write
        lambda: _log_says(saved),                                                # just after
        lambda: writing(checkpoints, r"ckpt-\d+_temp.*", saved),
        lambda: _after(rng.uniform(0.5, 4.0)),
        lambda: _log_says(saved),
        lambda: _log_says(r"step \d+/10 ", 0.05),
        lambda: writing(drill, r"\.ckpt_tmp_.*", r"Saved checkpoint \S*model\.ckpt-10"),
        lambda: _log_says(r"Wrote the original-format checkpoint"),  # before the curves
    ]
    what = f"pretraining (BERT_TF_DRILL_SEED={SEED})"
    kills = _kill_repeatedly("run_pretraining", flags, triggers, tmp_path, "pretraining",
                             lambda: None)
    assert kills == KILLS, f"{what}: {KILLS - kills} run(s) ended before their kill"
    again = run_tool("run_pretraining", *flags)
    assert again.returncode == 0, again.stderr[-3000:]
    assert temporaries(drill) == []
    assert extra_files(drill, pretraining_reference) == ([], [])  # (left over, missing)
    step = PRETRAINING_STEPS
    assert_identical(
        checkpoint_variables(pretraining_reference / "training_checkpoints" / f"ckpt-{step}"),
        checkpoint_variables(checkpoints / f"ckpt-{step}"), f"{what}: training checkpoint")
    assert_identical(checkpoint_variables(pretraining_reference / f"model.ckpt-{step}"),
                     checkpoint_variables(drill / f"model.ckpt-{step}"), f"{what}: model.ckpt")
    (reference,) = logged_losses(pretraining_reference / "train")
    for losses in logged_losses(drill / "train"):
        for s, loss in losses.items():
            assert loss == reference[s], f"{what}: loss of step {s}"


def _export_flags(original_fixtures, export_dir, *extra):
    checkpoint = original_fixtures / "checkpoint"
    return ["--model_type=encoder", f"--bert_config_file={checkpoint / 'bert_config.json'}",
            f"--init_checkpoint={checkpoint / 'bert_model.ckpt'}", f"--export_dir={export_dir}",
            "--version=1", *extra]


def _assert_whole_savedmodel(folder, what: str) -> None:
    """`folder` is a complete SavedModel: its graph parses and its variables all read."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((folder / "saved_model.pb").read_bytes())
    assert proto.meta_graphs and proto.meta_graphs[0].signature_def, what
    variables = checkpoint_variables(folder / "variables" / "variables")
    assert len(variables) > 39, (what, len(variables))


def test_export_killed_ten_times_and_overwritten_without_a_gap(original_fixtures, tmp_path):
    rng = random.Random(SEED + 3)
    export_dir = tmp_path / "models" / "encoder"
    version = export_dir / "1"
    writing = r"\.1\.tmp-.*"
    triggers = [
        lambda: _after(rng.uniform(0.5, 4.0)),                                   # start-up
        lambda: _exists(export_dir, writing),                                    # mid-write
        lambda: _exists(export_dir, writing, rng.uniform(0.0, 0.5)),             # mid-write
        lambda: _after(rng.uniform(0.5, 4.0)),
        lambda: _exists(export_dir, writing, rng.uniform(0.0, 0.5)),
    ]
    what = f"export (BERT_TF_DRILL_SEED={SEED})"
    late = []  # runs past the rename into place: killed while exiting, or ended first
    # A run that ends before its trigger (a fast machine exports in less than the 4 s an
    # `_after` trigger may wait) is tried again, up to 3 runs, so the kill count stays 10.
    retry = lambda: None  # noqa: E731 (the checks below already removed / re-stamped)

    # 1. 5 kills of the first export: nothing under the final name after any of them, unless
    # the kill came after the rename: then the version is whole (and is removed for the next).
    def no_version():
        if version.exists():
            _assert_whole_savedmodel(version, f"{what}: a version after a kill")
            late.append("export")
            shutil.rmtree(version)

    kills = _kill_repeatedly("export_savedmodel", _export_flags(original_fixtures, export_dir),
                             triggers, tmp_path, "export", no_version, start_over=retry)
    # 2. the same command again: the version, and the killed runs' temporary folders are gone.
    first = run_tool("export_savedmodel", *_export_flags(original_fixtures, export_dir))
    assert first.returncode == 0, first.stderr[-3000:]
    assert (version / "saved_model.pb").exists() and temporaries(export_dir) == []
    stamp = (version / "saved_model.pb").stat().st_mtime_ns
    first_stamp = stamp

    # 3. 5 kills of an --overwrite: the old version stays whole and untouched -- or, for a kill
    # that came after the exchange, the new version is whole (and is the old one from then on).
    def old_version_whole():
        nonlocal stamp
        assert (version / "variables" / "variables.index").exists(), what
        now = (version / "saved_model.pb").stat().st_mtime_ns
        if now != stamp:
            _assert_whole_savedmodel(version, f"{what}: a replaced version after a kill")
            late.append("overwrite")
            stamp = now

    kills += _kill_repeatedly("export_savedmodel",
                              _export_flags(original_fixtures, export_dir, "--overwrite"),
                              triggers, tmp_path, "overwrite", old_version_whole,
                              start_over=retry)
    assert kills == KILLS, f"{what}: {KILLS - kills} run(s) ended before their kill"
    assert len(late) < KILLS, f"{what}: every kill came after the rename ({late})"

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
    assert (version / "saved_model.pb").stat().st_mtime_ns not in (stamp, first_stamp)
    assert temporaries(export_dir) == [] and sorted(os.listdir(export_dir)) == ["1"]
    # The final version holds the checkpoint's weights: every float variable of the export is
    # one of bert_model.ckpt's tensors, and every encoder weight of the checkpoint is there.
    exported = checkpoint_variables(version / "variables" / "variables")
    original = checkpoint_variables(original_fixtures / "checkpoint" / "bert_model.ckpt")
    def float_arrays(variables):  # (the export also holds its config string, seeds: int64)
        arrays = (np.asarray(v) for v in variables)
        return {(a.shape, a.tobytes()) for a in arrays if a.dtype.kind == "f"}

    wanted = float_arrays(v for n, v in original.items() if n.startswith("bert/"))
    got = float_arrays(exported.values())
    assert len(wanted) == 39 and got == wanted, (len(got), len(wanted), len(got & wanted))


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
