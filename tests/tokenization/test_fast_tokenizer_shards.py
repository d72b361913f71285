"""The fast in-graph mode cuts each batch into parts tokenized concurrently
(`FastPathRouter(num_shards=...)`): the ids are the same for any number of parts and any batch
size (including batches smaller than the number of parts), in a graph and eagerly, and equal
`FullTokenizer`'s on texts that take every route (plain, cleaned, exact, [UNK])."""
from __future__ import annotations

import pytest
import tensorflow as tf

from bert_tf.tokenization import FullTokenizer, InGraphTokenizer

TEXTS = ["Hello, world!", "caf\u00e9 \u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2 \x96 ok",
         "x", "", "\u00bd \u00df", "a\x00b\tc\r\nd", "\u4e2d\u6587 text", "zzzqqqxxj" * 30,
         "\U0001F600 emoji", "plain ascii words only"]


@pytest.fixture(scope="module")
def vocab(original_fixtures):
    return str(original_fixtures / "vocab_uncased.txt")


@pytest.mark.parametrize("num_shards", [1, 3])
def test_parts_give_full_tokenizer_ids(vocab, num_shards):
    reference = FullTokenizer(vocab, do_lower_case=True)
    want = [reference.convert_tokens_to_ids(reference.tokenize(t)) for t in TEXTS]
    tokenizer = InGraphTokenizer(vocab, True, mode="fast", num_shards=num_shards)
    assert tokenizer._fast._num_shards == num_shards  # noqa: SLF001
    graph = tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    for size in range(len(TEXTS) + 1):
        assert graph(tf.constant(TEXTS[:size], tf.string)).to_list() == want[:size], size
    assert tokenizer.tokenize(TEXTS).to_list() == want
    assert tokenizer.tokenize(TEXTS[0]).numpy().tolist() == want[0]


def test_default_parts(vocab):
    import os

    parts = InGraphTokenizer(vocab, True, mode="fast")._fast._num_shards  # noqa: SLF001
    assert parts == min(2, os.cpu_count() or 1)
