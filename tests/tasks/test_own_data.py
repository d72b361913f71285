"""Own data for run_classifier (`--task_name=csv|tsv|jsonl`, bert_tf.tasks.own_data): csv with a
header, quoted commas in the text and in a column name, string labels (sorted into labels.json);
tsv by index without header; jsonl; regression; one-line errors for bad rows and unseen labels,
and nothing written to output_dir. End to end (`long`): tools/run_classifier.py on a csv of real
SST-2 rows and on a regression csv of real STS-B rows, with a tiny random BERT."""
from __future__ import annotations

import csv
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from bert_tf.errors import UserInputError
from bert_tf.tasks import classifier, own_data
from bert_tf.tasks.glue import GlueDataError
from tests.helpers import TINY_CONFIG

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = PROJECT_ROOT / "tools" / "run_classifier.py"
TEXT_COLUMN = "review, text"  # a column name with a comma (quoted in the header)


def _write_csv(path: pathlib.Path, header, rows, delimiter=",") -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter=delimiter)
        if header:
            writer.writerow(header)
        writer.writerows(rows)


def _sst2_rows(shared_data: pathlib.Path, n: int, skip: int = 0) -> list[tuple[str, str]]:
    """n real SST-2 training rows as (text, "neg"/"pos"), those with a comma first."""
    path = shared_data / "glue" / "SST-2" / "train.tsv"
    if not path.exists():
        pytest.skip(f"{path} (real SST-2 rows) is absent")
    rows = [line.rstrip("\n").split("\t")
            for line in path.read_text(encoding="utf-8").splitlines(True)[1:4000]]
    rows = [(t.strip(), "pos" if l == "1" else "neg") for t, l in rows]
    with_comma = [r for r in rows if "," in r[0]]
    ordered = with_comma[:len(with_comma) // 2] + rows
    return ordered[skip:skip + n]


def _sts_rows(shared_data: pathlib.Path, n: int, skip: int = 0) -> list[tuple[str, str, str]]:
    path = shared_data / "glue" / "STS-B" / "train.tsv"
    if not path.exists():
        pytest.skip(f"{path} (real STS-B rows) is absent")
    lines = path.read_text(encoding="utf-8").splitlines()[1 + skip:1 + skip + n]
    return [(c[7], c[8], c[9]) for c in (line.split("\t") for line in lines)]


def _processor(**kw) -> own_data.OwnDataProcessor:
    args = dict(fmt="csv", text_a_column=TEXT_COLUMN, label_column="label")
    args.update(kw)
    return own_data.OwnDataProcessor(**args)


# ---------------------------------------------------------------------------------------------
# Reading (no TensorFlow)
# ---------------------------------------------------------------------------------------------
def test_csv_with_quoted_commas_and_string_labels(tmp_path, shared_data):
    rows = _sst2_rows(shared_data, 12)
    assert any("," in t for t, _ in rows)
    train = tmp_path / "train.csv"
    _write_csv(train, ["id", TEXT_COLUMN, "label"], [(i, t, l) for i, (t, l) in enumerate(rows)])
    assert f'"{TEXT_COLUMN}"' in train.read_text().splitlines()[0]  # quoted by the csv module
    processor = _processor(train_file=str(train))
    examples = processor.get_train_examples(None)
    assert [(e.text_a, e.label) for e in examples] == rows  # the commas are text
    assert processor.get_labels() == sorted({l for _, l in rows}) == ["neg", "pos"]
    assert processor.num_labels == 2 and not processor.is_regression
    # the same by index; the label column found by --data_dir/train.csv
    by_index = own_data.OwnDataProcessor("csv", "1", None, "2")
    assert [(e.text_a, e.label) for e in by_index.get_train_examples(str(tmp_path))] == rows


def test_tsv_without_header_pairs_and_jsonl(tmp_path):
    _write_csv(tmp_path / "train.tsv", None, [("a, b", "c", "x"), ("d", "e\"f", "y")], "\t")
    processor = own_data.OwnDataProcessor("tsv", "0", "1", "2", has_header=False)
    examples = processor.get_train_examples(str(tmp_path))
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [("a, b", "c", "x"),
                                                                 ("d", "e\"f", "y")]
    with pytest.raises(GlueDataError, match="--has_header=false columns are 0-based indexes"):
        own_data.OwnDataProcessor("tsv", "text", None, "2", has_header=False)
    (tmp_path / "train.jsonl").write_text(
        '{"q": "a", "p": "b", "y": 1}\n\n{"q": "c", "p": "d", "y": 0}\n{"q": "e", "p": "f", '
        '"y": 1}\n', encoding="utf-8")
    processor = own_data.OwnDataProcessor("jsonl", "q", "p", "y")
    examples = processor.get_train_examples(str(tmp_path))
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [("a", "b", "1"), ("c", "d", "0"),
                                                                 ("e", "f", "1")]
    assert processor.get_labels() == ["0", "1"]


def test_regression_and_test_file_without_labels(tmp_path):
    _write_csv(tmp_path / "train.csv", ["s1", "s2", "score"], [("a", "b", "4.5"), ("c", "d", "0")])
    _write_csv(tmp_path / "test.csv", ["s1", "s2"], [("a", "b"), ("c", "d"), ("e", "f")])
    processor = own_data.OwnDataProcessor("csv", "s1", "s2", "score", regression=True)
    assert [e.label for e in processor.get_train_examples(str(tmp_path))] == [4.5, 0.0]
    assert processor.num_labels == 1 and processor.get_labels() is None
    test = processor.get_test_splits(str(tmp_path))[0].examples
    assert len(test) == 3 and all(e.label is None for e in test)
    _write_csv(tmp_path / "dev.csv", ["s1", "s2", "score"], [("a", "b", "high")])
    with pytest.raises(GlueDataError, match=r"dev\.csv:2: column 2 \(--label_column\): label "
                                            r"'high' is not a finite number"):
        processor.get_dev_splits(str(tmp_path))


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_bad_rows_name_file_line_and_column(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text(f'"{TEXT_COLUMN}",label\n"fine, good",pos\njust text\n', encoding="utf-8")
    with pytest.raises(GlueDataError) as error:
        _processor(train_file=str(path)).get_train_examples(None)
    assert _one_line(error) == (f"{path}:3: no column 1 ('label'); the row has 1 csv column(s) "
                                "(--label_column)")
    path.write_text('text,label\n"a,pos\n', encoding="utf-8")  # unterminated quote
    with pytest.raises(GlueDataError, match=rf"{path}:2: malformed csv row") as error:
        _processor(train_file=str(path), text_a_column="text").get_train_examples(None)
    _one_line(error)
    path.write_text("text,label\na,pos\n", encoding="utf-8")
    with pytest.raises(GlueDataError, match=rf"{path}:1: no column 'sentence' "
                                            r"\(--text_a_column\) in the header") as error:
        _processor(train_file=str(path), text_a_column="sentence").get_train_examples(None)
    _one_line(error)
    (tmp_path / "bad.jsonl").write_text('{"t": "a", "y": "x"}\n{"t": 3, "y": "x"}\n')
    with pytest.raises(GlueDataError, match=r"bad\.jsonl:2: key 't' \(--text_a_column\): "
                                            "expected a string, got 3") as error:
        own_data.OwnDataProcessor("jsonl", "t", None, "y",
                                  train_file=str(tmp_path / "bad.jsonl")).get_train_examples(None)
    _one_line(error)


def _options(tmp_path, **kw) -> classifier.ClassifierRunOptions:
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n")
    args = dict(task_name="csv", bert_config_file=str(config), vocab_file=str(vocab),
                output_dir=str(tmp_path / "out"), do_train=True, do_eval=True,
                train_file=str(tmp_path / "train.csv"), dev_file=str(tmp_path / "dev.csv"),
                text_a_column="text", label_column="label", max_seq_length=16)
    args.update(kw)
    return classifier.ClassifierRunOptions(**args)


def test_unseen_dev_label_is_one_line_and_nothing_is_written(tmp_path):
    _write_csv(tmp_path / "train.csv", ["text", "label"], [("a", "neg"), ("b", "pos")])
    _write_csv(tmp_path / "dev.csv", ["text", "label"], [("a", "neg"), ("c", "neutral")])
    with pytest.raises(GlueDataError) as error:
        classifier.run_classifier(_options(tmp_path))
    assert _one_line(error) == (f"{tmp_path / 'dev.csv'}:3: column 1 (--label_column): label "
                                "'neutral' is not in the training labels ['neg', 'pos']")
    assert not (tmp_path / "out").exists()
    # a GLUE task with own-data flags, and eval without a training run's labels.json
    with pytest.raises(UserInputError, match="--train_file, --text_a_column, --label_column only "
                                             "apply to --task_name=csv"):
        classifier.run_classifier(_options(tmp_path, task_name="sst-2",
                                           data_dir=str(tmp_path), dev_file=None))
    with pytest.raises(GlueDataError, match=r"no .*labels\.json \(the label set of a training "
                                            r"run\); add --do_train"):
        classifier.run_classifier(_options(tmp_path, do_train=False))
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# End to end: tools/run_classifier.py
# ---------------------------------------------------------------------------------------------
def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          cwd=PROJECT_ROOT, timeout=600)


def _read_eval(path: pathlib.Path) -> dict:
    return {k: float(v) for k, v in (line.split(" = ") for line in
                                     path.read_text().splitlines())}


@pytest.fixture()
def model_files(tmp_path, original_fixtures):
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    return str(config), str(original_fixtures / "vocab_uncased.txt")


@pytest.mark.long
def test_tool_on_a_csv_of_real_sst2_rows(tmp_path, shared_data, model_files):
    config, vocab = model_files
    rows = _sst2_rows(shared_data, 58)
    header = ["id", TEXT_COLUMN, "sentiment"]
    _write_csv(tmp_path / "train.csv", header, [(i, t, l) for i, (t, l) in enumerate(rows[:32])])
    _write_csv(tmp_path / "dev.csv", header, [(i, t, l) for i, (t, l) in enumerate(rows[32:48])])
    _write_csv(tmp_path / "test.csv", header[:2], list(enumerate(t for t, _ in rows[48:])))
    out = tmp_path / "out"
    proc = _run("--task_name=csv", f"--train_file={tmp_path / 'train.csv'}",
                f"--dev_file={tmp_path / 'dev.csv'}", f"--test_file={tmp_path / 'test.csv'}",
                f"--text_a_column={TEXT_COLUMN}", "--label_column=sentiment",
                f"--vocab_file={vocab}", f"--bert_config_file={config}", f"--output_dir={out}",
                "--do_train", "--do_eval", "--do_predict", "--max_seq_length=32",
                "--train_batch_size=16", "--num_train_epochs=1", "--learning_rate=1e-3",
                "--plot_curves=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["task"] == "csv" and summary["global_step"] == 2
    assert json.loads((out / "labels.json").read_text()) == ["neg", "pos"]
    results = _read_eval(out / "eval_results.txt")
    assert {"eval_accuracy", "acc", "eval_loss", "global_step"} <= set(results)
    assert 0.0 <= results["eval_accuracy"] <= 1.0
    probs = np.loadtxt(out / "test_results.tsv", delimiter="\t", ndmin=2)
    assert probs.shape == (10, 2)  # one line per test row, a probability per label
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)

    # the export of the run's checkpoint carries labels.json's names (no --label_list given)
    import tensorflow as tf

    from bert_tf.export import exporter

    version = exporter.export_savedmodel(exporter.ExportOptions(
        model_type="classifier", export_dir=str(tmp_path / "export"), bert_config_file=config,
        vocab_file=vocab, init_checkpoint=str(out / "model.ckpt-2"), seq_length=32))
    serve = tf.saved_model.load(version).signatures["serving_default"]
    served = serve(text=tf.constant([t for t, _ in rows[48:52]]))
    assert [x.decode() for x in served["labels"].numpy()] == [
        ["neg", "pos"][i] for i in probs[:4].argmax(axis=1)]
    # test_results.tsv prints float32 probabilities; the same packing at max_seq_length=32
    np.testing.assert_allclose(served["probabilities"].numpy(), probs[:4], atol=1e-5)

    # an unseen dev label: one error line, exit code 1, the output_dir untouched
    _write_csv(tmp_path / "dev2.csv", header, [(0, "fine", "pos"), (1, "meh", "mixed")])
    proc = _run("--task_name=csv", f"--train_file={tmp_path / 'train.csv'}",
                f"--dev_file={tmp_path / 'dev2.csv'}", f"--text_a_column={TEXT_COLUMN}",
                "--label_column=sentiment", f"--vocab_file={vocab}",
                f"--bert_config_file={config}", f"--output_dir={tmp_path / 'out2'}",
                "--do_train", "--do_eval")
    assert proc.returncode != 0
    assert f"dev2.csv:3: column 2 (--label_column): label 'mixed' is not in the training " \
           f"labels ['neg', 'pos']" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "out2").exists()


