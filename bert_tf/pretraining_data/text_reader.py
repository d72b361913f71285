"""Reading the pretraining corpus: one sentence per line, a blank line between documents.

Lines are split on "\\n" only, lose every "\\r" and are decoded as strict UTF-8 (the original
read files with `tf.gfile.GFile(..., "r")`, which does exactly that), then `str.strip()`-ed.
A blank line starts a new document; a line whose tokenization is empty adds nothing. As in the
original, documents are not reset between files (a file that does not end with a blank line
continues into the next file's first document), and empty documents are dropped. `.gz` files
are decompressed on the fly.
"""
from __future__ import annotations

import dataclasses
import gzip
import io
import os
from typing import BinaryIO, Callable, Iterator, Mapping, Sequence

from bert_tf import io_utils
from bert_tf.pretraining_data.options import PretrainingDataError

Sentence = list  # list[int]: WordPiece ids of one line
Document = list  # list[Sentence]

def expand_input_patterns(patterns: str | Sequence[str], flag: str = "--input_file") -> list[str]:
    """Comma-separated paths or glob patterns -> list of files.

    Each glob's matches are sorted; the patterns' order is kept (as the original, which extended
    the list pattern by pattern).

    Raises:
      PretrainingDataError: a pattern matches nothing, a named file does not exist (names the
        flag and the pattern) or is empty (names the file).
    """
    files = io_utils.expand_file_patterns(patterns, flag, PretrainingDataError)
    for path in files:
        if not io_utils.is_remote(path) and os.path.getsize(path) == 0:
            raise PretrainingDataError(
                f"{path}: the file is empty (0 bytes); the input must be text with one "
                "sentence per line and a blank line between documents")
    return files


class _CountingReader(io.RawIOBase):
    """Wraps a binary file, counting the bytes read (compressed bytes for .gz progress)."""

    def __init__(self, raw: BinaryIO):
        self._raw = raw
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._raw.readinto(buffer)
        self.bytes_read += n or 0
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


@dataclasses.dataclass
class LineSource:
    """Iterates the raw lines of one input file (bytes, "\\n" kept) and reports progress.

    Attributes:
      path: the file.
      size: its size in bytes on disk (compressed size for .gz), 0 if unknown.
    """

    path: str
    size: int = 0
    _counter: _CountingReader | None = None

    def __post_init__(self) -> None:
        if not self.size:
            try:
                self.size = os.path.getsize(self.path)
            except OSError:
                self.size = 0

    @property
    def bytes_read(self) -> int:
        """Bytes of the file (on disk) consumed so far."""
        return self._counter.bytes_read if self._counter is not None else 0

    def lines(self) -> Iterator[bytes]:
        """Yields the file's lines as bytes (split on b"\\n")."""
        if "://" in self.path:
            from bert_tf import io_utils as remote_io  # tf.io.gfile as a raw stream (readinto)

            raw = remote_io.open_file(self.path, "rb")
        else:
            raw = open(self.path, "rb", buffering=0)
        self._counter = _CountingReader(raw)
        buffered = io.BufferedReader(self._counter, buffer_size=1 << 20)
        stream: BinaryIO = buffered
        try:
            if self.path.endswith(".gz"):
                stream = gzip.GzipFile(fileobj=buffered, mode="rb")
            yield from stream
        except (OSError, EOFError) as e:
            raise PretrainingDataError(f"{self.path}: cannot read ({e})") from None
        finally:
            stream.close()  # A GzipFile does not close the file object it reads from.
            buffered.close()


def decode_line(raw: bytes, path: str, line_no: int) -> str:
    """One raw line -> str, as the original's `tf.gfile.GFile(path, "r").readline()` gives it:
    every carriage return (b"\\r") is dropped, anywhere in the line, then the bytes are decoded
    as strict UTF-8.

    Raises:
      PretrainingDataError: invalid UTF-8, naming the file, line and column.
    """
    if b"\r" in raw:
        raw = raw.replace(b"\r", b"")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PretrainingDataError(
            f"{path}:{line_no}: not valid UTF-8 ({e.reason}: byte 0x{raw[e.start]:02x} at column "
            f"{e.start + 1}); the corpus must be UTF-8 text. Fix or drop the line, or pass "
            "--skip_invalid_lines to skip such lines (they are counted in the summary)") from None


@dataclasses.dataclass
class ReadStats:
    """What reading the corpus saw.

    Attributes:
      lines: lines read.
      invalid_lines: lines skipped because they were not UTF-8 (only with skip_invalid_lines).
      invalid_line_examples: up to 10 `file:line` of those.
      empty_lines_tokens: non-blank lines whose tokenization was empty (e.g. only control chars).
    """

    lines: int = 0
    invalid_lines: int = 0
    invalid_line_examples: list = dataclasses.field(default_factory=list)
    empty_lines_tokens: int = 0

    def add_invalid(self, path: str, line_no: int) -> None:
        self.invalid_lines += 1
        if len(self.invalid_line_examples) < 10:
            self.invalid_line_examples.append(f"{path}:{line_no}")

    def merge(self, other: "ReadStats") -> None:
        self.lines += other.lines
        self.empty_lines_tokens += other.empty_lines_tokens
        for example in other.invalid_line_examples:
            if len(self.invalid_line_examples) < 10:
                self.invalid_line_examples.append(example)
        self.invalid_lines += other.invalid_lines


