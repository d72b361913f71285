"""The library's one file-system layer: every file the library reads or writes goes through these
helpers, so local paths, Cloud Storage (`gs://bucket/...`), TensorFlow's in-memory `ram://` and
any other file system the installed TensorFlow registers work the same way. `scheme://` paths go
through `tf.io.gfile`; plain local paths use Python's own `open`/`os` (the same files, without
importing TensorFlow in light processes such as tokenizer or data-generation workers). A scheme
TensorFlow cannot open is a clear `UnsupportedFileSystemError` (never a local folder named `gs:`).

  open_file(path, "r" | "w" | "rb" | "wb", encoding=, newline=, errors=)  -> a file object
  exists / isdir / makedirs / listdir / glob / remove / rename / rmtree / file_size
  atomic_output_path(path) / atomic_write_text(path, text) / atomic_write_bytes(path, data)
  check_path(path, flag)                                -> raises when the scheme is unusable
  require_cloud_storage(path, flag)                     -> raises unless gs:// (TPU runs)
  is_remote(path)                                       -> True for `scheme://` paths

Atomic writes: the content is written under a temporary name in the target's directory and then
renamed onto the target. On a local disk (POSIX) and on `ram://` that rename is atomic. On an
object store (`gs://`) TensorFlow's rename is a server-side copy followed by a delete: a reader
never sees a half-written object (each object is written whole), but between the copy and the
delete the temporary object is visible too, and a multi-file result (a checkpoint's `.index` and
`.data-*`, a SavedModel folder) becomes visible file by file rather than all at once; the
`.index`/`saved_model.pb` is always moved last so that readers that look for it first see a
complete result.
"""
from __future__ import annotations

import contextlib
import errno
import io
import os
import posixpath
import uuid
from typing import Iterator, Sequence

from bert_tf.errors import UserInputError


class UnsupportedFileSystemError(UserInputError):
    """A `scheme://` path the installed TensorFlow has no file system for."""


def _gfile():
    import tensorflow as tf  # imported lazily: flag checks run before TensorFlow loads

    return tf.io.gfile


def _errors():
    import tensorflow as tf

    return tf.errors


def is_remote(path: str | os.PathLike | None) -> bool:
    """True for `scheme://...` paths (gs://, ram://, s3://, hdfs://, ...)."""
    return bool(path) and "://" in os.fspath(path)


def scheme(path: str | os.PathLike) -> str:
    """`"gs"` for `gs://b/x`, `""` for a local path."""
    path = os.fspath(path)
    return path.split("://", 1)[0] if "://" in path else ""


@contextlib.contextmanager
def _translated_errors(path: str) -> Iterator[None]:
    """TensorFlow's file-system errors -> Python's (FileNotFoundError, OSError) or
    UnsupportedFileSystemError, each naming the path."""
    errors = _errors()
    try:
        yield
    except errors.UnimplementedError as e:
        raise UnsupportedFileSystemError(
            f"{path}: this TensorFlow cannot open '{scheme(path)}://' paths (no file system "
            f"registered for the scheme; TensorFlow itself has gs:// and ram://, tensorflow-io "
            f"adds s3:// and hdfs://)") from e
    except errors.NotFoundError as e:
        raise FileNotFoundError(errno.ENOENT, f"No such file or directory: {e.message}",
                                path) from e
    except errors.PermissionDeniedError as e:
        raise PermissionError(errno.EACCES, e.message, path) from e
    except errors.OpError as e:
        raise OSError(f"{path}: {e.message}") from e


def check_path(path: str | os.PathLike | None, flag: str = "") -> None:
    """Raises UnsupportedFileSystemError (naming `flag`) when `path` has a scheme TensorFlow
    cannot open; local paths and registered schemes pass. Touches the file system only for
    `scheme://` paths."""
    if not is_remote(path):
        return
    path = os.fspath(path)
    try:
        with _translated_errors(path):
            _gfile().exists(path)
    except UnsupportedFileSystemError as e:
        raise UnsupportedFileSystemError(f"{flag}={e}" if flag else str(e)) from None
    except OSError:
        pass  # the scheme is registered; reaching the store (network, permissions) is later's


