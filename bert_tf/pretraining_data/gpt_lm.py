"""GPT-1 language-model pretraining data: raw text -> TFRecords of contiguous `n_ctx`-token windows.

Input: the format users give `create_pretraining_data.py` (one sentence per line, a blank line
between documents; comma-separated files or globs; `.gz` read on the fly), read by the same
reader (`bert_tf.pretraining_data.text_reader`).

What is written. The original GPT-1 was trained on contiguous BooksCorpus text, so the text is
one token stream, cut into back-to-back windows of exactly `n_ctx` tokens:

* each line is encoded on its own (`TextEncoder.encode_text`: ftfy, text_standardize, spaCy,
  BPE -- or WordPiece with `--vocab_file`), and the lines of a document are concatenated (a line
  break inside a document is just the next sentence of running text);
* **document boundaries**: every document is followed by one separator token, so a window that
  spans two documents reads like text with a paragraph break. By default this is the BPE
  vocabulary's newline `\\n</w>` (what the original encoder gives for a line break in text) or
  `[SEP]` for a WordPiece vocabulary; `document_separator="none"` concatenates documents
  directly, any other value must be a token of the vocabulary. The special tokens `_start_`,
  `_delimiter_`, `_classify_` are never used here: they are fine-tuning tokens whose embedding
  rows the original draws afresh when it loads pretrained weights;
* the corpus is cut into shards of `docs_per_shard` documents exactly as the scalable BERT mode,
  by the same engine (`bert_tf.pretraining_data.sharding`: shard files, temporary names, run
  fingerprint, resume and refusal rules, worker pool). Each shard's stream is cut into
  `len // n_ctx` windows in stream order; the last `len % n_ctx` tokens of each shard (fewer than
  `n_ctx`) are dropped and counted (`tail_tokens_dropped`);
* a held-out split (`held_out_fraction > 0`) takes whole documents, drawn with a generator seeded
  from (random_seed, shard index), into `<prefix>_heldout-NNNNN.tfrecord` (its own stream and
  windows), so no held-out text is ever in a training window. The random seed only decides that
  split; windows are written in text order and shuffled by the reader (`lm_dataset`).

Files: `<prefix>-NNNNN.tfrecord` (+ `.json` stats per shard), `<prefix>.run.json` (settings),
`<prefix>.summary.json` (totals); the same under `<prefix>_heldout` for the held-out split. Each
record is a `tf.train.Example` with one feature `input_ids`: int64 [n_ctx].

The output depends only on the corpus, the vocabulary files and the options, never on
`num_workers`. Re-running the same command after a crash skips finished shards (see sharding.py:
a shard is finished when its records and its stats both exist under their final names; for the
two splits, when both splits' shards are finished).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import time
from typing import Sequence

from absl import logging

from bert_tf.pretraining_data.options import PretrainingDataError
from bert_tf.pretraining_data.rng import shard_seed
from bert_tf.pretraining_data.sharding import atomic_write_json, check_num_workers, \
    finished_shard, iter_shards, output_prefix, prepare_output, run_shards, sha256_file, \
    shard_path, write_shard
from bert_tf.pretraining_data.text_reader import LineSource, RawDocument, ReadStats, \
    expand_input_patterns
from bert_tf.pretraining_data.writer import varint

__all__ = ["EncoderSpec", "LmDataOptions", "create_gpt_lm_data", "encode_lm_example",
           "held_out_prefix", "lm_dataset"]

FORMAT_VERSION = 1
FEATURE_NAME = "input_ids"
BPE_DOCUMENT_SEPARATOR = "\n</w>"
WORDPIECE_DOCUMENT_SEPARATOR = "[SEP]"


@dataclasses.dataclass(frozen=True)
class EncoderSpec:
    """Which text encoder makes the ids: the original BPE (`encoder_path` + `bpe_path`) or
    bert_tf's WordPiece (`vocab_file`, `do_lower_case`). Picklable, so workers build their own."""

    encoder_path: str | None = None
    bpe_path: str | None = None
    vocab_file: str | None = None
    do_lower_case: bool = True

    @property
    def kind(self) -> str:
        return "wordpiece" if self.vocab_file else "bpe"

    def validate(self) -> None:
        """Raises PretrainingDataError unless exactly one vocabulary is given, completely."""
        bpe = bool(self.encoder_path) or bool(self.bpe_path)
        if bool(self.vocab_file) == bpe:
            raise PretrainingDataError(
                "give either --encoder_path and --bpe_path (the original GPT-1 BPE) or "
                "--vocab_file (a WordPiece vocab), not both and not neither")
        if bpe and not (self.encoder_path and self.bpe_path):
            missing = "--bpe_path" if self.encoder_path else "--encoder_path"
            raise PretrainingDataError(f"{missing} is missing: the BPE needs both "
                                       "--encoder_path (encoder_bpe_*.json) and --bpe_path (*.bpe)")
        for flag, path in self.files().items():
            if not os.path.isfile(path):
                raise PretrainingDataError(f"{flag}={path}: file not found")

    def files(self) -> dict[str, str]:
        """flag name -> path of every vocabulary file."""
        if self.kind == "wordpiece":
            return {"--vocab_file": self.vocab_file}
        return {"--encoder_path": self.encoder_path, "--bpe_path": self.bpe_path}

    def build(self):
        """The encoder object (`TextEncoder` or `WordPieceTextEncoder`)."""
        from bert_tf.tokenization.gpt_text_encoder import TextEncoder, WordPieceTextEncoder
        if self.kind == "wordpiece":
            return WordPieceTextEncoder(self.vocab_file, self.do_lower_case)
        return TextEncoder(self.encoder_path, self.bpe_path)


