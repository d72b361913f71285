"""WordPiece vocab building: library functions and tools/build_vocab.py."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from bert_tf.errors import UserInputError

from bert_tf.tokenization import (FullTokenizer, build_wordpiece_vocab, learn_wordpiece_vocab,
                                  load_vocab, reserved_tokens, write_vocab)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Tokenizers split words into word pieces; unknown words become [UNK].",
    "Running, runner, runs and ran: the runners were running quickly!",
    "Café, naïve and résumé lose their accents when lower-casing.",
] * 20


def test_reserved_tokens():
    assert reserved_tokens() == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert reserved_tokens(2) == ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]",
                                  "[MASK]"]


def test_learn_and_load(tmp_path):
    vocab = learn_wordpiece_vocab(TEXT, vocab_size=120, num_reserved_unused=3)
    assert vocab[:8] == reserved_tokens(3)
    assert len(vocab) <= 120 and len(vocab) == len(set(vocab))
    path = tmp_path / "sub" / "vocab.txt"
    write_vocab(vocab, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert list(load_vocab(str(path))) == vocab
    tokenizer = FullTokenizer(str(path), do_lower_case=True)
    tokens = tokenizer.tokenize("The runners were running; café!")
    assert "[UNK]" not in tokens  # Every character seen in the corpus is in the vocab.
    assert "".join(t.removeprefix("##") for t in tokens) == "therunnerswererunning;cafe!"
    assert [tokenizer.vocab[t] for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]] == [
        0, 4, 5, 6, 7]


def test_cased_vocab_keeps_case():
    vocab = learn_wordpiece_vocab(TEXT, vocab_size=200, do_lower_case=False)
    assert "T" in vocab and "é" in vocab


def test_build_from_files_and_errors(tmp_path):
    (tmp_path / "a.txt").write_text("\n".join(TEXT[:2]) + "\n", encoding="utf-8")
    (tmp_path / "b.txt").write_bytes("\n".join(TEXT[2:4]).encode() + b"\xff\n")
    out = tmp_path / "vocab.txt"
    vocab = build_wordpiece_vocab(f"{tmp_path / 'a.txt'},{tmp_path}/b*.txt", out, vocab_size=80)
    assert out.read_text(encoding="utf-8") == "".join(t + "\n" for t in vocab)
    assert vocab[:5] == reserved_tokens()
    with pytest.raises(UserInputError, match="--input_file: no file matches .*nothing-here"):
        build_wordpiece_vocab(str(tmp_path / "nothing-here*.txt"), None, vocab_size=80)
    with pytest.raises(ValueError, match="no words"):
        learn_wordpiece_vocab(["", "  "], vocab_size=80)
    with pytest.raises(ValueError, match="no room"):
        learn_wordpiece_vocab(TEXT, vocab_size=5)
    with pytest.raises(ValueError, match="repeats token 0"):
        write_vocab(["a", "a"], tmp_path / "bad.txt")
    with pytest.raises(ValueError, match="cannot be written"):
        write_vocab(["a", " b"], tmp_path / "bad.txt")
    assert not (tmp_path / "bad.txt").exists()


def test_pydoc_topics_quickstart_corpus():
    from pydoc_data.topics import topics

    vocab = learn_wordpiece_vocab(topics.values(), vocab_size=3000, max_lines=60)
    assert 500 < len(vocab) <= 3000 and vocab[:5] == reserved_tokens()


def test_build_vocab_tool(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXT) + "\n", encoding="utf-8")
    out = tmp_path / "vocab.txt"
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "build_vocab.py"), f"--input_file={corpus}",
         f"--output_file={out}", "--vocab_size=100", "--do_lower_case=False",
         "--num_reserved_unused=2", "--max_lines=40"],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    vocab = list(load_vocab(str(out)))
    assert vocab[:7] == reserved_tokens(2) and len(vocab) <= 100
    assert f"wrote {len(vocab)} tokens" in proc.stdout
