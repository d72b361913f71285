"""Fixtures for the pretraining-data tests: the original's vocab/tokenizer and small corpora."""
from __future__ import annotations

import json
import pathlib
import random

import pytest

from bert_tf.pretraining_data import PretrainingDataOptions

# The two fixture runs of the original create_pretraining_data.py (commands.txt).
FIXTURE_RUNS = {
    "run1": PretrainingDataOptions(max_seq_length=128, max_predictions_per_seq=20,
                                   masked_lm_prob=0.15, random_seed=12345, dupe_factor=5),
    "run2": PretrainingDataOptions(do_whole_word_mask=True, random_seed=7, max_seq_length=64,
                                   max_predictions_per_seq=10, masked_lm_prob=0.15,
                                   dupe_factor=2, short_seq_prob=0.3),
}


@pytest.fixture(scope="session")
def vocab_file(original_fixtures) -> str:
    return str(original_fixtures / "vocab_uncased.txt")


@pytest.fixture(scope="session")
def tokenizer(vocab_file):
    from bert_tf.tokenization import FullTokenizer

    return FullTokenizer(vocab_file, do_lower_case=True)


@pytest.fixture(scope="session")
def sample_text(original_fixtures) -> str:
    return str(original_fixtures / "sample_text.txt")


def read_jsonl(path: pathlib.Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="session")
def synthetic_corpus(tmp_path_factory, sample_text) -> str:
    """~120 documents of 1-8 sentences drawn from sample_text.txt (fixed seed), with a few
    one-sentence documents: small, but enough for several shards."""
    with open(sample_text, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    rng = random.Random(2024)
    docs = []
    for i in range(120):
        n = 1 if i % 17 == 0 else rng.randint(2, 8)
        docs.append("\n".join(rng.choice(sentences) for _ in range(n)))
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return str(path)