def require_cloud_storage(path: str | os.PathLike | None, flag: str) -> None:
    """With a TPU, the TPU workers read and write `path` themselves: it must be on Cloud Storage
    (gs://), as the original requires. Raises UserInputError naming `flag` for any other path."""
    if path and scheme(path) != "gs":
        raise UserInputError(
            f"{flag}={os.fspath(path)} is not a gs:// path; with --use_tpu the TPU workers read "
            "and write it and cannot see this machine's disk: use a Cloud Storage path "
            "(gs://bucket/...) as the original requires")


def exists(path: str | os.PathLike) -> bool:
    path = os.fspath(path)
    if not is_remote(path):
        return os.path.exists(path)
    with _translated_errors(path):
        return _gfile().exists(path)


def isdir(path: str | os.PathLike) -> bool:
    path = os.fspath(path)
    if not is_remote(path):
        return os.path.isdir(path)
    with _translated_errors(path):
        return _gfile().isdir(path)


def isfile(path: str | os.PathLike) -> bool:
    path = os.fspath(path)
    if not is_remote(path):
        return os.path.isfile(path)
    with _translated_errors(path):
        return _gfile().exists(path) and not _gfile().isdir(path)


def makedirs(path: str | os.PathLike) -> None:
    """Creates `path` and its parents (no error if it exists)."""
    path = os.fspath(path)
    if not is_remote(path):
        os.makedirs(path, exist_ok=True)
        return
    with _translated_errors(path):
        _gfile().makedirs(path)


def listdir(path: str | os.PathLike) -> list[str]:
    """Entry names in `path` (directories without the trailing slash some object stores add)."""
    path = os.fspath(path)
    if not is_remote(path):
        return os.listdir(path)
    with _translated_errors(path):
        return [n.rstrip("/") for n in _gfile().listdir(path)]


def glob(pattern: str | os.PathLike) -> list[str]:
    """Sorted matches of a glob pattern (`*`, `?`, `[...]`) on any file system."""
    pattern = os.fspath(pattern)
    if not is_remote(pattern):
        import glob as _glob

        return sorted(_glob.glob(pattern))
    with _translated_errors(pattern):
        return sorted(_gfile().glob(pattern))


def expand_file_patterns(patterns: str | os.PathLike | Sequence[str | os.PathLike],
                         flag: str = "--input_file", error: type = UserInputError,
                         expected: str = "") -> list[str]:
    """Comma-separated paths or glob patterns (a string, or a list of them) -> files, on any file
    system: the library's one reader of `--input_file`-style flags.

    Each pattern's matches are sorted and the patterns' order is kept (as the original, which
    extended its list pattern by pattern); local directories are left out.

    Raises:
      `error` (a UserInputError class): a pattern matches no file ("<flag>: no file matches
        '<pattern>'" + `expected`), or no pattern is given.
    """
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    files: list[str] = []
    for item in patterns:
        for pattern in os.fspath(item).split(","):
            pattern = pattern.strip()
            if not pattern:
                continue
            matches = glob(pattern)
            if not is_remote(pattern):
                matches = [p for p in matches if os.path.isfile(p)]
            if not matches:
                raise error(f"{flag}: no file matches {pattern!r}{expected}")
            files.extend(matches)
    if not files:
        raise error(f"{flag} is empty: give one or more files or glob patterns")
    return files


def remove(path: str | os.PathLike) -> None:
    path = os.fspath(path)
    if not is_remote(path):
        os.remove(path)
        return
    with _translated_errors(path):
        _gfile().remove(path)


def rename(src: str | os.PathLike, dst: str | os.PathLike, overwrite: bool = True) -> None:
    """Moves `src` onto `dst` (atomic on local disks and ram://; copy + delete on gs://)."""
    src, dst = os.fspath(src), os.fspath(dst)
    if not is_remote(src) and not is_remote(dst):
        if not overwrite and os.path.exists(dst):
            raise FileExistsError(errno.EEXIST, "File exists", dst)
        os.replace(src, dst)
        return
    with _translated_errors(src):
        _gfile().rename(src, dst, overwrite=overwrite)


def rmtree(path: str | os.PathLike) -> None:
    path = os.fspath(path)
    if not is_remote(path):
        import shutil

        shutil.rmtree(path)
        return
    with _translated_errors(path):
        _gfile().rmtree(path)


def file_size(path: str | os.PathLike) -> int:
    path = os.fspath(path)
    if not is_remote(path):
        return os.path.getsize(path)
    with _translated_errors(path):
        return _gfile().stat(path).length


