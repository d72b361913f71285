"""Trivial baselines of the study tasks, computed by the tool itself on the same split as the
cells (docs/studies.md, "Method: gates, baselines, verdicts"). A task cell whose score is not
above its task's gate (the best of its baselines) is "not learned".

* every classification task: the majority class of the training split;
* classification: multinomial Naive Bayes (Laplace smoothing 1) over the WordPiece tokens the
  models read, truncated as they are (`model_tokens`: BERT's [CLS] a [SEP] b [SEP] budget; a
  pair's second-segment tokens are features of their own);
* STS-B: the Jaccard overlap of the two sentences' lower-cased word sets (Pearson with the
  gold scores);
* CoNLL-2003: a lexicon of the training entities that always carry one type; a held-out
  sentence is tagged by greedy longest match (at most `LEXICON_MAX_WORDS` words);
* SQuAD: the sliding-window heuristic (Richardson et al. 2013, as Rajpurkar et al. 2016 use it
  for SQuAD): every span of at most `WINDOW_MAX_ANSWER` words of the paragraph is a candidate,
  scored by the rarity-weighted question words found in the window of |question| words either
  side of it, nearer ones counting more (a candidate holding question words is skipped); the
  best candidate is the answer (`sliding_window_answer`).

Every baseline returns {"name", "value" (the task's metric in %), "per_example"
(`statistics.PerExample.to_json()`)}; `task_baselines` returns all of a task's and names the
gate.
"""
from __future__ import annotations

import collections
import math
import re
from typing import Callable, Sequence

import numpy as np

from bert_tf.studies.statistics import PerExample, per_example_from_predictions

LEXICON_MAX_WORDS = 5
WINDOW_MAX_ANSWER = 4
WINDOW_DECAY = 0.2
_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset("a an the of in on at to for by with from and or is are was were be been "
                  "what which who whom whose when where why how did does do that this these "
                  "those it its as".split())


def _result(name: str, cell: PerExample) -> dict:
    return {"name": name, "value": round(float(cell.metric()), 2),
            "per_example": cell.to_json()}


def model_tokens(tokenize: Callable[[str], list], text_a: str, text_b: str | None,
                 max_seq_length: int) -> list[str]:
    """The tokens a BERT-style model of `max_seq_length` reads of an example: a's, and b's
    (prefixed "b:") after the original's truncate_seq_pair (the longer one loses its last
    token until both fit max_seq_length - 3; a single text keeps max_seq_length - 2)."""
    a = list(tokenize(text_a))
    if text_b is None:
        return a[:max(0, max_seq_length - 2)]
    b = list(tokenize(text_b))
    while len(a) + len(b) > max_seq_length - 3 and (a or b):
        (a if len(a) > len(b) else b).pop()
    return a + ["b:" + t for t in b]


def majority(train_labels: Sequence, held_labels: Sequence, metric: str) -> dict:
    """The training split's most common label for every held-out example (`metric`: the
    task's; a regression predicts the training mean, Pearson 0)."""
    gold = np.asarray(held_labels)
    if metric == "pearson":
        pred = np.full(len(gold), float(np.mean(np.asarray(train_labels, np.float64))))
        return _result("training mean", PerExample("pearson", pred=pred,
                                                   gold=gold.astype(np.float64)))
    common = collections.Counter(train_labels).most_common(1)[0][0]
    return _result("majority class",
                   per_example_from_predictions(metric, np.array([common] * len(gold)), gold))


class NaiveBayes:
    """Multinomial Naive Bayes over token lists (Laplace smoothing `alpha`)."""

    def __init__(self, alpha: float = 1.0):
        self.alpha = alpha

    def fit(self, docs: Sequence[Sequence[str]], labels: Sequence) -> "NaiveBayes":
        self.classes = sorted(set(labels))
        index = {c: i for i, c in enumerate(self.classes)}
        self.vocab = {t: i for i, t in enumerate(sorted({t for d in docs for t in d}))}
        counts = np.zeros((len(self.classes), len(self.vocab)))
        prior = np.zeros(len(self.classes))
        for d, y in zip(docs, labels):
            prior[index[y]] += 1
            for t in d:
                counts[index[y], self.vocab[t]] += 1
        smoothed = counts + self.alpha
        self.log_prob = np.log(smoothed / smoothed.sum(axis=1, keepdims=True))  # [C, V]
        self.log_prior = np.log(prior / prior.sum())
        return self

    def predict(self, docs: Sequence[Sequence[str]]) -> list:
        out = []
        for d in docs:
            ids = [self.vocab[t] for t in d if t in self.vocab]
            scores = self.log_prior + self.log_prob[:, ids].sum(axis=1)
            out.append(self.classes[int(np.argmax(scores))])
        return out


