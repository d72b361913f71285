"""tensorflow-datasets (TFDS) as an input source of the task scripts, offline.

Reading: `glue_examples(task, split, tfds_data_dir)` loads a *prepared* TFDS dataset (`glue/mrpc`,
`glue/rte`, ..., `imdb_reviews`) from `--tfds_data_dir` (never downloading) and converts its
records into the same `InputExample`s the tsv readers produce (same text fields, the label as the
task's label name, test rows unlabelled, rows in file order by TFDS's `idx`), so a run on TFDS
data scores the same as a run on the tsv files. `split_for(task, which)` names the TFDS split of
"train"/"dev"/"test" (MNLI: `validation_matched` ...).

Preparing offline: TFDS's own builders download from the internet. `prepare(name, tfds_data_dir,
manual_dir)` prepares the same datasets (same name, version, features and TFDS record parsing)
from local copies of the source files, TFDS's manual-download mechanism:

  glue/<task>     manual_dir = the GLUE download folder (glue_data/, holding CoLA/, MRPC/, RTE/...);
                  MRPC from MRPC/msr_paraphrase_{train,test}.txt + MRPC/dev_ids.tsv as TFDS does.
                  TFDS's own Glue builder parses the files (its `_generate_examples`).
  imdb_reviews    manual_dir holds train.tsv.gz (`file rating label text`, label 1 = positive).
  squad/v1.1, squad/v2.0   manual_dir holds the SQuAD json files (train-v1.1.json, dev-v1.1.json /
                  train-v2.0.json, dev-v2.0.json; whichever exist become splits), parsed by
                  TFDS's squad builder.
  conll2003       manual_dir holds the CoNLL-2003 files (eng.train / eng.testa / eng.testb, or
                  train.txt / valid.txt / test.txt), parsed by TFDS's conll2003 builder.
  bert_pretraining_text   manual_dir holds the pretraining corpus (one sentence per line, blank
                  line between documents, `.txt` or `.txt.gz`); one record per document.

After `prepare`, `tfds.load(name, data_dir=tfds_data_dir)` works with TFDS's own classes.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

from absl import logging

from bert_tf import io_utils, tfds_io
from bert_tf.pretraining_data import tfds_text
# The pretraining-text dataset lives in pretraining_data.tfds_text; its names stay here as well.
from bert_tf.pretraining_data.tfds_text import (PRETRAINING_TEXT, pretraining_documents,
                                                pretraining_text_file, write_pretraining_text)
from bert_tf.tasks import glue
from bert_tf.tfds_io import TfdsSourceError


# GLUE task (bert_tf name) -> (TFDS config, text feature of text_a, of text_b or None).
GLUE_TFDS = {
    "cola": ("cola", "sentence", None),
    "sst-2": ("sst2", "sentence", None),
    "mrpc": ("mrpc", "sentence1", "sentence2"),
    "sts-b": ("stsb", "sentence1", "sentence2"),
    "qqp": ("qqp", "question1", "question2"),
    "mnli": ("mnli", "premise", "hypothesis"),
    "qnli": ("qnli", "question", "sentence"),
    "rte": ("rte", "sentence1", "sentence2"),
    "wnli": ("wnli", "sentence1", "sentence2"),
    "imdb": (None, "text", None),  # imdb_reviews
}
_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
_MNLI_SPLITS = {"dev": "validation_matched", "dev_mismatched": "validation_mismatched",
                "test": "test_matched", "test_mismatched": "test_mismatched"}


def dataset_name(task: str) -> str:
    """TFDS name of a bert_tf task: "glue/mrpc", ..., "imdb_reviews"."""
    task = glue.canonical_task_name(task)
    if task not in GLUE_TFDS:
        raise TfdsSourceError(f"--task_name={task}: no TFDS dataset for it (TFDS sources: "
                              f"{', '.join(sorted(GLUE_TFDS))})")
    config = GLUE_TFDS[task][0]
    return "imdb_reviews/plain_text" if config is None else f"glue/{config}"


def split_for(task: str, which: str) -> str:
    """TFDS split of "train", "dev", "test" (MNLI also "dev_mismatched", "test_mismatched")."""
    if glue.canonical_task_name(task) == "mnli" and which in _MNLI_SPLITS:
        return _MNLI_SPLITS[which]
    return _SPLITS[which]


def load_prepared(name: str, split: str, tfds_data_dir: str):
    """A prepared TFDS split as a tf.data.Dataset, in file order; never downloads.

    Raises TfdsSourceError naming --tfds_data_dir when the dataset or split is not there."""
    tfds = tfds_io.tfds_module()
    io_utils.check_path(tfds_data_dir, "--tfds_data_dir")
    try:
        builder = tfds.builder(name, data_dir=tfds_data_dir)
    except Exception as e:  # unknown name / config
        raise TfdsSourceError(f"TFDS dataset {name!r}: {e}") from e
    if not builder.is_prepared():
        raise TfdsSourceError(
            f"--tfds_data_dir={tfds_data_dir}: TFDS dataset {name} is not prepared there "
            f"(expected {builder.data_dir}); prepare it offline from local files with "
            f"bert_tf.tasks.tfds_sources.prepare({name!r}, {tfds_data_dir!r}, manual_dir)")
    if split not in builder.info.splits:
        raise TfdsSourceError(f"--tfds_data_dir={tfds_data_dir}: {name} has no split {split!r} "
                              f"(it has {', '.join(sorted(builder.info.splits))})")
    return builder, builder.as_dataset(split=split, shuffle_files=False)


def glue_examples(task: str, which: str, tfds_data_dir: str) -> list[glue.InputExample]:
    """The `InputExample`s of a task's "train"/"dev"/"test" split from a prepared TFDS dataset,
    equal to the tsv readers' (text_a, text_b, label; test rows unlabelled; file order)."""
    task = glue.canonical_task_name(task)
    name = dataset_name(task)
    processor = glue.get_processor(task)
    _, text_a, text_b = GLUE_TFDS[task]
    builder, dataset = load_prepared(name, split_for(task, which), tfds_data_dir)
    label_feature = builder.info.features["label"]
    names = getattr(label_feature, "names", None)
    rows = list(tfds_io.tfds_module().as_numpy(dataset))
    if "idx" in builder.info.features:
        rows.sort(key=lambda r: int(r["idx"]))  # TFDS shuffles at preparation; idx = file row
    set_type = "dev" if which.startswith("dev") else which
    examples = []
    for row in rows:
        label = row["label"]
        if processor.is_regression:
            value = None if which.startswith("test") else float(label)
        elif int(label) < 0:
            value = None
        else:
            label_name = names[int(label)] if names else str(int(label))
            value = label_name if label_name in processor.labels else str(int(label))
            if value not in processor.labels:
                raise TfdsSourceError(f"{name}: label {label_name!r} is not one of "
                                      f"{processor.labels} (task {task})")
        index = str(int(row["idx"])) if "idx" in row else str(len(examples))
        examples.append(glue.InputExample(
            guid=f"{set_type}-{len(examples)}", text_a=tfds_io.text(row[text_a]),
            text_b=tfds_io.text(row[text_b]) if text_b else None, label=value, index=index))
    if not examples:
        raise TfdsSourceError(f"--tfds_data_dir={tfds_data_dir}: {name} split {which} is empty")
    return examples


