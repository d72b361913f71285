"""GPT-1 fine-tuning through the shared task readers, metrics and loop, on real GLUE rows (a few
dozen MRPC / SST-2 rows of ../shared/data/glue) with a tiny GPT (dropout 0.1), a WordPiece
vocabulary built from those rows. Skips when the data is absent."""
from __future__ import annotations

import csv
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from bert_tf.errors import UserInputError

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
GLUE = pathlib.Path(os.environ.get("BERT_TF_DATA",
                                  PROJECT_ROOT.parent / "shared" / "data")) / "glue"
N_CTX = 64


def _head(path: pathlib.Path, n: int, skip: int = 0) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    return [lines[0]] + lines[1 + skip:1 + skip + n]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Folders MRPC/, SST-2/, swag/ with real rows, a vocab and a tiny GPT config."""
    if not (GLUE / "MRPC" / "train.tsv").exists() or not (GLUE / "SST-2" / "train.tsv").exists():
        pytest.skip(f"needs the GLUE MRPC and SST-2 files under {GLUE} (../shared/data)")
    from bert_tf.gpt.config import GptConfig
    root = tmp_path_factory.mktemp("gpt_ft")
    for task, n_train, n_dev in (("MRPC", 48, 16), ("SST-2", 48, 16)):
        (root / task).mkdir()
        (root / task / "train.tsv").write_text(
            "".join(_head(GLUE / task / "train.tsv", n_train)), encoding="utf-8")
        (root / task / "dev.tsv").write_text("".join(_head(GLUE / task / "dev.tsv", n_dev)),
                                             encoding="utf-8")
    # SWAG layout from real SST-2 phrases: context, 4 endings, the right one by label.
    phrases = [line.split("\t")[0].strip()
               for line in _head(GLUE / "SST-2" / "train.tsv", 120)[1:]]
    (root / "swag").mkdir()
    for name, offset, n in (("train.csv", 0, 16), ("val.csv", 80, 8)):
        with open(root / "swag" / name, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
                        "ending0", "ending1", "ending2", "ending3", "label"])
            for i in range(n):
                p = phrases[offset + i * 5: offset + i * 5 + 5]
                w.writerow([i, "v", i, p[0], p[0], "then", "gold", p[1], p[2], p[3], p[4], i % 4])
    words = set()
    for path in root.rglob("*.*sv"):
        words |= set(path.read_text(encoding="utf-8").lower().split())
    for path in (root / "swag").glob("*.csv"):
        words |= set(path.read_text(encoding="utf-8").lower().replace(",", " ").split())
    from bert_tf.tokenization import BasicTokenizer
    basic = BasicTokenizer(do_lower_case=True)
    tokens = sorted({t for w in words for t in basic.tokenize(w)})
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + tokens) + "\n",
                     encoding="utf-8")
    config = GptConfig(n_vocab=4 + len(tokens), n_special=3, n_ctx=N_CTX, n_embd=32, n_head=2,
                       n_layer=2)
    config.to_json_file(root / "gpt_config.json")
    return root


def _opts(data, task, output_dir, **overrides):
    from bert_tf.tasks.gpt_classifier import GptClassifierRunOptions
    folder = {"mrpc": "MRPC", "sst-2": "SST-2", "swag": "swag"}[task]
    kwargs = dict(task_name=task, data_dir=str(data / folder),
                  gpt_config_file=str(data / "gpt_config.json"), output_dir=str(output_dir),
                  vocab_file=str(data / "vocab.txt"), max_seq_length=N_CTX,
                  do_train=True, do_eval=True, train_batch_size=8, eval_batch_size=8,
                  learning_rate=1e-3, num_train_epochs=1.0, warmup_proportion=0.1,
                  save_checkpoints_steps=1000, seed=3)
    kwargs.update(overrides)
    return GptClassifierRunOptions(**kwargs)


def _results(path: pathlib.Path) -> dict[str, str]:
    return dict(line.split(" = ") for line in path.read_text().strip().splitlines())


@pytest.mark.long
def test_mrpc_similarity_trains_and_evaluates_with_the_official_metric(data, tmp_path):
    from bert_tf.evaluation.glue_metrics import glue_metrics
    from bert_tf.tasks.gpt_classifier import run_gpt_classifier
    out = tmp_path / "mrpc"
    result = run_gpt_classifier(_opts(data, "mrpc", out, num_train_epochs=2.0,
                                           max_text_length=30,
                                           export_dir=str(tmp_path / "export")))
    assert (tmp_path / "export" / "1" / "saved_model.pb").exists()
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (the in-graph tokenizer's ops)
    served = tf.saved_model.load(str(tmp_path / "export" / "1"))
    assert {"serving_default", "serving_ids"} <= set(served.signatures)
    probs = served.signatures["serving_default"](
        text_a=tf.constant(["A good film ."]), text_b=tf.constant(["A fine film ."]))
    assert probs["probabilities"].shape == (1, 2)
    with pytest.raises(UserInputError, match="version 1 exists"):
        run_gpt_classifier(_opts(data, "mrpc", tmp_path / "other", do_train=False,
                                 export_dir=str(tmp_path / "export")))
    assert result["kind"] == "similarity"
    train = result["train"]
    assert train["global_step"] == 12 and len(train["history"]) == 12  # 48 / 8 * 2
    assert all(math.isfinite(h["loss"]) for h in train["history"])
    metrics = _results(out / "eval_results.txt")
    official = set(glue_metrics("mrpc", [0, 1], [0, 1]))
    assert official <= set(metrics) and {"eval_loss", "global_step"} <= set(metrics)
    assert metrics["global_step"] == "12"
    assert (out / "model.ckpt-12.index").exists() and (out / "curves.png").exists()
    # A second run on the same output_dir resumes (nothing left to train) and evaluates the
    # same weights: the same file.
    again = run_gpt_classifier(_opts(data, "mrpc", out, num_train_epochs=2.0,
                                          max_text_length=30))
    assert again["train"]["start_step"] == 12 and again["train"]["history"] == []
    assert _results(out / "eval_results.txt") == metrics


@pytest.mark.long
def test_mixed_bfloat16_run_trains_and_exports_float32_probabilities(data, tmp_path):
    import keras
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (the in-graph tokenizer's ops)
    from bert_tf.tasks.gpt_classifier import run_gpt_classifier
    result = run_gpt_classifier(_opts(data, "mrpc", tmp_path / "mrpc", max_text_length=30,
                                      mixed_precision="mixed_bfloat16",
                                      export_dir=str(tmp_path / "export")))
    assert keras.mixed_precision.global_policy().name == "float32"  # restored after the run
    assert all(math.isfinite(h["loss"]) for h in result["train"]["history"])
    served = tf.saved_model.load(str(tmp_path / "export" / "1"))
    probs = served.signatures["serving_default"](
        text_a=tf.constant(["A good film .", "A bad film ."]),
        text_b=tf.constant(["A fine film .", "A good film ."]))["probabilities"]
    assert probs.dtype == tf.float32 and probs.shape == (2, 2)
    np.testing.assert_allclose(probs.numpy().sum(axis=1), 1.0, rtol=1e-6)


@pytest.mark.long
def test_aux_lm_loss_weight(data, tmp_path):
    """Same init, same dropout draws: the first step's loss with lm_coef=0.5 exceeds the one with
    lm_coef=0 by half the LM loss, which for fresh weights is about ln(table rows)."""
    from bert_tf.gpt.config import GptConfig
    from bert_tf.tasks.gpt_classifier import run_gpt_classifier
    with_lm = run_gpt_classifier(_opts(data, "sst-2", tmp_path / "lm", lm_coef=0.5,
                                       do_eval=False))
    without = run_gpt_classifier(_opts(data, "sst-2", tmp_path / "nolm", lm_coef=0.0,
                                       do_eval=False))
    a, b = with_lm["train"]["history"], without["train"]["history"]
    assert [x["loss"] for x in a] != [x["loss"] for x in b]
    rows = GptConfig.from_json_file(data / "gpt_config.json").table_rows
    lm_part = (a[0]["loss"] - b[0]["loss"]) / 0.5
    assert abs(lm_part - math.log(rows)) < 0.5, (lm_part, math.log(rows))
    assert b[0]["loss"] < 1.0  # binary cross-entropy of a fresh head, about ln 2


def test_multiple_choice_swag_layout_and_predict(data, tmp_path):
    from bert_tf.tasks.gpt_classifier import run_gpt_classifier
    out = tmp_path / "swag"
    (data / "swag" / "test.csv").write_text(
        (data / "swag" / "val.csv").read_text(encoding="utf-8").replace(",label", ",x"),
        encoding="utf-8")
    result = run_gpt_classifier(_opts(data, "swag", out, do_predict=True,
                                           max_text_length=30))
    assert result["kind"] == "multiple_choice" and result["train"]["global_step"] == 2
    metrics = _results(out / "eval_results.txt")
    assert {"accuracy", "eval_loss", "global_step"} <= set(metrics)
    probs = np.loadtxt(out / "test_results.tsv")
    assert probs.shape == (8, 4)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-6)


def test_init_from_original_params(data, tmp_path):
    from bert_tf.gpt.config import GptConfig
    from bert_tf.tasks.gpt_classifier import run_gpt_classifier
    from bert_tf.gpt.model import GptModel
    from bert_tf.checkpoints.openai import save_original_params
    from bert_tf.training.finetuning import latest_checkpoint
    pretrained = GptModel(GptConfig.from_json_file(data / "gpt_config.json"), classifier=False)
    save_original_params(pretrained, tmp_path / "params")
    out = tmp_path / "ft"
    run_gpt_classifier(_opts(data, "sst-2", out, do_train=False, do_predict=False,
                             init_checkpoint=str(tmp_path / "params")))
    assert latest_checkpoint(str(out)) is None and (out / "eval_results.txt").exists()


def test_bad_input_is_one_clear_line(data, tmp_path):
    from bert_tf.tasks.gpt_classifier import GptTaskDataError, run_gpt_classifier
    # A sequence longer than n_ctx: names the split, the row and the flags.
    with pytest.raises(GptTaskDataError, match=r"mrpc train \(example train-\d+, line/id \d+\): "
                                               r"similarity_inputs: row \d+.*exceeds n_ctx 16"
                                               r".*--max_seq_length=16"):
        run_gpt_classifier(_opts(data, "mrpc", tmp_path / "long", max_seq_length=16))
    # A multiple-choice row with a missing choice: names the file and line.
    bad = tmp_path / "badswag"
    bad.mkdir()
    text = (data / "swag" / "train.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    cells = next(csv.reader([text[3]]))
    cells[9] = ""
    import io
    buf = io.StringIO()
    csv.writer(buf).writerow(cells)
    text[3] = buf.getvalue()
    (bad / "train.csv").write_text("".join(text), encoding="utf-8")
    with pytest.raises(GptTaskDataError, match=r"train\.csv:4: ending2 is missing"):
        run_gpt_classifier(_opts(data, "swag", tmp_path / "mc", data_dir=str(bad),
                                 do_eval=False))
    with pytest.raises(UserInputError, match="sts-b"):
        run_gpt_classifier(_opts(data, "mrpc", tmp_path / "x", task_name="STS-B"))
    # Through the real tool: exit status 1, one line naming the flag.
    proc = subprocess.run(
        [sys.executable, "tools/run_gpt_classifier.py", "--task_name=mrpc",
         f"--data_dir={data / 'MRPC'}", f"--gpt_config_file={data / 'gpt_config.json'}",
         f"--output_dir={tmp_path / 'tool'}", f"--vocab_file={data / 'vocab.txt'}",
         "--max_seq_length=16", "--do_train"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 1, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "exceeds n_ctx 16" in errors[0] and "--max_seq_length" in errors[0]
    assert not (tmp_path / "tool" / "checkpoint").exists()
