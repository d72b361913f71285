"""CellStore: a finished cell's wall time counts every process that worked on it (a killed
attempt up to its last heartbeat), and a finished cell is reused untouched."""
from __future__ import annotations

import json
import os
import time
import types

import pytest

from bert_tf.studies import cells
from bert_tf.studies.cells import ATTEMPTS_FILE, DONE_FILE, CellStore


def test_wall_time_counts_the_killed_attempts(tmp_path, monkeypatch):
    # The cells' clock is a fake one that only the work below moves: the recorded times do not
    # depend on how loaded the host is (with the real clock, a 0.3 s sleep had to fit bounds of
    # 120.2-121.5 s). The heartbeat thread still runs on real time, every 0.05 s.
    clock = [5000.0]
    monkeypatch.setattr(cells, "time", types.SimpleNamespace(time=lambda: clock[0]))
    monkeypatch.setattr(cells, "HEARTBEAT_S", 0.05)
    store = CellStore(str(tmp_path))
    cell_dir = store.path("pretraining", "budget/bert")
    os.makedirs(cell_dir)
    # What a process killed after 120 s of work (and one whose record is cut short) left behind.
    killed = [{"pid": 1, "start": 1000.0, "last_seen": 1120.0}, {"pid": 2}]
    with open(os.path.join(cell_dir, ATTEMPTS_FILE), "w", encoding="utf-8") as f:
        json.dump(killed, f)
    seen_mid_run = []

    def work(d):
        clock[0] += 0.3  # the work takes 0.3 s
        deadline = time.monotonic() + 60
        while True:  # until the heartbeat has written the new time (or a minute has passed)
            with open(os.path.join(d, ATTEMPTS_FILE), encoding="utf-8") as f:
                record = json.load(f)[-1]
            if record["last_seen"] == 5000.3 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        seen_mid_run.append(record)
        return {"value": 1}

    result, ran = store.run("pretraining", "budget/bert", work)
    assert ran and result["attempts"] == 2 and result["value"] == 1
    assert result["wall_s"] == 120.3, result
    mid = seen_mid_run[0]  # the heartbeat moved last_seen while the work ran
    assert mid["pid"] == os.getpid() and (mid["start"], mid["last_seen"]) == (5000.0, 5000.3)
    with open(os.path.join(cell_dir, ATTEMPTS_FILE), encoding="utf-8") as f:
        records = json.load(f)
    assert len(records) == 2 and records[0] == killed[0]
    assert os.path.exists(os.path.join(cell_dir, DONE_FILE))
    # Finished: reused as written, nothing runs.
    again, ran = store.run("pretraining", "budget/bert", lambda d: 1 / 0)
    assert not ran and again == result


def test_a_first_attempt_reports_its_own_time(tmp_path):
    result, ran = CellStore(str(tmp_path)).run("finetuning", "k", lambda d: {"value": 2})
    assert ran and "attempts" not in result and 0 <= result["wall_s"] < 5