def naive_bayes(train_docs, train_labels, held_docs, held_labels, metric: str) -> dict:
    """Naive Bayes trained on the training split's token lists, scored on the held-out ones."""
    pred = NaiveBayes().fit(train_docs, train_labels).predict(held_docs)
    return _result("Naive Bayes", per_example_from_predictions(
        metric, np.asarray(pred), np.asarray(held_labels)))


def jaccard(pairs: Sequence[tuple[str, str]], gold: Sequence[float]) -> dict:
    """STS-B: Pearson of the word-set Jaccard overlap with the gold similarity."""
    def words(s):
        return set(_WORD.findall(s.lower()))

    pred = np.array([len(words(a) & words(b)) / max(1, len(words(a) | words(b)))
                     for a, b in pairs])
    return _result("word overlap (Jaccard)", PerExample("pearson", pred=pred,
                                                        gold=np.asarray(gold, np.float64)))


def _chunks(labels: Sequence[str]) -> list[tuple[int, int, str]]:
    """(start, end exclusive, type) of the entities of an IOB1/IOB2 tag sequence."""
    out, start, kind = [], None, None
    for i, tag in enumerate(list(labels) + ["O"]):
        prefix, _, t = tag.partition("-")
        begins = tag != "O" and (kind != t or prefix == "B")
        if start is not None and (tag == "O" or begins):
            out.append((start, i, kind))
            start, kind = None, None
        if begins:
            start, kind = i, t
    return out


def entity_lexicon(train_sentences) -> dict[tuple[str, ...], str]:
    """The training entities (word tuples) that carry one type every time they are tagged."""
    types: dict = collections.defaultdict(set)
    for s in train_sentences:
        for start, end, kind in _chunks(s.labels):
            types[tuple(s.words[start:end])].add(kind)
    return {words: next(iter(t)) for words, t in types.items()
            if len(t) == 1 and len(words) <= LEXICON_MAX_WORDS}


def lexicon_tags(words: Sequence[str], lexicon: dict) -> list[str]:
    """Greedy longest match of `lexicon` over `words` (B- first word, I- the rest)."""
    tags, i = ["O"] * len(words), 0
    while i < len(words):
        for n in range(min(LEXICON_MAX_WORDS, len(words) - i), 0, -1):
            kind = lexicon.get(tuple(words[i:i + n]))
            if kind:
                tags[i:i + n] = [f"B-{kind}"] + [f"I-{kind}"] * (n - 1)
                i += n
                break
        else:
            i += 1
    return tags


def ner_per_example(sentences, predictions: Sequence[Sequence[str]]) -> PerExample:
    """Per-sentence conlleval chunk counts (correct, guessed, gold) [N, 3]: their sums are
    conlleval's overall counts (sentences are separated by boundaries)."""
    from bert_tf.evaluation import conlleval

    counts = []
    for s, p in zip(sentences, predictions):
        r = conlleval.evaluate([s.labels], [list(p)]).overall
        counts.append((r.correct, r.found_guessed, r.found_gold))
    return PerExample("f1_counts", counts=np.array(counts, np.int32).reshape(-1, 3))


def ner_lexicon(task) -> dict:
    """CoNLL-2003: the lexicon baseline on the held-out sentences (entity F1)."""
    lexicon = entity_lexicon(task.train)
    predictions = [lexicon_tags(s.words, lexicon) for s in task.held_out]
    return _result("entity lexicon", ner_per_example(task.held_out, predictions))


