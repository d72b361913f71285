"""tf.data input pipeline for pretraining TFRecords, with the original `run_pretraining.py`
input_fn semantics.

Training (`is_training=True`), as the original:
  file names -> repeat -> shuffle the file names (buffer = number of files) -> read
  `min(num_cpu_threads, len(files))` files at a time, interleaved (the original's "sloppy"
  parallel_interleave: not deterministic unless a `seed` is given or `deterministic=True`)
  -> shuffle records (buffer 100) -> batch (drop_remainder=True) -> decode.
Evaluation (`is_training=False`), as the original: the files in the given order, no shuffle,
repeated (the original evaluates for a fixed number of steps; pass `repeat=False` for a single
pass), batch with drop_remainder=True -> decode.

Decoding casts every int64 feature to int32 (as the original did for TPUs). Feature names are
the original's: input_ids, input_mask, segment_ids [batch, max_seq_length] int32;
masked_lm_positions, masked_lm_ids [batch, max_predictions_per_seq] int32; masked_lm_weights
[batch, max_predictions_per_seq] float32; next_sentence_labels [batch, 1] int32.

Before the pipeline is built, `check_pretraining_files` checks every file against the flags: the
file's record framing (a truncated file is named with the record it ends in) and the first
record's features (names, types and lengths against `--max_seq_length` /
`--max_predictions_per_seq`), so a mismatch is one line naming the file, the record (counted from
0) and the flag, not a TensorFlow error in the middle of training.

Distribution: pass `input_context` (tf.distribute.InputContext, as given to the dataset function
of `distribute_datasets_from_function`); files (or, with fewer files than input pipelines,
records) are then sharded per pipeline. `batch_size` is what each pipeline yields, i.e. the
per-replica batch (`input_context.get_per_replica_batch_size(global_batch)`).
"""
from __future__ import annotations

import mmap
import os
import struct
from typing import Callable, Sequence

import tensorflow as tf
from absl import logging

from bert_tf import io_utils
from bert_tf.errors import UserInputError

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                 "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")


def expand_input_files(input_files: str | Sequence[str]) -> list[str]:
    """Comma-separated globs (or a list of globs) -> files, pattern by pattern as the original's
    run_pretraining (`tf.io.gfile.glob`, sorted within a pattern).

    Raises:
      TFRecordInputError: a pattern matches nothing (names it).
    """
    return io_utils.expand_file_patterns(
        input_files, "--input_file", TFRecordInputError,
        "; expected TFRecord files of create_pretraining_data.py")


def name_to_features(max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """The parsing spec of the original: FixedLenFeature per feature name."""
    return {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }


class TFRecordInputError(UserInputError):
    """A pretraining TFRecord file that does not fit the flags (names file, record, flag)."""


# Inputs up to this size (all files together) get every record header walked before training
# (about 2-8 s per GB).
FULL_SCAN_MAX_BYTES = 2 << 30

_INT_FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                 "masked_lm_ids", "next_sentence_labels")


def _expected_lengths(max_seq_length: int, max_predictions_per_seq: int) -> dict:
    seq = (max_seq_length, f"--max_seq_length={max_seq_length}")
    pred = (max_predictions_per_seq, f"--max_predictions_per_seq={max_predictions_per_seq}")
    return {"input_ids": seq, "input_mask": seq, "segment_ids": seq,
            "masked_lm_positions": pred, "masked_lm_ids": pred, "masked_lm_weights": pred,
            "next_sentence_labels": (1, "one label per example")}


def _truncated(path: str, record: int, detail: str) -> TFRecordInputError:
    return TFRecordInputError(f"{path}: record {record}: truncated ({detail}); expected a "
                              "complete TFRecord file (was it copied or written completely?)")


def _check_header(path: str, header: bytes) -> None:
    from bert_tf.pretraining_data.writer import crc32c, masked_crc

    (hcrc,) = struct.unpack_from("<I", header, 8)
    if int(masked_crc(crc32c([header[:8]]))[0]) != hcrc:
        raise TFRecordInputError(f"{path}: record 0: bad header checksum; expected a TFRecord "
                                 "file (uncompressed) of create_pretraining_data.py")


def _check_data(path: str, data: bytes, data_crc: bytes) -> None:
    from bert_tf.pretraining_data.writer import crc32c, masked_crc

    if int(masked_crc(crc32c([data]))[0]) != struct.unpack("<I", data_crc)[0]:
        raise TFRecordInputError(f"{path}: record 0: data checksum mismatch (damaged file)")