def _data_cell(d, text="corpus line\n"):
    with open(os.path.join(d, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(d, "corpus.txt.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"seconds": time.time()}))  # side file: timings, not digested
    return {"corpus": os.path.join(d, "corpus.txt"), "data_dir": d}


def _pretraining_cell(d):
    for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001",
                 "model.ckpt-40.index"):
        with open(os.path.join(d, name), "wb") as f:
            f.write(b"weights")
    return {"checkpoint": os.path.join(d, "bert_model.ckpt"), "steps": 40,
            "curve": [[1, 2.0]], "nested": {"paths": [os.path.join(d, "x")]}}


def test_paths_are_kept_relative_and_an_export_reads_the_same_elsewhere(tmp_path):
    """DONE.json holds the cells' paths relative to the cells folder: an exported copy in
    another folder reads as the original, with its own paths; only the kept files go."""
    src = CellStore(str(tmp_path / "run"))
    data, _ = src.run("data", "b/corpus", _data_cell)
    pre, _ = src.run("pretraining", "b/bert", _pretraining_cell)
    done, _ = src.run("pretraining", "b/old", _pretraining_cell)
    src.run("finetuning", "b/bert/SST-2/seed1", lambda d: {"value": 80.0, "per_example": [1]})
    with open(os.path.join(src.path("pretraining", "b/bert"), DONE_FILE), encoding="utf-8") as f:
        written = f.read()
    assert str(tmp_path) not in written and '"<cells>/pretraining/b/bert/bert_model.ckpt"' \
        in written
    assert src.result("pretraining", "b/bert") == {**pre, "wall_s": pre["wall_s"]}
    assert src.finished() == [("data", "b/corpus"), ("finetuning", "b/bert/SST-2/seed1"),
                              ("pretraining", "b/bert"), ("pretraining", "b/old")]

    def keep(kind, key, result):  # b/bert still has readers, b/old has none
        if key == "b/bert":
            return ["bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001"]
        return []

    counts = src.export_finished(str(tmp_path / "export"), keep)
    assert counts == {"cells": 4, "files": 2, "bytes": 14}
    out = CellStore(str(tmp_path / "export"))
    moved = out.result("pretraining", "b/bert")
    assert moved["checkpoint"] == os.path.join(out.root, "pretraining", "b", "bert",
                                               "bert_model.ckpt")
    assert moved["nested"]["paths"] == [os.path.join(out.path("pretraining", "b/bert"), "x")]
    assert os.path.exists(moved["checkpoint"] + ".index")
    assert not os.path.exists(os.path.join(out.path("pretraining", "b/bert"),
                                           "model.ckpt-40.index"))
    assert sorted(os.listdir(out.path("pretraining", "b/old"))) == [DONE_FILE]
    assert out.result("finetuning", "b/bert/SST-2/seed1")["value"] == 80.0
    # The data cell is exported to be made again: no DONE.json, its files' digest instead.
    assert out.result("data", "b/corpus") is None
    assert sorted(os.listdir(out.path("data", "b/corpus"))) == [cells.EXPECTED_FILE]
    # Made again with the same files: accepted (its side file's new timing does not count).
    again, ran = out.run("data", "b/corpus", _data_cell)
    assert ran and again["corpus"] == os.path.join(out.path("data", "b/corpus"), "corpus.txt")
    assert data["corpus"] != again["corpus"]
    # Exporting into the cells' own folder is refused.
    with pytest.raises(ValueError, match="own folder"):
        src.export_finished(str(tmp_path / "run"), keep)


def test_a_re_made_cell_with_other_files_stops_the_run(tmp_path):
    """A data cell made again from other data (its files differ from the exported digest)
    is not marked done: the run stops with one line naming the file."""
    src = CellStore(str(tmp_path / "run"))
    src.run("data", "b/corpus", _data_cell)
    src.export_finished(str(tmp_path / "export"), lambda *a: [])
    out = CellStore(str(tmp_path / "export"))
    with pytest.raises(cells.CellMismatch, match=r"data/b/corpus: .*first corpus\.txt"):
        out.run("data", "b/corpus", lambda d: _data_cell(d, "other text\n"))
    assert out.result("data", "b/corpus") is None


_PAUSED_CELL = """
import sys, time
from bert_tf.studies import cells
cells.HEARTBEAT_S, cells.PAUSE_MIN_S = 0.2, 2.5

def work(d):
    open(d + "/started", "w").close()
    end = time.monotonic() + 7.0
    while time.monotonic() < end:  # 7 s of wall time, sleeping (little CPU)
        time.sleep(0.05)
    return {"value": 3}

cells.CellStore(sys.argv[1]).run("finetuning", "paused", work)
"""


def test_time_a_process_spent_stopped_is_left_out_of_wall_time(tmp_path):
    """A real process stopped (SIGSTOP) for 5 s in the middle of its cell: the cell's wall_s
    leaves those seconds out, paused_s gives them, cpu_s is the process's CPU time. A beat
    counts as a stop only when 2.5 s late (the grid's threshold is 30 s), so that a loaded test
    machine's late beats (the work still runs ~2 s around the stop) do not pass for one."""
    import signal
    import subprocess
    import sys

    root = tmp_path / "grid"
    script = tmp_path / "cell.py"
    script.write_text(_PAUSED_CELL)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(script), str(root)])
    cell_dir = CellStore(str(root)).path("finetuning", "paused")
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(cell_dir, "started")):
        assert proc.poll() is None and time.monotonic() < deadline, "the cell did not start"
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGSTOP)
    time.sleep(5.0)
    proc.send_signal(signal.SIGCONT)
    assert proc.wait(timeout=120) == 0
    elapsed = time.monotonic() - started
    with open(os.path.join(cell_dir, DONE_FILE), encoding="utf-8") as f:
        done = json.load(f)
    assert done["value"] == 3
    assert 4.5 <= done["paused_s"] <= elapsed, done
    assert done["wall_s"] <= elapsed - 4.5, (done, elapsed)
    assert done["wall_s"] >= 1.0, done  # the work ran ~2 s before and after the stop
    assert 0 <= done["cpu_s"] < done["wall_s"] + done["paused_s"], done


def test_a_cell_without_a_pause_reports_none(tmp_path):
    result, _ = CellStore(str(tmp_path)).run("finetuning", "k", lambda d: {"value": 2})
    assert "paused_s" not in result and 0 <= result["cpu_s"] < 5