def squad_per_example(articles, predictions: dict) -> PerExample:
    """Per-question official v1.1 F1 (%, max over the gold answers) in the file's question
    order; a question without a prediction scores 0 (as the official script)."""
    from bert_tf.evaluation.squad import iter_questions, token_f1

    values = []
    for qa in iter_questions(articles):
        pred = predictions.get(qa["id"])
        values.append(0.0 if pred is None else
                      100.0 * max(token_f1(pred, a["text"]) for a in qa["answers"]))
    return PerExample("mean", values=np.array(values))


def sliding_window_answer(doc_tokens: Sequence[str], question: str) -> str:
    """The sliding-window heuristic's answer (module docstring): every span of at most
    WINDOW_MAX_ANSWER words that holds no question word and neither starts with a stop word
    nor with punctuation is scored by the question words within |question| words either side,
    each weighted by its rarity in the paragraph (log(1 + 1/count), Richardson et al.'s
    inverse count) and by 1 / (1 + WINDOW_DECAY x its distance to the span). The settings were
    chosen on the first 600 training questions of the split (F1 10.4 for the plain count, 14.4
    for these), never on the held-out ones."""
    def norm(w):
        return "".join(_WORD.findall(w.lower()))

    q = {norm(w) for w in question.split()} - _STOP - {""}
    words = [norm(w) for w in doc_tokens]
    count = collections.Counter(words)
    hit = np.array([math.log(1 + 1 / count[w]) if w in q else 0.0 for w in words])
    width, n = max(1, len(q)), len(words)
    position = np.arange(n)
    best, best_span = -math.inf, (0, 0)
    for start in range(n):
        if not words[start] or words[start] in _STOP:
            continue
        for end in range(start, min(n, start + WINDOW_MAX_ANSWER)):
            if hit[start:end + 1].any() or not words[end]:
                continue
            lo, hi = max(0, start - width), min(n, end + 1 + width)
            distance = np.maximum(0, np.where(position < start, start - position,
                                              position - end))[lo:hi]
            score = float((hit[lo:hi] / (1 + WINDOW_DECAY * distance)).sum()) \
                - (end - start) * 1e-3  # ties: the shorter span
            if score > best:
                best, best_span = score, (start, end)
    return " ".join(doc_tokens[best_span[0]:best_span[1] + 1])


def squad_sliding_window(task) -> dict:
    """SQuAD split: the sliding-window heuristic on every held-out question (official F1)."""
    predictions = {e.qas_id: sliding_window_answer(e.doc_tokens, e.question_text)
                   for e in task.held_out}
    return _result("sliding window", squad_per_example(task.held_out_articles, predictions))


def task_baselines(task, metric: str, tokenize: Callable[[str], list] | None = None,
                   max_seq_length: int = 128) -> dict:
    """Every trivial baseline of `task` (a `data.TaskData`, `NerTaskData` or `SpanTaskData`)
    on its held-out split. Returns {"baselines": {name: value}, "gate": the best one's name,
    "value": its score, "per_example": its PerExample json}."""
    from bert_tf.studies.data import NerTaskData, SpanTaskData

    if isinstance(task, SpanTaskData):
        found = [squad_sliding_window(task)]
    elif isinstance(task, NerTaskData):
        found = [ner_lexicon(task)]
    elif task.regression:
        gold = [float(e.label) for e in task.held_out]
        found = [majority([float(e.label) for e in task.train], gold, metric),
                 jaccard([(e.text_a, e.text_b or "") for e in task.held_out], gold)]
    else:
        ids = {label: i for i, label in enumerate(task.labels)}
        train_y = [ids[e.label] for e in task.train]
        held_y = [ids[e.label] for e in task.held_out]
        found = [majority(train_y, held_y, metric)]
        if tokenize is not None:
            def docs(examples):
                return [model_tokens(tokenize, e.text_a, e.text_b, max_seq_length)
                        for e in examples]

            found.append(naive_bayes(docs(task.train), train_y, docs(task.held_out), held_y,
                                     metric))
    best = max(found, key=lambda r: r["value"] if math.isfinite(r["value"]) else -math.inf)
    return {"baselines": {r["name"]: r["value"] for r in found}, "gate": best["name"],
            "value": best["value"], "per_example": best["per_example"]}
