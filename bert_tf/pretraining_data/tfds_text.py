"""The pretraining corpus as a tensorflow-datasets (TFDS) dataset, offline.

`bert_pretraining_text` holds one record per document ({"text": its sentences joined by "\n"}),
prepared from text files in the original create_pretraining_data.py input format (one sentence per
line, a blank line between documents) by `bert_tf.tasks.tfds_sources.prepare`, the one offline
preparer of every TFDS source. `pretraining_text_file` turns it back into such a file for
create_pretraining_data's `--tfds_data_dir`.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

from absl import logging

from bert_tf import io_utils, tfds_io
from bert_tf.tfds_io import TfdsSourceError

PRETRAINING_TEXT = "bert_pretraining_text"
"""Name (and folder in `--tfds_data_dir`) of the pretraining-text dataset `prepare` makes."""


def pretraining_documents(tfds_data_dir: str, name: str = PRETRAINING_TEXT) -> Iterator[str]:
    """The documents of a prepared `bert_pretraining_text` dataset ("train" split, in corpus
    order): each its sentences joined by "\n". The builder is not registered with TFDS (it is
    bert_tf's), so it is read from its folder `<tfds_data_dir>/<name>/<version>`."""
    tfds = tfds_io.tfds_module()
    io_utils.check_path(tfds_data_dir, "--tfds_data_dir")
    if not io_utils.isdir(tfds_data_dir):
        raise TfdsSourceError(f"--tfds_data_dir={tfds_data_dir} is not a directory")
    root = os.path.join(tfds_data_dir, name)
    versions = sorted((v for v in (io_utils.listdir(root) if io_utils.isdir(root) else [])
                       if io_utils.exists(os.path.join(root, v, "dataset_info.json"))),
                      key=lambda v: tuple(int(x) if x.isdigit() else 0 for x in v.split(".")))
    if not versions:
        raise TfdsSourceError(
            f"--tfds_data_dir={tfds_data_dir}: TFDS dataset {name} is not prepared there "
            f"(expected {root}/<version>/dataset_info.json); prepare it offline from local text "
            f"files with bert_tf.tasks.tfds_sources.prepare({name!r}, {tfds_data_dir!r}, "
            "manual_dir)")
    builder = tfds.builder_from_directory(os.path.join(root, versions[-1]))
    if "train" not in builder.info.splits or "text" not in builder.info.features:
        raise TfdsSourceError(f"--tfds_data_dir={tfds_data_dir}: {root}/{versions[-1]} is not "
                              "a pretraining-text dataset (a 'train' split of 'text' records)")
    for row in tfds.as_numpy(builder.as_dataset(split="train", shuffle_files=False)):
        yield tfds_io.text(row["text"])


def write_pretraining_text(tfds_data_dir: str, path: str, name: str = PRETRAINING_TEXT) -> int:
    """Writes the prepared pretraining-text dataset as a create_pretraining_data input file (one
    sentence per line, a blank line after each document), which reads back into the same
    documents and sentences; returns the number of documents.

    Raises TfdsSourceError when the dataset is missing or holds no document."""
    count = 0
    with open(path, "w", encoding="utf-8") as f:
        for document in pretraining_documents(tfds_data_dir, name):
            f.write(document)
            f.write("\n\n")
            count += 1
    if not count:
        raise TfdsSourceError(f"--tfds_data_dir={tfds_data_dir}: {name} holds no document")
    return count


@contextlib.contextmanager
def pretraining_text_file(tfds_data_dir: str, name: str = PRETRAINING_TEXT) -> Iterator[str]:
    """create_pretraining_data's `--tfds_data_dir`: a local text file holding the prepared
    pretraining-text dataset (`write_pretraining_text`), removed on exit. Its name depends only
    on `tfds_data_dir`, so that a resumed scalable run sees the same input file (its run
    fingerprint names the input path and size).

    The text reader makes the same documents of it as of the files the dataset was prepared
    from, except that a document never runs on across two of those files (the builder ends a
    document at the end of each file; the text reader, as the original, continues it when a
    file does not end with a blank line)."""
    import glob
    import hashlib
    import tempfile

    key = hashlib.sha1(os.path.abspath(tfds_data_dir).encode("utf-8")).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"bert_tf_{name}_{key}.txt")
    partial = f"{path}.{os.getpid()}.tmp"
    for stale in glob.glob(f"{glob.escape(path)}.*.tmp"):  # of killed runs
        pid = stale[len(path) + 1:-len(".tmp")]
        if pid.isdigit() and not io_utils.pid_alive(int(pid)):
            os.remove(stale)
    try:
        count = write_pretraining_text(tfds_data_dir, partial, name)
        os.replace(partial, path)
        logging.info("%d documents of TFDS %s in %s (as a text file in %s)", count, name,
                     tfds_data_dir, path)
        yield path
    finally:
        for leftover in (partial, path):
            if os.path.exists(leftover):
                os.remove(leftover)


def pretraining_text_builder_class():
    """The TFDS builder of `bert_pretraining_text` (not registered with TFDS; prepared by
    `bert_tf.tasks.tfds_sources.prepare`)."""
    tfds = tfds_io.tfds_module()

    class BertPretrainingText(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        """Pretraining text: one record per document ({"text": its lines joined by "\\n"}),
        from files with one sentence per line and a blank line between documents (the format
        of the original's create_pretraining_data.py input)."""

        name = "bert_pretraining_text"
        VERSION = tfds.core.Version("1.0.0")
        MANUAL_DOWNLOAD_INSTRUCTIONS = "manual_dir: *.txt / *.txt.gz corpus files"

        def _info(self):
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
                {"text": tfds.features.Text()}), disable_shuffling=True)

        def _split_generators(self, dl_manager):
            root = str(dl_manager.manual_dir)
            files = sorted(os.path.join(root, n) for n in os.listdir(root)
                           if n.endswith((".txt", ".txt.gz")))
            if not files:
                raise TfdsSourceError(f"manual_dir={root}: no .txt or .txt.gz corpus file")
            return {"train": self._generate_examples(files)}

        def _generate_examples(self, files):
            import gzip

            for path in files:
                opener = gzip.open if path.endswith(".gz") else open
                with opener(path, "rt", encoding="utf-8") as f:
                    doc, n = [], 0
                    for line in f:
                        line = line.strip()
                        if line:
                            doc.append(line)
                        elif doc:
                            yield f"{os.path.basename(path)}-{n}", {"text": "\n".join(doc)}
                            doc, n = [], n + 1
                    if doc:
                        yield f"{os.path.basename(path)}-{n}", {"text": "\n".join(doc)}

    return BertPretrainingText


__all__ = ["PRETRAINING_TEXT", "pretraining_documents", "write_pretraining_text",
           "pretraining_text_file", "pretraining_text_builder_class"]
