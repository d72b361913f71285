"""tools/run_classifier.py end to end with a tiny random BERT: fine-tune + eval + predict on a
learnable SST-2-layout task (the loss falls, official files written, --config flagfile), predict
again from the checkpoint it wrote, STS-B regression, and bad input."""
from __future__ import annotations

import json
import pathlib
import random
import subprocess
import sys

import numpy as np
import pytest

from bert_tf.tasks import classifier, glue
from tests.helpers import TINY_CONFIG

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = PROJECT_ROOT / "tools" / "run_classifier.py"

POSITIVE = "good great fine nice happy".split()
NEGATIVE = "bad awful poor sad ugly".split()
FILLER = "the film was a story of people and it".split()


def _sentence(rng: random.Random, positive: bool) -> str:
    words = rng.sample(FILLER, 4) + [rng.choice(POSITIVE if positive else NEGATIVE)]
    rng.shuffle(words)
    return " ".join(words)


@pytest.fixture()
def model_files(tmp_path, original_fixtures):
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    return str(config), str(original_fixtures / "vocab_uncased.txt")


def _write_sst2(data_dir: pathlib.Path, n_train=64, n_dev=16, n_test=10) -> None:
    rng = random.Random(0)
    data_dir.mkdir(parents=True, exist_ok=True)

    def rows(n):
        return [(_sentence(rng, i % 2 == 1), str(i % 2)) for i in range(n)]

    for split, n in (("train", n_train), ("dev", n_dev)):
        (data_dir / f"{split}.tsv").write_text(
            "sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows(n)), encoding="utf-8")
    (data_dir / "test.tsv").write_text(
        "index\tsentence\n" + "".join(f"{i}\t{s}\n" for i, (s, _) in enumerate(rows(n_test))),
        encoding="utf-8")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          cwd=PROJECT_ROOT, timeout=300)


