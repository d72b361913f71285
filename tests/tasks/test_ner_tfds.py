"""run_ner on tensorflow-datasets' conll2003 (--tfds_data_dir), prepared offline from real
CoNLL-2003 rows (TFDS's own conll parser, manual_dir, no download): the same sentences in the
same order, the same features, and the same scores as run_ner on the CoNLL files; bad input is
one clear line."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from bert_tf.errors import UserInputError
from bert_tf.tasks import ner, tfds_sources

pytest.importorskip("tensorflow_datasets")

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]


def _head_sentences(source: pathlib.Path, target: pathlib.Path, n: int) -> None:
    """The first `n` sentences of a CoNLL file, its -DOCSTART- lines included."""
    out, sentences = [], 0
    with open(source, encoding="utf-8") as f:
        for line in f:
            out.append(line)
            if not line.strip() and out[-2:-1] and not out[-2].startswith("-DOCSTART-"):
                sentences += 1
                if sentences == n:
                    break
    target.write_text("".join(out), encoding="utf-8")


@pytest.fixture(scope="module")
def conll(tmp_path_factory, shared_data):
    """eng.train (40 sentences, two documents) and eng.testa (20), real rows, as files and as
    TFDS conll2003 prepared from them."""
    root = tmp_path_factory.mktemp("conll_tfds")
    files = root / "files"
    files.mkdir()
    _head_sentences(shared_data / "conll2003" / "eng.train", files / "eng.train", 40)
    _head_sentences(shared_data / "conll2003" / "eng.testa", files / "eng.testa", 20)
    tfds_dir = root / "tfds"
    tfds_sources.prepare("conll2003", str(tfds_dir), str(files))
    return {"files": files, "tfds": tfds_dir, "root": root}


def _tiny_model(original_fixtures) -> dict:
    ckpt = original_fixtures / "checkpoint"
    return dict(bert_config_file=str(ckpt / "bert_config.json"),
                vocab_file=str(original_fixtures / "vocab_uncased.txt"),
                init_checkpoint=str(ckpt / "bert_model.ckpt"))


def test_tfds_sentences_and_features_equal_the_files(conll, original_fixtures):
    from bert_tf.tokenization import FullTokenizer

    tokenizer = FullTokenizer(str(original_fixtures / "vocab_uncased.txt"), do_lower_case=True)
    for split, name in (("train", "eng.train"), ("dev", "eng.testa")):
        from_files = ner.read_conll_file(conll["files"] / name)
        from_tfds = tfds_sources.conll_sentences(split, str(conll["tfds"]))
        assert len(from_files) == (40 if split == "train" else 20)
        # Same sentences in the same order (not only the same set).
        assert [(s.words, s.labels) for s in from_tfds] == \
            [(s.words, s.labels) for s in from_files]
        labels = list(ner.CONLL2003_LABELS)
        arrays = [ner.features_to_arrays(ner.convert_sentences_to_features(
                      sentences, tokenizer, labels, 32, 16, False))
                  for sentences in (from_files, from_tfds)]
        assert arrays[0].keys() == arrays[1].keys()
        for key in arrays[0]:
            np.testing.assert_array_equal(arrays[0][key], arrays[1][key], err_msg=key)


def test_run_ner_on_tfds_scores_as_on_the_files(conll, original_fixtures, tmp_path):
    """Evaluation of eng.testa from the release's checkpoint (same fresh head: same seed)."""
    common = dict(**_tiny_model(original_fixtures), do_eval=True, max_seq_length=32,
                  doc_stride=16, eval_batch_size=8)
    results = {}
    for source, extra in (("files", dict(data_dir=str(conll["files"]))),
                          ("tfds", dict(tfds_data_dir=str(conll["tfds"])))):
        out = tmp_path / source
        ner.run_ner(ner.NerRunOptions(output_dir=str(out), **common, **extra))
        results[source] = {name: (out / name).read_text() for name in
                           ("eval_results.txt", "eval_predictions.txt", "eval_conlleval.txt")}
    assert results["tfds"] == results["files"]
    assert "num_sentences = 20" in results["tfds"]["eval_results.txt"]


def test_bad_tfds_input_is_one_clear_error(conll, original_fixtures, tmp_path):
    model = _tiny_model(original_fixtures)

    def run(**kwargs):
        opts = dict(output_dir=str(tmp_path / "out"), do_eval=True, **model)
        opts.update(kwargs)
        return ner.run_ner(ner.NerRunOptions(**opts))

    with pytest.raises(UserInputError, match=r"--tfds_data_dir=.*missing is not a directory"):
        run(tfds_data_dir=str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserInputError, match=r"--tfds_data_dir=.*conll2003 is not prepared"):
        run(tfds_data_dir=str(empty))
    with pytest.raises(UserInputError, match=r"conll2003 has no split 'test'"):
        run(tfds_data_dir=str(conll["tfds"]), do_eval=False, do_predict=True)
    with pytest.raises(UserInputError, match="--document_context needs the -DOCSTART-"):
        run(tfds_data_dir=str(conll["tfds"]), document_context=True)
    with pytest.raises(UserInputError, match="both given"):
        run(tfds_data_dir=str(conll["tfds"]), data_dir=str(conll["files"]))
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_run_ner_tool_trains_on_tfds_as_on_the_files(conll, original_fixtures, tmp_path):
    """tools/run_ner.py as a real process: train + eval with --tfds_data_dir gives the files'
    losses and scores (same sentences in the same order: same shuffle, same batches)."""
    model = _tiny_model(original_fixtures)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(PROJECT_ROOT))
    outputs = {}
    for source, flag in (("files", f"--data_dir={conll['files']}"),
                         ("tfds", f"--tfds_data_dir={conll['tfds']}")):
        out = tmp_path / source
        proc = subprocess.run(
            [sys.executable, str(PROJECT_ROOT / "tools" / "run_ner.py"), flag,
             *(f"--{k}={v}" for k, v in model.items()), f"--output_dir={out}", "--do_train",
             "--do_eval", "--max_seq_length=32", "--doc_stride=16", "--train_batch_size=8",
             "--num_train_epochs=1", "--learning_rate=1e-3", "--plot_curves=false"],
            capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        outputs[source] = {name: (out / name).read_text()
                           for name in ("train_results.txt", "eval_results.txt")}
    assert outputs["tfds"] == outputs["files"]
    missing = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "tools" / "run_ner.py"),
         f"--tfds_data_dir={tmp_path / 'nowhere'}", *(f"--{k}={v}" for k, v in model.items()),
         f"--output_dir={tmp_path / 'bad'}", "--do_eval"],
        capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, timeout=300)
    assert missing.returncode == 1
    errors = [line for line in missing.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--tfds_data_dir=" in errors[0], missing.stderr[-2000:]
