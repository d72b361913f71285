"""tf.train.Example serialisation of pretraining instances and TFRecord files, without TensorFlow.

* `ExampleEncoder` writes the protobuf bytes of a `tf.train.Example` directly, features in the
  original's order (input_ids, input_mask, segment_ids, masked_lm_positions, masked_lm_ids,
  masked_lm_weights, next_sentence_labels). The bytes equal what protobuf's pure-Python backend
  writes for the original's OrderedDict, so files are byte-identical to the original run with
  `PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python`.
* `tfrecord_frames` / `TFRecordShardWriter` frame records as TFRecords (length, masked CRC32C);
  CRC32C is computed with numpy (no TensorFlow import, so worker processes stay small).
* Files are written under a temporary name and renamed onto the final name only on success.
* `parse_example` / `read_tfrecord` decode them back (tests, logging, resume checks).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import struct
from typing import Iterator, Sequence

import numpy as np

from bert_tf.io_utils import pid_alive

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                 "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")

# ------------------------------------------------------------------------------------------
# CRC32C (Castagnoli), vectorised. CRC is linear over GF(2): for a message of n bytes,
#   crc_raw(init, data) = Z^n(init) XOR  XOR_i  Z^(n-1-i)(T[data[i]])
# where T is the byte table and Z advances the register by one zero byte. M[d, b] = Z^d(T[b]) and
# Zinit[n] = Z^n(0xFFFFFFFF) are tabulated once, so a record's CRC is one gather + XOR-reduce.


def _crc_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint32)
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table[b] = c
    return table


class _Crc32c:
    """CRC32C of many byte strings at once (tables grow with the longest message seen)."""

    def __init__(self) -> None:
        self._t = _crc_table()
        self._m = np.zeros((0, 256), dtype=np.uint32)
        self._zinit = np.zeros(0, dtype=np.uint32)
        self._grow(4096)

    def _grow(self, length: int) -> None:
        old = self._m.shape[0]
        if length <= old:
            return
        length = max(length, 2 * old)
        t = self._t
        m = np.empty((length, 256), dtype=np.uint32)
        zinit = np.empty(length + 1, dtype=np.uint32)
        if old:
            m[:old] = self._m
            zinit[:old + 1] = self._zinit
            row, z = m[old - 1], zinit[old]
        else:
            row = t.copy()
            m[0] = row
            z = np.uint32(0xFFFFFFFF)
            zinit[0] = z
            old = 1
            z = t[z & 0xFF] ^ (z >> np.uint32(8))
            zinit[1] = z
        for d in range(old, length):
            row = t[row & 0xFF] ^ (row >> np.uint32(8))
            m[d] = row
            z = t[z & 0xFF] ^ (z >> np.uint32(8))
            zinit[d + 1] = z
        self._m = m
        self._zinit = zinit

    def many(self, messages: Sequence[bytes]) -> np.ndarray:
        """CRC32C (uint32) of each message."""
        if not messages:
            return np.zeros(0, dtype=np.uint32)
        lengths = np.fromiter((len(x) for x in messages), dtype=np.int64, count=len(messages))
        longest = int(lengths.max())
        self._grow(longest)
        out = self._zinit[lengths].copy()
        if longest == 0:
            pass
        elif len(messages) >= 64 and longest * len(messages) <= 4 * int(lengths.sum()):
            out ^= self._columns(messages, longest)
        else:
            data = np.frombuffer(b"".join(messages), dtype=np.uint8)
            starts = np.zeros(len(messages), dtype=np.int64)
            np.cumsum(lengths[:-1], out=starts[1:])
            out ^= self._gather(data, lengths, starts)
        return out ^ np.uint32(0xFFFFFFFF)

    def _gather(self, data: np.ndarray, lengths: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """crc_raw(0, message) for a few messages: one table gather per byte + XOR-reduce."""
        out = np.zeros(len(lengths), dtype=np.uint32)
        nonempty = lengths > 0
        ends = starts + lengths
        # Byte j of message r sits (n_r - 1 - j) bytes before its end.
        pos_from_end = np.repeat(ends, lengths) - np.arange(data.size, dtype=np.int64) - 1
        vals = self._m.ravel()[pos_from_end * 256 + data]
        out[nonempty] = np.bitwise_xor.reduceat(vals, starts[nonempty])
        return out

    def _columns(self, messages: Sequence[bytes], longest: int) -> np.ndarray:
        """crc_raw(0, message) for many messages at once: the messages are right-aligned in a
        [count, longest] byte matrix (leading zero bytes leave a zero register unchanged) and
        the byte-wise CRC update runs column by column, vectorised across messages."""
        count = len(messages)
        padded = b"".join([bytes(longest - len(m)) + m for m in messages])
        columns = np.frombuffer(padded, dtype=np.uint8).reshape(count, longest).T.copy()
        table = self._t
        crc = np.zeros(count, dtype=np.uint32)
        eight = np.uint32(8)
        for column in columns:
            crc = table[(crc ^ column) & 0xFF] ^ (crc >> eight)
        return crc


@functools.lru_cache(maxsize=None)
def _crc_engine() -> _Crc32c:
    """The CRC tables, built on first use (a cache of constants: results never depend on it)."""
    return _Crc32c()


def crc32c(messages: Sequence[bytes]) -> np.ndarray:
    """CRC32C (Castagnoli) of each byte string, as uint32 array [len(messages)]."""
    return _crc_engine().many(messages)


def masked_crc(crc: np.ndarray) -> np.ndarray:
    """TFRecord's masked CRC32C (rotate right by 15, add 0xa282ead8) of uint32 checksums."""
    crc = crc.astype(np.uint32)
    return (((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(0xA282EAD8)).astype(
        np.uint32)


def tfrecord_frames(records: Sequence[bytes]) -> bytes:
    """The TFRecord file bytes of `records`: per record uint64 length, masked CRC32C of the length,
    data, masked CRC32C of the data (little-endian), as TensorFlow's TFRecordWriter writes."""
    if not records:
        return b""
    headers = [struct.pack("<Q", len(r)) for r in records]
    header_crcs = masked_crc(crc32c(headers))
    data_crcs = masked_crc(crc32c(records))
    parts = []
    for header, hcrc, rec, dcrc in zip(headers, header_crcs.tolist(), records, data_crcs.tolist()):
        parts.append(header)
        parts.append(struct.pack("<I", hcrc))
        parts.append(rec)
        parts.append(struct.pack("<I", dcrc))
    return b"".join(parts)


def read_tfrecord(path: str | os.PathLike, verify: bool = True) -> list[bytes]:
    """All records of a TFRecord file (uncompressed), checking the CRCs when `verify`.

    Raises:
      ValueError: a truncated file or a CRC mismatch (names the file and record number).
    """
    with open(path, "rb") as f:
        data = f.read()
    records = []
    offset = 0
    while offset < len(data):
        if offset + 12 > len(data):
            raise ValueError(f"{path}: truncated record header at byte {offset}")
        (length,) = struct.unpack_from("<Q", data, offset)
        (hcrc,) = struct.unpack_from("<I", data, offset + 8)
        start = offset + 12
        end = start + length
        if end + 4 > len(data):
            raise ValueError(f"{path}: record {len(records)} truncated")
        rec = data[start:end]
        (dcrc,) = struct.unpack_from("<I", data, end)
        if verify:
            want_h, want_d = masked_crc(crc32c([data[offset:offset + 8], rec])).tolist()
            if want_h != hcrc or want_d != dcrc:
                raise ValueError(f"{path}: CRC mismatch in record {len(records)}")
        records.append(rec)
        offset = end + 4
    return records


# ------------------------------------------------------------------------------------------
# tf.train.Example wire format.

def varint(value: int) -> bytes:
    """A non-negative int as a protocol-buffer base-128 varint."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class ExampleEncoder:
    """Serialises pretraining instances as `tf.train.Example` bytes.

    Args:
      max_seq_length: padded length of input_ids / input_mask / segment_ids.
      max_predictions_per_seq: padded length of the masked_lm_* features.
      vocab_size: ids are in [0, vocab_size) (ids beyond still work, just slower).
    """

    def __init__(self, max_seq_length: int, max_predictions_per_seq: int, vocab_size: int):
        self.max_seq_length = max_seq_length
        self.max_predictions_per_seq = max_predictions_per_seq
        # Varints of every id and of every length an example can have (so `_v[n]` never misses
        # for lengths: an example is < 8 bytes per position plus the feature keys).
        size = max(vocab_size, 1 << 14, 8 * (max_seq_length + max_predictions_per_seq) + 512)
        self._v = [varint(i) for i in range(size)]
        self._keys = {name: b"\x0a" + varint(len(name)) + name.encode() for name in FEATURE_NAMES}
        self._one_f = struct.pack("<f", 1.0)
        self._zero_f = struct.pack("<f", 0.0)
        self._cache: dict = {}
        self._prefix = {name: key + b"\x12" for name, key in self._keys.items()}

    def _len(self, n: int) -> bytes:
        v = self._v
        return v[n] if n < len(v) else varint(n)

    def _entry(self, name: str, kind: bytes, payload: bytes) -> bytes:
        ln = self._len
        lst = b"\x0a" + ln(len(payload)) + payload if payload else b""
        feature = kind + ln(len(lst)) + lst
        entry = self._keys[name] + b"\x12" + ln(len(feature)) + feature
        return b"\x0a" + ln(len(entry)) + entry

    def encode(self, input_ids: Sequence[int], segment_b_start: int,
               masked_lm_positions: Sequence[int], masked_lm_ids: Sequence[int],
               next_sentence_label: int) -> bytes:
        """Bytes of one `tf.train.Example`.

        Args:
          input_ids: the (masked) token ids, unpadded, len <= max_seq_length.
          segment_b_start: index of the first segment-B position (segment_ids are 0 before it and
            1 from it to the end of input_ids); len(input_ids) for single-segment examples.
          masked_lm_positions: sorted positions, len <= max_predictions_per_seq.
          masked_lm_ids: the original ids at those positions.
          next_sentence_label: 1 = random next (NotNext), 0 = actual next (IsNext).

        Returns:
          Serialized `tf.train.Example`; int64 features padded with 0, masked_lm_weights
          (float32) 1.0 for real predictions and 0.0 for padding.
        """
        n = len(input_ids)
        pad = self.max_seq_length - n
        if pad < 0:
            raise ValueError(f"{n} input ids exceed max_seq_length={self.max_seq_length}")
        k = len(masked_lm_positions)
        mpad = self.max_predictions_per_seq - k
        if mpad < 0:
            raise ValueError(
                f"{k} predictions exceed max_predictions_per_seq={self.max_predictions_per_seq}")
        entry = self._entry
        kind_int = b"\x1a"
        # Entries that only depend on lengths are cached.
        cache = self._cache
        mask_seg = cache.get((n, segment_b_start))
        if mask_seg is None:
            zeros = b"\x00" * pad
            mask_seg = (entry("input_mask", kind_int, b"\x01" * n + zeros)
                        + entry("segment_ids", kind_int, b"\x00" * segment_b_start
                                + b"\x01" * (n - segment_b_start) + zeros))
            cache[(n, segment_b_start)] = mask_seg
        tail = cache.get((k, next_sentence_label, "tail"))
        if tail is None:
            tail = (entry("masked_lm_weights", b"\x12", self._one_f * k + self._zero_f * mpad)
                    + entry("next_sentence_labels", kind_int, self._v[next_sentence_label]))
            cache[(k, next_sentence_label, "tail")] = tail
        v = self._v
        try:
            ids = b"".join([v[x] for x in input_ids])
            positions = b"".join([v[x] for x in masked_lm_positions])
            labels = b"".join([v[x] for x in masked_lm_ids])
        except IndexError:  # An id beyond the table (a vocab larger than announced).
            ids, positions, labels = (b"".join([varint(int(x)) for x in seq]) for seq in
                                      (input_ids, masked_lm_positions, masked_lm_ids))
        mzeros = b"\x00" * mpad
        ln = v.__getitem__  # Lengths always fit the table (see __init__).
        # Same bytes as _entry(), inlined for the three features that change per example:
        # MapEntry{key, value: Feature{int64_list: Int64List{packed values}}}.
        parts = []
        for prefix, payload in ((self._prefix["input_ids"], ids + b"\x00" * pad),
                                (self._prefix["masked_lm_positions"], positions + mzeros),
                                (self._prefix["masked_lm_ids"], labels + mzeros)):
            lst = b"\x0a" + ln(len(payload)) + payload
            feature = b"\x1a" + ln(len(lst)) + lst
            body = prefix + ln(len(feature)) + feature
            parts.append(b"\x0a" + ln(len(body)) + body)
        features = b"".join((parts[0], mask_seg, parts[1], parts[2], tail))
        return b"\x0a" + ln(len(features)) + features  # Example.features (field 1)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, object]]:
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
        elif wire == 2:
            n, pos = _read_varint(buf, pos)
            value = buf[pos:pos + n]
            pos += n
        elif wire == 5:
            value = buf[pos:pos + 4]
            pos += 4
        elif wire == 1:
            value = buf[pos:pos + 8]
            pos += 8
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield field, wire, value


def parse_example(data: bytes) -> dict[str, list]:
    """Decodes a serialized `tf.train.Example` with int64/float features.

    Returns:
      dict feature name -> list of ints (int64_list) or floats (float_list), in file order.
    """
    out: dict[str, list] = {}
    for field, _, features in _fields(data):
        if field != 1:
            continue
        for f2, _, entry in _fields(features):  # map<string, Feature> entries
            if f2 != 1:
                continue
            key, feature = "", b""
            for f3, _, value in _fields(entry):
                if f3 == 1:
                    key = value.decode()
                elif f3 == 2:
                    feature = value
            values: list = []
            for kind, _, lst in _fields(feature):
                for f4, wire, v in _fields(lst):
                    if f4 != 1:
                        continue
                    if kind == 3:  # Int64List
                        if wire == 2:
                            pos = 0
                            while pos < len(v):
                                x, pos = _read_varint(v, pos)
                                values.append(x - (1 << 64) if x >= 1 << 63 else x)
                        else:
                            values.append(v - (1 << 64) if v >= 1 << 63 else v)
                    elif kind == 2:  # FloatList
                        values.extend(struct.unpack(f"<{len(v) // 4}f", v))
                    else:
                        values.append(v)
            out[key] = values
    return out


# ------------------------------------------------------------------------------------------
# Files written under a temporary name.

def temporary_path(path: str) -> str:
    """Where `path` is written before being renamed onto its final name: `.<name>.tmp-<pid>`."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.tmp-{os.getpid()}")



def remove_stale_temporaries(path: str) -> list[str]:
    """Deletes `.<name>.tmp-<pid>` files of `path` left by processes that no longer run (a
    killed earlier run of the same output); returns the paths removed."""
    directory, name = os.path.split(os.path.abspath(path))
    if not os.path.isdir(directory):
        return []
    pattern = re.compile(r"\." + re.escape(name) + r"\.tmp-(\d+)")
    removed = []
    for entry in os.listdir(directory):
        m = pattern.fullmatch(entry)
        if m and not pid_alive(int(m.group(1))):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(directory, entry))
            removed.append(os.path.join(directory, entry))
    return removed


