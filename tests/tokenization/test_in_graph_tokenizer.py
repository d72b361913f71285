"""InGraphTokenizer: the same ids as FullTokenizer (original fixtures, real reviews, Unicode
sweeps) except the documented differences, which are asserted to still differ; tf.function,
tf.data and SavedModel use; the ops it puts in a graph."""
from __future__ import annotations

import gzip
import random
import unicodedata

import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from bert_tf.tokenization import FullTokenizer, InGraphTokenizer

from test_full_tokenizer import FIXTURE_FILES, case_input, fixture_setup

# JSONL cases (file, name) where the in-graph tokenizer is known to differ: none. The test
# below fails if a case is listed here but matches, or differs but is not listed.
KNOWN_DIFFERENT_FIXTURE_CASES: dict[tuple[str, str], str] = {}

# The documented differences (docs/tokenization.md), do_lower_case=True, Python 3.11's
# unicodedata 14.0.0 vs TF 2.21's ICU (case mapping, Unicode 13) and tensorflow-text 2.21's
# ICU (NFD, Unicode 16). (text, FullTokenizer basic tokens, in-graph basic tokens).
DOCUMENTED_EXAMPLES = [
    ("\u2c2f", ["\u2c5f"], ["\u2c2f"]),  # A: capital added in 14.0, not lower-cased in-graph.
    ("\U00010570", ["\U00010597"], ["\U00010570"]),
    ("\u0391\u03a3\u0898\u0391", ["\u03b1\u03c3\u03b1"], ["\u03b1\u03c2\u03b1"]),  # B: sigma.
    ("\u0391\u03a3\u2c5f", ["\u03b1\u03c3\u2c5f"], ["\u03b1\u03c2\u2c5f"]),
    ("\U000105c9", ["\U000105c9"], ["\U000105d2"]),  # C: NFD of a code point new after 14.0.
    ("\U00011383", ["\U00011383"], ["\U00011382\U000113c9"]),
]


def _ranges(*items):
    out = set()
    for item in items:
        a, b = item if isinstance(item, tuple) else (item, item)
        out.update(range(a, b + 1))
    return frozenset(out)


# A: capitals that Unicode 14.0 added; TF's ICU (Unicode 13) has no lower-case mapping for them.
NOT_LOWERCASED = _ranges(0x2C2F, 0xA7C0, 0xA7D0, 0xA7D6, 0xA7D8, (0x10570, 0x1057A),
                         (0x1057C, 0x1058A), (0x1058C, 0x10592), (0x10594, 0x10595))
# C: unassigned in Unicode 14.0, canonically decomposed by tensorflow-text's ICU (Unicode 16).
NEWER_DECOMPOSITIONS = _ranges(0x105C9, 0x105E4, 0x11383, 0x11385, 0x1138E, 0x11391, 0x113C5,
                               0x113C7, 0x113C8, (0x16121, 0x16128), (0x16D68, 0x16D6A))
# B: added or re-categorised in Unicode 14.0, cased or case-ignorable for Python but not for
# TF's ICU, so a Σ next to them gets the other lower-case form (σ vs ς).
SIGMA_CONTEXT = NOT_LOWERCASED | _ranges(
    0x0888, (0x0898, 0x089F), (0x08C9, 0x08D2), 0x0C3C, 0x1734, 0x180F, (0x1AC1, 0x1ACE), 0x1DFA,
    0x2C5F, 0xA7C1, 0xA7D1, 0xA7D3, (0xA7D5, 0xA7D9), (0xA7F2, 0xA7F4), 0xFBC2,
    (0x10597, 0x105A1), (0x105A3, 0x105B1), (0x105B3, 0x105B9), (0x105BB, 0x105BC),
    (0x10780, 0x10785), (0x10787, 0x107B0), (0x107B2, 0x107BA), (0x10F82, 0x10F85), 0x11070,
    (0x11073, 0x11074), 0x110C2, (0x1AFF0, 0x1AFF3), (0x1AFF5, 0x1AFFB), (0x1AFFD, 0x1AFFE),
    (0x1CF00, 0x1CF2D), (0x1CF30, 0x1CF46), (0x1DF00, 0x1DF09), (0x1DF0B, 0x1DF1E), 0x1E2AE)