def _scan_frames(path: str, scan_all: bool) -> tuple[int, bytes | None]:
    """Walks the TFRecord framing of `path` (record headers only; `scan_all=False`: the first
    record only). Returns (records seen, the first record's data or None for an empty file).

    Raises TFRecordInputError for a truncated file or a damaged first record.
    """
    local = "://" not in path
    with (open(path, "rb") if local else tf.io.gfile.GFile(path, "rb")) as f:
        size = os.path.getsize(path) if local else f.size()
        if size == 0:
            return 0, None
        header = f.read(12)
        if len(header) < 12:
            raise _truncated(path, 0, f"the file ends {size} bytes into its 12-byte header")
        _check_header(path, header)
        (length,) = struct.unpack_from("<Q", header, 0)
        if 12 + length + 4 > size:
            raise _truncated(path, 0, f"expected {length} data bytes + checksum, the file ends "
                                      f"{12 + length + 4 - size} bytes short")
        first = f.read(length)
        _check_data(path, first, f.read(4))
        if not scan_all or not local:
            return 1, first
    count, offset = 1, 12 + length + 4
    unpack = struct.Struct("<Q").unpack_from
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        while offset < size:
            if offset + 12 > size:
                raise _truncated(path, count, f"the file ends {size - offset} bytes into its "
                                              "12-byte header")
            end = offset + 12 + unpack(data, offset)[0] + 4
            if end > size:
                raise _truncated(path, count, f"expected {end - offset - 16} data bytes + "
                                              f"checksum, the file ends {end - size} bytes short")
            offset = end
            count += 1
    return count, first


def check_pretraining_files(files: Sequence[str], max_seq_length: int,
                            max_predictions_per_seq: int, scan_all: bool | None = None) -> None:
    """Checks pretraining TFRecords against the flags before any training step.

    Per file: the TFRecord framing (all record headers when `scan_all`; default: when all files
    are local and `FULL_SCAN_MAX_BYTES` or less in all, else only the first record) and the
    first record's features: every name of
    `name_to_features`, int64 or float as the original writes them, and
    `--max_seq_length` / `--max_predictions_per_seq` values each.

    Raises:
      TFRecordInputError: one line naming the file, the record (from 0), what was expected
        (the flag) and what was found.
    """
    expected = _expected_lengths(max_seq_length, max_predictions_per_seq)
    if scan_all is None:
        local = all("://" not in p for p in files)
        scan_all = local and sum(os.path.getsize(p) for p in files) <= FULL_SCAN_MAX_BYTES
        if local and not scan_all:
            logging.info("Input files larger than %d bytes in all: checking their first records "
                         "only (a damaged record later is reported when training reaches it)",
                         FULL_SCAN_MAX_BYTES)
    for path in files:
        try:
            count, first = _scan_frames(path, scan_all)
        except tf.errors.OpError as e:
            raise TFRecordInputError(f"{path}: cannot read ({e.message})") from None
        except OSError as e:
            raise TFRecordInputError(f"{path}: cannot read ({e.strerror or e})") from None
        if first is None:
            raise TFRecordInputError(f"{path}: contains no records; expected pretraining "
                                     "examples of create_pretraining_data.py")
        try:
            example = tf.train.Example.FromString(first)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError
            raise TFRecordInputError(f"{path}: record 0: not a tf.train.Example; expected "
                                     "pretraining examples of create_pretraining_data.py") \
                from None
        features = example.features.feature
        for name, (length, flag) in expected.items():
            if name not in features:
                raise TFRecordInputError(
                    f"{path}: record 0: no feature {name!r}; expected the pretraining features "
                    f"{', '.join(FEATURE_NAMES)} (a file of create_pretraining_data.py)")
            feature = features[name]
            kind = feature.WhichOneof("kind")
            want_kind = "int64_list" if name in _INT_FEATURES else "float_list"
            if kind != want_kind:
                raise TFRecordInputError(f"{path}: record 0: feature {name!r} is a {kind}; "
                                         f"expected a {want_kind}")
            found = len(getattr(feature, kind).value)
            if found != length:
                raise TFRecordInputError(
                    f"{path}: record 0: feature {name!r} has {found} values; expected {length} "
                    f"({flag}; the file was written with a different setting)")


def decode_records(records: tf.Tensor, features_spec: dict) -> dict:
    """Serialized examples [batch] (string) -> dict of features, int64 cast to int32."""
    parsed = tf.io.parse_example(records, features_spec)
    return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
            for name, t in parsed.items()}