def join(path: str | os.PathLike, *parts: str) -> str:
    """`os.path.join` for local paths, `/`-joined for `scheme://` paths."""
    path = os.fspath(path)
    return posixpath.join(path, *parts) if is_remote(path) else os.path.join(path, *parts)


def dirname(path: str | os.PathLike) -> str:
    """The parent directory: absolute for local paths, `scheme://bucket/dir` for remote ones."""
    path = os.fspath(path)
    if is_remote(path):
        return posixpath.dirname(path.rstrip("/"))
    return os.path.dirname(os.path.abspath(path))


class _GFileRaw(io.RawIOBase):
    """A `tf.io.gfile.GFile` (binary) as a raw stream, so that io.BufferedReader/Writer and
    io.TextIOWrapper give the exact semantics of Python's open() (encoding, newline, errors)."""

    def __init__(self, path: str, mode: str):
        super().__init__()
        self._path = path
        self._mode = mode
        with _translated_errors(path):
            self._file = _gfile().GFile(path, mode)

    def readable(self) -> bool:
        return "r" in self._mode

    def writable(self) -> bool:
        return "w" in self._mode or "a" in self._mode

    def tell(self) -> int:
        with _translated_errors(self._path):
            return self._file.tell()

    def readinto(self, buffer) -> int:
        with _translated_errors(self._path):
            data = self._file.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def write(self, data) -> int:
        with _translated_errors(self._path):
            self._file.write(bytes(data))
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                with _translated_errors(self._path):
                    self._file.close()
            finally:
                super().close()


def open_file(path: str | os.PathLike, mode: str = "r", encoding: str | None = None,
              newline: str | None = None, errors: str | None = None):
    """Python's open() on any TensorFlow file system ("r", "w", "a", "rb", "wb", "ab").

    Text mode defaults to UTF-8. A missing file is FileNotFoundError naming the path."""
    path = os.fspath(path)
    binary = "b" in mode
    base = mode.replace("b", "").replace("t", "")
    if base not in ("r", "w", "a"):
        raise ValueError(f"open_file: unsupported mode {mode!r}")
    if not is_remote(path):
        if binary:
            return open(path, base + "b")
        return open(path, base, encoding=encoding or "utf-8", errors=errors, newline=newline)
    if base == "r" and not exists(path):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
    if base == "r" and isdir(path):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    raw = _GFileRaw(path, base + "b")
    buffered = io.BufferedReader(raw) if base == "r" else io.BufferedWriter(raw)
    if binary:
        return buffered
    return io.TextIOWrapper(buffered, encoding=encoding or "utf-8", errors=errors,
                            newline=newline)


def read_text(path: str | os.PathLike, encoding: str = "utf-8") -> str:
    with open_file(path, "r", encoding=encoding) as f:
        return f.read()


def read_bytes(path: str | os.PathLike) -> bytes:
    with open_file(path, "rb") as f:
        return f.read()


@contextlib.contextmanager
def atomic_output_path(path: str | os.PathLike, suffix: str = "") -> Iterator[str]:
    """Yields a temporary path beside `path`; renames it onto `path` only if the block succeeds.

    Write the temporary path with `open_file` (or any TensorFlow writer). On an exception the
    temporary file is removed and `path` (if it existed) is left untouched. See the module
    docstring for what "atomic" means on gs://.
    """
    path = os.fspath(path)
    directory = dirname(path)
    makedirs(directory)
    tmp = join(directory, f".{os.path.basename(path.rstrip('/'))}.{uuid.uuid4().hex[:12]}"
                          f"{suffix}.tmp")
    try:
        yield tmp
        rename(tmp, path, overwrite=True)
    except BaseException:
        with contextlib.suppress(Exception):
            if exists(tmp):
                if isdir(tmp):
                    rmtree(tmp)
                else:
                    remove(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Writes `text` (UTF-8) to `path` atomically."""
    with atomic_output_path(path) as tmp:
        with open_file(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes `data` to `path` atomically."""
    with atomic_output_path(path) as tmp:
        with open_file(tmp, "wb") as f:
            f.write(data)


def pid_alive(pid: int) -> bool:
    """True if process `pid` still runs on this machine (its temporary files are still in use)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True
