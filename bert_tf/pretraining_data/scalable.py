"""Scalable mode: sharded, multi-process, memory-bounded and resumable pretraining-data generation.

The corpus is streamed once in file order and cut into shards of `docs_per_shard` documents
(document boundaries exactly as in faithful mode). Each shard is processed on its own with the
faithful algorithm (shuffle the shard's documents, `dupe_factor` passes, shuffle the shard's
instances) and a generator seeded from (random_seed, shard index), and written to its own file
`<prefix>-NNNNN.tfrecord`. So:

* memory is bounded by a few shards (never corpus x dupe_factor);
* the output is the same whatever `num_workers` is (a shard's content depends only on its
  documents, the settings and its seed);
* a re-run skips finished shards: a shard is finished when both `<shard>.tfrecord` and its
  done-marker `<shard>.tfrecord.json` (counts, run fingerprint, size and SHA-256 of the shard)
  exist and the shard's size and SHA-256 match the marker (a damaged shard is written again);
  both are written under temporary names and renamed, the marker first, the records last, so a
  crash never leaves a half-written shard under its final name. Temporary files of killed runs
  of the same prefix are removed when a run starts.

What differs from faithful mode is listed in docs/pretraining_data.md.
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

from bert_tf.pretraining_data.faithful import load_tokenizer, log_summary
from bert_tf.pretraining_data.text_reader import IdTokenizer, LineSource, RawDocument, ReadStats, \
    expand_input_patterns, iter_raw_documents, tokenize_documents
from bert_tf.pretraining_data.instances import InstanceStats, create_training_instances
from bert_tf.pretraining_data.masking import VocabInfo
from bert_tf.pretraining_data.options import PretrainingDataError, PretrainingDataOptions
from bert_tf.pretraining_data.rng import ScalableRandom, shard_seed
from bert_tf.pretraining_data.writer import ExampleEncoder, TFRecordShardWriter, temporary_path

FORMAT_VERSION = 1


MODES = ("faithful", "scalable")


def choose_mode(mode: str | None, num_workers: int) -> str:
    """The generation mode from `--mode` and `--num_workers`, as a user expects them to combine:
    `--num_workers` above 1 asks for several processes, which only scalable mode has, so it
    selects scalable mode when `--mode` is not given; no `--mode` and one worker is faithful
    mode (the original's output). An explicit `--mode=faithful` with `--num_workers` > 1 is a
    contradiction and an error.

    Raises:
      PretrainingDataError: an unknown mode, `--num_workers` < 1, or faithful with workers.
    """
    if num_workers < 1:
        raise PretrainingDataError(f"--num_workers={num_workers} must be >= 1")
    if mode in (None, "", "auto"):
        return "scalable" if num_workers > 1 else "faithful"
    if mode not in MODES:
        raise PretrainingDataError(f"--mode={mode!r}: expected one of {', '.join(MODES)}")
    if mode == "faithful" and num_workers > 1:
        raise PretrainingDataError(
            f"--mode=faithful with --num_workers={num_workers}: faithful mode is one process "
            "(the original's exact order); drop --mode (or pass --mode=scalable) for workers")
    return mode


def output_prefix(output_file: str) -> str:
    """`--output_file` -> shard prefix: a trailing `.tfrecord` is dropped (`out/x.tfrecord` gives
    shards `out/x-00000.tfrecord`, ...); an existing folder (or a path ending in "/") gives
    `<folder>/pretraining_data-00000.tfrecord`, ...)."""
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
    """Path of shard `index`: `<prefix>-00007.tfrecord`."""
    return f"{prefix}-{index:05d}.tfrecord"


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_fingerprint(files: Sequence[str], vocab_file: str, do_lower_case: bool,
                    options: PretrainingDataOptions, docs_per_shard: int) -> dict:
    """Everything a shard's content depends on (not num_workers), as a JSON-able dict."""
    return {
        "format_version": FORMAT_VERSION,
        "options": options.to_dict(),
        "do_lower_case": bool(do_lower_case),
        "vocab_sha256": _sha256_file(vocab_file),
        "docs_per_shard": docs_per_shard,
        "input_files": [[os.path.abspath(p), os.path.getsize(p)] for p in files],
    }


def _atomic_write_json(path: str, obj: dict) -> None:
    tmp = temporary_path(path)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@dataclasses.dataclass
class _Shard:
    index: int
    documents: list
    input_bytes_end: int  # Input consumed (bytes on disk) when the shard was complete.


