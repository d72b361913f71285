"""FullTokenizer & co against the original release's outputs (../shared fixtures), the original's
API surface, vocab loading (the original's leniency, with a warning; errors), the split cache
following in-place vocab edits, and a fuzz test against a literal per-character rendering of
the original's documented algorithm."""
from __future__ import annotations

import collections
import json
import random
import unicodedata
import warnings

import pytest

from bert_tf import tokenization
from bert_tf.tokenization import (BasicTokenizer, FullTokenizer, WordpieceTokenizer, load_vocab,
                                  validate_case_matches_checkpoint)

FIXTURE_FILES = [
    "uncased_vocab_lower_true.jsonl",
    "uncased_vocab_lower_false.jsonl",
    "uncased_vocab_lower_true_bytes_input.jsonl",
    "uncased_vocab_lower_false_bytes_input.jsonl",
    "cased_synthetic_vocab_lower_true.jsonl",
    "cased_synthetic_vocab_lower_false.jsonl",
]


def fixture_setup(original_fixtures, name: str):
    """(vocab path, do_lower_case, cases) for one tokenization JSONL file."""
    folder = original_fixtures / "tokenization"
    vocab = (folder / "vocab_cased_synthetic.txt" if name.startswith("cased_synthetic")
             else original_fixtures / "vocab_uncased.txt")
    lower = "_lower_true" in name
    with open(folder / name, encoding="utf-8") as f:
        cases = [json.loads(line) for line in f if line.strip()]
    return vocab, lower, cases


def case_input(case: dict):
    return case["text"] if "text" in case else bytes.fromhex(case["text_utf8_hex"])


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_matches_original_fixtures(original_fixtures, name):
    vocab, lower, cases = fixture_setup(original_fixtures, name)
    tokenizer = FullTokenizer(str(vocab), do_lower_case=lower)
    mismatches = []
    for case in cases:
        text = case_input(case)
        tokens = tokenizer.tokenize(text)
        got = (tokens, tokenizer.convert_tokens_to_ids(tokens),
               tokenizer.basic_tokenizer.tokenize(text))
        want = (case["tokens"], case["ids"], case["basic_tokens"])
        if got != want:
            mismatches.append((case["name"], got, want))
        assert tokenizer.convert_ids_to_tokens(case["ids"]) == case["tokens"]
    assert not mismatches, mismatches


def test_fixture_counts(original_fixtures):
    meta = json.loads((original_fixtures / "tokenization" / "meta.json").read_text())
    counts = {name: len(fixture_setup(original_fixtures, name)[2]) for name in FIXTURE_FILES}
    assert counts["uncased_vocab_lower_true.jsonl"] == meta["num_cases"]
    assert counts["uncased_vocab_lower_false.jsonl"] == meta["num_cases"]
    assert counts["uncased_vocab_lower_true_bytes_input.jsonl"] == meta["num_bytes_cases"]
    assert counts["cased_synthetic_vocab_lower_false.jsonl"] == meta["num_cased_cases"]
    assert meta["max_input_chars_per_word"] == 200
    if unicodedata.unidata_version != meta["unicodedata_unidata_version"]:
        pytest.skip(f"fixtures were made with unicodedata {meta['unicodedata_unidata_version']}; "
                    f"this Python has {unicodedata.unidata_version}")


def test_api_surface(original_fixtures):
    tokenizer = FullTokenizer(vocab_file=str(original_fixtures / "vocab_uncased.txt"))
    assert isinstance(tokenizer.vocab, collections.OrderedDict)
    assert len(tokenizer.vocab) == 30522
    assert tokenizer.vocab["[PAD]"] == 0 and tokenizer.vocab["[UNK]"] == 100
    assert tokenizer.inv_vocab[7592] == "hello"
    assert isinstance(tokenizer.basic_tokenizer, BasicTokenizer)
    assert tokenizer.basic_tokenizer.do_lower_case is True
    assert isinstance(tokenizer.wordpiece_tokenizer, WordpieceTokenizer)
    assert tokenizer.wordpiece_tokenizer.unk_token == "[UNK]"
    assert tokenizer.wordpiece_tokenizer.max_input_chars_per_word == 200
    assert tokenization.convert_tokens_to_ids(tokenizer.vocab, ["hello", "world"]) == [7592, 2088]
    assert tokenization.convert_ids_to_tokens(tokenizer.inv_vocab, [7592]) == ["hello"]
    assert tokenization.convert_by_vocab({"a": 1}, ["a", "a"]) == [1, 1]
    with pytest.raises(KeyError):
        tokenizer.convert_tokens_to_ids(["not-a-token-at-all"])
    with pytest.raises(KeyError):
        tokenizer.convert_ids_to_tokens([30522])