def squad_data(split: str, tfds_data_dir: str, name: str = "squad/v1.1") -> list[dict]:
    """A prepared TFDS SQuAD split ("train", "validation") as the `data` list of a SQuAD json
    file (articles -> paragraphs -> qas), which bert_tf's SQuAD reader and the official metrics
    read. TFDS keeps no file order: articles are in title order, paragraphs in order of first
    appearance by question id, questions by id (the metrics do not depend on the order)."""
    _, dataset = load_prepared(name, split, tfds_data_dir)
    rows = sorted(tfds_io.tfds_module().as_numpy(dataset), key=lambda r: tfds_io.text(r["id"]))
    articles: dict[str, dict[str, list]] = {}
    for r in rows:
        qa = {"id": tfds_io.text(r["id"]), "question": tfds_io.text(r["question"]),
              "answers": [{"text": tfds_io.text(t), "answer_start": int(a)} for t, a in
                          zip(r["answers"]["text"], r["answers"]["answer_start"])]}
        if "is_impossible" in r:
            qa["is_impossible"] = bool(r["is_impossible"])
        articles.setdefault(tfds_io.text(r["title"]), {}).setdefault(tfds_io.text(r["context"]), []).append(qa)
    return [{"title": title, "paragraphs": [{"context": c, "qas": qas}
                                             for c, qas in paragraphs.items()]}
            for title, paragraphs in sorted(articles.items())]