@pytest.mark.long
def test_tool_regression_on_a_csv_of_real_stsb_rows(tmp_path, shared_data, model_files):
    config, vocab = model_files
    rows = _sts_rows(shared_data, 40)
    header = ["sentence 1", "sentence 2", "score"]
    _write_csv(tmp_path / "train.csv", header, rows[:24])
    _write_csv(tmp_path / "dev.csv", header, rows[24:34])
    out = tmp_path / "out"
    proc = _run("--task_name=csv", f"--data_dir={tmp_path}", "--text_a_column=sentence 1",
                "--text_b_column=sentence 2", "--label_column=score", "--task_type=regression",
                f"--vocab_file={vocab}", f"--bert_config_file={config}", f"--output_dir={out}",
                "--do_train", "--do_eval", "--max_seq_length=48", "--train_batch_size=8",
                "--num_train_epochs=1", "--learning_rate=1e-3", "--plot_curves=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = _read_eval(out / "eval_results.txt")
    assert {"pearson", "spearmanr", "eval_loss"} <= set(results)
    assert "eval_accuracy" not in results and results["eval_loss"] > 0
    assert not (out / "labels.json").exists()  # regression: no label set


def test_labels_json_travels_into_the_export_options(tmp_path):
    from bert_tf.export import exporter

    run = tmp_path / "run"
    run.mkdir()
    (run / "labels.json").write_text(json.dumps(["neg", "pos, mostly"]))
    config, vocab = tmp_path / "bert_config.json", tmp_path / "vocab.txt"
    config.write_text(json.dumps(TINY_CONFIG))
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\na\n")
    opts = exporter.ExportOptions(model_type="classifier", export_dir=str(tmp_path / "export"),
                                  bert_config_file=str(config), vocab_file=str(vocab),
                                  init_checkpoint=str(run / "model.ckpt-2"))
    exporter.validate_options(opts)
    assert opts.label_list == ["neg", "pos, mostly"]  # a comma no --label_list could carry
    explicit = exporter.ExportOptions(**{**vars(opts), "label_list": None, "num_labels": 3})
    exporter.validate_options(explicit)
    assert explicit.label_list is None and explicit.num_labels == 3  # flags win
    (run / "labels.json").unlink()
    with pytest.raises(UserInputError, match="--num_labels or --label_list is required"):
        exporter.validate_options(exporter.ExportOptions(**{**vars(opts), "label_list": None}))


def test_one_label_and_tfds_with_own_data_are_refused(tmp_path):
    _write_csv(tmp_path / "train.csv", ["text", "label"], [("a", "pos"), ("b", "pos")])
    with pytest.raises(GlueDataError, match=r"train\.csv: 1 distinct label\(s\) \['pos'\]; "
                                            "classification needs at least 2"):
        own_data.OwnDataProcessor("csv", "text", None, "label").get_train_examples(str(tmp_path))
    with pytest.raises(UserInputError, match="--tfds_data_dir does not apply to --task_name=csv"):
        classifier.run_classifier(_options(tmp_path, tfds_data_dir=str(tmp_path)))
    assert not (tmp_path / "out").exists()
