"""Writing SavedModels atomically, as TF Serving's versioned layout `<export_dir>/<version>/`.

The SavedModel is written into a hidden temporary folder beside its final place (TF Serving only
picks up folders whose names are all digits, so it never sees a half-written one) and renamed
into place when complete. A failed export removes its temporary folder and leaves any earlier
version untouched; an existing version is an error unless `overwrite=True`, and even then it is
replaced only after the new one is complete.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import tensorflow as tf


def check_version(version: int | str) -> int:
    """A TF Serving model version: a positive integer (also given as a string of digits)."""
    text = str(version).strip()
    if not text.isdigit() or int(text) <= 0:
        raise ValueError(f"version must be a positive integer (TF Serving loads only "
                         f"<export_dir>/<digits>/); got {version!r}")
    return int(text)


def write_atomically(target_dir: str | os.PathLike, write: Callable[[str], None],
                     overwrite: bool = False) -> str:
    """Calls `write(tmp_dir)` and renames `tmp_dir` onto `target_dir` only if it succeeds.

    Args:
      target_dir: final folder (must not exist unless `overwrite`).
      write: writes the complete contents into the (empty, existing) folder it is given.
      overwrite: replace an existing `target_dir` (after the new contents are complete).

    Returns:
      The absolute `target_dir`.

    Raises:
      FileExistsError: `target_dir` exists and `overwrite` is False (nothing is written).
    """
    target_dir = os.path.abspath(os.fspath(target_dir))
    if os.path.exists(target_dir) and not overwrite:
        raise FileExistsError(f"{target_dir} already exists; refusing to overwrite it (pass "
                              "overwrite=True / --overwrite, or choose another --version)")
    parent = os.path.dirname(target_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(target_dir)}.tmp-", dir=parent)
    old = None
    try:
        write(tmp)
        os.chmod(tmp, 0o755 & ~_umask())
        if os.path.exists(target_dir):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(target_dir)}.old-", dir=parent)
            os.rmdir(old)
            os.replace(target_dir, old)
        os.replace(tmp, target_dir)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return target_dir


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def save_versioned_savedmodel(obj: tf.Module, export_dir: str | os.PathLike, version: int | str,
                              signatures: dict | None = None, overwrite: bool = False,
                              options: tf.saved_model.SaveOptions | None = None,
                              check: Callable[[str], None] | None = None) -> str:
    """Saves `obj` as `<export_dir>/<version>/` atomically (see the module docstring).

    Args:
      obj: the tf.Module / trackable to save.
      export_dir: the model's base path (what TF Serving's `model_base_path` points at).
      version: positive integer.
      signatures: name -> concrete function (`tf.saved_model.save`'s `signatures`).
      overwrite: replace an existing version.
      options: `tf.saved_model.SaveOptions`.
      check: optional callable run on the written temporary folder before it is renamed into
        place (e.g. the serving-compatibility check); an exception aborts the export.

    Returns:
      The absolute path of the version folder.
    """
    import tensorflow as tf

    version = check_version(version)
    target = os.path.join(os.fspath(export_dir), str(version))

    def write(tmp: str) -> None:
        tf.saved_model.save(obj, tmp, signatures=signatures, options=options)
        if check is not None:
            check(tmp)

    return write_atomically(target, write, overwrite=overwrite)


def existing_versions(export_dir: str | os.PathLike) -> list[int]:
    """Versions present under `export_dir` (folders named by digits), ascending."""
    export_dir = os.fspath(export_dir)
    if not os.path.isdir(export_dir):
        return []
    return sorted(int(n) for n in os.listdir(export_dir)
                  if n.isdigit() and os.path.isdir(os.path.join(export_dir, n)))
