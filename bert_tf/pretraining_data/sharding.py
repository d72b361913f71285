"""The sharding/worker engine of the data tools: a corpus cut into shards, written by a pool of
worker processes into resumable files. BERT's scalable mode (`scalable.py`, masked-LM examples)
and GPT-1's LM windows (`gpt_lm.py`) both run on it; a tool brings only its worker (what one
shard of documents becomes) and its run fingerprint (what a shard's content depends on).

Files of a run with output prefix `<prefix>` (`out/data`):

* `<prefix>-NNNNN.tfrecord`: shard NNNNN (`shard_path`), written by `write_shard`;
* `<prefix>-NNNNN.tfrecord.json`: the shard's done-marker: the worker's stats plus `path`,
  `records`, `bytes` (the shard's size), optionally `sha256`, and the run fingerprint;
* `<prefix>.run.json`: the run fingerprint (`prepare_output`);
* `<prefix>.summary.json`: the tool's totals (written by the tool with `atomic_write_json`).

The rules every tool gets from here:

* **Shards.** The input files are read once, in order, and cut into shards of
  `docs_per_shard` documents (`iter_shards`; the last shard takes the remainder when it is
  smaller than half of that). A shard's content depends only on its documents, the settings and
  its index (the worker seeds its generator from (seed, index)), so the output is the same
  whatever `num_workers` is.
* **Nothing half-written under a final name.** A shard and its marker are written under
  temporary names `.<name>.tmp-<pid>` and renamed, the marker first, the records last
  (`write_shard`); `<prefix>.run.json` and the summary are renamed into place too
  (`atomic_write_json`).
* **Resume.** A re-run skips the shards that are finished (`finished_shard`: records and marker
  both present, the marker naming this run's fingerprint and the shard's size, and, where the
  marker holds one, the shard's SHA-256); a damaged shard is written again. Temporary files of
  killed runs of the same prefix are removed when a run starts.
* **Refusal.** A run does not mix its shards with another run's (`prepare_output`): a
  `<prefix>.run.json` with other settings, or shards `<prefix>-NNNNN.tfrecord` without any
  `<prefix>.run.json`, stop the run with a PretrainingDataError unless `overwrite` is given
  (which deletes that prefix's shards, markers and summary first).
* **Workers.** `run_shards` writes the pending shards in this process (one worker) or in a
  process pool, with a bounded number of shards read ahead, and reports each shard, skipped or
  written, to the tool as it is done; `ShardProgress` turns those reports into a progress line
  with the share of the input done and an ETA.

Nothing here imports TensorFlow.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import multiprocessing
import os
import re
import sys
import time
from typing import Any, Callable, Iterator, Sequence

from absl import logging

from bert_tf.pretraining_data.options import PretrainingDataError
from bert_tf.pretraining_data.text_reader import LineSource, RawDocument, ReadStats, \
    iter_raw_documents
from bert_tf.pretraining_data.writer import TFRecordShardWriter, temporary_path

__all__ = ["Shard", "ShardProgress", "atomic_write_json", "check_num_workers", "finished_shard",
           "iter_shards", "output_prefix", "prepare_output", "run_shards", "sha256_file",
           "shard_path", "write_shard"]


# --------------------------------------------------------------------------------------------
# Names, hashes and atomic files.
# --------------------------------------------------------------------------------------------

def output_prefix(output_file: str) -> str:
    """`--output_file` -> shard prefix: a trailing `.tfrecord` is dropped (`out/x.tfrecord` gives
    shards `out/x-00000.tfrecord`, ...); an existing folder (or a path ending in "/") gives
    `<folder>/pretraining_data-00000.tfrecord`, ...).

    Raises:
      PretrainingDataError: a comma-separated list (a sharded run takes one prefix).
    """
    if "," in output_file:
        raise PretrainingDataError(
            f"--output_file={output_file}: scalable mode writes its own shards and takes one "
            "output prefix, not a comma-separated list")
    prefix = output_file.strip()
    if os.path.isdir(prefix):  # an existing folder: the shards go inside it
        prefix = os.path.join(prefix, "")
    if prefix.endswith(".tfrecord"):
        prefix = prefix[: -len(".tfrecord")]
    if not prefix or prefix.endswith(os.sep):
        prefix = os.path.join(prefix, "pretraining_data")
    return prefix


def shard_path(prefix: str, index: int) -> str:
    """Path of shard `index`: `<prefix>-00007.tfrecord` (its done-marker adds `.json`)."""
    return f"{prefix}-{index:05d}.tfrecord"


def sha256_file(path: str) -> str:
    """Hex SHA-256 of a file's bytes (read in 1 MiB blocks): vocabulary files in the run
    fingerprints, shards when they are checked against their done-marker."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write_json(path: str, obj: dict) -> None:
    """Writes `obj` as JSON (indent 1, sorted keys) to a temporary file, fsyncs it and renames it
    onto `path`: `path` is either the old file or the whole new one, never a part."""
    tmp = temporary_path(path)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def check_num_workers(num_workers: int) -> None:
    """Raises PretrainingDataError unless `num_workers` >= 1."""
    if num_workers < 1:
        raise PretrainingDataError(f"--num_workers={num_workers} must be >= 1")


