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

The shards, files, resume and refusal rules and the worker pool are the engine in `sharding.py`
(which GPT-1's LM windows, `gpt_lm.py`, run on too); this module is BERT's worker and totals.
What differs from faithful mode is listed in docs/pretraining_data.md.
"""
from __future__ import annotations

import functools
import os
import time
from typing import Sequence

from absl import logging

from bert_tf.pretraining_data.faithful import load_tokenizer, log_summary
from bert_tf.pretraining_data.text_reader import IdTokenizer, LineSource, RawDocument, ReadStats, \
    expand_input_patterns, tokenize_documents
from bert_tf.pretraining_data.instances import InstanceStats, create_training_instances
from bert_tf.pretraining_data.masking import VocabInfo
from bert_tf.pretraining_data.options import PretrainingDataError, PretrainingDataOptions
from bert_tf.pretraining_data.rng import ScalableRandom, shard_seed
from bert_tf.pretraining_data.sharding import ShardProgress, atomic_write_json, \
    check_num_workers, finished_shard, iter_shards, output_prefix, prepare_output, run_shards, \
    sha256_file, shard_path, write_shard
from bert_tf.pretraining_data.writer import ExampleEncoder

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
    check_num_workers(num_workers)
    if mode in (None, "", "auto"):
        return "scalable" if num_workers > 1 else "faithful"
    if mode not in MODES:
        raise PretrainingDataError(f"--mode={mode!r}: expected one of {', '.join(MODES)}")
    if mode == "faithful" and num_workers > 1:
        raise PretrainingDataError(
            f"--mode=faithful with --num_workers={num_workers}: faithful mode is one process "
            "(the original's exact order); drop --mode (or pass --mode=scalable) for workers")
    return mode


def run_fingerprint(files: Sequence[str], vocab_file: str, do_lower_case: bool,
                    options: PretrainingDataOptions, docs_per_shard: int) -> dict:
    """Everything a shard's content depends on (not num_workers), as a JSON-able dict."""
    return {
        "format_version": FORMAT_VERSION,
        "options": options.to_dict(),
        "do_lower_case": bool(do_lower_case),
        "vocab_sha256": sha256_file(vocab_file),
        "docs_per_shard": docs_per_shard,
        "input_files": [[os.path.abspath(p), os.path.getsize(p)] for p in files],
    }


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
        """Processes shard `index`; returns its stats dict (also written beside the shard, with
        the shard's SHA-256)."""
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
        marker = {"shard": index, "raw_documents": len(documents),
                  "lines_without_tokens": read_stats.empty_lines_tokens,
                  "stats": stats.to_dict(), "fingerprint": self.fingerprint}
        return write_shard(shard_path(self.prefix, index), records, marker, started=start,
                           checksum=True, crash=index == self.crash_in_shard)


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
    check_num_workers(num_workers)
    if docs_per_shard < 1:
        raise PretrainingDataError(f"--docs_per_shard={docs_per_shard} must be >= 1")
    tokenizer = load_tokenizer(vocab_file, do_lower_case)
    VocabInfo.from_vocab(tokenizer.vocab, vocab_file)  # Checks [CLS]/[SEP]/[MASK] up front.
    files = expand_input_patterns(input_files)
    prefix = output_prefix(output_file)
    fingerprint = run_fingerprint(files, vocab_file, do_lower_case, options, docs_per_shard)
    prepare_output(prefix, fingerprint, overwrite)

    sources = [LineSource(p) for p in files]
    read_stats = ReadStats()
    total = InstanceStats()
    shards_written, shards_skipped, shard_files = 0, 0, []
    lines_without_tokens = 0
    worked = {"documents": 0, "instances": 0}  # Of the shards this run wrote (for the rates).

    def describe(elapsed: float) -> str:
        docs, instances = worked["documents"], worked["instances"]
        return (f"{docs} docs ({docs / elapsed:.0f} docs/s) | {instances} instances "
                f"({instances / elapsed:.0f}/s)")

    tracker = ShardProgress("create_pretraining_data", sum(s.size for s in sources),
                            progress_interval, progress, describe)

    def account(result: dict, skipped: bool, span: int) -> None:
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
            worked["documents"] += result["stats"]["documents"]
            worked["instances"] += result["stats"]["instances"]
        tracker.update(span, skipped)

    logging.info("*** Reading from %d input file(s), writing shards %s-NNNNN.tfrecord with %d "
                 "worker(s) ***", len(files), prefix, num_workers)
    run_shards(iter_shards(sources, read_stats, docs_per_shard, skip_invalid_lines),
               lambda index: finished_shard(prefix, index, fingerprint, require_checksum=True),
               account,
               functools.partial(_ShardWorker, vocab_file, do_lower_case, options, prefix,
                                 fingerprint, _crash_in_shard),
               num_workers=num_workers, max_pending_shards=max_pending_shards, prefix=prefix)
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
    atomic_write_json(prefix + ".summary.json", summary)
    log_summary(summary)
    return summary

