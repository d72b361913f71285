"""A study's shared data: the pretraining corpus, the WordPiece vocabulary (BERT and GPT use the
same one, as BERT Table 5's LTR model does), GPT's LM windows, and the fine-tuning tasks.

Tasks are lists of `TaskExample`s with a train and a held-out split:

* `topic` (tiny scale): the embedded topic task of the quickstart
  (`bert_tf.quickstart.topic_task`: which group of Python's reference a documentation paragraph
  comes from, 3 balanced classes, whole topics held out; the pretraining corpus and the vocab
  are made from the training topics only);
* GLUE names (small/base): `<data_dir>/glue/<task>/train.tsv` and `dev.tsv` through the
  original processors (`bert_tf.tasks.glue`); the dev set is the held-out split, as in the
  papers' ablation tables;
* `IMDb` (small/base, BERT vs GPT): `<data_dir>/imdb/train.tsv.gz` (the 25,000 labelled
  training reviews), split by the seed into held-out (2,500) and training reviews;
* `conll2003` (every scale, BERT Table 7): `<data_dir>/conll2003/eng.train` -> eng.testa
  (the dev set, as the paper's Table 7), read by `bert_tf.tasks.ner` (`NerTaskData`);
* `SQuAD` (small/base): a split of the SQuAD v1.1 dev articles
  (`<data_dir>/squad/dev-v1.1.json`): every third article is held out and scored with the
  official v1.1 evaluation, the questions of the other articles train (`SpanTaskData`).

Each task is scored by its official metric (`TASK_METRICS`): CoLA by Matthews correlation,
STS-B (a regression: one output, squared error) by Pearson correlation, SQuAD by the official
F1, NER by conlleval's entity F1, the others by accuracy; all in % as the papers print them.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random

from bert_tf import io_utils
from bert_tf.studies.declarations import Scale, StudyError

GLUE_FOLDERS = {"SST-2": "SST-2", "MRPC": "MRPC", "RTE": "RTE", "CoLA": "CoLA",
                "STS-B": "STS-B"}
SQUAD_FILE = os.path.join("squad", "dev-v1.1.json")
SQUAD_HELD_OUT_EVERY = 3
"""SQuAD split: article i of the dev file is held out when i % 3 == 2 (16 of its 48 articles,
2,817 of its 10,570 questions)."""
TASK_METRICS = {"CoLA": "mcc", "STS-B": "pearson", "SQuAD": "f1", "conll2003": "f1"}
"""The metric each task is scored by (`bert_tf.evaluation.glue_metrics` names; SQuAD: the
official v1.1 F1; conll2003: conlleval's entity F1); tasks not listed: accuracy."""


def task_metric(task: str) -> str:
    """The metric `task` is scored by ("accuracy", "mcc", "pearson", "f1")."""
    return TASK_METRICS.get(task, "accuracy")
IMDB_FILE = os.path.join("imdb", "train.tsv.gz")
IMDB_HELD_OUT = 2500
CONLL_FILES = (os.path.join("conll2003", "eng.train"), os.path.join("conll2003", "eng.testa"))
ZERO_SHOT = {
    # task: (text appended to the example, {label: the word whose LM likelihood scores it}).
    # GPT-1 section 5's sentiment heuristic: append "very", compare "positive" / "negative".
    "SST-2": ("very", {"0": "negative", "1": "positive"}),
    "IMDb": ("very", {"0": "negative", "1": "positive"}),
    # The tiny topic task: which part of Python's reference the paragraph comes from.
    "topic": ("this is about", {"statements": "statements", "expressions": "expressions",
                                "data model": "objects"}),
}
"""Zero-shot heuristics of GPT-1 Figure 2 (right) per task; tasks without one are not scored."""


@dataclasses.dataclass(frozen=True)
class TaskExample:
    """One example: text_a, optional text_b, label (a string of the task's label list)."""

    text_a: str
    text_b: str | None
    label: str


@dataclasses.dataclass
class TaskData:
    """A task's splits. labels: the label list ([] for a regression: labels are scores);
    pair: examples have text_b; regression: one real-valued output (STS-B)."""

    name: str
    labels: list[str]
    train: list[TaskExample]
    held_out: list[TaskExample]
    pair: bool
    regression: bool = False


@dataclasses.dataclass
class SpanTaskData:
    """SQuAD's split: `bert_tf.tasks.squad.reading.SquadExample` lists (train: with answer
    positions) and the held-out articles in the SQuAD JSON layout (the official evaluation
    reads them)."""

    name: str
    train: list
    held_out: list
    held_out_articles: list


@dataclasses.dataclass
class NerTaskData:
    """A token-tagging task's splits (`bert_tf.tasks.ner.reading.NerSentence` lists)."""

    name: str
    labels: list[str]
    train: list
    held_out: list


def required_files(scale: Scale, data_dir: str, tasks: tuple[str, ...] | None = None
                   ) -> list[str]:
    """The input files a scale's tasks need (`tasks`: default the scale's; the tiny scale's
    corpus and topic task are embedded)."""
    files = []
    if scale.corpus != "embedded":
        files.append(os.path.join(data_dir, scale.corpus))
    for task in scale.tasks if tasks is None else tasks:
        if task == "IMDb":
            files.append(os.path.join(data_dir, IMDB_FILE))
        elif task == "conll2003":
            files += [os.path.join(data_dir, f) for f in CONLL_FILES]
        elif task == "SQuAD":
            files.append(os.path.join(data_dir, SQUAD_FILE))
        elif task != "topic":
            folder = os.path.join(data_dir, "glue", GLUE_FOLDERS.get(task, task))
            files += [os.path.join(folder, "train.tsv"), os.path.join(folder, "dev.tsv")]
    return files


def check_data(scale: Scale, data_dir: str, tasks: tuple[str, ...] | None = None) -> None:
    """Raises StudyError naming the first missing file, before anything runs."""
    for task in scale.tasks if tasks is None else tasks:
        if task not in ("topic", "IMDb", "conll2003", "SQuAD") and task not in GLUE_FOLDERS:
            raise StudyError(f"scale {scale.name}: task {task!r} has no reader; expected topic, "
                             f"IMDb, conll2003, SQuAD or one of {', '.join(GLUE_FOLDERS)}")
    for path in required_files(scale, data_dir, tasks):
        if not os.path.exists(path):
            raise StudyError(f"{path}: not found (needed by --scale={scale.name}; set "
                             "--data_dir to the folder holding pretrain/, glue/, imdb/, squad/ "
                             "and conll2003/)")


def _open_text(path: str):
    """A text file for reading, gunzipped when its name ends in .gz."""
    if path.endswith(".gz"):
        import gzip

        return gzip.open(path, "rt", encoding="utf-8")
    return io_utils.open_file(path, "r", encoding="utf-8")


def split_corpus(corpus: str, train_path: str, held_out_path: str, every: int) -> dict:
    """Writes every `every`-th document of `corpus` (create_pretraining_data's format: one
    sentence a line, blank lines between documents; gzip allowed) to `held_out_path`, the others
    to `train_path`. Returns the document counts."""
    counts = {"documents": 0, "held_out_documents": 0}
    with io_utils.atomic_output_path(train_path) as train_tmp, \
            io_utils.atomic_output_path(held_out_path) as held_tmp, \
            open(train_tmp, "w", encoding="utf-8") as train, \
            open(held_tmp, "w", encoding="utf-8") as held:
        index, started = 0, False
        with _open_text(corpus) as f:
            for line in f:
                if not line.strip():
                    if started:
                        (held if index % every == every - 1 else train).write("\n")
                        index += 1
                        started = False
                    continue
                started = True
                (held if index % every == every - 1 else train).write(line.rstrip("\n") + "\n")
        if started:
            index += 1
    counts["held_out_documents"] = index // every
    counts["documents"] = index - counts["held_out_documents"]
    return counts


def prepare_corpus(cell_dir: str, scale: Scale, data_dir: str, seed: int) -> dict:
    """The data cell: corpus.txt (+ held_out_corpus.txt), vocab.txt, gpt_lm_data/, tasks.

    Returns the paths and counts (the cell's result)."""
    from bert_tf.pretraining_data.gpt_lm import EncoderSpec, LmDataOptions, create_gpt_lm_data
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
    elif scale.held_out_every:
        corpus = os.path.join(cell_dir, "corpus.txt")
        held = os.path.join(cell_dir, "held_out_corpus.txt")
        out.update(split_corpus(os.path.join(data_dir, scale.corpus), corpus, held,
                                scale.held_out_every))
        out["held_out_corpus"] = held
    else:
        corpus = os.path.join(data_dir, scale.corpus)
        out["held_out_corpus"] = None
    out["corpus"] = corpus
    vocab_file = os.path.join(cell_dir, "vocab.txt")
    vocab = build_wordpiece_vocab([corpus], vocab_file, vocab_size=scale.vocab_size,
                                  do_lower_case=scale.do_lower_case)
    out["vocab_file"], out["vocab_size"] = vocab_file, len(vocab)
    out["do_lower_case"] = scale.do_lower_case
    spec = EncoderSpec(vocab_file=vocab_file, do_lower_case=scale.do_lower_case)
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
    if name == "IMDb":
        return _load_imdb(os.path.join(data_dir, IMDB_FILE), max_train_examples, seed)
    if name == "SQuAD":
        return load_squad_split(os.path.join(data_dir, SQUAD_FILE), max_train_examples, seed)
    from bert_tf.tasks import glue

    processor = glue.get_processor(name)
    folder = os.path.join(data_dir, "glue", GLUE_FOLDERS[name])

    def convert(rows):
        return [TaskExample(r.text_a, r.text_b, str(r.label)) for r in rows]

    train = convert(processor.get_train_examples(folder))
    if max_train_examples and len(train) > max_train_examples:
        train = random.Random(seed).sample(train, max_train_examples)
    held = convert(processor.get_dev_examples(folder))
    regression = processor.is_regression
    return TaskData(name, [] if regression else [str(x) for x in processor.get_labels()], train,
                    held, pair=any(e.text_b for e in train), regression=regression)


def load_squad_split(path: str, max_train_examples: int = 0, seed: int = 12345
                     ) -> SpanTaskData:
    """SQuAD v1.1's dev articles split by article (`SQUAD_HELD_OUT_EVERY`): no held-out
    paragraph is seen in training. At most `max_train_examples` training questions, drawn by
    `seed`. Training questions are read as the original's training reader does, with their
    first answer as the target (a question whose answer text is not at its answer_start is
    logged and dropped)."""
    from bert_tf.tasks.squad.reading import examples_from_squad_data, load_squad_json

    articles = load_squad_json(path)
    if len(articles) < SQUAD_HELD_OUT_EVERY:
        raise StudyError(f"{path}: {len(articles)} articles; the split needs at least "
                         f"{SQUAD_HELD_OUT_EVERY}")
    held_articles = [a for i, a in enumerate(articles)
                     if i % SQUAD_HELD_OUT_EVERY == SQUAD_HELD_OUT_EVERY - 1]
    train_articles = [a for i, a in enumerate(articles)
                      if i % SQUAD_HELD_OUT_EVERY != SQUAD_HELD_OUT_EVERY - 1]
    # The dev file lists up to 5 answers per question; training reads one (the first).
    train_articles = [{**a, "paragraphs": [
        {**p, "qas": [{**qa, "answers": qa["answers"][:1]} for qa in p["qas"]]}
        for p in a["paragraphs"]]} for a in train_articles]
    train = examples_from_squad_data(train_articles, is_training=True, source=path)
    if max_train_examples and len(train) > max_train_examples:
        train = random.Random(seed).sample(train, max_train_examples)
    else:
        random.Random(seed).shuffle(train)
    held = examples_from_squad_data(held_articles, is_training=False, source=path)
    return SpanTaskData("SQuAD", train, held, held_articles)


def _load_imdb(path: str, max_train_examples: int, seed: int) -> TaskData:
    """IMDb's labelled training reviews (columns file, rating, label, text; label 1 =
    positive), split by `seed` into IMDB_HELD_OUT held-out and the other training reviews."""
    import csv

    rows = []
    with _open_text(path) as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if not header or "label" not in header or "text" not in header:
            raise StudyError(f"{path}:1: expected a header with the columns label and text, "
                             f"got {header}")
        li, ti = header.index("label"), header.index("text")
        for n, row in enumerate(reader, start=2):
            if len(row) != len(header) or row[li] not in ("0", "1"):
                raise StudyError(f"{path}:{n}: expected {len(header)} tab-separated columns "
                                 "with label 0 or 1")
            rows.append(TaskExample(row[ti].replace("<br />", " "), None, row[li]))
    random.Random(seed).shuffle(rows)
    held, train = rows[:IMDB_HELD_OUT], rows[IMDB_HELD_OUT:]
    if max_train_examples:
        train = train[:max_train_examples]
    return TaskData("IMDb", ["0", "1"], train, held, pair=False)


def load_ner_task(data_dir: str, max_sentences: int = 0, seed: int = 12345) -> NerTaskData:
    """CoNLL-2003: eng.train -> eng.testa (at most `max_sentences` of each, drawn by `seed`,
    kept in file order)."""
    from bert_tf.tasks.ner.reading import build_label_list, check_labels, read_conll_file

    train_path, dev_path = (os.path.join(data_dir, f) for f in CONLL_FILES)
    train = read_conll_file(train_path, require_labels=True)
    held = read_conll_file(dev_path, require_labels=True)
    labels = build_label_list(train)
    check_labels(held, labels)
    if max_sentences:
        rng = random.Random(seed)
        train = [train[i] for i in sorted(rng.sample(range(len(train)),
                                                     min(max_sentences, len(train))))]
        held = [held[i] for i in sorted(rng.sample(range(len(held)),
                                                   min(max_sentences, len(held))))]
    return NerTaskData("conll2003", labels, train, held)


HEAD_FRACTION = 0.25
"""Head + tail truncation: a quarter of the budget from the start of the text, the rest from
its end (Sun et al. 2019's best IMDb cut was 128 head + 382 tail tokens of 510)."""


def head_tail_text(text: str, tokenizer, max_tokens: int,
                   head_fraction: float = HEAD_FRACTION) -> str:
    """`text` cut to its head and tail so that it holds at most `max_tokens` WordPieces of
    `tokenizer` (whole words kept; the words in between replaced by " ... "); unchanged when
    it fits. BERT, GPT and the Naive Bayes baseline then all read the same cut."""
    words = text.split()
    sizes = [len(tokenizer.tokenize(w)) for w in words]
    if sum(sizes) <= max_tokens:
        return text
    budget = max(0, max_tokens - 1)  # the "..." costs one WordPiece
    head_budget = int(budget * head_fraction)
    head, used = 0, 0
    while head < len(words) and used + sizes[head] <= head_budget:
        used += sizes[head]
        head += 1
    tail, used_tail = len(words), 0
    while tail > head and used + used_tail + sizes[tail - 1] <= budget:
        tail -= 1
        used_tail += sizes[tail]
    return " ".join(words[:head] + ["..."] + words[tail:])


def head_tail_task(task: TaskData, tokenizer, max_seq_length: int) -> TaskData:
    """`task` with every text cut by `head_tail_text` to what a single-segment BERT input of
    `max_seq_length` holds ([CLS] text [SEP]: max_seq_length - 2 WordPieces)."""
    def cut(examples):
        return [dataclasses.replace(e, text_a=head_tail_text(e.text_a, tokenizer,
                                                             max_seq_length - 2))
                for e in examples]

    return dataclasses.replace(task, train=cut(task.train), held_out=cut(task.held_out))