def test_module_functions():
    assert tokenization.convert_to_unicode("héllo") == "héllo"
    assert tokenization.convert_to_unicode("héllo".encode()) == "héllo"
    assert tokenization.convert_to_unicode(b"bad\xff\xfe bytes") == "bad bytes"
    assert tokenization.printable_text(b"caf\xc3\xa9") == "café"
    with pytest.raises(ValueError, match="Unsupported string type"):
        tokenization.convert_to_unicode(3)
    with pytest.raises(ValueError, match="Unsupported string type"):
        tokenization.printable_text(None)
    assert tokenization.whitespace_tokenize("  a \t b\n\u2028c  ") == ["a", "b", "c"]
    assert tokenization.whitespace_tokenize(" \t ") == []
    # The original's module-level helpers, still importable.
    assert tokenization._is_whitespace("\u3000") and not tokenization._is_whitespace("\u2028")
    assert tokenization._is_control("\x00") and not tokenization._is_control("\t")
    assert tokenization._is_punctuation("$") and not tokenization._is_punctuation("€")


def test_wordpiece_tokenizer_standalone():
    # The example from the original's docstring and its unit test.
    vocab = {t: i for i, t in enumerate(
        ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing"])}
    wordpiece = WordpieceTokenizer(vocab=vocab)
    assert wordpiece.tokenize("") == []
    assert wordpiece.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
    assert wordpiece.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]
    assert wordpiece.tokenize(b"want") == ["want"]
    short = WordpieceTokenizer(vocab=vocab, unk_token="<?>", max_input_chars_per_word=4)
    assert short.tokenize("want wanted") == ["want", "<?>"]
    # The tokenizer follows changes to the vocab it was given.
    assert wordpiece.tokenize("wanter") == ["[UNK]"]
    vocab["##er"] = 10
    assert wordpiece.tokenize("wanter") == ["want", "##er"]
    vocab["wante"] = 11
    vocab["##r"] = 12
    assert wordpiece.tokenize("wanter") == ["wante", "##r"]


@pytest.mark.parametrize("kind", ["plain dict", "load_vocab's VocabDict"])
def test_no_stale_split_after_in_place_vocab_edits(tmp_path, kind):
    """Edits that keep the vocab's size (the old cache key) or go through every mutating method:
    each tokenization equals the original's loop (`_literal_wordpiece`, below) on the vocab as it
    is at that moment."""
    tokens = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing"]
    if kind == "plain dict":
        vocab = {t: i for i, t in enumerate(tokens)}
    else:
        path = tmp_path / "vocab.txt"
        path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
        vocab = load_vocab(str(path))
        assert isinstance(vocab, tokenization.VocabDict)
        assert isinstance(vocab, collections.OrderedDict)
    wordpiece = WordpieceTokenizer(vocab=vocab)
    words = ["unwanted", "wanted", "running", "wanter", "unwant", "runner", "wa"]

    def check():
        assert wordpiece.tokenize(" ".join(words)) == [
            p for w in words for p in _literal_wordpiece(w, vocab)], dict(vocab)

    check()
    vocab["##er"] = vocab.pop("##ed")  # same size: the old cache key did not change
    check()
    del vocab["##ing"]
    vocab["##ning"] = 99
    check()
    vocab.update({"##r": 100, "wante": 101})
    check()
    vocab.setdefault("##ed", 102)
    check()
    vocab.popitem()
    check()
    vocab |= {"runne": 103}
    check()
    vocab.clear()
    vocab.update({"[UNK]": 0, "wa": 1, "##nted": 2})
    check()


def test_full_tokenizer_follows_its_edited_vocab(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[UNK]\nhello\n##s\n", encoding="utf-8")
    tokenizer = FullTokenizer(str(path))
    assert tokenizer.tokenize("hellos cats") == ["hello", "##s", "[UNK]"]
    tokenizer.vocab["cat"] = 3
    assert tokenizer.tokenize("hellos cats") == ["hello", "##s", "cat", "##s"]
    del tokenizer.vocab["##s"]
    assert tokenizer.tokenize("hellos cats") == ["[UNK]", "[UNK]"]


def test_basic_tokenizer_helpers():
    basic = BasicTokenizer(do_lower_case=True)
    assert basic.tokenize(" \tHeLLo!how  \n Are yoU?  ") == ["hello", "!", "how", "are", "you",
                                                             "?"]
    assert basic.tokenize("H\u00E9llo") == ["hello"]
    assert BasicTokenizer(do_lower_case=False).tokenize(" \tHeLLo!how  \n Are yoU?  ") == [
        "HeLLo", "!", "how", "Are", "yoU", "?"]
    assert basic._run_strip_accents("Héllo") == "Hello"
    assert basic._run_split_on_punc("a,b!!c") == ["a", ",", "b", "!", "!", "c"]
    assert basic._tokenize_chinese_chars("ah博推zz") == "ah 博  推 zz"
    assert basic._is_chinese_char(ord("博")) and not basic._is_chinese_char(ord("〇"))
    assert basic._clean_text("a\x00b\tc\u200bd") == "ab cd"


def test_validate_case_matches_checkpoint():
    validate_case_matches_checkpoint(True, None)
    validate_case_matches_checkpoint(True, "")
    validate_case_matches_checkpoint(False, "/my/model.ckpt")
    validate_case_matches_checkpoint(True, "/m/uncased_L-12_H-768_A-12/bert_model.ckpt")
    validate_case_matches_checkpoint(False, "/m/cased_L-12_H-768_A-12/bert_model.ckpt")
    validate_case_matches_checkpoint(True, "/m/some_other_model/bert_model.ckpt")
    with pytest.raises(ValueError, match="uncased_L-24_H-1024_A-16"):
        validate_case_matches_checkpoint(False, "gs://b/uncased_L-24_H-1024_A-16/bert_model.ckpt")
    with pytest.raises(ValueError, match="multi_cased_L-12_H-768_A-12"):
        validate_case_matches_checkpoint(True, "/x/multi_cased_L-12_H-768_A-12/bert_model.ckpt-5")
    with pytest.raises(ValueError, match="chinese"):
        validate_case_matches_checkpoint(False, "chinese_L-12_H-768_A-12/bert_model.ckpt")


# ---- vocab loading -------------------------------------------------------------------------


def _write(tmp_path, data: bytes):
    path = tmp_path / "vocab.txt"
    path.write_bytes(data)
    return str(path)


def test_load_vocab_line_endings(tmp_path):
    assert list(load_vocab(_write(tmp_path, b"[PAD]\r\n a \nb")).items()) == [
        ("[PAD]", 0), ("a", 1), ("b", 2)]
    # Only "\n" ends a line (as the original's tf.gfile readline); U+2028 is part of a token line.
    assert list(load_vocab(_write(tmp_path, "x\u2028y\nz\n".encode()))) == ["x\u2028y", "z"]


def _original_load_vocab(path) -> collections.OrderedDict:
    """The original's loop: readline until "", strip, vocab[token] = line index."""
    vocab, index = collections.OrderedDict(), 0
    with open(path, encoding="utf-8", newline="") as reader:
        text = reader.read()
    for line in text.split("\n")[:-1] + ([text.split("\n")[-1]] if not text.endswith("\n")
                                         and text else []):
        vocab[line.strip()] = index
        index += 1
    return vocab


@pytest.mark.parametrize("data, lines", [
    (b"a\nb\na\n", ["line 3 repeats the 'a' token of line 1"]),
    (b"a\n\nb\n", ["line 2 is blank"]),
    (b"a\n \t \nb\n", ["line 2 is blank"]),
    (b"a\nb\n\n", ["line 3 is blank"]),
    (b"[UNK]\n\nx\n\nx\n", ["line 2 is blank", "line 4 repeats the blank token of line 2",
                            "line 5 repeats the 'x' token of line 3"]),
])
def test_load_vocab_accepts_what_the_original_accepts_with_a_warning(tmp_path, data, lines):
    """Blank lines and repeated tokens: the original's dict (ids = line numbers, a repeated
    token at its first place with its last line's id), one warning naming file and lines."""
    path = _write(tmp_path, data)
    with pytest.warns(UserWarning) as record:
        vocab = load_vocab(path)
    assert len(record) == 1
    message = str(record[0].message)
    assert message.startswith(path + ": ") and all(line in message for line in lines), message
    assert list(vocab.items()) == list(_original_load_vocab(path).items())
    with pytest.warns(UserWarning, match="line"):
        tokenizer = FullTokenizer(path)
    assert dict(tokenizer.vocab) == dict(vocab)
    assert tokenizer.inv_vocab == {v: k for k, v in vocab.items()}


def test_load_vocab_regular_file_gives_no_warning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(load_vocab(_write(tmp_path, b"a\nb\nc")).items()) == [
            ("a", 0), ("b", 1), ("c", 2)]


def test_load_vocab_lists_at_most_five_lines(tmp_path):
    with pytest.warns(UserWarning, match=r"of line 2; and 3 more\. Loaded as the original"):
        load_vocab(_write(tmp_path, b"a" + b"\n" * 9))


def test_load_vocab_invalid_utf8(tmp_path):
    path = _write(tmp_path, b"a\nb\xff\n")
    with pytest.raises(ValueError, match=r"line 2: not valid UTF-8") as info:
        load_vocab(path)
    assert path in str(info.value)
    with pytest.raises(ValueError, match="line 2: not valid UTF-8"):
        FullTokenizer(path)


def test_load_vocab_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        load_vocab(str(tmp_path / "nope.txt"))


# ---- fuzz against a literal rendering of the original's algorithm --------------------------


def _literal_basic_tokenize(text, do_lower_case: bool) -> list[str]:
    """Per character and per word, exactly as the fixtures README (§2, §8) describes."""
    category = unicodedata.category
    if isinstance(text, bytes):
        text = text.decode("utf-8", "ignore")
    kept = []
    for c in text:
        if c == "\x00" or c == "\ufffd" or (c not in "\t\n\r" and category(c) in ("Cc", "Cf")):
            continue
        kept.append(" " if c in " \t\n\r" or category(c) == "Zs" else c)
    spaced = "".join(f" {c} " if tokenization.BasicTokenizer()._is_chinese_char(ord(c)) else c
                     for c in kept)
    out = []
    for word in spaced.split():
        if do_lower_case:
            word = "".join(c for c in unicodedata.normalize("NFD", word.lower())
                           if category(c) != "Mn")
        current = ""
        for c in word:
            cp = ord(c)
            if (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126
                    or category(c).startswith("P")):
                out.extend([current, c] if current else [c])
                current = ""
            else:
                current += c
        if current:
            out.append(current)
    return " ".join(out).split()


def _literal_wordpiece(word: str, vocab) -> list[str]:
    if len(word) > 200:
        return ["[UNK]"]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start and (("##" if start else "") + word[start:end]) not in vocab:
            end -= 1
        if end == start:
            return ["[UNK]"]
        pieces.append(("##" if start else "") + word[start:end])
        start = end
    return pieces


def test_fuzz_against_literal_algorithm(original_fixtures):
    rng = random.Random(1234)
    special = list(" \t\n\r\x00\x0b\x0c\x1c\x85\xa0\u2003\u2028\u2029\u200b\u00ad\ufeff\ufffd"
                   "\u0301\u0308\u0345ΣσςΑİIıiẞß一中豈〇がパ한,.!-'`$€\u1fef\u037e\u0387\u212b"
                   "ＡﬁǄ😀") + list("abcXYZ019") * 3
    tokenizers = {lower: FullTokenizer(str(original_fixtures / "vocab_uncased.txt"), lower)
                  for lower in (True, False)}
    failures = []
    for _ in range(1500):
        text = "".join(rng.choice(special) if rng.random() < 0.7 else chr(rng.randrange(0x30000))
                       for _ in range(rng.randint(0, 24)))
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        for lower, tokenizer in tokenizers.items():
            words = _literal_basic_tokenize(text, lower)
            want = [p for w in words for p in _literal_wordpiece(w, tokenizer.vocab)]
            got = (tokenizer.basic_tokenizer.tokenize(text), tokenizer.tokenize(text))
            if got != (words, want):
                failures.append((text, lower))
    assert not failures, failures[:5]
