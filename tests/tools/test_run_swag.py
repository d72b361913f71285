"""tools/run_swag.py end to end on the handmade SWAG sample (tests/tasks/data/swag, the swagaf csv
layout) with a tiny random BERT and a vocab built from the sample: fine-tuning (the loss falls),
evaluation (accuracy and loss recomputed from the predictions file), prediction of the unlabelled
test file, evaluation again from the written checkpoint, and bad input."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from bert_tf.tasks import multiple_choice as mc
from bert_tf.tokenization import BasicTokenizer
from tests.helpers import read_results, run_tool, write_tiny_model

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = PROJECT_ROOT / "tools" / "run_swag.py"
DATA = PROJECT_ROOT / "tests" / "tasks" / "data" / "swag"


def _tiny_model(tmp_path: pathlib.Path) -> tuple[str, str]:
    """A whole-word vocab of the sample's words and a 2-layer, 32-wide config of its size."""
    words: set[str] = set()
    basic = BasicTokenizer(do_lower_case=True)
    for name in ("train.csv", "val.csv", "test.csv"):
        for e in mc.read_swag_examples(DATA / name, require_label=False):
            for text in [e.context_sentence, *e.choice_texts()]:
                words.update(basic.tokenize(text))
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(words)]
    return write_tiny_model(tmp_path, tokens, attention_probs_dropout_prob=0.1,
                            hidden_dropout_prob=0.1)


def _run(args: list[str]):
    return run_tool(SCRIPT, args)


def _predictions(path: pathlib.Path) -> tuple[list[str], list[list[str]]]:
    lines = path.read_text().splitlines()
    return lines[0].split("\t"), [line.split("\t") for line in lines[1:]]


@pytest.mark.long
def test_run_swag_train_eval_predict_and_reload(tmp_path):
    config, vocab = _tiny_model(tmp_path)
    out = tmp_path / "out"
    common = [f"--bert_config_file={config}", f"--vocab_file={vocab}", f"--output_dir={out}",
              f"--data_dir={DATA}", "--max_seq_length=32"]
    proc = _run(common + ["--do_train", "--do_eval", "--do_predict", "--train_batch_size=4",
                          "--num_train_epochs=6", "--learning_rate=2e-3",
                          "--save_checkpoints_steps=10", "--eval_batch_size=3"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Num steps = 24" in proc.stderr  # int(16 questions / 4 * 6 epochs)
    assert 'model_checkpoint_path: "model.ckpt-24"' in (out / "checkpoint").read_text()
    train = read_results(out / "train_results.txt")
    assert train["loss"] < 0.7 * train["first_loss"], train

    header, rows = _predictions(out / "eval_predictions.tsv")
    assert header == ["id", "prediction", "label", "prob0", "prob1", "prob2", "prob3"]
    assert [r[0] for r in rows] == ["100", "101", "102", "103"]
    assert [r[2] for r in rows] == ["0", "1", "2", "3"]
    probs = np.array([[float(x) for x in r[3:]] for r in rows])
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    assert [int(r[1]) for r in rows] == probs.argmax(axis=1).tolist()
    metrics = read_results(out / "eval_results.txt")
    assert set(metrics) == {"acc", "eval_loss", "num_examples", "global_step"}
    assert metrics["acc"] == pytest.approx(
        np.mean([r[1] == r[2] for r in rows]))
    assert metrics["eval_loss"] == pytest.approx(
        -np.mean(np.log(probs[np.arange(4), [0, 1, 2, 3]])), abs=1e-4)
    assert metrics["global_step"] == 24 and metrics["num_examples"] == 4
    # The unlabelled test file: predictions, no score.
    _, test_rows = _predictions(out / "test_predictions.tsv")
    assert [r[0] for r in test_rows] == ["200", "201"] and all(r[2] == "" for r in test_rows)
    assert not (out / "test_results.txt").exists()

    # Evaluation only: the latest checkpoint in --output_dir gives the same probabilities.
    again = mc.run_swag(mc.SwagRunOptions(
        bert_config_file=config, vocab_file=vocab, output_dir=str(out),
        eval_file=str(DATA / "val.csv"), do_eval=True, max_seq_length=32, eval_batch_size=4))
    _, rows_again = _predictions(out / "eval_predictions.tsv")
    np.testing.assert_allclose([[float(x) for x in r[3:]] for r in rows_again], probs,
                               atol=2e-6)
    assert again["eval"]["acc"] == pytest.approx(metrics["acc"])


@pytest.mark.long
def test_bad_input_is_named(tmp_path):
    config, vocab = _tiny_model(tmp_path)
    bad = tmp_path / "bad.csv"
    text = (DATA / "train.csv").read_text().splitlines()
    text[3] = text[3][:-1] + "7"
    bad.write_text("\n".join(text) + "\n")
    proc = _run([f"--bert_config_file={config}", f"--vocab_file={vocab}",
                 f"--output_dir={tmp_path / 'out'}", f"--train_file={bad}", "--do_train"])
    assert proc.returncode != 0
    assert f"{bad}:4: label '7' is not one of 0..3" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = _run([f"--bert_config_file={config}", f"--vocab_file={vocab}",
                 f"--output_dir={tmp_path / 'out'}", f"--eval_file={DATA / 'test.csv'}",
                 "--do_eval"])
    assert proc.returncode != 0 and "test.csv:1: no `label` column" in proc.stderr