needs_unicode_14 = pytest.mark.skipif(
    unicodedata.unidata_version != "14.0.0",
    reason=f"the documented differences are for Python's unicodedata 14.0.0 (Python 3.11); "
           f"this one has {unicodedata.unidata_version}")


@pytest.fixture(scope="module")
def uncased(original_fixtures):
    vocab = str(original_fixtures / "vocab_uncased.txt")
    return {lower: (FullTokenizer(vocab, lower), InGraphTokenizer(vocab, lower, mode="exact"))
            for lower in (True, False)}


def _strings(tensor) -> list:
    return [[w.decode("utf-8") for w in row] for row in tensor.to_list()]


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_matches_original_fixtures(original_fixtures, name, mode):
    vocab, lower, cases = fixture_setup(original_fixtures, name)
    tokenizer = InGraphTokenizer(str(vocab), do_lower_case=lower, mode=mode)
    texts = [t.encode("utf-8") if isinstance(t, str) else t for t in map(case_input, cases)]
    ids = tokenizer.tokenize(tf.constant(texts, tf.string)).to_list()
    basic = _strings(tokenizer.basic_tokenize(tf.constant(texts, tf.string)))
    differing = set()
    for case, got_ids, got_basic in zip(cases, ids, basic):
        if got_ids != case["ids"] or got_basic != case["basic_tokens"]:
            differing.add((name, case["name"]))
    known = {key for key in KNOWN_DIFFERENT_FIXTURE_CASES if key[0] == name}
    assert differing == known, {"unexpected": differing - known,
                                "no longer differ": known - differing}


def test_scalar_empty_and_shapes(uncased):
    _, tokenizer = uncased[True]
    ids = tokenizer.tokenize("Hello, World!")
    assert isinstance(ids, tf.Tensor) and ids.dtype == tf.int32
    assert ids.numpy().tolist() == [7592, 1010, 2088, 999]
    batch = tokenizer.tokenize(tf.constant(["", "unaffable", " \t "]))
    assert isinstance(batch, tf.RaggedTensor) and batch.dtype == tf.int32
    assert batch.to_list() == [[], [14477, 20961, 3468], []]
    assert tokenizer.tokenize(tf.constant([], tf.string)).to_list() == []
    words = tokenizer.tokenize_words(["unaffable hello", "x"])
    assert words.to_list() == [[[14477, 20961, 3468], [7592]], [[1060]]]
    assert tokenizer(["hello"]).to_list() == [[7592]]
    tokens = tokenizer.convert_ids_to_tokens(batch)
    assert tokens.to_list() == [[], [b"una", b"##ffa", b"##ble"], []]
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
            tokenizer.mask_id, tokenizer.vocab_size) == (0, 100, 101, 102, 103, 30522)
    with pytest.raises(ValueError, match="scalar or vector"):
        tokenizer.tokenize(tf.constant([["a"]]))


def test_tf_function_and_dataset(uncased):
    python, tokenizer = uncased[True]
    texts = ["The quick brown fox.", "Ünïcödé wörds — naïve", "", "中文 and 한국어"]
    want = [python.convert_tokens_to_ids(python.tokenize(t)) for t in texts]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(batch):
        return tokenizer.tokenize(batch)

    assert tokenize(tf.constant(texts)).to_list() == want
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(3).map(tokenizer.tokenize)
    assert [row for batch in dataset for row in batch.to_list()] == want


class _Wrapper(tf.Module):
    def __init__(self, vocab_file, mode):
        super().__init__()
        self.tokenizer = InGraphTokenizer(vocab_file, do_lower_case=True, mode=mode)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, texts):
        return self.tokenizer.tokenize(texts)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, texts):
        ids = self.tokenizer.tokenize(texts)
        return {"ids": ids.flat_values, "row_splits": ids.row_splits}


def _graph_ops(saved_model_dir) -> set[str]:
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((saved_model_dir / "saved_model.pb").read_bytes())
    ops = set()
    for meta in proto.meta_graphs:
        ops.update(node.op for node in meta.graph_def.node)
        for function in meta.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    return ops