@dataclasses.dataclass
class RawDocument:
    """A document before tokenization: its stripped non-blank lines and where they come from.

    Attributes:
      lines: the document's lines (str, stripped, non-empty).
      path: file of its first line.
      line_no: 1-based line number of its first line.
      runs: [(index in `lines`, path, line_no)] where a new run of consecutive lines starts
        (the first run is (0, path, line_no); more only across a file boundary or a skipped line).
    """

    lines: list
    path: str
    line_no: int
    runs: list = dataclasses.field(default_factory=list)

    def location(self, index: int) -> tuple[str, int]:
        """(path, line_no) of `lines[index]`."""
        path, line_no, start = self.path, self.line_no, 0
        for run_start, run_path, run_line in self.runs:
            if run_start > index:
                break
            path, line_no, start = run_path, run_line, run_start
        return path, line_no + index - start


def iter_raw_documents(sources: Sequence[LineSource], read_stats: ReadStats,
                       skip_invalid_lines: bool = False) -> Iterator[RawDocument]:
    """Streams the corpus as RawDocuments (no tokenization), in file order.

    A document runs from a non-blank line to the next blank line; it continues across a file
    boundary, as in the original.

    Raises:
      PretrainingDataError: invalid UTF-8 (unless skip_invalid_lines), or a file that holds no
        text at all (names the file).
    """
    current: RawDocument | None = None
    for source in sources:
        file_has_text = False
        line_no = 0
        contiguous = False  # Does the next line continue `current`'s last run?
        for raw in source.lines():
            line_no += 1
            try:
                line = decode_line(raw, source.path, line_no)
            except PretrainingDataError:
                if not skip_invalid_lines:
                    raise
                read_stats.add_invalid(source.path, line_no)
                contiguous = False
                continue
            line = line.strip()
            if not line:
                if current is not None:
                    yield current
                    current = None
                continue
            file_has_text = True
            if current is None:
                current = RawDocument([], source.path, line_no, [(0, source.path, line_no)])
            elif not contiguous:
                current.runs.append((len(current.lines), source.path, line_no))
            contiguous = True
            current.lines.append(line)
        read_stats.lines += line_no
        if not file_has_text:
            raise PretrainingDataError(
                f"{source.path}: the file is empty (no non-blank line); the input must be text "
                "with one sentence per line and a blank line between documents")
    if current is not None:
        yield current


class IdTokenizer:
    """Text line -> WordPiece ids with a `FullTokenizer`-like object (`.tokenize`, `.vocab`).

    Args:
      tokenizer: object with `tokenize(text) -> list[str]` and `vocab` (token -> id).
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.vocab: Mapping[str, int] = tokenizer.vocab

    def __call__(self, line: str, path: str = "<text>", line_no: int = 0) -> list[int]:
        """WordPiece ids of `line`.

        Raises:
          PretrainingDataError: a token missing from the vocab (e.g. no [UNK] in it), naming
            file and line.
        """
        tokens = self.tokenizer.tokenize(line)
        vocab = self.vocab
        try:
            return [vocab[t] for t in tokens]
        except KeyError as e:
            raise PretrainingDataError(
                f"{path}:{line_no}: token {e.args[0]!r} is not in the vocab (a vocab without "
                "[UNK] cannot represent unknown words)") from None


def tokenize_documents(raw_docs: Sequence[RawDocument], to_ids: Callable,
                       read_stats: ReadStats) -> tuple[list, list]:
    """Tokenizes RawDocuments; drops the ones that end up empty.

    Returns:
      (documents, locations): documents as lists of sentences (lists of ids) and, for each,
      the (path, line_no) where it starts.
    """
    documents, locations = [], []
    for doc in raw_docs:
        sentences = []
        single_run = len(doc.runs) <= 1
        for offset, line in enumerate(doc.lines):
            try:
                ids = to_ids(line, doc.path, doc.line_no + offset)
            except PretrainingDataError:
                if single_run:
                    raise
                ids = to_ids(line, *doc.location(offset))  # Re-raise with the exact line.
            if ids:
                sentences.append(ids)
            else:
                read_stats.empty_lines_tokens += 1
        if sentences:
            documents.append(sentences)
            locations.append((doc.path, doc.line_no))
    return documents, locations


def read_documents(input_files: Sequence[str], to_ids: Callable, read_stats: ReadStats,
                   skip_invalid_lines: bool = False) -> tuple[list, list]:
    """The whole corpus as tokenized documents, in file order (the original's `all_documents`
    before its shuffle).

    Returns:
      (documents, locations) as `tokenize_documents`.
    """
    sources = [LineSource(p) for p in input_files]
    documents, locations = [], []
    for raw in iter_raw_documents(sources, read_stats, skip_invalid_lines):
        docs, locs = tokenize_documents([raw], to_ids, read_stats)
        documents.extend(docs)
        locations.extend(locs)
    return documents, locations
