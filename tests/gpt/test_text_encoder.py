"""The GPT-1 BPE text encoder against the original's reference encodings.

The reference (`bpe_encoding.jsonl`, `bpe_encoding_errors.json`, `manifest_bpe.json`, `bpe/`) is
read from $BERT_TF_GPT_FIXTURES, default ../shared/fixtures/original_gpt; nothing of the public
set is hard-coded here, so another fixture set of the same layout can be used.
"""
from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys

import pytest

from bert_tf.errors import UserInputError

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
GPT_FIXTURES = pathlib.Path(os.environ.get(
    "BERT_TF_GPT_FIXTURES", PROJECT_ROOT.parent / "shared" / "fixtures" / "original_gpt"))


def _require_gpt_dependencies() -> None:
    for module in ("ftfy", "spacy"):
        pytest.importorskip(module, reason=f"the GPT-1 BPE encoder needs {module} "
                            "(pip install 'bert_tf[gpt]'); it is not installed here")


@pytest.fixture(scope="module")
def bpe_fixtures() -> pathlib.Path:
    """The GPT-1 fixture folder (skips with a clear message when absent)."""
    if not (GPT_FIXTURES / "bpe_encoding.jsonl").exists():
        pytest.skip(f"needs {GPT_FIXTURES}/bpe_encoding.jsonl (the original GPT-1 fixtures: "
                    "../shared/fixtures/original_gpt or $BERT_TF_GPT_FIXTURES); it is absent here")
    _require_gpt_dependencies()
    return GPT_FIXTURES


@pytest.fixture(scope="module")
def records(bpe_fixtures) -> list[dict]:
    with open(bpe_fixtures / "bpe_encoding.jsonl", encoding="ascii") as f:
        return [json.loads(line) for line in f]


def _new_encoder(folder: pathlib.Path):
    from bert_tf.tokenization.gpt_text_encoder import TextEncoder
    bpe_dir = folder / "bpe"
    encoder_path = next(iter(sorted(bpe_dir.glob("encoder_bpe_*.json"))))
    bpe_path = next(iter(sorted(bpe_dir.glob("vocab_*.bpe"))))
    return TextEncoder(encoder_path, bpe_path)


def _mismatches(records: list[dict], ids: list[list[int]]) -> list[str]:
    return [r["id"] for r, got in zip(records, ids) if got != r["ids"]]


@pytest.mark.gpt_fixtures
def test_ids_identical_on_every_fixture_text(bpe_fixtures, records):
    """As the reference was made: one fresh encoder, encode() once on the whole list."""
    encoder = _new_encoder(bpe_fixtures)
    ids = encoder.encode([r["text"] for r in records], verbose=False)
    assert len(ids) == len(records)
    bad = _mismatches(records, ids)
    assert not bad, f"{len(bad)}/{len(records)} fixture texts differ: {bad[:20]}"
    manifest = json.loads((bpe_fixtures / "manifest_bpe.json").read_text())
    assert sum(len(x) for x in ids) == manifest["n_ids"]
    assert sum(x.count(0) for x in ids) == manifest["n_unk_ids"]
    # The original's cache: one entry per distinct multi-character lower-cased token.
    assert len(encoder.cache) == manifest["encoder_cache_entries_after_encode"]


@pytest.mark.gpt_fixtures
def test_every_stage_matches(bpe_fixtures, records):
    """ftfy -> text_standardize -> spaCy tokens -> BPE strings -> decoded tokens, per record."""
    from bert_tf.tokenization.gpt_text_encoder import text_standardize
    encoder = _new_encoder(bpe_fixtures)
    for r in records:
        fixed = encoder._ftfy.fix_text(r["text"])  # pylint: disable=protected-access
        assert fixed == r["fixed"], r["id"]
        assert text_standardize(fixed) == r["standardized"], r["id"]
        tokens = encoder.tokenize(r["text"])
        assert tokens == r["spacy_tokens"], r["id"]
        assert [encoder.bpe(t.lower()) for t in tokens] == r["bpe"], r["id"]
        assert [encoder.decoder.get(i, "<unk>") if i else "<unk>" for i in r["ids"]] \
            == r["tokens"], r["id"]


@pytest.mark.gpt_fixtures
def test_verbose_and_warm_cache_give_the_same_ids(bpe_fixtures, records, capsys):
    encoder = _new_encoder(bpe_fixtures)
    texts = [r["text"] for r in records]
    assert not _mismatches(records, encoder.encode(texts))  # verbose=True: the tqdm bar
    assert capsys.readouterr().err  # the bar was shown on stderr
    # Each text alone on the now-warm cache.
    warm = [encoder.encode([t], verbose=False)[0] for t in texts]
    assert not _mismatches(records, warm)


