"""tools/run_squad.py end to end with a tiny random BERT on real SQuAD questions: fine-tuning a
few steps (the loss falls), predicting, output files, scoring (v1.1 and v2.0), predicting from
the checkpoint it wrote, and bad input."""
from __future__ import annotations

import copy
import json
import os
import pathlib
import subprocess
import sys

import pytest

from bert_tf.tasks import squad
from tests import helpers

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = PROJECT_ROOT / "tools" / "run_squad.py"

# The shared tiny BERT with dropout on and 128 positions (the SQuAD windows are longer).
TINY_CONFIG = {**helpers.TINY_CONFIG, "attention_probs_dropout_prob": 0.1,
               "hidden_dropout_prob": 0.1, "max_position_embeddings": 128}


def _subset(data_file: pathlib.Path, num_questions: int, one_answer: bool,
            mix_impossible: bool = False) -> dict:
    """The first paragraphs of a SQuAD file holding `num_questions` questions."""
    data = json.loads(data_file.read_text(encoding="utf-8"))
    paragraphs, count, impossible = [], 0, 0
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            qas = []
            for qa in paragraph["qas"]:
                if mix_impossible and qa.get("is_impossible") and impossible >= num_questions // 2:
                    continue
                impossible += bool(qa.get("is_impossible"))
                qa = copy.deepcopy(qa)
                if one_answer:
                    qa["answers"] = qa["answers"][:1]
                qas.append(qa)
                count += 1
                if count == num_questions:
                    break
            if qas:
                paragraphs.append({"context": paragraph["context"], "qas": qas})
            if count == num_questions:
                return {"version": data["version"], "data": [{"title": "t",
                                                              "paragraphs": paragraphs}]}
    raise AssertionError("not enough questions")


@pytest.fixture()
def tiny_model(tmp_path, original_fixtures):
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    return str(config), str(original_fixtures / "vocab_uncased.txt")


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, cwd=PROJECT_ROOT, timeout=300)