@dataclasses.dataclass(frozen=True)
class LmDataOptions:
    """Settings that decide the windows (all of them enter the run fingerprint).

    Attributes:
      n_ctx: tokens per window (the model's context length; 512 in GPT-1).
      random_seed: seeds the held-out split (per shard).
      held_out_fraction: share of documents written to the held-out split (0 = none).
      document_separator: "auto" (`\\n</w>` for BPE, `[SEP]` for WordPiece), "none", or a token
        of the vocabulary, appended after every document.
      docs_per_shard: documents per shard (see scalable.py: the last shard takes the remainder
        if it is smaller than half of this).
    """

    n_ctx: int = 512
    random_seed: int = 12345
    held_out_fraction: float = 0.0
    document_separator: str = "auto"
    docs_per_shard: int = 1000

    def validate(self) -> None:
        if self.n_ctx < 2:
            raise PretrainingDataError(f"--n_ctx={self.n_ctx} must be >= 2 (a window needs a "
                                       "token and its next token)")
        if not 0.0 <= self.held_out_fraction < 1.0:
            raise PretrainingDataError(
                f"--held_out_fraction={self.held_out_fraction} must be in [0, 1)")
        if self.docs_per_shard < 1:
            raise PretrainingDataError(f"--docs_per_shard={self.docs_per_shard} must be >= 1")


def separator_id(encoder, kind: str, document_separator: str) -> int | None:
    """The id appended after each document, or None for "none".

    Raises:
      PretrainingDataError: the separator is not a token of the vocabulary.
    """
    if document_separator == "none":
        return None
    token = document_separator
    if token == "auto":
        token = BPE_DOCUMENT_SEPARATOR if kind == "bpe" else WORDPIECE_DOCUMENT_SEPARATOR
    if token not in encoder.encoder:
        raise PretrainingDataError(
            f"--document_separator={document_separator!r}: token {token!r} is not in the "
            f"{kind} vocabulary; give a token of the vocabulary or 'none'")
    return encoder.encoder[token]


def held_out_prefix(prefix: str) -> str:
    """Prefix of the held-out shards: `out/lm` -> `out/lm_heldout` (`out/lm_heldout-00000...`),
    which a training glob `out/lm-*.tfrecord` does not match."""
    return prefix + "_heldout"


class _ExampleBytes:
    """`tf.train.Example{features {feature {key: "input_ids" value {int64_list}}}}` bytes
    (packed varints; the same bytes TensorFlow's serializer writes)."""

    def __init__(self, vocab_size: int):
        self._v = [varint(i) for i in range(max(vocab_size, 1 << 14))]
        self._key = b"\x0a" + varint(len(FEATURE_NAME)) + FEATURE_NAME.encode()

    def __call__(self, ids: Sequence[int]) -> bytes:
        v = self._v
        try:
            payload = b"".join([v[i] for i in ids])
        except IndexError:
            payload = b"".join([varint(int(i)) for i in ids])
        int64_list = b"\x0a" + varint(len(payload)) + payload
        feature = b"\x1a" + varint(len(int64_list)) + int64_list
        entry = self._key + b"\x12" + varint(len(feature)) + feature
        features = b"\x0a" + varint(len(entry)) + entry
        return b"\x0a" + varint(len(features)) + features