@pytest.mark.long
@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_saved_model_round_trip(original_fixtures, uncased, tmp_path, mode):
    python, _ = uncased[True]
    texts = ["Hello, World!", "", "Héllo wörld — naïve café", "null\x00byte 5€ hi😀there",
             "ΑΣ straße"]
    want = [python.convert_tokens_to_ids(python.tokenize(t)) for t in texts]
    module = _Wrapper(str(original_fixtures / "vocab_uncased.txt"), mode)
    export_dir = tmp_path / "tokenizer"
    tf.saved_model.save(module, str(export_dir), signatures={"serving_default": module.serve})
    assert (export_dir / "assets" / "vocab_uncased.txt").exists()
    loaded = tf.saved_model.load(str(export_dir))
    assert loaded.tokenize(tf.constant(texts)).to_list() == want
    out = loaded.signatures["serving_default"](tf.constant(texts))
    got = tf.RaggedTensor.from_row_splits(out["ids"], out["row_splits"]).to_list()
    assert got == want
    assert loaded.tokenizer.vocab_file.asset_path.numpy().decode().endswith("vocab_uncased.txt")
    # Only core TF ops plus the two classic tensorflow-text ops that TF Serving builds link
    # (the fast mode adds the two ops of FastBertTokenizer, also in TF Serving's text ops_lib).
    non_core = {op for op in _graph_ops(export_dir) if not hasattr(tf.raw_ops, op)}
    allowed = {"NormalizeUTF8", "WordpieceTokenizeWithOffsets"}
    if mode == "fast":
        allowed |= {"FastBertNormalize", "FastWordpieceTokenizeWithOffsets"}
    assert non_core <= allowed, non_core


def test_vocab_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        InGraphTokenizer(str(tmp_path / "missing.txt"))
    no_unk = tmp_path / "no_unk.txt"
    no_unk.write_text("[PAD]\nhello\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"no_unk.txt: the unknown token '\[UNK\]'"):
        InGraphTokenizer(str(no_unk))
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"[UNK]\ncaf\xe9\n")
    with pytest.raises(ValueError, match="latin1.txt, line 2: not valid UTF-8"):
        InGraphTokenizer(str(latin1))


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_irregular_vocab_gives_the_original_ids(tmp_path, mode):
    """Blank lines and a repeated token, which the original loads (load_vocab warns): the ids are
    FullTokenizer's (a repeated token has its last line's id), and ids no token has map to a
    placeholder no word piece matches."""
    path = tmp_path / "irregular.txt"
    path.write_text("[PAD]\nhello\n[UNK]\n\n[CLS]\nworld\n##s\nhello\n \nfoo\n\n",
                    encoding="utf-8")
    with pytest.warns(UserWarning, match="irregular.txt: line 4 is blank"):
        python = FullTokenizer(str(path))
    with pytest.warns(UserWarning, match="line 8 repeats the 'hello' token of line 2"):
        tokenizer = InGraphTokenizer(str(path), mode=mode)
    texts = ["hello worlds foo", "Hello, bar!", "no token has id"]
    want = [python.convert_tokens_to_ids(python.tokenize(t)) for t in texts]
    assert want[0] == [7, 5, 6, 9]
    assert tokenizer.tokenize(texts).to_list() == want
    assert tokenizer.vocab_size == 11
    tokens = [t.decode("utf-8") for t in
              tokenizer.convert_ids_to_tokens(tf.constant([7, 1, 10, 0])).numpy()]
    assert tokens[0] == "hello" and tokens[2] == "" and tokens[3] == "[PAD]"
    assert " " in tokens[1]  # id 1 (the first "hello" line) is no token's


def test_long_words_and_cased_vocab(original_fixtures):
    vocab = str(original_fixtures / "tokenization" / "vocab_cased_synthetic.txt")
    python, tokenizer = FullTokenizer(vocab, False), InGraphTokenizer(vocab, False)
    texts = ["ab" * 100, "ab" * 100 + "a", "é" * 200, "é" * 201, "Café café CAFÉ", "Hello"]
    want = [python.convert_tokens_to_ids(python.tokenize(t)) for t in texts]
    assert tokenizer.tokenize(texts).to_list() == want
    assert want[2] != [1] and want[3] == [1]  # 200 chars (400 bytes) split, 201 -> [UNK].


