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
short each), with `attempts` beside it when there was more than one. Time a process spent
stopped (SIGSTOP, a suspended job: seen as a heartbeat more than PAUSE_MIN_S late) is left out
of `wall_s` and reported as `paused_s`; `cpu_s` is the CPU time the processes spent on the cell
(every thread; given when each attempt recorded it).

Paths inside the cells folder are kept in DONE.json relative to it ("<cells>/kind/key/file"),
so a copy of the folder elsewhere (another machine, a later session) reads as the original.
`export_finished` copies the finished cells with only the files their unfinished readers need:
a grid that spans sessions whose machines keep nothing but the project's commits continues
from such a copy (docs/studies.md). A cell of a kind exported as "re-made" (the data cell: its
files are large and made again in minutes) is copied without its DONE.json and with the
digest of its files (EXPECTED.json): run again in the copy, it must give the same files, or
the run stops (`CellMismatch`) instead of mixing cells made from different data.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
# The real clocks, bound here (tests replace `time` with a fake wall clock): the process's CPU
# seconds (every thread; they stop while the process is stopped), and a clock that runs while it
# is stopped (the heartbeat's lateness).
from time import monotonic as _pause_clock, process_time as _cpu_clock
from typing import Any, Callable

from bert_tf import io_utils
from bert_tf.errors import UserInputError

DONE_FILE = "DONE.json"
ATTEMPTS_FILE = "ATTEMPTS.json"
EXPECTED_FILE = "EXPECTED.json"
LOCK_FILE = "RUNNING.lock"
HEARTBEAT_S = 10.0
PAUSE_MIN_S = 30.0  # a heartbeat this much later than due: the process was stopped meanwhile
CELLS_MARK = "<cells>"


class CellMismatch(UserInputError):
    """A re-made cell's files differ from the ones its exported copy was made from."""


class CellBusy(RuntimeError):
    """Another live process is running the cell (it holds the cell's lock)."""


