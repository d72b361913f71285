"""`BertTextTokenClassifier.predict(words, window_stride=k)`: texts longer than
`sequence_length - 2` pieces are tagged in overlapping windows and every word gets one row, from
the window where its first piece has the most context; a text that fits gives the plain
prediction. With a vocab where every word is one piece, the windows fall on word boundaries, so
each word's row must equal the plain prediction of the chosen window's words."""
from __future__ import annotations

import numpy as np
import pytest

from test_text_models import TEXTS, tiny_vocab, write_google_folder

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
SEQ = 8  # windows of 6 pieces
LABELS = ["O", "B-X", "I-X"]


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    import bert_tf

    folder = write_google_folder(tmp_path_factory.mktemp("tiny_google_ner"), tiny_vocab(TEXTS))
    return bert_tf.BertTextTokenClassifier.from_pretrained(str(folder), label_names=LABELS,
                                                           sequence_length=SEQ)


@pytest.mark.long  # four predict calls, two of them in windows (Keras loop): ~10-20 s
def test_windows_give_one_row_per_word_and_the_plain_result_when_it_fits(tagger):
    from bert_tf.errors import UserInputError
    from bert_tf.tasks.text_models.text_classifier import window_starts

    span, stride = SEQ - 2, 2
    long_words = TEXTS[2].split()  # 13 one-piece words
    assert [len(tagger.preprocessor.tokenize([w]).to_list()[0]) for w in long_words] == \
        [1] * len(long_words)
    short_words = TEXTS[0].split()[:span]
    plain = tagger.predict([short_words, long_words])
    windowed = tagger.predict([short_words, long_words], window_stride=stride)
    assert len(plain[1]) == span < len(long_words)  # the original's truncation
    assert [len(p) for p in windowed] == [len(short_words), len(long_words)]
    np.testing.assert_allclose(windowed[0], plain[0], rtol=0, atol=1e-6)

    starts = window_starts(len(long_words), span, stride)
    assert len(starts) > 1
    per_window = tagger.predict([long_words[s:s + span] for s in starts])  # plain, one call
    for i, row in enumerate(windowed[1]):
        # the max-context window of word i (first one on ties), as SQuAD's doc_stride rule
        k = max((min(i - s, s + span - 1 - i), -k, k) for k, s in enumerate(starts)
                if s <= i < s + span)[2]
        np.testing.assert_allclose(row, per_window[k][i - starts[k]], rtol=0, atol=1e-5)
    labels = tagger.predict_labels([long_words], window_stride=stride)[0]
    assert len(labels) == len(long_words) and set(labels) <= set(LABELS)
    with pytest.raises(UserInputError, match=r"window_stride=7; expected 1..6"):
        tagger.predict([long_words], window_stride=7)


def test_predict_traces_once_and_equals_keras_loop(tagger, monkeypatch):
    """`predict` on word lists runs `pack_words` and the model in one function kept with the
    model: the same rows as Keras' loop on the tf.data pipeline, and no trace after the first
    call, whatever the number of texts."""
    import tensorflow as tf

    from bert_tf.tasks.text_models import token_classifier

    texts = [t.split() for t in TEXTS]
    traces = []
    pack = token_classifier.pack_words

    def counting(preprocessor, words, labels=None):
        traces.append(1)  # Python runs only while tracing
        return pack(preprocessor, words, labels)

    monkeypatch.setattr(token_classifier, "pack_words", counting)
    fast = tagger.predict(texts, batch_size=4)
    assert len(traces) <= 1  # 0 when an earlier test of this module traced it
    first = len(traces)
    for n in (1, 3, len(texts)):
        again = tagger.predict(texts[:n], batch_size=4)
        for a, b in zip(again, fast[:n]):
            # Fewer rows in a batch can pick other matmul kernels (oneDNN on Intel AVX-512: 1
            # float32 ulp apart, 6e-8 here, on 2026-11-30), so not bit-equal across batch sizes.
            np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    ragged32 = tf.ragged.constant(texts).with_row_splits_dtype(tf.int32)
    for a, b in zip(tagger.predict(ragged32, batch_size=4), fast):
        np.testing.assert_array_equal(a, b)
    assert len(traces) == first, traces
    monkeypatch.setattr(type(tagger), "_single_device", lambda self: False)  # Keras' loop
    keras_loop = tagger.predict(texts, batch_size=4)
    assert len(traces) > first  # its pipelines trace their maps on every call
    assert [len(p) for p in keras_loop] == [len(p) for p in fast]  # words kept (truncation)
    for a, b in zip(fast, keras_loop):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