def encode_lm_example(ids: Sequence[int]) -> bytes:
    """One window -> serialized tf.train.Example with the int64 feature `input_ids`."""
    return _ExampleBytes(0)(ids)


def run_fingerprint(files: Sequence[str], spec: EncoderSpec, options: LmDataOptions,
                    split: str) -> dict:
    """Everything a shard's content depends on (not num_workers), as a JSON-able dict."""
    return {
        "format_version": FORMAT_VERSION,
        "kind": "gpt_lm_windows",
        "split": split,
        "options": dataclasses.asdict(options),
        "encoder": spec.kind,
        "do_lower_case": bool(spec.do_lower_case) if spec.kind == "wordpiece" else None,
        "vocabulary_sha256": {flag: sha256_file(path) for flag, path in spec.files().items()},
        "input_files": [[os.path.abspath(p), os.path.getsize(p)] for p in files],
    }


class _LmShardWorker:
    """Turns one shard of raw documents into its window files (in a worker process or inline)."""

    def __init__(self, spec: EncoderSpec, options: LmDataOptions, prefix: str,
                 fingerprints: dict, crash_in_shard: int | None = None):
        self.encoder = spec.build()
        self.separator = separator_id(self.encoder, spec.kind, options.document_separator)
        self.options = options
        self.prefix = prefix
        self.fingerprints = fingerprints
        self.example = _ExampleBytes(len(self.encoder.encoder) + 8)
        self.crash_in_shard = crash_in_shard

    def _encode_line(self, doc: RawDocument, offset: int) -> list[int]:
        try:
            return self.encoder.encode_text(doc.lines[offset])
        except (ValueError, TypeError) as e:  # e.g. spaCy's [E088] for a > 1M-character line
            path, line_no = doc.location(offset)
            raise PretrainingDataError(
                f"{path}:{line_no}: cannot encode the line ({str(e).splitlines()[0][:200]})") \
                from None

    def __call__(self, index: int, documents: Sequence[RawDocument]) -> dict:
        """Processes shard `index`; returns {split: stats} (each also written beside its shard)."""
        start = time.time()
        n_ctx = self.options.n_ctx
        rng = random.Random(shard_seed(self.options.random_seed, index))
        fraction = self.options.held_out_fraction
        streams: dict[str, list[int]] = {"train": [], "heldout": []}
        counts = {split: {"documents": 0, "lines": 0, "lines_without_tokens": 0,
                          "empty_documents": 0} for split in streams}
        for doc in documents:
            split = "heldout" if fraction > 0 and rng.random() < fraction else "train"
            ids: list[int] = []
            for offset in range(len(doc.lines)):
                line_ids = self._encode_line(doc, offset)
                counts[split]["lines"] += 1
                if not line_ids:
                    counts[split]["lines_without_tokens"] += 1
                ids.extend(line_ids)
            if not ids:
                counts[split]["empty_documents"] += 1
                continue
            counts[split]["documents"] += 1
            streams[split].extend(ids)
            if self.separator is not None:
                streams[split].append(self.separator)
        results = {}
        prefixes = {"heldout": held_out_prefix(self.prefix), "train": self.prefix}
        for split in ("heldout", "train"):  # train last: its presence marks the shard finished
            if split not in self.fingerprints:
                continue
            stream = streams[split]
            n_windows = len(stream) // n_ctx
            windows = [stream[k * n_ctx:(k + 1) * n_ctx] for k in range(n_windows)]
            stats = {**counts[split], "tokens": len(stream), "windows": n_windows,
                     "tail_tokens_dropped": len(stream) - n_windows * n_ctx}
            marker = {"shard": index, "split": split, "raw_documents": len(documents),
                      "stats": stats, "fingerprint": self.fingerprints[split]}
            results[split] = write_shard(
                shard_path(prefixes[split], index), [self.example(w) for w in windows], marker,
                started=start, crash=index == self.crash_in_shard and split == "train")
        return results