def write_squad_json(data: list[dict], path: str, version: str = "1.1") -> str:
    """Writes `{"version", "data"}` as a SQuAD json file (atomically, any file system)."""
    import json

    io_utils.atomic_write_text(path, json.dumps({"version": version, "data": data}))
    return path


def squad_files_from_tfds(opts):
    """run_squad's `--tfds_data_dir`: the options with `train_file` / `predict_file` (those not
    given) set to SQuAD json files written into `output_dir` from the prepared TFDS dataset
    (`squad/v2.0` with `version_2_with_negative`, else `squad/v1.1`)."""
    import dataclasses

    name = "squad/v2.0" if opts.version_2_with_negative else "squad/v1.1"
    changes = {}
    for flag, split, wanted in (("train_file", "train", opts.do_train),
                                ("predict_file", "validation", opts.do_predict)):
        if wanted and not getattr(opts, flag):
            path = io_utils.join(opts.output_dir, f"tfds_{name.replace('/', '_')}_{split}.json")
            changes[flag] = write_squad_json(squad_data(split, opts.tfds_data_dir, name), path,
                                             "v2.0" if opts.version_2_with_negative else "1.1")
    return dataclasses.replace(opts, **changes)


def conll_sentences(split: str, tfds_data_dir: str, name: str = "conll2003") -> list:
    """`NerSentence`s (words and NER tags) of a prepared TFDS `conll2003` split ("train", "dev",
    "test"), in the CoNLL file's order when `prepare` made it (records stored unshuffled; a
    dataset TFDS prepared itself is stored shuffled, and its order is TFDS's). TFDS's parser
    drops the `-DOCSTART-` lines, so the document grouping is not kept (each sentence is its own
    document); it also yields an empty record at the end of a file, which is dropped here."""
    from bert_tf.tasks.ner.reading import NerSentence

    builder, dataset = load_prepared(name, split, tfds_data_dir)
    tags = builder.info.features["ner"].feature.names
    sentences = []
    for i, row in enumerate(tfds_io.tfds_module().as_numpy(dataset)):
        words = [tfds_io.text(w) for w in row["tokens"]]
        if not words:
            continue
        sentences.append(NerSentence(words=words, labels=[tags[int(t)] for t in row["ner"]],
                                     lines=list(range(len(words))),
                                     source=f"{name}/{split}#{i}", doc_index=i))
    return sentences


