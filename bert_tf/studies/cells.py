"""Cells on disk: each pretraining or fine-tuning run of a study lives in its own folder with a
done-marker written last (atomically), so a killed study resumes and never counts a half-written
cell as done.

    <output_dir>/cells/<kind>/<key>/          the run's own files (checkpoints, events, ...)
    <output_dir>/cells/<kind>/<key>/DONE.json the cell's result; written last, atomically
    <output_dir>/cells/<kind>/<key>/ATTEMPTS.json  each process that worked on it: start and
                                              last time seen alive (rewritten every 10 s)

A folder without DONE.json is an unfinished cell (killed, or failed): it is run again, and the
training loops inside resume from their own checkpoints where they have them. A finished cell's
`wall_s` is the time of every attempt (a killed one's up to its last heartbeat, so at most 10 s
short each), with `attempts` beside it when there was more than one.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Callable

from bert_tf import io_utils

DONE_FILE = "DONE.json"
ATTEMPTS_FILE = "ATTEMPTS.json"
HEARTBEAT_S = 10.0


class CellStore:
    """The cells of one output folder."""

    def __init__(self, output_dir: str):
        self.root = os.path.join(output_dir, "cells")

    def path(self, kind: str, key: str) -> str:
        return os.path.join(self.root, kind, key)

    def result(self, kind: str, key: str) -> dict | None:
        """The finished cell's result, None when it is not done (no marker, or unreadable)."""
        marker = os.path.join(self.path(kind, key), DONE_FILE)
        if not os.path.exists(marker):
            return None
        try:
            with open(marker, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def run(self, kind: str, key: str, fn: Callable[[str], dict],
            on_run: Callable[[str, str], None] | None = None) -> tuple[dict, bool]:
        """Returns (result, ran): the cached result, or `fn(cell_dir)`'s, then marks it done.

        `fn` receives the cell's folder (created; may hold an earlier unfinished run's files)
        and returns a JSON-serialisable dict; `wall_s` (the seconds of this call and of the
        earlier, killed attempts, see the module docstring) is added.
        """
        cached = self.result(kind, key)
        if cached is not None:
            return cached, False
        cell_dir = self.path(kind, key)
        os.makedirs(cell_dir, exist_ok=True)
        if on_run is not None:
            on_run(kind, key)
        with _Attempt(os.path.join(cell_dir, ATTEMPTS_FILE)) as attempt:
            result = dict(fn(cell_dir))
        if "wall_s" not in result:
            result["wall_s"] = round(attempt.total_s, 1)
            if attempt.earlier:
                result["attempts"] = attempt.earlier + 1
        io_utils.atomic_write_text(os.path.join(cell_dir, DONE_FILE),
                                   json.dumps(result, indent=1, default=_plain) + "\n")
        return result, True


class _Attempt:
    """One process's work on a cell, recorded in its ATTEMPTS.json: appended on entry, its
    `last_seen` rewritten every HEARTBEAT_S by a background thread and on exit. `total_s`
    (after exit): this attempt's seconds plus the earlier attempts' (start to last seen)."""

    def __init__(self, path: str):
        self.path = path
        self.earlier = 0
        self.total_s = 0.0
        self._records: list[dict] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def __enter__(self) -> "_Attempt":
        try:
            with open(self.path, encoding="utf-8") as f:
                records = json.load(f)
            self._records = [r for r in records if {"start", "last_seen"} <= set(r)]
        except (OSError, ValueError, TypeError):
            self._records = []  # none yet (or unreadable: the earlier time is not known)
        self.earlier = len(self._records)
        now = time.time()
        self._records.append({"pid": os.getpid(), "start": round(now, 1),
                              "last_seen": round(now, 1)})
        self._write()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._write()
        self.total_s = sum(r["last_seen"] - r["start"] for r in self._records)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self._write()

    def _write(self) -> None:
        with self._lock:
            self._records[-1]["last_seen"] = round(time.time(), 1)
            io_utils.atomic_write_text(self.path, json.dumps(self._records) + "\n")


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)