def _finished_splits(prefixes: dict, index: int, fingerprints: dict) -> dict | None:
    """{split: stats} if every split of shard `index` is finished with these settings."""
    results = {}
    for split, fingerprint in fingerprints.items():
        done = finished_shard(prefixes[split], index, fingerprint)
        if done is None:
            return None
        results[split] = done
    return results


def create_gpt_lm_data(input_files: str | Sequence[str], output_file: str, spec: EncoderSpec,
                       options: LmDataOptions | None = None, *, num_workers: int = 1,
                       skip_invalid_lines: bool = False, overwrite: bool = False,
                       progress: bool = True, max_pending_shards: int | None = None,
                       _crash_in_shard: int | None = None) -> dict:
    """Writes the window shards (see the module docstring).

    Args:
      input_files: comma-separated paths/globs or a list; `.gz` allowed.
      output_file: output prefix (`out/lm` or `out/lm.tfrecord` -> `out/lm-00000.tfrecord` ...).
      spec: the text encoder (BPE files or WordPiece vocab).
      options: LmDataOptions.
      num_workers: processes; 1 works in this process. The output does not depend on it.
      skip_invalid_lines: skip (and count) non-UTF-8 lines instead of stopping.
      overwrite: replace the shards of a run with other settings under the same prefix.
      progress: show a tqdm bar over the input bytes (with ETA) on stderr.
      max_pending_shards: shards read ahead of the workers (default 2 x num_workers).
      _crash_in_shard: test hook: die (os._exit) half-way through writing this shard.

    Returns:
      summary dict (also in `<prefix>.summary.json`): documents, lines, tokens, windows,
      tail_tokens_dropped per split, shards written/skipped, files, seconds, tokens/s.

    Raises:
      PretrainingDataError: bad flags, vocabulary or input; finished shards stay, nothing
        half-written is left under a final name.
    """
    start = time.time()
    options = options or LmDataOptions()
    options.validate()
    spec.validate()
    check_num_workers(num_workers)
    # Build once here: checks the vocabulary files and the separator before any work.
    encoder = spec.build()
    separator_id(encoder, spec.kind, options.document_separator)
    del encoder
    files = expand_input_patterns(input_files)
    prefix = output_prefix(output_file)
    prefixes = {"train": prefix, "heldout": held_out_prefix(prefix)}
    splits = ["train"] + (["heldout"] if options.held_out_fraction > 0 else [])
    fingerprints = {s: run_fingerprint(files, spec, options, s) for s in splits}
    for split in splits:
        prepare_output(prefixes[split], fingerprints[split], overwrite)

    sources = [LineSource(p) for p in files]
    read_stats = ReadStats()
    totals = {s: {} for s in splits}
    shard_files: dict[str, list] = {s: [] for s in splits}
    written = skipped = 0
    from tqdm import tqdm
    bar = tqdm(total=sum(s.size for s in sources), unit="B", unit_scale=True,
               desc="create_gpt_lm_data", disable=not progress, dynamic_ncols=True)

    def account(results: dict, was_skipped: bool, span: int) -> None:
        nonlocal written, skipped
        for split, result in results.items():
            index = result["shard"]
            for key, value in result["stats"].items():
                totals[split][key] = totals[split].get(key, 0) + value
            shard_files[split].append((index, shard_path(prefixes[split], index)))
        if was_skipped:
            skipped += 1
        else:
            written += 1
        bar.update(span)
        bar.set_postfix(shards=written + skipped, windows=totals["train"].get("windows", 0))

    logging.info("*** Reading %d input file(s), writing %d-token windows to %s-NNNNN.tfrecord "
                 "with %d worker(s) ***", len(files), options.n_ctx, prefix, num_workers)
    try:
        run_shards(iter_shards(sources, read_stats, options.docs_per_shard, skip_invalid_lines),
                   lambda index: _finished_splits(prefixes, index, fingerprints), account,
                   functools.partial(_LmShardWorker, spec, options, prefix, fingerprints,
                                     _crash_in_shard),
                   num_workers=num_workers, max_pending_shards=max_pending_shards,
                   prefix=prefix)
    finally:
        bar.close()

    elapsed = time.time() - start
    summary = {"mode": "gpt_lm_windows", "n_ctx": options.n_ctx, "encoder": spec.kind,
               "shards": written + skipped, "shards_written": written, "shards_skipped": skipped,
               "invalid_lines_skipped": read_stats.invalid_lines,
               "invalid_line_examples": read_stats.invalid_line_examples,
               "num_workers": num_workers, "seconds": elapsed}
    for split in splits:
        summary[split] = {**totals[split],
                          "output_files": [p for _, p in sorted(shard_files[split])],
                          "file_pattern": prefixes[split] + "-*.tfrecord"}
    summary["tokens_per_second"] = (sum(t.get("tokens", 0) for t in totals.values()) / elapsed
                                    if elapsed else 0.0)
    for split in splits:
        atomic_write_json(prefixes[split] + ".summary.json", summary)
    logging.info("*** Wrote %s ***", json.dumps(
        {s: {k: summary[s].get(k, 0) for k in ("documents", "tokens", "windows",
                                                "tail_tokens_dropped")} for s in splits}))
    return summary


