"""Writing SavedModels atomically, as TF Serving's versioned layout `<export_dir>/<version>/`.

The SavedModel is written into a hidden temporary folder beside its final place (TF Serving only
picks up folders whose names are all digits, so it never sees a half-written one) and renamed
into place when complete. A failed export removes its temporary folder and leaves any earlier
version untouched; an existing version is an error unless `overwrite=True`, and even then it is
replaced only after the new one is complete, by one atomic exchange of the two folders
(Linux `renameat2(RENAME_EXCHANGE)`), so `<export_dir>/<version>/` never goes missing. Where
the exchange is not available (other systems, some file systems), the old folder is renamed
aside and the new one into place; a process killed between those two renames leaves the old
version under `.<version>.old-<pid>-*`, which the next export of that folder puts back first.

Temporary folders are named `.<version>.tmp-<pid>-*` / `.<version>.old-<pid>-*`; the next
export to the same place removes those of processes that no longer run.

A SavedModel is a program (its graph may read and write files); load only SavedModels you trust.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import re
import shutil
import tempfile
from typing import TYPE_CHECKING, Callable

from absl import logging

from bert_tf.errors import UserInputError
from bert_tf.io_utils import pid_alive

if TYPE_CHECKING:
    import tensorflow as tf


class ExportError(UserInputError):
    """A bad export flag or target (names the flag / path and what was expected)."""


class ExportTargetExistsError(ExportError, FileExistsError):
    """The version folder exists and overwriting was not asked for."""


def check_version(version: int | str) -> int:
    """A TF Serving model version: a positive integer (also given as a string of digits)."""
    text = str(version).strip()
    if not text.isdigit() or int(text) <= 0:
        raise ExportError(f"version must be a positive integer (TF Serving loads only "
                         f"<export_dir>/<digits>/); got {version!r}")
    return int(text)


def write_atomically(target_dir: str | os.PathLike, write: Callable[[str], None],
                     overwrite: bool = False) -> str:
    """Calls `write(tmp_dir)` and moves `tmp_dir` onto `target_dir` only if it succeeds.

    Args:
      target_dir: final folder (must not exist unless `overwrite`).
      write: writes the complete contents into the (empty, existing) folder it is given.
      overwrite: replace an existing `target_dir` (after the new contents are complete; by an
        atomic exchange where the system has one, see the module docstring).

    Returns:
      The absolute `target_dir`.

    Raises:
      ExportError: `target_dir` exists and `overwrite` is False, or it or its parent is a
        file (nothing is written).
    """
    from bert_tf import io_utils

    if io_utils.is_remote(target_dir):
        return _write_remote(os.fspath(target_dir), write, overwrite)
    target_dir = os.path.abspath(os.fspath(target_dir))
    parent = os.path.dirname(target_dir)
    check_target_dir(target_dir, overwrite)
    os.makedirs(parent, exist_ok=True)
    name = os.path.basename(target_dir)
    recover_and_clean(target_dir)
    tmp = tempfile.mkdtemp(prefix=f".{name}.tmp-{os.getpid()}-", dir=parent)
    try:
        write(tmp)
        os.chmod(tmp, 0o755 & ~_umask())
        if os.path.exists(target_dir):
            if _exchange(tmp, target_dir):  # tmp now holds the old version
                return target_dir
            old = tempfile.mkdtemp(prefix=f".{name}.old-{os.getpid()}-", dir=parent)
            os.rmdir(old)
            os.replace(target_dir, old)
            os.replace(tmp, target_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target_dir)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
    return target_dir


def _write_remote(target_dir: str, write: Callable[[str], None], overwrite: bool) -> str:
    """`write_atomically` on an object store / remote file system (see its docstring)."""
    import uuid

    import tensorflow as tf

    from bert_tf import io_utils

    target_dir = target_dir.rstrip("/")
    io_utils.check_path(target_dir, "--export_dir")
    if io_utils.exists(io_utils.join(target_dir, "saved_model.pb")) and not overwrite:
        raise ExportTargetExistsError(f"{target_dir} already exists; pass --overwrite to replace "
                                      "it or choose another --version")
    tmp = f"{target_dir}.tmp-{uuid.uuid4().hex[:12]}"
    io_utils.makedirs(tmp)
    try:
        write(tmp)
        files = [io_utils.join(root, name) for root, _, names in tf.io.gfile.walk(tmp)
                 for name in names]
        files.sort(key=lambda p: p.endswith("/saved_model.pb"))  # saved_model.pb last
        if overwrite and io_utils.exists(io_utils.join(target_dir, "saved_model.pb")):
            io_utils.remove(io_utils.join(target_dir, "saved_model.pb"))  # no longer loadable
        for path in files:
            dest = target_dir + path[len(tmp):]
            io_utils.makedirs(dest.rsplit("/", 1)[0])
            io_utils.rename(path, dest, overwrite=True)
    finally:
        with contextlib.suppress(OSError):
            if io_utils.exists(tmp):
                io_utils.rmtree(tmp)
    return target_dir


def check_target_dir(target_dir: str | os.PathLike, overwrite: bool = False,
                     flag: str = "--export_dir") -> None:
    """Raises ExportError when `target_dir` cannot receive an export: it exists and `overwrite`
    is False, it is a file, or a component of its parent is a file."""
    target_dir = os.path.abspath(os.fspath(target_dir))
    if os.path.exists(target_dir):
        if not os.path.isdir(target_dir):
            raise ExportError(f"{flag}: {target_dir} is a file; expected a folder (or a path "
                              "that does not exist yet)")
        if not overwrite:
            raise ExportTargetExistsError(f"{target_dir} already exists; refusing to overwrite it (pass "
                              "--overwrite, or choose another --version)")
    parent = os.path.dirname(target_dir)
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent) if os.path.dirname(parent) != parent else ""
    if parent and not os.path.isdir(parent):
        raise ExportError(f"{flag}: {parent} is a file; expected a folder to export into")


_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<pid>\d+)-.*")


def recover_and_clean(target_dir: str | os.PathLike) -> list[str]:
    """Puts back a version an export killed between its two renames left aside (only where
    `target_dir` is missing), then removes the temporary folders of `target_dir` that processes
    no longer running left. Returns the paths removed."""
    target_dir = os.path.abspath(os.fspath(target_dir))
    parent, name = os.path.split(target_dir)
    if not os.path.isdir(parent):
        return []
    leftovers = []
    for entry in sorted(os.listdir(parent)):
        m = _TEMP_NAME.fullmatch(entry)
        if m and m["name"] == name and not pid_alive(int(m["pid"])):
            leftovers.append((m["kind"], os.path.join(parent, entry)))
    removed = []
    for kind, path in leftovers:
        if kind == "old" and not os.path.exists(target_dir):
            os.replace(path, target_dir)
            logging.warning("Restored %s from %s (an export was interrupted while swapping "
                            "versions)", target_dir, path)
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    if removed:
        logging.info("Removed %d temporary folder(s) of interrupted exports: %s", len(removed),
                     ", ".join(removed))
    return removed


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Atomically swaps the folders `a` and `b` (Linux renameat2 RENAME_EXCHANGE); False where
    the system or file system cannot (nothing is changed then)."""
    if os.environ.get("BERT_TF_NO_RENAME_EXCHANGE"):  # test hook: the two-rename fallback
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return result == 0


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def save_savedmodel_atomically(obj: tf.Module, target_dir: str | os.PathLike,
                               signatures: dict | None = None, overwrite: bool = False,
                               options: tf.saved_model.SaveOptions | None = None,
                               check: Callable[[str], None] | None = None) -> str:
    """`tf.saved_model.save(obj, ...)` into `target_dir` atomically (`write_atomically`).

    Args:
      obj: the tf.Module / trackable to save.
      target_dir: the folder to write (must not exist unless `overwrite`).
      signatures: name -> concrete function (`tf.saved_model.save`'s `signatures`).
      overwrite: replace an existing `target_dir`.
      options: `tf.saved_model.SaveOptions`.
      check: optional callable run on the written temporary folder before it is renamed into
        place (e.g. the serving-compatibility check); an exception aborts the export.

    Returns:
      The absolute `target_dir`.
    """
    import tensorflow as tf

    def write(tmp: str) -> None:
        tf.saved_model.save(obj, tmp, signatures=signatures, options=options)
        if check is not None:
            check(tmp)

    return write_atomically(target_dir, write, overwrite=overwrite)


def save_versioned_savedmodel(obj: tf.Module, export_dir: str | os.PathLike, version: int | str,
                              signatures: dict | None = None, overwrite: bool = False,
                              options: tf.saved_model.SaveOptions | None = None,
                              check: Callable[[str], None] | None = None) -> str:
    """Saves `obj` as `<export_dir>/<version>/` atomically (see the module docstring).

    Args:
      obj: the tf.Module / trackable to save.
      export_dir: the model's base path (what TF Serving's `model_base_path` points at).
      version: positive integer.
      signatures, overwrite, options, check: as `save_savedmodel_atomically`'s.

    Returns:
      The absolute path of the version folder.
    """
    version = check_version(version)
    target = os.path.join(os.fspath(export_dir), str(version))
    return save_savedmodel_atomically(obj, target, signatures=signatures, overwrite=overwrite,
                                      options=options, check=check)


def existing_versions(export_dir: str | os.PathLike) -> list[int]:
    """Versions present under `export_dir` (folders named by digits), ascending."""
    export_dir = os.fspath(export_dir)
    if not os.path.isdir(export_dir):
        return []
    return sorted(int(n) for n in os.listdir(export_dir)
                  if n.isdigit() and os.path.isdir(os.path.join(export_dir, n)))
