"""InGraphTokenizer(mode="fast"): FastBertTokenizer on the texts the fast-path rule admits, the
exact ops on the rest. Its ids must equal FullTokenizer's on the original's fixtures (see
test_in_graph_tokenizer.py, parametrized over both modes), on every code point (alone, inside a
word, next to Σ: only the exact mode's documented differences remain), on random mixtures of
characters from every class, and on the 25,000 IMDb reviews (slow)."""
from __future__ import annotations

import gzip
import random
import unicodedata

import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.tokenization import FullTokenizer, InGraphTokenizer
from bert_tf.tokenization.fast_in_graph import _is_fast_path_character

from test_in_graph_tokenizer import (NEWER_DECOMPOSITIONS, NOT_LOWERCASED, SIGMA_CONTEXT,
                                     needs_unicode_14)

ALL_CODEPOINTS = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
BMP = [cp for cp in range(0x10000) if not 0xD800 <= cp <= 0xDFFF]


@pytest.fixture(scope="module")
def tokenizers(original_fixtures):
    vocab = str(original_fixtures / "vocab_uncased.txt")
    return {lower: (FullTokenizer(vocab, lower), InGraphTokenizer(vocab, lower, mode="fast"),
                    InGraphTokenizer(vocab, lower, mode="exact"))
            for lower in (True, False)}


def _ids(tokenizer, texts: list[str], chunk: int = 50000) -> list[list[int]]:
    out = []
    for start in range(0, len(texts), chunk):
        batch = tf.constant([t.encode("utf-8") for t in texts[start:start + chunk]])
        out.extend(tokenizer.tokenize(batch).to_list())
    return out


def _python_ids(python: FullTokenizer, texts) -> list[list[int]]:
    return [python.convert_tokens_to_ids(python.tokenize(t)) for t in texts]


def _fast_bert_sweep(tokenizers, lower: bool, codepoints) -> set[int]:
    """Fast-path code points for which FastBertTokenizer alone gives other ids than
    FullTokenizer, alone or inside a word."""
    python, fast, _ = tokenizers[lower]
    fast_path = [cp for cp in codepoints if _is_fast_path_character(chr(cp), lower)]
    bad = set()
    for template in ("{}", "ab{}cd", "x{}{}y"):
        texts = [template.format(chr(cp), chr(cp)) for cp in fast_path]
        got = _ids(fast._fast.fast_bert, texts)
        bad |= {cp for cp, text, g in zip(fast_path, texts, got)
                if g != python.convert_tokens_to_ids(python.tokenize(text))}
    return bad


def _routed_sweep(tokenizers, lower: bool, codepoints, template: str) -> tuple[set, set]:
    """(code points where fast-mode ids differ from FullTokenizer, ... from the exact mode)."""
    python, fast, exact = tokenizers[lower]
    texts = [template.format(chr(cp)) for cp in codepoints]
    got, exact_ids = _ids(fast, texts), _ids(exact, texts)
    want = _python_ids(python, texts)
    return ({cp for cp, g, w in zip(codepoints, got, want) if g != w},
            {cp for cp, g, e in zip(codepoints, got, exact_ids) if g != e})


@pytest.mark.long
@pytest.mark.parametrize("lower", [True, False])
def test_fast_path_rule_holds_on_the_bmp(tokenizers, lower):
    """Every fast-path BMP character: FastBertTokenizer's ids == FullTokenizer's."""
    assert _fast_bert_sweep(tokenizers, lower, BMP) == set()


@pytest.mark.slow
@pytest.mark.parametrize("lower", [True, False])
def test_fast_path_rule_holds_everywhere(tokenizers, lower):
    assert _fast_bert_sweep(tokenizers, lower, ALL_CODEPOINTS) == set()


def test_fast_path_rule_excludes_what_fast_bert_gets_wrong(tokenizers):
    """The characters that make FastBertTokenizer differ are routed to the exact ops; for these
    texts FastBertTokenizer alone does differ, so the rule is not vacuous."""
    python, fast, _ = tokenizers[True]
    texts = ["stra\u00dfe", "\u0391\u03a3", "\u00bd cup", "coolne\u00df", "it\u00b4s",
             "a\x96b", "null\x00byte", "\ufb01ne", "x\u00b9", "\u1100\u115f"]
    want = _python_ids(python, texts)
    alone = fast._fast.fast_bert.tokenize(tf.constant(texts)).to_list()
    assert [a != w for a, w in zip(alone, want)].count(True) >= 8
    assert fast.tokenize(texts).to_list() == want
    plain, cleaned = fast._fast.split(tf.constant(texts))
    # Controls are cleaned and then go the fast path; the others go the exact path.
    assert plain.numpy().tolist() == [i in (5, 6) for i in range(len(texts))]
    assert cleaned.numpy().tolist()[5:7] == [b"ab", b"nullbyte"]


@pytest.mark.long
@needs_unicode_14
@pytest.mark.parametrize("lower", [True, False])
def test_routed_bmp_sweep(tokenizers, lower):
    differ_python, differ_exact = _routed_sweep(tokenizers, lower, BMP, "Ab{}Cd")
    assert differ_exact == set()
    # The exact mode's documented cases A and C give [UNK] either way: no id differs.
    assert differ_python == set()