class _ShardWorker:
    """Turns one shard of raw documents into its TFRecord file (in a worker process or inline)."""

    def __init__(self, vocab_file: str, do_lower_case: bool, options: PretrainingDataOptions,
                 prefix: str, fingerprint: dict, crash_in_shard: int | None = None):
        self.tokenizer = load_tokenizer(vocab_file, do_lower_case)
        self.to_ids = IdTokenizer(self.tokenizer)
        self.vocab = VocabInfo.from_vocab(self.tokenizer.vocab, vocab_file)
        self.options = options
        self.prefix = prefix
        self.fingerprint = fingerprint
        self.encoder = ExampleEncoder(options.max_seq_length, options.max_predictions_per_seq,
                                      self.vocab.size)
        self.crash_in_shard = crash_in_shard

    def __call__(self, index: int, documents: Sequence[RawDocument]) -> dict:
        """Processes shard `index`; returns its stats dict (also written beside the shard)."""
        start = time.time()
        read_stats = ReadStats()
        docs, _ = tokenize_documents(documents, self.to_ids, read_stats)
        stats = InstanceStats()
        rng = ScalableRandom(shard_seed(self.options.random_seed, index))
        enc = self.encoder

        def to_record(inst):
            return enc.encode(inst.input_ids, inst.segment_b_start, inst.masked_lm_positions,
                              inst.masked_lm_ids, 1 if inst.is_random_next else 0)

        records = create_training_instances(docs, self.options, self.vocab, rng, to_record, stats)
        path = shard_path(self.prefix, index)
        writer = TFRecordShardWriter(path)
        try:
            if self.crash_in_shard is not None and index == self.crash_in_shard:
                writer.write_many(records[: len(records) // 2])
                writer.size()
                os._exit(3)  # Test hook: die like a killed process, mid-shard.
            writer.write_many(records)
            result = {
                "shard": index,
                "path": os.path.basename(path),
                "records": len(records),
                "bytes": writer.size(),
                "sha256": writer.sha256(),
                "raw_documents": len(documents),
                "lines_without_tokens": read_stats.empty_lines_tokens,
                "stats": stats.to_dict(),
                "seconds": time.time() - start,
                "fingerprint": self.fingerprint,
            }
            _atomic_write_json(path + ".json", result)
            writer.commit()
        except BaseException:
            writer.abort()
            raise
        return result


# One worker object per worker process, set by the pool initializer (process-local).
_PROCESS_WORKER: _ShardWorker | None = None


def _init_worker(*args) -> None:
    global _PROCESS_WORKER
    _PROCESS_WORKER = _ShardWorker(*args)


def _run_in_worker(index: int, documents: list) -> dict:
    assert _PROCESS_WORKER is not None
    return _PROCESS_WORKER(index, documents)


def _start_method() -> str:
    """"fork" where available and TensorFlow is not loaded in this process (fast start, and no
    re-import of the caller's __main__), else "spawn" (forking a process that runs TensorFlow's
    threads is unsafe)."""
    if "fork" in multiprocessing.get_all_start_methods() and "tensorflow" not in sys.modules:
        return "fork"
    return "spawn"


def _is_finished(prefix: str, index: int, fingerprint: dict,
                 require_checksum: bool = False) -> dict | None:
    """The stats of shard `index` if it is complete, intact and from this run's settings, else
    None (the shard is then written again).

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
    if _sha256_file(path) != expected:
        logging.warning("%s: SHA-256 differs from the one recorded in %s.json when it was "
                        "written (the file was changed or damaged); writing the shard again",
                        path, os.path.basename(path))
        return None
    return result


def _prepare_output(prefix: str, fingerprint: dict, overwrite: bool) -> None:
    """Checks/records the run fingerprint; removes leftover temporary files of this prefix."""
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
    _atomic_write_json(run_file, fingerprint)


def _iter_shards(sources: Sequence[LineSource], read_stats: ReadStats, docs_per_shard: int,
                 skip_invalid_lines: bool) -> Iterator[_Shard]:
    """Cuts the document stream into shards; a last shard of fewer than docs_per_shard / 2
    documents is merged into the one before (so no shard is tiny)."""
    consumed = lambda: sum(s.bytes_read for s in sources)  # noqa: E731
    pending: _Shard | None = None
    current: list = []
    index = 0
    for doc in iter_raw_documents(sources, read_stats, skip_invalid_lines):
        current.append(doc)
        if len(current) == docs_per_shard:
            if pending is not None:
                yield pending
            pending = _Shard(index, current, consumed())
            index += 1
            current = []
    if current:
        if pending is not None and len(current) < max(1, docs_per_shard // 2):
            pending.documents.extend(current)
            pending.input_bytes_end = consumed()
        else:
            if pending is not None:
                yield pending
            pending = _Shard(index, current, consumed())
    if pending is not None:
        pending.input_bytes_end = max(pending.input_bytes_end, consumed())
        yield pending


class _Progress:
    """Logs a progress line every `interval` seconds: shards, documents/s, instances, ETA."""

    def __init__(self, total_bytes: int, interval: float, enabled: bool):
        self.total = max(total_bytes, 1)
        self.interval = interval
        self.enabled = enabled
        self.start = time.time()
        self.last = 0.0
        self.done_bytes = 0
        self.skipped_bytes = 0
        self.docs = self.instances = self.shards = 0

    def update(self, result: dict, span: int, skipped: bool, force: bool = False) -> None:
        self.shards += 1
        self.done_bytes += span
        if skipped:
            self.skipped_bytes += span
        else:
            self.docs += result["stats"]["documents"]
            self.instances += result["stats"]["instances"]
        self.log(force)

    def log(self, force: bool = False) -> None:
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
        logging.info(
            "[create_pretraining_data] %d shards | %d docs (%.0f docs/s) | %d instances "
            "(%.0f/s) | input %.1f%% | elapsed %.0fs | ETA %s", self.shards, self.docs,
            self.docs / elapsed, self.instances, self.instances / elapsed, 100 * frac, elapsed,
            eta_text)


def run_shards(shard_iter: Iterator, spans: dict, is_finished: Callable[[int], Any],
               account: Callable[[Any, bool], None], worker_class: type, worker_args: tuple,
               init_worker: Callable, run_in_worker: Callable, num_workers: int,
               pending_limit: int, prefix: str) -> None:
    """Writes every shard of `shard_iter` that is not finished yet, in this process (one
    worker) or in a process pool with at most `pending_limit` shards in flight.

    Args:
      shard_iter: shards (`.index`, `.documents`, `.input_bytes_end`) in input order.
      spans: filled with shard index -> input bytes the shard covers (for progress).
      is_finished: shard index -> its earlier result if it is already written, else None.
      account: called with (result, skipped) once per shard, skipped ones included.
      worker_class, worker_args: the in-process worker, `worker_class(*worker_args)(index, docs)`.
      init_worker, run_in_worker: the same worker for a pool (initializer / submitted function).
      prefix: named in the error when a worker process dies.
    """
    last_end = 0

    def pending() -> Iterator:
        nonlocal last_end
        for shard in shard_iter:
            spans[shard.index] = shard.input_bytes_end - last_end
            last_end = shard.input_bytes_end
            done = is_finished(shard.index)
            if done is not None:
                account(done, True)
                continue
            yield shard

    if num_workers == 1:
        worker = worker_class(*worker_args)
        for shard in pending():
            account(worker(shard.index, shard.documents), False)
        return
    ctx = multiprocessing.get_context(_start_method())
    with concurrent.futures.ProcessPoolExecutor(num_workers, mp_context=ctx,
                                                initializer=init_worker,
                                                initargs=worker_args) as pool:
        running: set = set()
        try:
            for shard in pending():
                while len(running) >= pending_limit:
                    finished, running = concurrent.futures.wait(
                        running, return_when=concurrent.futures.FIRST_COMPLETED)
                    for fut in finished:
                        account(fut.result(), False)
                running.add(pool.submit(run_in_worker, shard.index, shard.documents))
            for fut in concurrent.futures.as_completed(running):
                account(fut.result(), False)
            running = set()
        except concurrent.futures.process.BrokenProcessPool:
            raise PretrainingDataError(
                f"a worker process died while writing shards of {prefix}; finished shards "
                "are kept: run the same command again to resume") from None
        finally:
            for fut in running:
                fut.cancel()


def create_pretraining_data_sharded(
        input_files: str | Sequence[str], output_file: str, vocab_file: str,
        do_lower_case: bool = True, options: PretrainingDataOptions | None = None, *,
        num_workers: int = 1, docs_per_shard: int = 1000, skip_invalid_lines: bool = False,
        allow_prediction_cap: bool = False, overwrite: bool = False, progress: bool = True,
        progress_interval: float = 10.0, max_pending_shards: int | None = None,
        _crash_in_shard: int | None = None) -> dict:
    """Scalable mode: writes `<prefix>-NNNNN.tfrecord` shards (see the module docstring).

    Args:
      input_files: comma-separated paths/globs or a list; `.gz` allowed.
      output_file: output prefix (`out/data` or `out/data.tfrecord` -> `out/data-00000.tfrecord`
        ...), plus `<prefix>.run.json` (settings) and `<prefix>.summary.json` (totals).
      vocab_file, do_lower_case: the tokenizer (`FullTokenizer(vocab_file, do_lower_case)`).
      options: PretrainingDataOptions (random_seed seeds every shard's own generator).
      num_workers: processes; 1 works in this process. The output does not depend on it.
      docs_per_shard: documents per shard (shuffling and random-next segments stay within a
        shard); the last shard takes the remainder if it is smaller than half of this.
      skip_invalid_lines: skip (and count) non-UTF-8 lines instead of stopping.
      allow_prediction_cap: see PretrainingDataOptions.validate.
      overwrite: replace shards of a run with other settings under the same prefix.
      progress, progress_interval: log a progress line every so many seconds.
      max_pending_shards: shards read ahead of the workers (default 2 x num_workers), which
        bounds the memory of the reading process.
      _crash_in_shard: test hook: die (os._exit) half-way through writing this shard.

    Returns:
      summary dict (also written to `<prefix>.summary.json`): documents, instances, tokens,
      masked positions, truncations, IsNext/NotNext shares, shards written/skipped, invalid
      lines, seconds, documents/s and instances/s.

    Raises:
      PretrainingDataError: bad flags, vocab or input; already-finished shards stay, nothing
        half-written is left under a final name.
    """
    start = time.time()
    options = options or PretrainingDataOptions()
    options.validate(allow_prediction_cap)
    if num_workers < 1:
        raise PretrainingDataError(f"--num_workers={num_workers} must be >= 1")
    if docs_per_shard < 1:
        raise PretrainingDataError(f"--docs_per_shard={docs_per_shard} must be >= 1")
    tokenizer = load_tokenizer(vocab_file, do_lower_case)
    VocabInfo.from_vocab(tokenizer.vocab, vocab_file)  # Checks [CLS]/[SEP]/[MASK] up front.
    files = expand_input_patterns(input_files)
    prefix = output_prefix(output_file)
    fingerprint = run_fingerprint(files, vocab_file, do_lower_case, options, docs_per_shard)
    _prepare_output(prefix, fingerprint, overwrite)

    sources = [LineSource(p) for p in files]
    read_stats = ReadStats()
    total = InstanceStats()
    shards_written, shards_skipped, shard_files = 0, 0, []
    tracker = _Progress(sum(s.size for s in sources), progress_interval, progress)
    worker_args = (vocab_file, do_lower_case, options, prefix, fingerprint, _crash_in_shard)
    pending_limit = max_pending_shards or 2 * num_workers
    lines_without_tokens = 0
    spans: dict = {}

    def account(result: dict, skipped: bool) -> None:
        nonlocal shards_written, shards_skipped, lines_without_tokens
        stats = InstanceStats(**{k: v for k, v in result["stats"].items()
                                 if k in InstanceStats.__dataclass_fields__})
        total.merge(stats)
        lines_without_tokens += result.get("lines_without_tokens", 0)
        shard_files.append((result["shard"], shard_path(prefix, result["shard"])))
        if skipped:
            shards_skipped += 1
        else:
            shards_written += 1
        tracker.update(result, spans.pop(result["shard"]), skipped)

    logging.info("*** Reading from %d input file(s), writing shards %s-NNNNN.tfrecord with %d "
                 "worker(s) ***", len(files), prefix, num_workers)
    shard_iter = _iter_shards(sources, read_stats, docs_per_shard, skip_invalid_lines)
    run_shards(shard_iter, spans,
               lambda index: _is_finished(prefix, index, fingerprint, require_checksum=True),
               account, _ShardWorker, worker_args, _init_worker, _run_in_worker, num_workers,
               pending_limit, prefix)
    tracker.log(force=True)

    shard_files.sort()
    elapsed = time.time() - start
    summary = {
        "mode": "scalable",
        **total.to_dict(),
        "shards": len(shard_files),
        "shards_written": shards_written,
        "shards_skipped": shards_skipped,
        "invalid_lines_skipped": read_stats.invalid_lines,
        "invalid_line_examples": read_stats.invalid_line_examples,
        "lines_without_tokens": lines_without_tokens,
        "num_workers": num_workers,
        "output_files": [p for _, p in shard_files],
        "seconds": elapsed,
        "documents_per_second": total.documents / elapsed if elapsed else 0.0,
        "instances_per_second": total.instances / elapsed if elapsed else 0.0,
    }
    _atomic_write_json(prefix + ".summary.json", summary)
    log_summary(summary)
    return summary

