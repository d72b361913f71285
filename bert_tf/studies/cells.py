"""Cells on disk: each pretraining or fine-tuning run of a study lives in its own folder with a
done-marker written last (atomically), so a killed study resumes and never counts a half-written
cell as done.

    <output_dir>/cells/<kind>/<key>/          the run's own files (checkpoints, events, ...)
    <output_dir>/cells/<kind>/<key>/DONE.json the cell's result; written last, atomically

A folder without DONE.json is an unfinished cell (killed, or failed): it is run again, and the
training loops inside resume from their own checkpoints where they have them.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

from bert_tf import io_utils

DONE_FILE = "DONE.json"


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
        and returns a JSON-serialisable dict; `wall_s` (this call's seconds) is added.
        """
        cached = self.result(kind, key)
        if cached is not None:
            return cached, False
        cell_dir = self.path(kind, key)
        os.makedirs(cell_dir, exist_ok=True)
        if on_run is not None:
            on_run(kind, key)
        start = time.time()
        result = dict(fn(cell_dir))
        result.setdefault("wall_s", round(time.time() - start, 1))
        io_utils.atomic_write_text(os.path.join(cell_dir, DONE_FILE),
                                   json.dumps(result, indent=1, default=_plain) + "\n")
        return result, True


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)
