"""A study's shared data: the pretraining corpus, the WordPiece vocabulary (BERT and GPT use the
same one, as BERT Table 5's LTR model does), GPT's LM windows, and the fine-tuning tasks.

Tasks are lists of `TaskExample`s with a train and a held-out split:

* `topic` (tiny scale): the embedded topic task of the quickstart
  (`bert_tf.quickstart.topic_task`: which group of Python's reference a documentation paragraph
  comes from, 3 balanced classes, whole topics held out; the pretraining corpus and the vocab
  are made from the training topics only);
* GLUE names (small/base): `<data_dir>/glue/<task>/train.tsv` and `dev.tsv` through the
  original processors (`bert_tf.tasks.glue`); the dev set is the held-out split, as in the
  papers' ablation tables.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random

from bert_tf import io_utils
from bert_tf.studies.declarations import Scale, StudyError

GLUE_FOLDERS = {"SST-2": "SST-2", "MRPC": "MRPC", "RTE": "RTE", "CoLA": "CoLA"}


@dataclasses.dataclass(frozen=True)
class TaskExample:
    """One example: text_a, optional text_b, label (a string of the task's label list)."""

    text_a: str
    text_b: str | None
    label: str


@dataclasses.dataclass
class TaskData:
    """A task's splits. labels: the label list; pair: examples have text_b."""

    name: str
    labels: list[str]
    train: list[TaskExample]
    held_out: list[TaskExample]
    pair: bool


def required_files(scale: Scale, data_dir: str) -> list[str]:
    """The input files a scale needs (empty for tiny: everything is embedded)."""
    files = []
    if scale.corpus != "embedded":
        files.append(os.path.join(data_dir, scale.corpus))
    for task in scale.tasks:
        if task != "topic":
            folder = os.path.join(data_dir, "glue", GLUE_FOLDERS.get(task, task))
            files += [os.path.join(folder, "train.tsv"), os.path.join(folder, "dev.tsv")]
    return files


def check_data(scale: Scale, data_dir: str) -> None:
    """Raises StudyError naming the first missing file, before anything runs."""
    for task in scale.tasks:
        if task != "topic" and task not in GLUE_FOLDERS:
            raise StudyError(f"scale {scale.name}: task {task!r} has no reader; expected topic or "
                             f"one of {', '.join(GLUE_FOLDERS)}")
    for path in required_files(scale, data_dir):
        if not os.path.exists(path):
            raise StudyError(f"{path}: not found (needed by --scale={scale.name}; set "
                             "--data_dir to the folder holding pretrain/ and glue/)")


def prepare_corpus(cell_dir: str, scale: Scale, data_dir: str, seed: int) -> dict:
    """The data cell: corpus.txt (+ held_out_corpus.txt), vocab.txt, gpt_lm_data/, tasks.

    Returns the paths and counts (the cell's result)."""
    from bert_tf.gpt.lm_data import EncoderSpec, LmDataOptions, create_gpt_lm_data
    from bert_tf.tokenization import build_wordpiece_vocab

    out = {}
    if scale.corpus == "embedded":
        from bert_tf.quickstart import topic_task

        split = topic_task.topic_split(seed=seed)
        corpus = os.path.join(cell_dir, "corpus.txt")
        held = os.path.join(cell_dir, "held_out_corpus.txt")
        out["documents"] = topic_task.write_corpus(split.train_documents, corpus)[0]
        topic_task.write_corpus(split.held_out_documents, held)
        task = {"labels": list(topic_task.LABELS),
                "train": [[t, None, topic_task.LABELS[y]] for t, y in split.train],
                "held_out": [[t, None, topic_task.LABELS[y]] for t, y in split.held_out]}
        io_utils.atomic_write_text(os.path.join(cell_dir, "topic.json"), json.dumps(task) + "\n")
        out["held_out_corpus"] = held
    else:
        corpus = os.path.join(data_dir, scale.corpus)
        out["held_out_corpus"] = None
    out["corpus"] = corpus
    vocab_file = os.path.join(cell_dir, "vocab.txt")
    vocab = build_wordpiece_vocab([corpus], vocab_file, vocab_size=scale.vocab_size,
                                  do_lower_case=True)
    out["vocab_file"], out["vocab_size"] = vocab_file, len(vocab)
    spec = EncoderSpec(vocab_file=vocab_file, do_lower_case=True)
    create_gpt_lm_data(corpus, os.path.join(cell_dir, "gpt_lm_data", "train"), spec,
                       LmDataOptions(n_ctx=scale.max_seq_length, random_seed=seed),
                       progress=False, overwrite=True)
    return out


def load_task(name: str, data_cell: str, data_dir: str, max_train_examples: int = 0,
              seed: int = 12345) -> TaskData:
    """The task's splits (see the module docstring)."""
    if name == "topic":
        with open(os.path.join(data_cell, "topic.json"), encoding="utf-8") as f:
            task = json.load(f)
        return TaskData("topic", task["labels"], [TaskExample(*e) for e in task["train"]],
                        [TaskExample(*e) for e in task["held_out"]], pair=False)
    from bert_tf.tasks import glue

    processor = glue.get_processor(name)
    folder = os.path.join(data_dir, "glue", GLUE_FOLDERS[name])

    def convert(rows):
        return [TaskExample(r.text_a, r.text_b, str(r.label)) for r in rows]

    train = convert(processor.get_train_examples(folder))
    if max_train_examples and len(train) > max_train_examples:
        train = random.Random(seed).sample(train, max_train_examples)
    held = convert(processor.get_dev_examples(folder))
    return TaskData(name, [str(x) for x in processor.get_labels()], train, held,
                    pair=any(e.text_b for e in train))