def pretraining_dataset(input_files: str | Sequence[str], max_seq_length: int,
                        max_predictions_per_seq: int, batch_size: int, is_training: bool, *,
                        num_cpu_threads: int = 4,
                        input_context: tf.distribute.InputContext | None = None,
                        seed: int | None = None, repeat: bool = True,
                        deterministic: bool | None = None,
                        shuffle_buffer_size: int = 100,
                        check_files: bool = True) -> tf.data.Dataset:
    """The pretraining input pipeline (see the module docstring).

    Args:
      input_files: TFRecord files or globs (list or comma-separated string).
      max_seq_length, max_predictions_per_seq: as used to write the files.
      batch_size: examples per batch of this pipeline (with `input_context`: the per-replica
        batch, `input_context.get_per_replica_batch_size(global_batch_size)`).
      is_training: training (shuffle, interleave) or evaluation (file order) semantics.
      num_cpu_threads: as the original (cycle length bound and parallel decoding).
      input_context: optional tf.distribute.InputContext for per-pipeline sharding.
      seed: seeds the file and record shuffles; also makes the interleave deterministic
        unless `deterministic` says otherwise.
      repeat: repeat indefinitely (True in the original, for training and for evaluation).
      deterministic: interleave order; default: deterministic only if `seed` is given (the
        original's training interleave is "sloppy").
      shuffle_buffer_size: record shuffle buffer (100 in the original).
      check_files: first run `check_pretraining_files` (framing + first record's shapes).

    Raises:
      TFRecordInputError: see `expand_input_files` and `check_pretraining_files`.

    Returns:
      tf.data.Dataset of dicts: input_ids, input_mask, segment_ids [B, max_seq_length] int32;
      masked_lm_positions, masked_lm_ids [B, max_predictions_per_seq] int32;
      masked_lm_weights [B, max_predictions_per_seq] float32; next_sentence_labels [B, 1] int32.
    """
    files = expand_input_files(input_files)
    if check_files:
        check_pretraining_files(files, max_seq_length, max_predictions_per_seq)
    spec = name_to_features(max_seq_length, max_predictions_per_seq)
    num_pipelines, pipeline_id = 1, 0
    if input_context is not None:
        num_pipelines = input_context.num_input_pipelines
        pipeline_id = input_context.input_pipeline_id
    shard_files = num_pipelines > 1 and len(files) >= num_pipelines
    shard_records = num_pipelines > 1 and not shard_files

    if is_training:
        if deterministic is None:
            deterministic = seed is not None
        d = tf.data.Dataset.from_tensor_slices(tf.constant(files))
        if shard_files:
            d = d.shard(num_pipelines, pipeline_id)
        if repeat:
            d = d.repeat()
        d = d.shuffle(buffer_size=len(files), seed=seed)
        # Number of files read in parallel, as the original.
        cycle_length = max(1, min(num_cpu_threads, len(files)))
        d = d.interleave(tf.data.TFRecordDataset, cycle_length=cycle_length,
                         num_parallel_calls=cycle_length, deterministic=deterministic)
        if shard_records:
            d = d.shard(num_pipelines, pipeline_id)
        d = d.shuffle(buffer_size=shuffle_buffer_size, seed=seed)
    else:
        if shard_files:  # This pipeline's files, still in the given order.
            d = tf.data.TFRecordDataset(files[pipeline_id::num_pipelines])
        else:
            d = tf.data.TFRecordDataset(files)
            if shard_records:
                d = d.shard(num_pipelines, pipeline_id)
        if repeat:
            d = d.repeat()
    # Batch then parse the whole batch: the same tensors as the original's per-record
    # map_and_batch, in one vectorized parse.
    d = d.batch(batch_size, drop_remainder=True)
    d = d.map(lambda records: decode_records(records, spec),
              num_parallel_calls=num_cpu_threads,
              deterministic=True if deterministic is None else deterministic)
    return d.prefetch(tf.data.AUTOTUNE)


def input_fn_builder(input_files: str | Sequence[str], max_seq_length: int,
                     max_predictions_per_seq: int, is_training: bool,
                     num_cpu_threads: int = 4) -> Callable[[dict], tf.data.Dataset]:
    """The original's `input_fn_builder`: returns `input_fn(params)` reading
    `params["batch_size"]` (and optional `params["seed"]`, `params["input_context"]`)."""

    def input_fn(params: dict) -> tf.data.Dataset:
        return pretraining_dataset(input_files, max_seq_length, max_predictions_per_seq,
                                   params["batch_size"], is_training,
                                   num_cpu_threads=num_cpu_threads,
                                   input_context=params.get("input_context"),
                                   seed=params.get("seed"))

    return input_fn
