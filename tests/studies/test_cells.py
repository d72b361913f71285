"""CellStore: a finished cell's wall time counts every process that worked on it (a killed
attempt up to its last heartbeat), and a finished cell is reused untouched."""
from __future__ import annotations

import json
import os
import time
import types

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