def _check_window_length(files: Sequence[str], n_ctx: int):
    import tensorflow as tf
    for path in files:
        for record in tf.data.TFRecordDataset([path]).take(1):
            parsed = tf.io.parse_single_example(
                record, {FEATURE_NAME: tf.io.VarLenFeature(tf.int64)})
            length = int(tf.size(parsed[FEATURE_NAME].values))
            if length != n_ctx:
                raise PretrainingDataError(
                    f"{path}: windows have {length} tokens, but n_ctx={n_ctx} was asked for; "
                    "pass the --n_ctx the data was written with")
            return


def lm_dataset(input_files: str | Sequence[str], n_ctx: int, batch_size: int | None = None,
               is_training: bool = True, *, seed: int | None = None, repeat: bool | None = None,
               shuffle_buffer_size: int = 10000, num_parallel_reads: int = 4,
               input_context=None):
    """The LM windows as a tf.data pipeline.

    Args:
      input_files: TFRecord files or globs (list or comma-separated), e.g.
        `out/lm-*.tfrecord` (training) or `out/lm_heldout-*.tfrecord` (held-out).
      n_ctx: the window length the files were written with (checked on the first record).
      batch_size: None -> one window per element; else batches of that size (training drops
        the last partial batch; evaluation keeps it).
      is_training: shuffle files and windows (seeded by `seed`) and repeat; otherwise file order,
        once.
      seed: shuffle seed (deterministic order when given).
      repeat: default: `is_training`.
      shuffle_buffer_size: window shuffle buffer.
      num_parallel_reads: files read at once (interleaved) in training.
      input_context: optional tf.distribute.InputContext (each pipeline reads its share).

    Returns:
      tf.data.Dataset of {"input_ids": int32 [n_ctx]} (or [batch_size, n_ctx] when batched).
    """
    import tensorflow as tf
    from bert_tf.pretraining_data.tfrecord_reader import decode_records, expand_input_files
    files = expand_input_files(input_files)
    _check_window_length(files, n_ctx)
    spec = {FEATURE_NAME: tf.io.FixedLenFeature([n_ctx], tf.int64)}
    repeat = is_training if repeat is None else repeat
    pipelines, pipeline_id = 1, 0
    if input_context is not None:
        pipelines, pipeline_id = input_context.num_input_pipelines, input_context.input_pipeline_id
    shard_files = pipelines > 1 and len(files) >= pipelines
    d = tf.data.Dataset.from_tensor_slices(tf.constant(files))
    if shard_files:
        d = d.shard(pipelines, pipeline_id)
    if is_training:
        d = d.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        d = d.interleave(tf.data.TFRecordDataset, cycle_length=max(1, min(num_parallel_reads,
                                                                            len(files))),
                         num_parallel_calls=tf.data.AUTOTUNE, deterministic=seed is not None)
        d = d.shuffle(shuffle_buffer_size, seed=seed, reshuffle_each_iteration=True)
    else:
        d = d.flat_map(tf.data.TFRecordDataset)
    if pipelines > 1 and not shard_files:  # fewer files than pipelines: every k-th window
        d = d.shard(pipelines, pipeline_id)
    if repeat:
        d = d.repeat()
    if batch_size is None:
        d = d.map(lambda r: {FEATURE_NAME: tf.cast(
            tf.io.parse_single_example(r, spec)[FEATURE_NAME], tf.int32)},
                  num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    else:
        d = d.batch(batch_size, drop_remainder=is_training)
        d = d.map(lambda records: decode_records(records, spec),
                  num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return d.prefetch(tf.data.AUTOTUNE)
