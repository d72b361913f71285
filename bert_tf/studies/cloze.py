"""The cloze probe (issue 33): a word of held-out text is hidden and the pretrained model, with
no fine-tuning, chooses it among k candidates. It measures the use of the right context
directly: BERT scores the candidates by its masked-LM probability at the [MASK] (it sees both
sides); the left-to-right model by the likelihood of the whole sentence with each candidate in
place (the candidate and every later token, the only part that differs), so the right context
counts for it only through the later tokens' probabilities.

Items (`make_items`): held-out lines of the data cell's held-out corpus (never pretrained on),
WordPiece-tokenized; the target is a whole word of one WordPiece (alphabetic, >= 3 letters,
not a stop word) with at least `MIN_CONTEXT` tokens on each side; the k - 1 distractors are
other targets' words drawn from the pool of all target occurrences (so frequent words are
frequent distractors, and the unigram prior alone does not find the answer); the candidate
order is shuffled. The baselines (`baselines`): chance 1/k, and the candidate most frequent
among the pool's occurrences.
"""
from __future__ import annotations

import collections
import dataclasses
import random

import numpy as np

from bert_tf.studies.statistics import PerExample

MIN_CONTEXT = 4
STOP = frozenset("the and for are but not you all any can had her was one our out his has "
                 "him how its may new now see two who did get let say she too use that with "
                 "have this will your from they been than them then were what when which "
                 "there their would about could other these some into more very just only "
                 "also".split())


@dataclasses.dataclass
class ClozeItem:
    """One item: `tokens` (WordPieces, the target's place holding the answer), `position` of
    the target, `candidates` (WordPieces, the answer among them) and `answer` (its index)."""

    tokens: list[str]
    position: int
    candidates: list[str]
    answer: int


def _is_target(tokens: list[str], i: int) -> bool:
    t = tokens[i]
    return (t.isalpha() and len(t) >= 3 and t.lower() not in STOP and not t.startswith("##")
            and (i + 1 == len(tokens) or not tokens[i + 1].startswith("##")))


def make_items(lines, tokenize, max_tokens: int, k: int = 5, max_items: int = 2000,
               seed: int = 12345) -> list[ClozeItem]:
    """Cloze items from `lines` (module docstring): at most one target per line, at most
    `max_items`, each line's tokens cut to `max_tokens` around its target."""
    rng = random.Random(seed)
    found = []
    for line in lines:
        tokens = tokenize(line.strip())
        if len(tokens) < 2 * MIN_CONTEXT + 1:
            continue
        places = [i for i in range(MIN_CONTEXT, len(tokens) - MIN_CONTEXT)
                  if _is_target(tokens, i)]
        if places:
            i = rng.choice(places)
            lo = max(0, min(i - max_tokens // 2, len(tokens) - max_tokens))
            found.append((tokens[lo:lo + max_tokens], i - lo))
    rng.shuffle(found)
    found = found[:max_items]
    pool = [tokens[i] for tokens, i in found]
    items = []
    for tokens, i in found:
        answer = tokens[i]
        distractors: list[str] = []
        for _ in range(100 * k):
            if len(distractors) == k - 1:
                break
            w = rng.choice(pool)
            if w != answer and w not in distractors:
                distractors.append(w)
        if len(distractors) < k - 1:
            continue
        candidates = distractors + [answer]
        rng.shuffle(candidates)
        items.append(ClozeItem(tokens, i, candidates, candidates.index(answer)))
    return items


def baselines(items: list[ClozeItem]) -> dict:
    """Chance (1/k) and the most frequent candidate (by the items' answers): {"baselines",
    "gate", "value", "per_example"} as `baselines.task_baselines` gives them."""
    freq = collections.Counter(item.candidates[item.answer] for item in items)
    correct = np.array([int(np.argmax([freq[c] for c in item.candidates]) == item.answer)
                        for item in items], np.int8)
    frequent = PerExample("correct", values=correct)
    chance = 100.0 / max(1, len(items[0].candidates)) if items else 0.0
    value = round(float(frequent.metric()), 2) if items else 0.0
    best = ("most frequent candidate", value) if value >= chance else ("chance", chance)
    return {"baselines": {"chance": round(chance, 2), "most frequent candidate": value},
            "gate": best[0], "value": round(best[1], 2),
            "per_example": frequent.to_json()}


def score_bert(model, vocab: dict, items: list[ClozeItem], seq: int, batch: int = 64
               ) -> np.ndarray:
    """BERT's choices [N]: the candidate with the highest masked-LM logit at the [MASK].

    `model`: a `BertPretrainer` (masked_lm_logits [B, 1, V] at `masked_lm_positions`)."""
    import tensorflow as tf

    choices = []
    for b in range(0, len(items), batch):
        chunk = items[b:b + batch]
        ids = np.zeros((len(chunk), seq), np.int32)
        mask = np.zeros((len(chunk), seq), np.int32)
        positions = np.zeros((len(chunk), 1), np.int32)
        for r, item in enumerate(chunk):
            tokens = ["[CLS]"] + item.tokens[:seq - 2] + ["[SEP]"]
            tokens[item.position + 1] = "[MASK]"
            ids[r, :len(tokens)] = [vocab[t] for t in tokens]
            mask[r, :len(tokens)] = 1
            positions[r, 0] = item.position + 1
        logits = model({"input_word_ids": tf.constant(ids), "input_mask": tf.constant(mask),
                        "input_type_ids": tf.zeros_like(ids),
                        "masked_lm_positions": tf.constant(positions)},
                       training=False)["masked_lm_logits"].numpy()[:, 0]
        for r, item in enumerate(chunk):
            choices.append(int(np.argmax([logits[r, vocab[c]] for c in item.candidates])))
    return np.array(choices)


def score_ltr(model, vocab: dict, items: list[ClozeItem], seq: int, batch: int = 64
              ) -> np.ndarray:
    """The left-to-right model's choices [N]: the candidate whose sentence is likeliest (the
    summed log-probabilities of the candidate and every later token).

    `model`: a `GptModel` (lm_logits [B, S-1, V'] of tokens 1..S-1; its ids are the WordPiece
    vocab's, as in the studies)."""
    import tensorflow as tf

    rows, spans = [], []
    for item in items:
        for c in item.candidates:
            tokens = list(item.tokens[:seq])
            tokens[item.position] = c
            rows.append([vocab[t] for t in tokens])
            spans.append((item.position, len(tokens)))
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), np.int32)
    for r, row in enumerate(rows):
        ids[r, :len(row)] = row
    scores = np.zeros(len(rows))
    n_vocab = len(vocab)
    for b in range(0, len(rows), batch):
        logits = model({"token_ids": tf.constant(ids[b:b + batch])},
                       training=False)["lm_logits"][..., :n_vocab]
        logp = tf.nn.log_softmax(logits, axis=-1).numpy()  # [B, W-1, V]
        for r in range(logp.shape[0]):
            start, end = spans[b + r]
            t = np.arange(max(1, start), end)
            scores[b + r] = logp[r, t - 1, ids[b + r, t]].sum()
    k = len(items[0].candidates) if items else 1
    return scores.reshape(len(items), k).argmax(-1)


def result(items: list[ClozeItem], choices: np.ndarray) -> dict:
    """The cell result of a probe: accuracy (%), per-example correctness, k, items."""
    correct = (np.asarray(choices) == np.array([i.answer for i in items])).astype(np.int8)
    cell = PerExample("correct", values=correct)
    return {"metric": "accuracy", "value": round(float(cell.metric()), 2),
            "per_example": cell.to_json(), "k": len(items[0].candidates) if items else 0,
            "items": len(items)}