class TfdsTaskSource:
    """A task's splits from a prepared TFDS dataset, with a `DataProcessor`'s reading methods
    (`get_train_examples`, `get_dev_splits`, `get_test_splits`), so run_classifier reads TFDS
    where it would read tsv files (`--tfds_data_dir` instead of `--data_dir`).

    IMDb (`imdb_reviews`): train is TFDS's train split and dev its test split (TFDS has no
    held-out part of train)."""

    def __init__(self, task: str, tfds_data_dir: str):
        self.task = glue.canonical_task_name(task)
        self.processor = glue.get_processor(self.task)
        self.tfds_data_dir = tfds_data_dir
        dataset_name(self.task)  # unknown task -> TfdsSourceError

    def get_train_examples(self, data_dir: str | None = None, dev_file: str | None = None
                           ) -> list[glue.InputExample]:
        return glue_examples(self.task, "train", self.tfds_data_dir)

    def get_dev_splits(self, data_dir: str | None = None, dev_file: str | None = None
                       ) -> list[glue.EvalSplit]:
        if dev_file:
            return [glue.EvalSplit("dev", self.processor.read_examples(
                dev_file, "dev", self.processor.train_layout))]
        if self.task == "imdb":
            return [glue.EvalSplit("dev", glue_examples(self.task, "test", self.tfds_data_dir))]
        return [glue.EvalSplit(name, glue_examples(
                    self.task, "dev_mismatched" if name.endswith("mismatched") else "dev",
                    self.tfds_data_dir))
                for name, _, _ in self.processor.dev_files]

    def get_test_splits(self, data_dir: str | None = None) -> list[glue.EvalSplit]:
        return [glue.EvalSplit(name, glue_examples(
                    self.task, "test_mismatched" if name.endswith("mismatched") else "test",
                    self.tfds_data_dir), leaderboard)
                for name, _, leaderboard in self.processor.test_files]


# ---------------------------------------------------------------------------------------------
# Offline preparation (TFDS manual_dir)
# ---------------------------------------------------------------------------------------------
class _LocalGlueFiles:
    """Stands in for TFDS's download manager in the Glue builder: every "download" is a file of
    the local GLUE folder (the layout the GLUE download script writes)."""

    _MRPC = {"dev_ids": "dev_ids.tsv", "train": "msr_paraphrase_train.txt",
             "test": "msr_paraphrase_test.txt"}

    def __init__(self, glue_dir: str):
        self.manual_dir = glue_dir

    def _need(self, path: str) -> str:
        if not os.path.exists(path):
            raise TfdsSourceError(f"manual_dir={self.manual_dir}: {path} is missing (the local "
                                  "GLUE folder needs the files TFDS would download)")
        return path

    def download(self, urls):
        if isinstance(urls, dict):  # MRPC's source files
            return {k: self._need(os.path.join(self.manual_dir, "MRPC", self._MRPC[k]))
                    for k in urls}
        return self._need(os.path.join(self.manual_dir, "diagnostic", "diagnostic.tsv"))

    def download_and_extract(self, url):
        return self.manual_dir  # the builder then reads <manual_dir>/<config.data_dir>/*.tsv