@pytest.mark.long
def test_run_squad_v1_train_predict_and_reload(tmp_path, tiny_model, shared_data):
    config, vocab = tiny_model
    dev = shared_data / "squad" / "dev-v1.1.json"
    train_file, predict_file = tmp_path / "train.json", tmp_path / "predict.json"
    train_file.write_text(json.dumps(_subset(dev, 20, one_answer=True)))
    predict_file.write_text(json.dumps(_subset(dev, 20, one_answer=False)))
    out = tmp_path / "out"
    proc = _run([f"--bert_config_file={config}", f"--vocab_file={vocab}", f"--output_dir={out}",
                 f"--train_file={train_file}", f"--predict_file={predict_file}", "--do_train",
                 "--do_predict", "--train_batch_size=4", "--num_train_epochs=1",
                 "--max_seq_length=64", "--doc_stride=32", "--max_query_length=16",
                 "--learning_rate=1e-3", "--save_checkpoints_steps=3", "--n_best_size=5"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Num steps = 5" in proc.stderr  # int(20 questions / 4 * 1 epoch)
    assert "Num split examples" in proc.stderr
    predictions = json.loads((out / "predictions.json").read_text())
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    qids = [qa["id"] for p in _subset(dev, 20, False)["data"][0]["paragraphs"]
            for qa in p["qas"]]
    assert list(predictions) == qids and list(nbest) == qids
    assert all(isinstance(v, str) for v in predictions.values())
    for qid, entries in nbest.items():
        assert 1 <= len(entries) <= 5
        assert entries[0]["text"] == predictions[qid]
        assert abs(sum(e["probability"] for e in entries) - 1.0) < 1e-6
    assert not (out / "null_odds.json").exists()
    metrics = json.loads((out / "eval_results.json").read_text())
    assert set(metrics) == {"exact_match", "f1"}
    assert 0.0 <= metrics["exact_match"] <= metrics["f1"] <= 100.0
    state = (out / "checkpoint").read_text()
    assert 'model_checkpoint_path: "model.ckpt-5"' in state
    assert (out / "model.ckpt-3.index").exists() and (out / "model.ckpt-5.index").exists()


@pytest.mark.long
def test_run_squad_v2_outputs_null_odds_and_threshold(tmp_path, tiny_model, shared_data):
    config, vocab = tiny_model
    dev = shared_data / "squad" / "dev-v2.0.reconstructed.json"
    data = _subset(dev, 12, one_answer=True, mix_impossible=True)
    flags = [qa.get("is_impossible") for p in data["data"][0]["paragraphs"] for qa in p["qas"]]
    assert any(flags) and not all(flags)
    data_file = tmp_path / "v2.json"
    data_file.write_text(json.dumps(data))
    out = tmp_path / "out"
    common = dict(bert_config_file=config, vocab_file=vocab, output_dir=str(out),
                  predict_file=str(data_file), do_predict=True, max_seq_length=64,
                  doc_stride=32, max_query_length=16, version_2_with_negative=True,
                  null_score_diff_threshold=0.5)
    result = squad.run_squad(squad.SquadRunOptions(
        **common, train_file=str(data_file), do_train=True, train_batch_size=4,
        num_train_epochs=4.0, learning_rate=3e-3))
    train = result["train"]
    assert train["global_step"] == 12  # int(12 questions / 4 * 4 epochs)
    assert train["loss"] < 0.7 * train["first_loss"], train  # it learns
    predictions = json.loads((out / "predictions.json").read_text())
    null_odds = json.loads((out / "null_odds.json").read_text())
    assert list(null_odds) == list(predictions)
    for qid, diff in null_odds.items():
        if diff > 0.5:
            assert predictions[qid] == ""
        else:
            assert predictions[qid] == result["predictions"].best_non_null[qid]
    metrics = json.loads((out / "eval_results.json").read_text())
    for key in ("exact", "f1", "total", "HasAns_exact", "NoAns_exact", "best_f1",
                "best_f1_thresh"):
        assert key in metrics
    assert metrics["total"] == 12
    assert metrics["best_f1"] >= metrics["f1"] - 1e-9

    # Predict only: the latest checkpoint in output_dir is used (as the original's Estimator),
    # giving the predictions of the model in memory after training.
    first = json.loads((out / "nbest_predictions.json").read_text())
    again = squad.run_squad(squad.SquadRunOptions(**common, predict_batch_size=3))
    assert again["eval"] == pytest.approx(metrics)
    reloaded = json.loads((out / "nbest_predictions.json").read_text())
    for qid, entries in first.items():
        assert [e["text"] for e in reloaded[qid]] == [e["text"] for e in entries]
        for a, b in zip(reloaded[qid], entries):
            assert a["start_logit"] == pytest.approx(b["start_logit"], abs=1e-4)


@pytest.mark.long
def test_bad_answer_names_the_question(tmp_path, tiny_model):
    config, vocab = tiny_model
    context = "The Huguenots arrived in 1685."
    bad = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "good-1", "question": "When?", "answers": [{"text": "1685", "answer_start": 25}]},
        {"id": "qid-bad-42", "question": "Who?",
         "answers": [{"text": "The Walloons", "answer_start": 0}]}]}]}]}
    train_file = tmp_path / "bad.json"
    train_file.write_text(json.dumps(bad))
    args = [f"--bert_config_file={config}", f"--vocab_file={vocab}",
            f"--output_dir={tmp_path / 'out'}", f"--train_file={train_file}", "--do_train",
            "--max_seq_length=64", "--max_query_length=16"]
    proc = _run(args + ["--bad_answers=raise"])
    assert proc.returncode != 0
    assert "qid-bad-42" in proc.stderr and "bad.json" in proc.stderr
    assert "does not match the context span" in proc.stderr
    assert "Traceback" not in proc.stderr
    # Default (as the original): skipped, named, counted; then a flag error stops the run early.
    proc = _run(args[:-1] + ["--max_query_length=61"])
    assert proc.returncode != 0
    assert "max_seq_length (64) must be greater than max_query_length (61)" in proc.stderr
    proc = _run(args + ["--train_batch_size=64"])
    assert "qid-bad-42" in proc.stderr and "skipped 1 of 2 training questions" in proc.stderr
    assert "gives 0 training steps" in proc.stderr