def _eval_fixture_input(expression: str):
    """The error inputs are recorded as Python expressions (`'x' * 1000001`, `None`,
    `b'...'`), sometimes followed by a comment in two-space-separated parentheses. Evaluated
    with a tiny whitelist (constants and `*`), never `eval`."""
    expression = expression.split("  (")[0].strip()

    def value(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            return value(node.left) * value(node.right)
        raise ValueError(f"unsupported fixture input expression {expression!r}")

    return value(ast.parse(expression, mode="eval").body)


@pytest.mark.gpt_fixtures
def test_error_cases_raise_as_the_original(bpe_fixtures):
    encoder = _new_encoder(bpe_fixtures)
    cases = json.loads((bpe_fixtures / "bpe_encoding_errors.json").read_text())
    assert cases
    for case in cases:
        text = _eval_fixture_input(case["input"])
        if not case["raised"]:
            encoder.encode([text], verbose=False)
            continue
        with pytest.raises(Exception) as info:
            encoder.encode([text], verbose=False)
        names = {cls.__name__ for cls in type(info.value).__mro__}
        assert case["exception"] in names, (case["name"], type(info.value))
        assert str(info.value).splitlines()[0] == case["message_first_line"], case["name"]


@pytest.mark.gpt_fixtures
def test_bpe_direct_calls_keep_the_originals_edge_behaviour(bpe_fixtures):
    encoder = _new_encoder(bpe_fixtures)
    with pytest.raises(IndexError):
        encoder.bpe("")
    assert encoder.bpe("H") == "H</w>"  # bpe() does not lower-case; single chars skip the cache
    assert "h" not in encoder.cache
    assert encoder.bpe("\n ") == "\n</w>"  # the original's newline special case
    pieces = encoder.bpe("a b").split(" ")  # a space inside a token gives empty pieces -> id 0
    assert pieces[1:-1] == ["", ""]
    assert [encoder.encoder.get(p, 0) for p in pieces][1:3] == [0, 0]


def test_missing_bpe_files_give_one_line_naming_the_file(tmp_path):
    from bert_tf.tokenization.gpt_bpe import load_bpe_merges, load_encoder
    from bert_tf.tokenization.gpt_text_encoder import TextEncoder
    encoder_path = tmp_path / "encoder_bpe_40000.json"
    bpe_path = tmp_path / "vocab_40000.bpe"
    for missing in (encoder_path, bpe_path):
        with pytest.raises(UserInputError) as info:
            TextEncoder(encoder_path, bpe_path)
        message = str(info.value)
        assert "\n" not in message and str(missing) in message, message
        encoder_path.write_text(json.dumps({"<unk>": 0, "a</w>": 1}), encoding="utf-8")
    bpe_path.write_text("#version: 0.2\na b\nthree parts here\n", encoding="utf-8")
    with pytest.raises(UserInputError, match=r"vocab_40000.bpe: line 3: expected a merge"):
        load_bpe_merges(bpe_path)
    encoder_path.write_text("{not json", encoding="utf-8")
    with pytest.raises(UserInputError, match=r"encoder_bpe_40000.json: line 1: not valid JSON"):
        load_encoder(encoder_path)


def test_importing_the_package_loads_neither_spacy_nor_ftfy():
    code = ("import sys, bert_tf.gpt, bert_tf.tokenization.gpt_text_encoder; "
            "print(sorted(m for m in ('spacy', 'ftfy', 'tensorflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=PROJECT_ROOT)
    assert out.stdout.strip() == "[]"


def test_wordpiece_text_encoder_is_full_tokenizer_behind_the_encode_api(tmp_path):
    from bert_tf.tokenization.gpt_text_encoder import WordPieceTextEncoder
    from bert_tf.tokenization import FullTokenizer
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "##s", ",", "!", "on",
             "mat", "un", "##want", "##ed"]
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    texts = ["The cats sat, on the MAT!", "unwanted dogs", "", "  \n "]
    encoder = WordPieceTextEncoder(vocab_file, do_lower_case=True)
    reference = FullTokenizer(str(vocab_file), do_lower_case=True)
    expected = [reference.convert_tokens_to_ids(reference.tokenize(t)) for t in texts]
    assert encoder.encode(texts, verbose=False) == expected
    assert expected[0][:3] == [vocab.index("the"), vocab.index("cat"), vocab.index("##s")]
    assert encoder.decoder[vocab.index("mat")] == "mat"
    assert encoder.encoder["[UNK]"] == 1
    assert encoder.decode(expected[1]) == "unwanted [UNK]"
    with pytest.raises(UserInputError, match="nope.txt: WordPiece vocab file not found"):
        WordPieceTextEncoder(tmp_path / "nope.txt")


# ------------------------------------------------------------------------------------------
# The in-graph encoder (bert_tf.tokenization.gpt_bpe_in_graph): exact BPE; ftfy/spaCy approximated.

@pytest.fixture(scope="module")
def in_graph(bpe_fixtures):
    from bert_tf.tokenization.gpt_bpe_in_graph import InGraphBpeEncoder
    bpe_dir = bpe_fixtures / "bpe"
    encoder_path = next(iter(sorted(bpe_dir.glob("encoder_bpe_*.json"))))
    bpe_path = next(iter(sorted(bpe_dir.glob("vocab_*.bpe"))))
    return InGraphBpeEncoder.from_text_encoder(encoder_path, bpe_path,
                                               text_encoder=_new_encoder(bpe_fixtures))


def _utf8_representable(records):
    """Texts a tf.string can hold (a lone surrogate cannot be UTF-8 encoded)."""
    out = []
    for r in records:
        try:
            r["text"].encode("utf-8")
        except UnicodeEncodeError:
            continue
        out.append(r)
    return out


@pytest.mark.gpt_fixtures
def test_in_graph_bpe_is_exact_on_every_fixture_token(in_graph, records):
    import tensorflow as tf
    tokens = [t.lower() for r in records for t in r["spacy_tokens"]]
    expected = [b for r in records for b in r["bpe"]]
    got = [" ".join(p.decode("utf-8") for p in pieces)
           for pieces in in_graph.bpe(tf.constant([t.encode("utf-8", "surrogatepass")
                                                   for t in tokens])).to_list()]
    bad = [(t, g, e) for t, g, e in zip(tokens, got, expected) if g != e]
    assert not bad, f"{len(bad)}/{len(tokens)} tokens differ, e.g. {bad[:5]}"


@pytest.mark.long
@pytest.mark.gpt_fixtures
def test_in_graph_encoder_differs_only_where_documented(in_graph, records):
    """Every fixture text that a tf.string can hold gets the Python encoder's ids, except texts
    that ftfy's mojibake repair changes (not reproduced in-graph; docs/gpt_tokenization.md)."""
    import ftfy
    import tensorflow as tf
    usable = _utf8_representable(records)
    texts = tf.constant([r["text"] for r in usable])
    ids = in_graph.encode(texts).to_list()
    fixed = [f.decode("utf-8") for f in in_graph.fix_text(texts).numpy()]
    differing = [r for r, got in zip(usable, ids) if got != r["ids"]]
    unexplained = [r["id"] for r, f in zip(usable, fixed)
                   if r in differing and not (f != r["fixed"]
                                              and ftfy.fix_encoding(r["text"]) != r["text"])]
    assert not unexplained, f"in-graph ids differ beyond mojibake repair: {unexplained}"
    assert len(differing) <= len(usable) // 50  # the doc's claim: >= 98% identical here
    padded, lengths = in_graph.encode_padded(texts, 16)
    assert padded.shape == (len(usable), 16)
    assert lengths.numpy().tolist() == [len(x) for x in ids]


@pytest.mark.gpt_fixtures
def test_in_graph_encoder_in_a_servable_savedmodel(in_graph, records, tmp_path):
    import tensorflow as tf
    from bert_tf.export.serving_compat import check_serving_compatibility

    class Exported(tf.Module):
        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def serve(self, text):
            ids, lengths = self.encoder.encode_padded(text, 64)
            return {"input_ids": ids, "lengths": lengths}

    module = Exported(in_graph)
    export_dir = tmp_path / "bpe_export"
    tf.saved_model.save(module, str(export_dir), signatures={"serving_default": module.serve})
    report = check_serving_compatibility(export_dir)
    assert report.ok, report.problems
    loaded = tf.saved_model.load(str(export_dir)).signatures["serving_default"]
    usable = [r for r in _utf8_representable(records) if len(r["ids"]) <= 64][:40]
    out = loaded(text=tf.constant([r["text"] for r in usable]))
    direct = in_graph.encode(tf.constant([r["text"] for r in usable])).to_list()
    for r, row, n, want in zip(usable, out["input_ids"].numpy(), out["lengths"].numpy(),
                               direct):
        assert row[:n].tolist() == want, r["id"]