def check_output_file(path: str, flag: str = "--output_file") -> None:
    """Raises PretrainingDataError (naming `flag`) unless a file can be written at `path`: it is
    not a folder, its parent is a folder (or can be created) that this process can write."""
    from bert_tf.pretraining_data.options import PretrainingDataError

    if os.path.isdir(path):
        raise PretrainingDataError(
            f"{flag}={path} is a folder; expected a file name (e.g. "
            f"{os.path.join(path, 'tf_examples.tfrecord')})")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise PretrainingDataError(f"{flag}={path}: {parent} is a file; expected a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PretrainingDataError(f"{flag}={path}: cannot write in {parent} (permission "
                                   "denied)")


class TFRecordShardWriter:
    """Writes records to `path` atomically: all go to a temporary file, which `commit()` renames
    onto `path`; `abort()` (or leaving the `with` block by an exception) removes it.

    Args:
      path: final output path (local file system).
      flush_every: records buffered before their frames are computed and written.
    """

    def __init__(self, path: str | os.PathLike, flush_every: int = 2048):
        self.path = os.fspath(path)
        from bert_tf import io_utils  # local paths, or any TensorFlow file system (gs://)

        io_utils.makedirs(io_utils.dirname(self.path))
        self.tmp_path = temporary_path(self.path)
        self._f = io_utils.open_file(self.tmp_path, "wb")
        self._sha256 = hashlib.sha256()
        self._buffer: list[bytes] = []
        self._flush_every = flush_every
        self.num_records = 0

    def write(self, record: bytes) -> None:
        """Queues one serialized record."""
        self._buffer.append(record)
        self.num_records += 1
        if len(self._buffer) >= self._flush_every:
            self.flush()

    def write_many(self, records: Sequence[bytes]) -> None:
        """Queues several serialized records."""
        for start in range(0, len(records), self._flush_every):
            self._buffer.extend(records[start:start + self._flush_every])
            self.num_records += len(records[start:start + self._flush_every])
            self.flush()

    def flush(self) -> None:
        """Writes the queued records' frames to the temporary file."""
        if self._buffer:
            frames = tfrecord_frames(self._buffer)
            self._f.write(frames)
            self._sha256.update(frames)
            self._buffer = []

    def sha256(self) -> str:
        """Hex SHA-256 of the bytes written so far (flushes the queued records first): what
        `scalable` records in the shard's done-marker and verifies on resume."""
        self.flush()
        return self._sha256.hexdigest()

    def size(self) -> int:
        """Bytes written so far (flushes the queued records to the file first)."""
        self.flush()
        self._f.flush()
        return self._f.tell()

    def commit(self) -> None:
        """Flushes, fsyncs and renames the temporary file onto `path`."""
        self.flush()
        from bert_tf import io_utils

        self._f.flush()
        if not io_utils.is_remote(self.path):
            os.fsync(self._f.fileno())
        self._f.close()
        io_utils.rename(self.tmp_path, self.path)

    def abort(self) -> None:
        """Closes and deletes the temporary file; `path` is left as it was."""
        with contextlib.suppress(OSError):
            self._f.close()
        from bert_tf import io_utils

        with contextlib.suppress(OSError):
            io_utils.remove(self.tmp_path)

    def __enter__(self) -> "TFRecordShardWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            if not self._f.closed:
                self.commit()
        else:
            self.abort()


class RoundRobinWriter:
    """Writes instances round-robin over several output files, as the original does (instance i
    goes to file i mod len(paths)). Nothing appears under a final name before `commit()`."""

    def __init__(self, paths: Sequence[str]):
        if not paths:
            raise ValueError("no output file given")
        self.writers = [TFRecordShardWriter(p) for p in paths]
        self._next = 0
        self.num_records = 0

    def write(self, record: bytes) -> None:
        """Writes one serialized record to the next file in turn."""
        self.writers[self._next].write(record)
        self._next = (self._next + 1) % len(self.writers)
        self.num_records += 1

    def commit(self) -> None:
        """Renames every temporary file onto its final name."""
        for w in self.writers:
            w.flush()
        for w in self.writers:
            w.commit()

    def abort(self) -> None:
        """Deletes every temporary file."""
        for w in self.writers:
            w.abort()

    def __enter__(self) -> "RoundRobinWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()