@pytest.mark.slow
@needs_unicode_14
@pytest.mark.parametrize("lower", [True, False])
def test_routed_full_unicode_sweep(tokenizers, lower):
    """All 1,112,064 code points alone, inside a word and after Σ: the fast mode gives the exact
    mode's ids everywhere, so FullTokenizer's except the documented case B (sigma context)."""
    documented = NOT_LOWERCASED | NEWER_DECOMPOSITIONS | SIGMA_CONTEXT
    for template in ("{}", "Ab{}Cd", "\u0391\u03a3{}\u0391", "\u0391\u03a3{}"):
        differ_python, differ_exact = _routed_sweep(tokenizers, lower, ALL_CODEPOINTS, template)
        assert differ_exact == set(), template
        assert differ_python <= (documented if lower else set()), template
        if lower and template == "\u0391\u03a3{}\u0391":
            assert differ_python, "case B should still change ids between Σ and a letter"


def _random_texts(seed: int, count: int) -> list[str]:
    """Random mixtures of ASCII, accented and decomposed letters, CJK, punctuation, controls,
    spaces of every kind, Σ/ß/ligatures (exact path) and long runs (none of the characters of
    the exact mode's documented differences, which the sweeps cover)."""
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
        " \t\n\r\u00a0\u2003\u3000\u2028",
        ".,;:!?'\"()[]{}<>-_/\\#$%&*+=@^`|~\u2019\u201c\u201d\u2013\u2014\u2026\u00bf\u00a1",
        "\u00e9\u00e8\u00ea\u00eb\u00c9\u00e0\u00e7\u00f1\u00f6\u00fc\u00c5\u0130\u0131\u0142",
        "\u0301\u0308\u0327\u0323\u031b\u0345",  # combining marks (decomposed text)
        "\u4e2d\u6587\u5b57\uf900\u3042\uac00\u0e01\u05d0\u0627",
        "\x00\x01\x08\x0b\x0c\x7f\x85\x96\x97\u200b\u200d\ufeff\ufffd",
        "\u03a3\u03c3\u03c2\u00df\ufb01\u00bd\u00b9\u00b4\u1e9e\U0001f600",
        "\u0391\u0392\u0395\u039f\u03b1\u03bf\u0410\u0430\u0416\u0436",
    ]
    texts = []
    for _ in range(count):
        weights = [rng.random() for _ in pools]
        chars = [rng.choice(rng.choices(pools, weights)[0]) for _ in range(rng.randint(0, 60))]
        if rng.random() < 0.05:
            chars.insert(rng.randint(0, len(chars)), "x" * rng.choice([199, 200, 201, 230]))
        texts.append("".join(chars))
    return texts


@pytest.mark.long
@pytest.mark.parametrize("lower", [True, False])
def test_random_mixtures_match(tokenizers, lower):
    python, fast, _ = tokenizers[lower]
    texts = _random_texts(11, 4000)
    assert _ids(fast, texts) == _python_ids(python, texts)


def test_long_words_go_by_characters(original_fixtures):
    """The original's [UNK] limit counts characters; FastBertTokenizer's counts bytes, so
    non-ASCII texts with an [UNK] are re-done by the exact ops."""
    vocab = str(original_fixtures / "tokenization" / "vocab_cased_synthetic.txt")
    for lower in (False, True):
        python = FullTokenizer(vocab, lower)
        fast = InGraphTokenizer(vocab, lower, mode="fast")
        texts = ["ab" * 100, "ab" * 100 + "a", "\u00e9" * 200, "\u00e9" * 201,
                 "e\u0301" * 150, "a " + "b" * 201 + " c", "\u00e9" * 120 + " x",
                 "na\u00efve " + "\u00e9" * 101, "\u00e9" * 99 + "a", "ab" * 50 + "\u00e9"]
        assert fast.tokenize(texts).to_list() == _python_ids(python, texts)


def test_fast_mode_errors(original_fixtures):
    vocab = str(original_fixtures / "vocab_uncased.txt")
    with pytest.raises(ValueError, match="mode='slow'"):
        InGraphTokenizer(vocab, mode="slow")
    assert InGraphTokenizer(vocab, mode="exact").mode == "exact"
    assert isinstance(InGraphTokenizer(vocab)._fast.fast_bert, tf_text.FastBertTokenizer)


def _imdb_texts(shared_data, limit=None) -> list[str]:
    path = shared_data / "imdb" / "train.tsv.gz"
    if not path.exists():
        pytest.skip(f"needs {path}")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        next(f)
        return [line.rstrip("\n").split("\t", 3)[3] for _, line in
                zip(range(limit if limit is not None else 10**9), f)]


@pytest.mark.long
def test_imdb_reviews_match(tokenizers, shared_data):
    texts = _imdb_texts(shared_data, 500)
    for lower in (True, False):
        python, fast, _ = tokenizers[lower]
        assert _ids(fast, texts, 64) == _python_ids(python, texts)


@pytest.mark.slow
@pytest.mark.parametrize("lower", [True, False])
def test_all_imdb_reviews_match(tokenizers, shared_data, lower):
    """All 25,000 IMDb training reviews: 0 texts with different ids."""
    texts = _imdb_texts(shared_data)
    assert len(texts) == 25000
    python, fast, _ = tokenizers[lower]
    got = _ids(fast, texts, 256)
    want = _python_ids(python, texts)
    assert sum(g != w for g, w in zip(got, want)) == 0
    routed_exact = int(tf.reduce_sum(tf.cast(~fast._fast.split(tf.constant(texts))[0],
                                             tf.int32)))
    assert routed_exact < 0.02 * len(texts)
    if lower:
        assert routed_exact > 0  # Both paths are exercised by real reviews.