def test_imdb_reviews_match(uncased, shared_data):
    path = shared_data / "imdb" / "train.tsv.gz"
    if not path.exists():
        pytest.skip(f"needs {path}")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        next(f)
        texts = [line.rstrip("\n").split("\t", 3)[3] for _, line in zip(range(300), f)]
    for lower in (True, False):
        python, tokenizer = uncased[lower]
        want = [python.convert_tokens_to_ids(python.tokenize(t)) for t in texts]
        assert tokenizer.tokenize(texts).to_list() == want


def _sweep(uncased, lower: bool, codepoints, template: str = "{}") -> set[int]:
    """Code points whose text differs between the two tokenizers (basic tokens)."""
    python, tokenizer = uncased[lower]
    texts = [template.format(chr(cp)) for cp in codepoints]
    got = []
    for start in range(0, len(texts), 50000):
        chunk = [t.encode("utf-8") for t in texts[start:start + 50000]]
        got.extend(_strings(tokenizer.basic_tokenize(tf.constant(chunk))))
    return {cp for cp, text, g in zip(codepoints, texts, got)
            if python.basic_tokenizer.tokenize(text) != g}


@needs_unicode_14
def test_documented_differences_still_differ(uncased):
    python, tokenizer = uncased[True]
    for text, python_words, graph_words in DOCUMENTED_EXAMPLES:
        assert python_words != graph_words
        assert python.basic_tokenizer.tokenize(text) == python_words, ascii(text)
        assert _strings(tokenizer.basic_tokenize([text])) == [graph_words], ascii(text)
    # Every listed code point still differs; with do_lower_case=False none does.
    listed = sorted(NOT_LOWERCASED | NEWER_DECOMPOSITIONS)
    assert _sweep(uncased, True, listed) == set(listed)
    assert _sweep(uncased, False, listed) == set()
    sigma = sorted(SIGMA_CONTEXT)
    assert _sweep(uncased, True, sigma, "\u0391\u03a3{}\u0391") | _sweep(
        uncased, True, sigma, "\u0391\u03a3{}") == set(sigma)


@needs_unicode_14
@pytest.mark.parametrize("lower", [True, False])
def test_bmp_sweep(uncased, lower):
    """Each BMP code point alone and inside a word: only the documented ones differ."""
    codepoints = [cp for cp in range(0x10000) if not 0xD800 <= cp <= 0xDFFF]
    expected = (NOT_LOWERCASED | NEWER_DECOMPOSITIONS) & set(codepoints) if lower else set()
    assert _sweep(uncased, lower, codepoints, "Ab{}Cd") == expected


@pytest.mark.slow
@needs_unicode_14
@pytest.mark.parametrize("lower", [True, False])
def test_full_unicode_sweep(uncased, lower):
    """All 1,112,064 code points, alone and between Greek capitals around Σ (slow: ~1 min)."""
    codepoints = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    expected = (NOT_LOWERCASED | NEWER_DECOMPOSITIONS) if lower else set()
    assert _sweep(uncased, lower, codepoints) == expected
    assigned = [cp for cp in codepoints if unicodedata.category(chr(cp)) != "Cn"]
    sigma = _sweep(uncased, lower, assigned, "\u0391\u03a3{}\u0391") | _sweep(
        uncased, lower, assigned, "\u0391\u03a3{}")
    assert sigma == (SIGMA_CONTEXT if lower else set())


def test_invalid_utf8_matches(uncased):
    """Random byte strings: invalid UTF-8 is dropped exactly as bytes.decode('utf-8', 'ignore')."""
    rng = random.Random(7)
    alphabet = [0x41, 0x20, 0x80, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5,
                0xFF, 0xA0, 0x9F, 0x8F, 0x90, 0xB8, 0xAD]
    blobs = [bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 10))) for _ in range(3000)]
    for lower in (True, False):
        python, tokenizer = uncased[lower]
        got = _strings(tokenizer.basic_tokenize(tf.constant(blobs)))
        assert got == [python.basic_tokenizer.tokenize(b) for b in blobs]