class CellStore:
    """The cells of one output folder."""

    def __init__(self, output_dir: str):
        self.root = os.path.abspath(os.path.join(output_dir, "cells"))

    def path(self, kind: str, key: str) -> str:
        return os.path.join(self.root, kind, key)

    def result(self, kind: str, key: str) -> dict | None:
        """The finished cell's result, None when it is not done (no marker, or unreadable)."""
        marker = os.path.join(self.path(kind, key), DONE_FILE)
        if not os.path.exists(marker):
            return None
        try:
            with open(marker, encoding="utf-8") as f:
                return _absolute(json.load(f), self.root)
        except (OSError, ValueError):
            return None

    def finished(self) -> list[tuple[str, str]]:
        """(kind, key) of every finished cell under the folder, sorted."""
        found = []
        for folder, _, files in os.walk(self.root):
            if DONE_FILE in files:
                kind, _, key = os.path.relpath(folder, self.root).replace(os.sep, "/") \
                    .partition("/")
                found.append((kind, key))
        return sorted(found)

    def run(self, kind: str, key: str, fn: Callable[[str], dict],
            on_run: Callable[[str, str], None] | None = None,
            wait: bool = True) -> tuple[dict, bool]:
        """Returns (result, ran): the cached result, or `fn(cell_dir)`'s, then marks it done.

        `fn` receives the cell's folder (created; may hold an earlier unfinished run's files)
        and returns a JSON-serialisable dict; `wall_s` (the seconds of this call and of the
        earlier, killed attempts, see the module docstring) is added.

        The cell is run under its lock (an flock on RUNNING.lock in its folder, released by
        the kernel when the process ends, so a killed process never leaves it held): when
        another process holds it, `wait` waits for that process and returns its result (or
        runs the cell if it stopped unfinished); `wait=False` raises `CellBusy` at once.
        """
        cached = self.result(kind, key)
        if cached is not None:
            return cached, False
        cell_dir = self.path(kind, key)
        os.makedirs(cell_dir, exist_ok=True)
        with _CellLock(os.path.join(cell_dir, LOCK_FILE), wait, f"{kind}/{key}"):
            cached = self.result(kind, key)  # finished by the process that held the lock
            if cached is not None:
                return cached, False
            if on_run is not None:
                on_run(kind, key)
            with _Attempt(os.path.join(cell_dir, ATTEMPTS_FILE)) as attempt:
                result = dict(fn(cell_dir))
            if "wall_s" not in result:
                result["wall_s"] = round(attempt.total_s, 1)
                if attempt.paused_s:
                    result["paused_s"] = round(attempt.paused_s, 1)
                if attempt.cpu_s is not None:
                    result["cpu_s"] = round(attempt.cpu_s, 1)
                if attempt.earlier:
                    result["attempts"] = attempt.earlier + 1
            _check_expected(cell_dir, f"{kind}/{key}")
            self._write_done(cell_dir, result)
        return result, True

    def _write_done(self, cell_dir: str, result: dict) -> None:
        io_utils.atomic_write_text(
            os.path.join(cell_dir, DONE_FILE),
            json.dumps(_relative(result, self.root), indent=1, default=_plain) + "\n")

    def export_finished(self, dest: str, keep: Callable[[str, str, dict], list[str]],
                        remade: tuple[str, ...] = ("data",)) -> dict:
        """Copies every finished cell into `dest`/cells (the same layout): its DONE.json, and
        the files and folders `keep(kind, key, result)` names (paths relative to the cell's
        folder; e.g. the weights of a pretraining whose readers are not all finished). Cells
        of a kind in `remade` are copied as EXPECTED.json (the result and the digest of the
        cell's files, no DONE.json): the copy runs them again and checks the digest.

        Cells already in `dest` are replaced (a finished cell does not change; its kept
        files may shrink as its readers finish). Returns {"cells", "files", "bytes"}."""
        target = CellStore(dest)
        if os.path.abspath(target.root) == os.path.abspath(self.root):
            raise ValueError(f"export into the cells' own folder {self.root}")
        counts = {"cells": 0, "files": 0, "bytes": 0}
        for kind, key in self.finished():
            result = self.result(kind, key)
            if result is None:
                continue
            src, out = self.path(kind, key), target.path(kind, key)
            if os.path.isdir(out):
                shutil.rmtree(out)
            os.makedirs(out)
            counts["cells"] += 1
            if kind in remade:
                expected = {"result": _relative(result, self.root), "digest": files_digest(src)}
                io_utils.atomic_write_text(os.path.join(out, EXPECTED_FILE),
                                           json.dumps(expected, indent=1, default=_plain) + "\n")
                continue
            target._write_done(out, _absolute(_relative(result, self.root), target.root))
            for name in keep(kind, key, result):
                path = os.path.join(src, name)
                if os.path.isdir(path):
                    shutil.copytree(path, os.path.join(out, name))
                elif os.path.exists(path):
                    os.makedirs(os.path.dirname(os.path.join(out, name)), exist_ok=True)
                    shutil.copy2(path, os.path.join(out, name))
                else:
                    raise FileNotFoundError(f"{kind}/{key}: {path} is to be kept but does not "
                                            f"exist")
            for folder, _, files in os.walk(out):
                for f in files:
                    if f != DONE_FILE:
                        counts["files"] += 1
                        counts["bytes"] += os.path.getsize(os.path.join(folder, f))
        return counts


class _CellLock:
    """An exclusive flock on `path` for the duration of a `with` block."""

    def __init__(self, path: str, wait: bool, name: str):
        self.path, self.wait, self.name = path, wait, name
        self._fd: int | None = None

    def __enter__(self) -> "_CellLock":
        import fcntl

        self._fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | (0 if self.wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(self._fd)
            self._fd = None
            raise CellBusy(f"{self.name} is being run by another process") from None
        return self

    def __exit__(self, *exc) -> None:
        import fcntl

        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)