# --------------------------------------------------------------------------------------------
# The output folder: refusal rules, leftovers, finished shards.
# --------------------------------------------------------------------------------------------

def prepare_output(prefix: str, fingerprint: dict, overwrite: bool) -> None:
    """Makes the output folder ready for a run of `fingerprint` under `prefix`: checks that the
    shards already there are this run's, removes temporary files of killed runs of this prefix
    and records the fingerprint in `<prefix>.run.json`.

    Only this prefix's own files count: `<base>-NNNNN.tfrecord[.json]` (not `<base>-old-...`,
    not another prefix's), and the temporary names `.<base>-NNNNN.tfrecord[.json].tmp-<pid>`,
    `.<base>.run.json.tmp-<pid>`, `.<base>.summary.json.tmp-<pid>`.

    Args:
      prefix: the output prefix (`output_prefix`); its folder is created if missing.
      fingerprint: JSON-able dict of everything the shards' content depends on.
      overwrite: delete this prefix's shards, markers and summary instead of refusing.

    Raises:
      PretrainingDataError (unless `overwrite`): `<prefix>.run.json` records other settings
        (the message names the keys that differ), or shards of this prefix exist without a
        `<prefix>.run.json`.
    """
    directory = os.path.dirname(os.path.abspath(prefix))
    os.makedirs(directory, exist_ok=True)
    base = os.path.basename(prefix)
    run_file = prefix + ".run.json"
    # Only this prefix's own files: `<base>-NNNNN.tfrecord[.json]` (not `<base>-old-...`).
    shard_re = re.compile(re.escape(base) + r"-\d{5,}\.tfrecord(\.json)?")
    tmp_re = re.compile(r"\." + re.escape(base)
                        + r"(-\d{5,}\.tfrecord(\.json)?|\.run\.json|\.summary\.json)\.tmp-\d+")
    ours = [n for n in os.listdir(directory) if shard_re.fullmatch(n)]
    if os.path.exists(run_file) and not overwrite:
        with open(run_file, encoding="utf-8") as f:
            previous = json.load(f)
        if previous != fingerprint:
            changed = sorted(k for k in set(previous) | set(fingerprint)
                             if previous.get(k) != fingerprint.get(k))
            raise PretrainingDataError(
                f"--output_file={prefix}: {run_file} records a run with other settings "
                f"(differs in: {', '.join(changed)}); its shards cannot be resumed. Pass "
                "--overwrite to replace them, or choose another --output_file")
    elif ours and not overwrite and not os.path.exists(run_file):
        raise PretrainingDataError(
            f"--output_file={prefix}: {len(ours)} file(s) named {base}-NNNNN.tfrecord exist but "
            f"no {os.path.basename(run_file)}; pass --overwrite to replace them")
    if overwrite:
        for name in ours + [base + ".summary.json"]:
            p = os.path.join(directory, name)
            if os.path.exists(p):
                os.remove(p)
    for name in os.listdir(directory):  # Leftovers of a killed run are never final files.
        if tmp_re.fullmatch(name):
            os.remove(os.path.join(directory, name))
    atomic_write_json(run_file, fingerprint)


def finished_shard(prefix: str, index: int, fingerprint: dict,
                   require_checksum: bool = False) -> dict | None:
    """The done-marker (the shard's stats dict) of shard `index` if the shard is complete,
    intact and from this run's settings, else None (the shard is then written again).

    Complete: its done-marker `<shard>.json` exists and names this run's fingerprint and the
    shard's size. Intact: the shard's SHA-256 equals the marker's `sha256` (checked whenever the
    marker has one; `require_checksum` treats a marker without one as unfinished). A corrupt shard
    is logged, naming the file.
    """
    path = shard_path(prefix, index)
    try:
        with open(path + ".json", encoding="utf-8") as f:
            result = json.load(f)
        size = os.path.getsize(path)
    except (OSError, ValueError):
        return None
    if not isinstance(result, dict):
        return None
    if result.get("fingerprint") != fingerprint or result.get("bytes") != size:
        return None
    expected = result.get("sha256")
    if expected is None:
        return None if require_checksum else result
    if sha256_file(path) != expected:
        logging.warning("%s: SHA-256 differs from the one recorded in %s.json when it was "
                        "written (the file was changed or damaged); writing the shard again",
                        path, os.path.basename(path))
        return None
    return result