def _summary(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _read_eval(path: pathlib.Path) -> dict:
    return {k: float(v) for k, v in (line.split(" = ") for line in
                                     path.read_text().splitlines())}


@pytest.mark.long
def test_classification_train_eval_predict_then_predict_from_checkpoint(tmp_path, model_files):
    config, vocab = model_files
    data_dir, out = tmp_path / "sst2", tmp_path / "out"
    _write_sst2(data_dir)
    flagfile = tmp_path / "task.flags"
    flagfile.write_text("# hyper-parameters\n--task_name=sst-2\n--max_seq_length=16\n"
                        "--train_batch_size=16\n--num_train_epochs=24\n--learning_rate=1e-3\n"
                        "--warmup_proportion=0.1\n--save_checkpoints_steps=20\n")
    common = [f"--data_dir={data_dir}", f"--vocab_file={vocab}", f"--bert_config_file={config}",
              f"--output_dir={out}"]
    summary = _summary(_run(f"--config={flagfile}", *common, "--do_train", "--do_eval",
                            "--do_predict", "--eval_batch_size=5", "--predict_batch_size=4"))
    assert summary["global_step"] == 96  # int(64 / 16 * 24)
    assert summary["loss"] < 0.5 * summary["first_loss"], summary
    results = _read_eval(out / "eval_results.txt")
    # the original's keys (eval_accuracy, eval_loss, global_step, loss) besides the GLUE metric
    assert sorted(results) == ["acc", "eval_accuracy", "eval_loss", "global_step", "loss"]
    assert results["global_step"] == 96 and results["acc"] >= 0.75
    assert results["eval_accuracy"] == results["acc"]
    # loss: the mean of the batch means (16 dev rows in batches of 5: 5, 5, 5, 1)
    assert results["loss"] != results["eval_loss"] and results["loss"] > 0
    assert (out / "eval_results.txt").read_text().splitlines()[1].startswith("eval_accuracy = ")
    assert (out / "model.ckpt-96.index").exists() and (out / "model.ckpt-80.index").exists()
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"  # --plot_curves (default on)
    assert list((out / "train").glob("*tfevents*"))  # TensorBoard scalars
    probs = np.loadtxt(out / "test_results.tsv", delimiter="\t")
    assert probs.shape == (10, 2)  # every test example, the last partial batch included
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-6)
    lines = (out / "SST-2.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 11
    assert [l.split("\t")[0] for l in lines[1:]] == [str(i) for i in range(10)]
    assert [l.split("\t")[1] for l in lines[1:]] == [str(i) for i in probs.argmax(axis=1)]

    # Without --do_train: the latest checkpoint of --output_dir gives the same predictions
    # (in-process, the library function the script calls, to keep the test short).
    first = (out / "test_results.tsv").read_text()
    (out / "test_results.tsv").unlink()
    classifier.run_classifier(classifier.ClassifierRunOptions(
        task_name="SST-2", data_dir=str(data_dir), bert_config_file=config, vocab_file=vocab,
        output_dir=str(out), max_seq_length=16, do_eval=True, do_predict=True,
        predict_batch_size=3))
    np.testing.assert_allclose(np.loadtxt(out / "test_results.tsv", delimiter="\t"),
                               np.loadtxt(np.array(first.splitlines()), delimiter="\t"),
                               rtol=1e-5, atol=1e-6)
    again = _read_eval(out / "eval_results.txt")
    assert again["global_step"] == 96 and again["acc"] == results["acc"]

    # --length_bucketing=false: every batch at max_seq_length 16 (the examples are 7 pieces,
    # cut to 8 by default): the same predictions and metrics.
    (out / "test_results.tsv").unlink()
    classifier.run_classifier(classifier.ClassifierRunOptions(
        task_name="SST-2", data_dir=str(data_dir), bert_config_file=config, vocab_file=vocab,
        output_dir=str(out), max_seq_length=16, do_eval=True, do_predict=True,
        predict_batch_size=3, length_bucketing=False))
    np.testing.assert_allclose(np.loadtxt(out / "test_results.tsv", delimiter="\t"),
                               np.loadtxt(np.array(first.splitlines()), delimiter="\t"),
                               rtol=1e-5, atol=1e-6)
    padded = _read_eval(out / "eval_results.txt")
    assert padded["acc"] == results["acc"]
    assert abs(padded["eval_loss"] - results["eval_loss"]) < 1e-5


@pytest.mark.long
def test_stsb_regression(tmp_path, model_files):
    config, vocab = model_files
    data_dir, out = tmp_path / "stsb", tmp_path / "out"
    data_dir.mkdir()
    rng = random.Random(1)
    header = ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
              "\tscore\n")

    def rows(n, with_score=True):
        out_rows = []
        for i in range(n):
            a, b = _sentence(rng, True), _sentence(rng, i % 2 == 0)
            score = f"\t{rng.uniform(0, 5):.3f}" if with_score else ""
            out_rows.append(f"{i}\tmain\tx\t2012\t{i:04d}\tnone\tnone\t{a}\t{b}{score}\n")
        return "".join(out_rows)

    (data_dir / "train.tsv").write_text(header + rows(24))
    (data_dir / "dev.tsv").write_text(header + rows(10))
    (data_dir / "test.tsv").write_text(header.replace("\tscore", "") + rows(7, False))
    summary = _summary(_run("--task_name=STS-B", f"--data_dir={data_dir}",
                            f"--vocab_file={vocab}", f"--bert_config_file={config}",
                            f"--output_dir={out}", "--do_train", "--do_eval", "--do_predict",
                            "--max_seq_length=24", "--train_batch_size=8",
                            "--num_train_epochs=2", "--learning_rate=1e-3"))
    assert summary["global_step"] == 6
    results = _read_eval(out / "eval_results.txt")
    assert sorted(results) == ["corr", "eval_loss", "global_step", "loss", "pearson",
                               "spearmanr"]
    assert results["eval_loss"] > 0
    scores = np.loadtxt(out / "test_results.tsv")
    assert scores.shape == (7,)
    lines = (out / "STS-B.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 8
    np.testing.assert_allclose([float(l.split("\t")[1]) for l in lines[1:]], scores, atol=1e-5)


def _options(tmp_path, model_files, **kw) -> classifier.ClassifierRunOptions:
    config, vocab = model_files
    defaults = dict(task_name="rte", data_dir=str(tmp_path / "data"), bert_config_file=config,
                    vocab_file=vocab, output_dir=str(tmp_path / "out"), do_train=True,
                    max_seq_length=16, train_batch_size=2, num_train_epochs=1.0)
    defaults.update(kw)
    return classifier.ClassifierRunOptions(**defaults)


def test_bad_input_errors(tmp_path, model_files):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta b\tc d\tentailment"
                                    "\n1\tno label here\n")
    with pytest.raises(glue.GlueDataError, match=r"train\.tsv:3: 2 tab-separated column"):
        classifier.run_classifier(_options(tmp_path, model_files))
    (data / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta b\tc d\tentailment"
                                    "\n1\ta\tb\tcontradiction\n")
    with pytest.raises(glue.GlueDataError, match=r"train\.tsv:3: label 'contradiction' is not "
                                                 r"one of \['entailment', 'not_entailment'\]"):
        classifier.run_classifier(_options(tmp_path, model_files))
    with pytest.raises(ValueError, match="Task not found: 'rtee'"):
        classifier.run_classifier(_options(tmp_path, model_files, task_name="rtee"))
    with pytest.raises(ValueError, match="At least one of `do_train`"):
        classifier.run_classifier(_options(tmp_path, model_files, do_train=False))
    (data / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n"
                                    "1\ta\tb\tentailment\n")
    with pytest.raises(ValueError, match="max_position_embeddings"):
        classifier.run_classifier(_options(tmp_path, model_files, max_seq_length=65))


