"""GPT-1 fine-tuning on your own files (`run_gpt_classifier --task_name=csv|tsv|jsonl`, through
bert_tf.tasks.own_data as run_classifier): the flag checks, the label set from the training file
(sorted) and labels.json, an unseen dev label as one line with nothing written, the
transformation of a pair (entailment or similarity), test_results.tsv in run_classifier's
float32 text. End to end (`long`): tools/run_gpt_classifier.py on a csv of real SST-2 rows
(header, quoted commas in the text and in a column name, string labels) trains, evaluates,
predicts and exports with labels.json's names; a jsonl regression of real STS-B pairs reports
Pearson/Spearman."""
from __future__ import annotations

import csv
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from bert_tf.errors import UserInputError
from bert_tf.tasks import own_data
from bert_tf.tasks.glue import GlueDataError
from bert_tf.tasks.gpt_classifier import (GptClassifierRunOptions, format_probabilities,
                                          load_own_splits, own_task_kind, run_gpt_classifier)

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = PROJECT_ROOT / "tools" / "run_gpt_classifier.py"
TEXT_COLUMN = "review, text"  # a column name with a comma (quoted in the header)
N_CTX = 48


def _write_csv(path: pathlib.Path, header, rows) -> pathlib.Path:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        if header:
            writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture()
def model_files(tmp_path, original_fixtures):
    """A tiny GPT config whose table covers the original release's uncased WordPiece vocab."""
    from bert_tf.gpt.config import GptConfig

    vocab = original_fixtures / "vocab_uncased.txt"
    n_vocab = sum(1 for _ in open(vocab, encoding="utf-8"))
    config = tmp_path / "gpt_config.json"
    GptConfig(n_vocab=n_vocab, n_special=3, n_ctx=N_CTX, n_embd=32, n_head=2,
              n_layer=2).to_json_file(config)
    return str(config), str(vocab)


def _opts(tmp_path, model_files, **kw) -> GptClassifierRunOptions:
    config, vocab = model_files
    args = dict(task_name="csv", gpt_config_file=config, vocab_file=vocab,
                output_dir=str(tmp_path / "out"), text_a_column=TEXT_COLUMN,
                label_column="label", max_seq_length=N_CTX, max_text_length=20,
                train_batch_size=8, eval_batch_size=8, learning_rate=1e-3,
                num_train_epochs=1.0, warmup_proportion=0.1, seed=3)
    args.update(kw)
    return GptClassifierRunOptions(**args)


# ---------------------------------------------------------------------------------------------
# Fast: flags, reading, labels, result format
# ---------------------------------------------------------------------------------------------
def test_flags(tmp_path, model_files):
    with pytest.raises(UserInputError, match="--pair_transform=similarity needs a pair"):
        run_gpt_classifier(_opts(tmp_path, model_files, pair_transform="similarity",
                                 do_train=True))
    with pytest.raises(UserInputError, match=r"--text_a_column, --label_column only apply to "
                                             r"--task_name=csv\|tsv\|jsonl"):
        run_gpt_classifier(_opts(tmp_path, model_files, task_name="sst-2", data_dir="x",
                                 do_train=True))
    with pytest.raises(UserInputError, match="--task_name=sst-2 needs --data_dir"):
        run_gpt_classifier(_opts(tmp_path, model_files, task_name="sst-2", text_a_column=None,
                                 label_column=None, do_train=True))
    with pytest.raises(UserInputError, match="or csv, tsv, jsonl"):
        run_gpt_classifier(_opts(tmp_path, model_files, task_name="xyz", do_train=True))
    assert own_task_kind(_opts(tmp_path, model_files)) == "classification"
    assert own_task_kind(_opts(tmp_path, model_files, text_b_column="b")) == "entailment"
    assert own_task_kind(_opts(tmp_path, model_files, text_b_column="b",
                               pair_transform="similarity")) == "similarity"
    assert not (tmp_path / "out").exists()