def write_shard(path: str, records: Sequence[bytes], marker: dict, *, started: float,
                checksum: bool = False, crash: bool = False) -> dict:
    """Writes one shard: `records` to `path` and its done-marker to `path + ".json"`, both under
    temporary names, renamed the marker first and the records last (so a shard is under its final
    name only when its marker is); on any error the temporary records file is deleted.

    Args:
      path: the shard's final path (`shard_path(prefix, index)`).
      records: serialized tf.train.Examples, in file order.
      marker: the worker's stats for the done-marker (`shard`, `stats`, `fingerprint`, ...).
      started: `time.time()` when the shard's work began (the marker's `seconds`).
      checksum: also record the shard's SHA-256 (`sha256`), which `finished_shard` verifies.
      crash: test hook: write half of the records, then die like a killed process (os._exit).

    Returns:
      the marker as written: `marker` plus `path` (base name), `records` (count), `bytes` (the
      shard's size), `seconds` and, with `checksum`, `sha256`.
    """
    writer = TFRecordShardWriter(path)
    try:
        if crash:
            writer.write_many(records[: len(records) // 2])
            writer.size()
            os._exit(3)  # Test hook: die like a killed process, mid-shard.
        writer.write_many(records)
        result = {**marker, "path": os.path.basename(path), "records": len(records),
                  "bytes": writer.size()}
        if checksum:
            result["sha256"] = writer.sha256()
        result["seconds"] = time.time() - started
        atomic_write_json(path + ".json", result)
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    return result


# --------------------------------------------------------------------------------------------
# Shards of the input.
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Shard:
    """One shard of the input.

    Attributes:
      index: 0, 1, ... in input order (names the file and seeds the worker's generator).
      documents: the shard's RawDocuments, in input order.
      input_bytes_end: input consumed (bytes on disk, over all files) when the shard was
        complete; the difference to the previous shard's is the share of the input it covers.
    """

    index: int
    documents: list[RawDocument]
    input_bytes_end: int


def iter_shards(sources: Sequence[LineSource], read_stats: ReadStats, docs_per_shard: int,
                skip_invalid_lines: bool) -> Iterator[Shard]:
    """Cuts the document stream of `sources` into shards of `docs_per_shard` documents; a last
    shard of fewer than docs_per_shard / 2 documents is merged into the one before (so no shard is
    tiny). Reads lazily: one shard (plus the next one being filled) in memory.

    Args:
      sources: the input files, read once in this order.
      read_stats: counts invalid lines (see `iter_raw_documents`).
      docs_per_shard: documents per shard (>= 1).
      skip_invalid_lines: skip (and count) non-UTF-8 lines instead of stopping.
    """
    consumed = lambda: sum(s.bytes_read for s in sources)  # noqa: E731
    pending: Shard | None = None
    current: list = []
    index = 0
    for doc in iter_raw_documents(sources, read_stats, skip_invalid_lines):
        current.append(doc)
        if len(current) == docs_per_shard:
            if pending is not None:
                yield pending
            pending = Shard(index, current, consumed())
            index += 1
            current = []
    if current:
        if pending is not None and len(current) < max(1, docs_per_shard // 2):
            pending.documents.extend(current)
            pending.input_bytes_end = consumed()
        else:
            if pending is not None:
                yield pending
            pending = Shard(index, current, consumed())
    if pending is not None:
        pending.input_bytes_end = max(pending.input_bytes_end, consumed())
        yield pending


# --------------------------------------------------------------------------------------------
# The worker pool.
# --------------------------------------------------------------------------------------------

# One worker object per worker process, built by the pool initializer (process-local).
_PROCESS_WORKER: Callable[[int, list], Any] | None = None


def _start_worker(make_worker: Callable[[], Callable[[int, list], Any]]) -> None:
    global _PROCESS_WORKER
    _PROCESS_WORKER = make_worker()


def _run_in_worker(index: int, documents: list) -> Any:
    assert _PROCESS_WORKER is not None
    return _PROCESS_WORKER(index, documents)


def _start_method() -> str:
    """"fork" where available and TensorFlow is not loaded in this process (fast start, and no
    re-import of the caller's __main__), else "spawn" (forking a process that runs TensorFlow's
    threads is unsafe)."""
    if "fork" in multiprocessing.get_all_start_methods() and "tensorflow" not in sys.modules:
        return "fork"
    return "spawn"


def run_shards(shards: Iterator[Shard], is_finished: Callable[[int], Any],
               account: Callable[[Any, bool, int], None],
               make_worker: Callable[[], Callable[[int, list], Any]], *, num_workers: int,
               max_pending_shards: int | None, prefix: str) -> None:
    """Writes every shard of `shards` that is not finished yet, in this process (one worker) or
    in a process pool with at most `max_pending_shards` shards read ahead of the workers (which
    bounds the memory of the reading process).

    Args:
      shards: the input's shards in input order (`iter_shards`).
      is_finished: shard index -> its earlier result if it is already written (e.g. its
        `finished_shard` marker), else None; called in input order before the shard is queued.
      account: called as `account(result, skipped, span)` once per shard, skipped ones included:
        `result` is the worker's return value (or `is_finished`'s), `span` the input bytes the
        shard covers (for progress). Finished shards of a pool are reported as they finish.
      make_worker: a picklable callable of no arguments that builds the worker, e.g.
        `functools.partial(WorkerClass, settings...)`; `make_worker()(index, documents)` writes
        shard `index` and returns its result. Called once in this process (one worker) or once
        per worker process.
      num_workers: processes; 1 works in this process.
      max_pending_shards: shards in flight at most (None: 2 x num_workers).
      prefix: named in the error when a worker process dies.

    Raises:
      PretrainingDataError: a worker process died (the shards finished so far stay; a re-run
        resumes). A worker's own exception is raised as it is.
    """
    pending_limit = max_pending_shards or 2 * num_workers
    spans: dict[int, int] = {}
    last_end = 0

    def pending() -> Iterator[Shard]:
        nonlocal last_end
        for shard in shards:
            spans[shard.index] = shard.input_bytes_end - last_end
            last_end = shard.input_bytes_end
            done = is_finished(shard.index)
            if done is not None:
                account(done, True, spans.pop(shard.index))
                continue
            yield shard

    if num_workers == 1:
        worker = make_worker()
        for shard in pending():
            account(worker(shard.index, shard.documents), False, spans.pop(shard.index))
        return
    ctx = multiprocessing.get_context(_start_method())
    with concurrent.futures.ProcessPoolExecutor(num_workers, mp_context=ctx,
                                                initializer=_start_worker,
                                                initargs=(make_worker,)) as pool:
        running: dict = {}  # future -> shard index

        def account_finished(futures) -> None:
            for fut in futures:
                account(fut.result(), False, spans.pop(running.pop(fut)))

        try:
            for shard in pending():
                while len(running) >= pending_limit:
                    finished, _ = concurrent.futures.wait(
                        running, return_when=concurrent.futures.FIRST_COMPLETED)
                    account_finished(finished)
                running[pool.submit(_run_in_worker, shard.index, shard.documents)] = shard.index
            for fut in concurrent.futures.as_completed(list(running)):
                account_finished([fut])
        except concurrent.futures.process.BrokenProcessPool:
            raise PretrainingDataError(
                f"a worker process died while writing shards of {prefix}; finished shards "
                "are kept: run the same command again to resume") from None
        finally:
            for fut in running:
                fut.cancel()


class ShardProgress:
    """Logs a progress line at most every `interval` seconds (and when forced): shards done, the
    tool's counters, the share of the input done, elapsed time and ETA. The ETA is estimated from
    the input bytes this run worked on, not from the shards it skipped as finished.

    The line: `[<name>] <shards> shards | <describe(elapsed)> | input 42.0% | elapsed 12s |
    ETA 0m17s` (`?` until some shard was written).

    Args:
      name: the tool's name, at the start of the line.
      total_bytes: size of the input (bytes on disk).
      interval: seconds between two lines.
      enabled: False logs nothing.
      describe: elapsed seconds -> the tool's counters, e.g. "10 docs (5 docs/s)".
    """

    def __init__(self, name: str, total_bytes: int, interval: float, enabled: bool,
                 describe: Callable[[float], str]):
        self.name = name
        self.total = max(total_bytes, 1)
        self.interval = interval
        self.enabled = enabled
        self.describe = describe
        self.start = time.time()
        self.last = 0.0
        self.done_bytes = 0
        self.skipped_bytes = 0
        self.shards = 0

    def update(self, span: int, skipped: bool, force: bool = False) -> None:
        """One more shard, covering `span` input bytes, done (or `skipped` as finished)."""
        self.shards += 1
        self.done_bytes += span
        if skipped:
            self.skipped_bytes += span
        self.log(force)

    def log(self, force: bool = False) -> None:
        """Logs the line if `interval` seconds have passed since the last one (or `force`)."""
        now = time.time()
        if not self.enabled or (not force and now - self.last < self.interval):
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        frac = self.done_bytes / self.total
        worked = self.done_bytes - self.skipped_bytes
        remaining = self.total - self.done_bytes
        eta = remaining / (worked / elapsed) if worked > 0 else float("nan")
        eta_text = "?" if eta != eta else f"{int(eta) // 60}m{int(eta) % 60:02d}s"
        logging.info("[%s] %d shards | %s | input %.1f%% | elapsed %.0fs | ETA %s", self.name,
                     self.shards, self.describe(elapsed), 100 * frac, elapsed, eta_text)