def _local_builder_classes() -> dict:
    """name -> builder class preparing TFDS's dataset of that name from local files. Created
    lazily (importing TFDS's builders is slow) and without registering them (TFDS's own classes
    keep the names)."""
    tfds = tfds_io.tfds_module()

    class LocalGlue(tfds.builder_cls("glue"), skip_registration=True):
        """TFDS `glue`, prepared from the local GLUE folder (manual_dir)."""

        name = "glue"
        MANUAL_DOWNLOAD_INSTRUCTIONS = "manual_dir: the GLUE folder (CoLA/, MRPC/, RTE/, ...)"

        def _split_generators(self, dl_manager):
            return super()._split_generators(_LocalGlueFiles(str(dl_manager.manual_dir)))

    class LocalImdbReviews(tfds.builder_cls("imdb_reviews"), skip_registration=True):
        """TFDS `imdb_reviews/plain_text` (train split, same features) from train.tsv.gz."""

        name = "imdb_reviews"
        MANUAL_DOWNLOAD_INSTRUCTIONS = "manual_dir: train.tsv.gz (file rating label text)"

        def _split_generators(self, dl_manager):
            path = os.path.join(str(dl_manager.manual_dir), "train.tsv.gz")
            return {"train": self._generate_local(path)}

        def _generate_local(self, path: str) -> Iterator:
            for n, (_, row) in enumerate(glue.read_tsv(path)):
                if n == 0:
                    continue
                yield row[0], {"text": row[3], "label": int(row[2])}

    class LocalSquad(tfds.builder_cls("squad"), skip_registration=True):
        """TFDS `squad/v1.1`, `squad/v2.0` from local json files (TFDS parses them)."""

        name = "squad"
        MANUAL_DOWNLOAD_INSTRUCTIONS = "manual_dir: train-/dev-v1.1.json or -v2.0.json"

        def _split_generators(self, dl_manager):
            version = "v2.0" if self.builder_config.name == "v2.0" else "v1.1"
            splits = {}
            for split, stem in (("train", "train"), ("validation", "dev")):
                for suffix in ("", ".reconstructed"):
                    path = os.path.join(str(dl_manager.manual_dir), f"{stem}-{version}{suffix}.json")
                    if os.path.exists(path):
                        splits[split] = self._generate_examples(path)
                        break
            if not splits:
                raise TfdsSourceError(f"manual_dir={dl_manager.manual_dir}: no train-/dev-"
                                      f"{version}.json")
            return splits

    class LocalConll2003(tfds.builder_cls("conll2003"), skip_registration=True):
        """TFDS `conll2003` from the local CoNLL-2003 files (TFDS parses them)."""

        name = "conll2003"
        MANUAL_DOWNLOAD_INSTRUCTIONS = "manual_dir: eng.train/eng.testa/eng.testb"

        def _info(self):
            # Same features as TFDS's; records stored in file order (the NER run reads the
            # sentences in the order the CoNLL files have them, as from the files).
            info = super()._info()
            return self.dataset_info_from_configs(
                description=info.description, homepage=info.homepage, citation=info.citation,
                features=self.builder_config.features_dict, disable_shuffling=True)

        def _split_generators(self, dl_manager):
            root = str(dl_manager.manual_dir)
            splits = {}
            for split, names in (("train", ("train.txt", "eng.train")),
                                 ("dev", ("valid.txt", "eng.testa")),
                                 ("test", ("test.txt", "eng.testb"))):
                for file_name in names:
                    if os.path.exists(os.path.join(root, file_name)):
                        splits[split] = self._generate_examples(os.path.join(root, file_name))
                        break
            return splits

    return {"glue": LocalGlue, "imdb_reviews": LocalImdbReviews, "squad": LocalSquad,
            "conll2003": LocalConll2003,
            PRETRAINING_TEXT: tfds_text.pretraining_text_builder_class()}


def prepare(name: str, tfds_data_dir: str, manual_dir: str) -> str:
    """Prepares TFDS dataset `name` ("glue/mrpc", "imdb_reviews", "squad/v1.1", "conll2003",
    "bert_pretraining_text") in `tfds_data_dir` from the local files in `manual_dir`; no network.
    Returns the prepared dataset's folder. Already prepared: nothing is redone."""
    tfds = tfds_io.tfds_module()
    base, _, config = name.partition("/")
    classes = _local_builder_classes()
    if base not in classes:
        raise TfdsSourceError(f"cannot prepare TFDS dataset {name!r} offline (supported: "
                              f"{', '.join(sorted(classes))})")
    if not os.path.isdir(manual_dir):
        raise TfdsSourceError(f"manual_dir={manual_dir} is not a directory")
    kwargs = {"config": config} if config else {}
    builder = classes[base](data_dir=tfds_data_dir, **kwargs)
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        manual_dir=manual_dir, download_mode=tfds.download.GenerateMode.REUSE_DATASET_IF_EXISTS,
        try_download_gcs=False))
    return str(builder.data_dir)


__all__ = ["TfdsSourceError", "GLUE_TFDS", "TfdsTaskSource", "dataset_name", "split_for",
           "load_prepared", "glue_examples", "squad_data", "write_squad_json",
           "squad_files_from_tfds",
           "conll_sentences", "PRETRAINING_TEXT", "pretraining_documents",
           "write_pretraining_text", "pretraining_text_file", "prepare"]