def test_labels_from_the_training_file_and_unseen_dev_label(tmp_path, model_files):
    header = ["id", TEXT_COLUMN, "label"]
    train = _write_csv(tmp_path / "train.csv", header,
                       [(0, "good, fine", "pos"), (1, "bad", "neg"), (2, "dull", "meh")])
    dev = _write_csv(tmp_path / "dev.csv", header, [(0, "great", "pos"), (1, "awful", "bad")])
    opts = _opts(tmp_path, model_files, train_file=str(train), dev_file=str(dev),
                 do_train=True)
    splits, labels, processor = load_own_splits(opts)
    assert labels == ["meh", "neg", "pos"] and processor.num_labels == 3
    assert sorted(t[0] for t in splits["train"].texts) == ["bad", "dull", "good, fine"]
    by_text = {t[0]: int(y) for t, y in zip(splits["train"].texts, splits["train"].labels)}
    assert by_text == {"good, fine": 2, "bad": 1, "dull": 0}
    with pytest.raises(GlueDataError) as error:
        run_gpt_classifier(dataclasses_replace(opts, do_eval=True))
    assert str(error.value) == (f"{dev}:3: column 2 (--label_column): label 'bad' is not in "
                                "the training labels ['meh', 'neg', 'pos']")
    assert not (tmp_path / "out").exists()  # nothing written
    # without --do_train the labels come from output_dir/labels.json
    (tmp_path / "out").mkdir()
    with pytest.raises(GlueDataError, match=r"no .*labels\.json .*add --do_train"):
        load_own_splits(dataclasses_replace(opts, do_train=False, do_eval=True))
    (tmp_path / "out" / "labels.json").write_text('["neg", "pos", "bad"]\n')
    splits, labels, _ = load_own_splits(dataclasses_replace(opts, do_train=False, do_eval=True))
    assert labels == ["neg", "pos", "bad"] and splits["dev"][0].labels.tolist() == [1, 2]
    with pytest.raises(GlueDataError, match="holds labels .*use another --output_dir"):
        load_own_splits(opts)


def dataclasses_replace(opts, **kw):
    import dataclasses
    return dataclasses.replace(opts, **kw)


def test_test_results_text_is_run_classifiers_float32_text():
    """The GPT classifier's test_results.tsv prints probabilities as BERT's run_classifier does:
    `str` of each float32 (tab-separated), one score per line for a regression."""
    probabilities = np.array([[0.38892137556, 0.61107862444], [1 / 3, 2 / 3]])
    lines = format_probabilities(probabilities)
    assert lines == ["\t".join(str(np.float32(p)) for p in row) + "\n" for row in probabilities]
    assert lines[0] == "0.38892138\t0.6110786\n"
    assert format_probabilities(np.array([4.25, 1 / 3])) == ["4.25\n", "0.33333334\n"]

    # the same text as run_classifier's writer for the same probabilities
    import tempfile

    from bert_tf.tasks.classifier import write_test_outputs
    from bert_tf.tasks.glue import EvalSplit, InputExample

    processor = own_data.OwnDataProcessor("csv", "t", None, "l", labels=["a", "b"])
    logits = np.log(probabilities)
    with tempfile.TemporaryDirectory() as folder:
        paths = write_test_outputs(folder, processor, EvalSplit("test", [
            InputExample(guid=str(i), text_a="x") for i in range(2)]), logits, None)
        from bert_tf.tasks.results import softmax
        assert pathlib.Path(paths["test_results"]).read_text() == "".join(
            format_probabilities(softmax(logits)))


# ---------------------------------------------------------------------------------------------
# tools/run_gpt_classifier.py end to end on real rows
# ---------------------------------------------------------------------------------------------
def _sst2_rows(shared_data: pathlib.Path, n: int) -> list[tuple[str, str]]:
    """n real SST-2 training rows as (text, "negative"/"positive"), some with a comma."""
    path = shared_data / "glue" / "SST-2" / "train.tsv"
    if not path.exists():
        pytest.skip(f"{path} (real SST-2 rows) is absent")
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()[1:3000]]
    rows = [(t.strip(), "positive" if l == "1" else "negative") for t, l in rows]
    with_comma = [r for r in rows if "," in r[0]][:n // 3]
    return (with_comma + [r for r in rows if r not in with_comma])[:n]


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, cwd=PROJECT_ROOT, timeout=600)


