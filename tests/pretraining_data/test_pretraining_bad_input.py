"""Bad input, vocab and flags: a clear error naming file+line or flag, and nothing left under an
output name (faithful and scalable mode, and the command-line tool)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from bert_tf.pretraining_data import PretrainingDataError, PretrainingDataOptions, \
    create_pretraining_data, create_pretraining_data_sharded, read_tfrecord
from bert_tf.tokenization import FullTokenizer

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
OPTIONS = PretrainingDataOptions(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=1)


def _outputs_left(directory: pathlib.Path) -> list:
    return sorted(n for n in os.listdir(directory) if n.endswith((".tfrecord",)) or ".tmp-" in n)


def _both_modes(corpus, tmp_path, tokenizer, vocab_file, options=OPTIONS, **kwargs):
    """Runs faithful then scalable mode; returns the two exceptions."""
    errors = []
    for mode in ("faithful", "scalable"):
        out = tmp_path / mode
        out.mkdir()
        with pytest.raises(PretrainingDataError) as info:
            if mode == "faithful":
                create_pretraining_data(str(corpus), str(out / "x.tfrecord"), tokenizer, options,
                                        vocab_file=vocab_file, **kwargs)
            else:
                create_pretraining_data_sharded(str(corpus), str(out / "x"), vocab_file, True,
                                                options, progress=False, **kwargs)
        assert _outputs_left(out) == [], mode
        errors.append(str(info.value))
    return errors


def test_non_utf8_line_names_file_and_line(tmp_path, tokenizer, vocab_file, sample_text):
    corpus = tmp_path / "bad.txt"
    lines = open(sample_text, "rb").read().split(b"\n")
    lines[4] = b"caf\xe9 au lait"  # Latin-1, not UTF-8.
    corpus.write_bytes(b"\n".join(lines))
    for message in _both_modes(corpus, tmp_path, tokenizer, vocab_file):
        assert f"{corpus}:5:" in message and "UTF-8" in message and "0xe9" in message


def test_non_utf8_lines_can_be_skipped_and_counted(tmp_path, tokenizer, vocab_file,
                                                   sample_text):
    corpus = tmp_path / "bad.txt"
    lines = open(sample_text, "rb").read().split(b"\n")
    lines[4] = b"caf\xe9 au lait"
    corpus.write_bytes(b"\n".join(lines))
    summary = create_pretraining_data(str(corpus), str(tmp_path / "x.tfrecord"), tokenizer,
                                      OPTIONS, skip_invalid_lines=True)
    assert summary["invalid_lines_skipped"] == 1
    scal = create_pretraining_data_sharded(str(corpus), str(tmp_path / "s"), vocab_file, True,
                                           OPTIONS, skip_invalid_lines=True, progress=False)
    assert scal["invalid_lines_skipped"] == 1
    assert scal["invalid_line_examples"] == [f"{corpus}:5"]


@pytest.mark.parametrize("content", [b"", b"\n\n   \n"])
def test_empty_file_is_an_error_naming_it(tmp_path, tokenizer, vocab_file, sample_text,
                                          content):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(content)
    for message in _both_modes(f"{sample_text},{empty}", tmp_path, tokenizer, vocab_file):
        assert str(empty) in message and "empty" in message


def test_missing_input_names_the_flag(tmp_path, tokenizer, vocab_file):
    for message in _both_modes(tmp_path / "nope*.txt", tmp_path, tokenizer, vocab_file):
        assert "--input_file" in message and "nope" in message


def test_one_sentence_document_is_counted_not_fatal(tmp_path, tokenizer, vocab_file,
                                                    sample_text, caplog):
    corpus = tmp_path / "c.txt"
    corpus.write_text(open(sample_text, encoding="utf-8").read() + "\nA lonely sentence.\n",
                      encoding="utf-8")
    summary = create_pretraining_data(str(corpus), str(tmp_path / "x.tfrecord"), tokenizer,
                                      OPTIONS)
    assert summary["single_sentence_documents"] == 1
    assert f"{corpus}:" in caplog.text and "single sentence" in caplog.text
    scal = create_pretraining_data_sharded(str(corpus), str(tmp_path / "s"), vocab_file, True,
                                           OPTIONS, progress=False)
    assert scal["single_sentence_documents"] == 1


@pytest.mark.parametrize("missing", ["[MASK]", "[CLS]", "[SEP]"])
def test_vocab_without_special_token_names_the_vocab(tmp_path, vocab_file, sample_text, missing):
    tokens = open(vocab_file, encoding="utf-8").read().split("\n")
    bad_vocab = tmp_path / "vocab.txt"
    bad_vocab.write_text("\n".join(t if t != missing else "[XXX]" for t in tokens),
                         encoding="utf-8")
    tokenizer = FullTokenizer(str(bad_vocab), True)
    for message in _both_modes(sample_text, tmp_path, tokenizer, str(bad_vocab)):
        assert str(bad_vocab) in message and missing in message


def test_max_predictions_below_masked_lm_prob_caps_as_the_original(tmp_path, tokenizer,
                                                                     vocab_file, sample_text):
    """The original accepts --max_predictions_per_seq < round(masked_lm_prob x max_seq_length)
    and caps: num_to_predict = min(max_predictions_per_seq, max(1, round(len(tokens) * p)));
    both modes do the same (a warning only); the deprecated allow_prediction_cap changes nothing."""
    import tensorflow as tf

    options = PretrainingDataOptions(max_seq_length=128, max_predictions_per_seq=10,
                                     dupe_factor=2)
    options.validate()  # no error
    outputs = {}
    for mode, kwargs in (("faithful", {}), ("faithful_flag", {"allow_prediction_cap": True}),
                         ("scalable", {})):
        if mode == "scalable":
            create_pretraining_data_sharded(sample_text, str(tmp_path / "s" / "x"), vocab_file,
                                            True, options, progress=False)
            files = sorted(str(p) for p in (tmp_path / "s").glob("x*.tfrecord"))
        else:
            create_pretraining_data(sample_text, str(tmp_path / f"{mode}.tfrecord"), tokenizer,
                                    options, log_examples=0, **kwargs)
            files = [str(tmp_path / f"{mode}.tfrecord")]
        counts = []
        for f in files:
            for rec in read_tfrecord(f):
                ex = tf.train.Example.FromString(rec).features.feature
                n_tokens = sum(ex["input_mask"].int64_list.value)
                n_pred = sum(1 for w in ex["masked_lm_weights"].float_list.value if w > 0)
                want = min(10, max(1, int(round(n_tokens * 0.15))))
                assert n_pred == want, (mode, n_tokens, n_pred)
                counts.append(round(n_tokens * 0.15) > 10)
        assert any(counts), f"{mode}: no instance long enough to be capped"
        outputs[mode] = counts
    assert (open(tmp_path / "faithful.tfrecord", "rb").read()
            == open(tmp_path / "faithful_flag.tfrecord", "rb").read())


@pytest.mark.parametrize("field,value,flag", [("max_seq_length", 4, "--max_seq_length"),
                                              ("masked_lm_prob", 0.0, "--masked_lm_prob"),
                                              ("dupe_factor", 0, "--dupe_factor"),
                                              ("short_seq_prob", 1.5, "--short_seq_prob")])
def test_bad_settings_name_the_flag(field, value, flag):
    options = PretrainingDataOptions(**{field: value})
    with pytest.raises(PretrainingDataError, match=flag):
        options.validate()


def test_failure_while_writing_leaves_no_output(tmp_path, tokenizer, sample_text, monkeypatch):
    """An error after some records were written removes the temporary file."""
    from bert_tf.pretraining_data import faithful

    def boom(record, inv_vocab):
        raise RuntimeError("disk full")

    monkeypatch.setattr(faithful, "log_example", boom)
    with pytest.raises(RuntimeError):
        create_pretraining_data(sample_text, str(tmp_path / "x.tfrecord"), tokenizer, OPTIONS)
    assert os.listdir(tmp_path) == []


@pytest.mark.long
def test_command_line_error_and_success(tmp_path, vocab_file, sample_text):
    tool = PROJECT_ROOT / "tools" / "create_pretraining_data.py"
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT))
    bad = subprocess.run([sys.executable, str(tool), f"--input_file={sample_text}",
                          f"--output_file={tmp_path}/x.tfrecord", f"--vocab_file={vocab_file}",
                          "--max_seq_length=128", "--max_predictions_per_seq=0"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 1
    assert "--max_predictions_per_seq=0" in bad.stderr
    assert os.listdir(tmp_path) == []
    good = subprocess.run([sys.executable, str(tool), f"--input_file={sample_text}",
                           f"--output_file={tmp_path}/x", f"--vocab_file={vocab_file}",
                           "--mode=scalable", "--num_workers=2", "--dupe_factor=2",
                           "--docs_per_shard=1", "--max_predictions_per_seq=5",
                           "--allow_prediction_cap"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert good.returncode == 0, good.stderr
    assert "IsNext" in good.stderr
    shards = sorted(n for n in os.listdir(tmp_path) if n.endswith(".tfrecord"))
    assert shards == ["x-00000.tfrecord", "x-00001.tfrecord", "x-00002.tfrecord"]
    assert sum(len(read_tfrecord(tmp_path / n)) for n in shards) > 0