def files_digest(cell_dir: str) -> dict[str, str]:
    """sha256 of each data file under a cell's folder (relative path -> hex): every file but
    the cell's own markers, its lock and the .json side files (which hold paths and
    timings)."""
    digest = {}
    for folder, _, files in os.walk(cell_dir):
        for f in sorted(files):
            if f.endswith(".json") or f == LOCK_FILE:
                continue
            path = os.path.join(folder, f)
            h = hashlib.sha256()
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
            digest[os.path.relpath(path, cell_dir).replace(os.sep, "/")] = h.hexdigest()
    return dict(sorted(digest.items()))


def _check_expected(cell_dir: str, name: str) -> None:
    """A re-made exported cell (EXPECTED.json beside it) must give the exported files."""
    path = os.path.join(cell_dir, EXPECTED_FILE)
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        expected = json.load(f)["digest"]
    found = files_digest(cell_dir)
    differ = sorted(k for k in expected.keys() | found.keys()
                    if expected.get(k) != found.get(k))
    if differ:
        raise CellMismatch(
            f"{name}: made again here, its files differ from the exported ones ({len(differ)} "
            f"of {len(expected)}, first {differ[0]}): the cells exported with it were made "
            f"from other data; use a new --output_dir, or delete {path} to accept the new "
            f"files without the exported cells that read the old ones")


def _relative(value: Any, root: str) -> Any:
    """`value` with every string path under `root` written as "<cells>/rel/path"."""
    if isinstance(value, dict):
        return {k: _relative(v, root) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_relative(v, root) for v in value]
    if isinstance(value, str):
        base = os.path.abspath(root)
        if value == base or value.startswith(base + os.sep):
            return CELLS_MARK + value[len(base):].replace(os.sep, "/")
    return value


def _absolute(value: Any, root: str) -> Any:
    """The inverse of `_relative` for the cells folder `root`."""
    if isinstance(value, dict):
        return {k: _absolute(v, root) for k, v in value.items()}
    if isinstance(value, list):
        return [_absolute(v, root) for v in value]
    if isinstance(value, str) and (value == CELLS_MARK or value.startswith(CELLS_MARK + "/")):
        rest = value[len(CELLS_MARK) + 1:]
        return os.path.join(os.path.abspath(root), *rest.split("/")) if rest else \
            os.path.abspath(root)
    return value


class _Attempt:
    """One process's work on a cell, recorded in its ATTEMPTS.json: appended on entry, its
    `last_seen`, `cpu_s` and `paused_s` rewritten every HEARTBEAT_S by a background thread and
    on exit. After exit: `total_s`, this attempt's seconds plus the earlier attempts' (start to
    last seen, less the time stopped); `paused_s`, the time stopped; `cpu_s`, the process CPU
    seconds of all of them (None when an earlier attempt did not record it)."""

    def __init__(self, path: str):
        self.path = path
        self.earlier = 0
        self.total_s = 0.0
        self.paused_s = 0.0
        self.cpu_s: float | None = None
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
        self._cpu0, self._beat_at = _cpu_clock(), _pause_clock()
        self._records.append({"pid": os.getpid(), "start": round(now, 1),
                              "last_seen": round(now, 1), "cpu_s": 0.0, "paused_s": 0.0})
        self._write()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._write()
        self.total_s = sum(r["last_seen"] - r["start"] - r.get("paused_s", 0.0)
                           for r in self._records)
        self.paused_s = sum(r.get("paused_s", 0.0) for r in self._records)
        if all("cpu_s" in r for r in self._records):
            self.cpu_s = sum(r["cpu_s"] for r in self._records)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self._write()

    def _write(self) -> None:
        with self._lock:
            record = self._records[-1]
            now = _pause_clock()
            # The heartbeat is due every HEARTBEAT_S; a stopped process (SIGSTOP) beats late by
            # the time it was stopped. A late beat under load is seconds late, never PAUSE_MIN_S.
            late = now - self._beat_at - HEARTBEAT_S
            if late > PAUSE_MIN_S:
                record["paused_s"] = round(record["paused_s"] + late, 1)
            self._beat_at = now
            record["last_seen"] = round(time.time(), 1)
            record["cpu_s"] = round(_cpu_clock() - self._cpu0, 1)
            io_utils.atomic_write_text(self.path, json.dumps(self._records) + "\n")


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)