def _results(path: pathlib.Path) -> dict[str, float]:
    return {k: float(v) for k, v in
            (line.split(" = ") for line in path.read_text().strip().splitlines())}


@pytest.mark.long
def test_tool_on_a_csv_of_real_sst2_rows(tmp_path, shared_data, model_files):
    config, vocab = model_files
    rows = _sst2_rows(shared_data, 52)
    assert any("," in t for t, _ in rows)
    header = ["id", TEXT_COLUMN, "sentiment"]
    _write_csv(tmp_path / "train.csv", header, [(i, t, l) for i, (t, l) in enumerate(rows[:32])])
    _write_csv(tmp_path / "dev.csv", header, [(i, t, l) for i, (t, l) in enumerate(rows[32:44])])
    _write_csv(tmp_path / "test.csv", header[:2], list(enumerate(t for t, _ in rows[44:])))
    out, export = tmp_path / "out", tmp_path / "export"
    proc = _run("--task_name=csv", f"--train_file={tmp_path / 'train.csv'}",
                f"--dev_file={tmp_path / 'dev.csv'}", f"--test_file={tmp_path / 'test.csv'}",
                f"--text_a_column={TEXT_COLUMN}", "--label_column=sentiment",
                f"--gpt_config_file={config}", f"--vocab_file={vocab}", f"--output_dir={out}",
                f"--export_dir={export}", "--do_train", "--do_eval", "--do_predict",
                f"--max_seq_length={N_CTX}", "--max_text_length=40", "--train_batch_size=16",
                "--num_train_epochs=1", "--learning_rate=1e-3", "--warmup_proportion=0.1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "labels.json").read_text()) == ["negative", "positive"]
    metrics = _results(out / "eval_results.txt")
    assert {"acc", "eval_loss", "global_step"} <= set(metrics) and metrics["global_step"] == 2
    lines = (out / "test_results.tsv").read_text().splitlines()
    assert len(lines) == 8  # one line per test row
    probs = np.array([[float(x) for x in line.split("\t")] for line in lines])
    assert lines == [l.rstrip("\n") for l in format_probabilities(probs)]  # float32 text
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)

    # labels.json travels into the export: its names come out of the raw-text signature
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (the in-graph tokenizer's ops)

    served = tf.saved_model.load(str(export / "1")).signatures["serving_default"](
        text=tf.constant([t for t, _ in rows[44:48]]))
    assert [x.decode() for x in served["labels"].numpy()] == [
        ["negative", "positive"][i] for i in probs[:4].argmax(axis=1)]
    # test_results.tsv holds float32 text; the same model, transformation and length
    np.testing.assert_allclose(served["probabilities"].numpy(), probs[:4], atol=1e-5)


@pytest.mark.long
def test_regression_of_real_stsb_pairs_in_jsonl(tmp_path, shared_data, model_files):
    path = shared_data / "glue" / "STS-B" / "train.tsv"
    if not path.exists():
        pytest.skip(f"{path} (real STS-B rows) is absent")
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()[1:41]]
    for name, part in (("train", rows[:24]), ("dev", rows[24:36]), ("test", rows[36:])):
        (tmp_path / f"{name}.jsonl").write_text("".join(
            json.dumps({"first": r[7], "second": r[8], "score": float(r[9])}) + "\n"
            for r in part), encoding="utf-8")
    result = run_gpt_classifier(_opts(
        tmp_path, model_files, task_name="jsonl", data_dir=str(tmp_path), text_a_column="first",
        text_b_column="second", label_column="score", task_type="regression",
        pair_transform="similarity", do_train=True, do_eval=True, do_predict=True))
    assert result["kind"] == "similarity"
    metrics = result["eval"]["dev"]
    assert {"pearson", "spearmanr", "corr", "eval_loss"} <= set(metrics)
    assert not (tmp_path / "out" / "labels.json").exists()  # a regression has no label names
    scores = (tmp_path / "out" / "test_results.tsv").read_text().splitlines()
    assert len(scores) == 4 and scores == [str(np.float32(float(s))) for s in scores]