def test_init_checkpoint_of_another_size_names_the_variable(tmp_path, model_files,
                                                            original_fixtures):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta b\tc d\tentailment"
                                    "\n1\ta\tb\tnot_entailment\n")
    from bert_tf.checkpoints import CheckpointError

    # The fixture checkpoint is hidden size 128; the config says 32.
    ckpt = str(original_fixtures / "checkpoint" / "bert_model.ckpt")
    with pytest.raises(CheckpointError, match=r"bert_model\.ckpt: variable "
                                              r"'bert/embeddings/word_embeddings' has shape "
                                              r"\(30522, 128\), the model expects \(30522, 32\)"):
        classifier.run_classifier(_options(tmp_path, model_files, init_checkpoint=ckpt))


def test_fine_tune_real_mrpc_rows_from_the_original_checkpoint(tmp_path, original_fixtures,
                                                               shared_data):
    """In-process: the original release's (tiny) checkpoint as --init_checkpoint, real MRPC rows
    (BOM header), train + eval; the encoder comes from the checkpoint, the head is new."""
    mrpc = shared_data / "glue" / "MRPC"
    if not mrpc.exists():
        pytest.skip(f"{mrpc} is absent")
    data = tmp_path / "mrpc"
    data.mkdir()
    for split, n in (("train", 9), ("dev", 5)):
        lines = (mrpc / f"{split}.tsv").read_text(encoding="utf-8").splitlines(True)[:n]
        (data / f"{split}.tsv").write_text("".join(lines), encoding="utf-8")
    ckpt_dir = original_fixtures / "checkpoint"
    opts = classifier.ClassifierRunOptions(
        task_name="MRPC", data_dir=str(data), bert_config_file=str(ckpt_dir / "bert_config.json"),
        vocab_file=str(original_fixtures / "vocab_uncased.txt"), output_dir=str(tmp_path / "out"),
        init_checkpoint=str(ckpt_dir / "bert_model.ckpt"), do_train=True, do_eval=True,
        max_seq_length=32, train_batch_size=4, num_train_epochs=1.0, learning_rate=2e-5)
    result = classifier.run_classifier(opts)
    assert result["train"]["global_step"] == 2 and result["metric_key"] == "f1"
    assert sorted(result["eval"]["dev"]) == ["acc", "acc_and_f1", "eval_accuracy", "eval_loss",
                                             "f1", "global_step", "loss"]
    from bert_tf.checkpoints import read_checkpoint

    pretrained = read_checkpoint(str(ckpt_dir / "bert_model.ckpt"))
    tuned = read_checkpoint(result["train"]["checkpoint"])
    assert tuned["output_weights"].shape == (2, 128)
    name = "bert/encoder/layer_0/attention/self/query/kernel"
    delta = np.abs(tuned[name] - pretrained[name]).max()
    assert 0 < delta < 1e-3  # fine-tuned from the pretrained weights (2 small steps)
