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
    from bert_tf.gpt.text_encoder import TextEncoder
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
    from bert_tf.gpt.text_encoder import text_standardize
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
    from bert_tf.gpt.bpe import load_bpe_merges, load_encoder
    from bert_tf.gpt.text_encoder import TextEncoder
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
    code = ("import sys, bert_tf.gpt, bert_tf.gpt.text_encoder; "
            "print(sorted(m for m in ('spacy', 'ftfy', 'tensorflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=PROJECT_ROOT)
    assert out.stdout.strip() == "[]"


def test_wordpiece_text_encoder_is_full_tokenizer_behind_the_encode_api(tmp_path):
    from bert_tf.gpt.text_encoder import WordPieceTextEncoder
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
