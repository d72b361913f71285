"""tools/run_ner.py end to end with a tiny random BERT and a handmade vocab on handmade CoNLL data:
fine-tuning (the loss falls), evaluation files (conlleval input, results, report), prediction of
an untagged file, evaluation again from the written checkpoint; the feature-based tagger (BERT
weights in its checkpoint identical to --init_checkpoint, prediction from a fresh process); bad
input named by file and line."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from bert_tf.evaluation import conlleval
from bert_tf.tasks import ner
from tests.helpers import read_results, run_tool, write_tiny_model

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = PROJECT_ROOT / "tools" / "run_ner.py"

PEOPLE = [["John", "Smith"], ["Mary"], ["Anna", "Berg"], ["Peter"]]
PLACES = [["Paris"], ["New", "York"], ["Washington"], ["Bonn"]]
ORGS = [["Reuters"], ["European", "Commission"], ["Ajax"]]
VERBS = ["visited", "left", "praised", "met"]


def _sentences(n: int, seed: int) -> list[list[tuple[str, str]]]:
    """Handmade NER sentences: `<PER> <verb> <LOC|ORG> .` and `<ORG> said <PER> was in <LOC> .`"""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        per = PEOPLE[rng.integers(len(PEOPLE))]
        loc = PLACES[rng.integers(len(PLACES))]
        org = ORGS[rng.integers(len(ORGS))]
        words = [(w, "I-PER") for w in per]
        if i % 2:
            words = ([(w, "I-ORG") for w in org] + [("said", "O")] + words
                     + [("was", "O"), ("in", "O")] + [(w, "I-LOC") for w in loc])
        else:
            target = [(w, "I-LOC") for w in loc] if i % 4 else [(w, "I-ORG") for w in org]
            words = words + [(VERBS[rng.integers(len(VERBS))], "O")] + target
        out.append(words + [(".", "O")])
    return out


def _write_conll(path: pathlib.Path, sentences, columns: int = 4) -> None:
    lines = ["-DOCSTART- -X- -X- O", ""]
    for sentence in sentences:
        for word, tag in sentence:
            lines.append(f"{word} NNP I-NP {tag}" if columns == 4 else word)
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "said", "was", "in", *VERBS,
         "john", "smith", "mary", "anna", "berg", "peter", "paris", "new", "york", "wash",
         "##ington", "bo", "##nn", "reuters", "european", "commission", "ajax"]


def _tiny_model(tmp_path: pathlib.Path, layers: int = 2) -> tuple[str, str]:
    return write_tiny_model(tmp_path, VOCAB, num_hidden_layers=layers,
                            attention_probs_dropout_prob=0.1, hidden_dropout_prob=0.1)


def _run(args: list[str]):
    return run_tool(SCRIPT, args)


@pytest.fixture()
def data(tmp_path):
    folder = tmp_path / "conll"
    folder.mkdir()
    _write_conll(folder / "eng.train", _sentences(24, seed=0))
    _write_conll(folder / "eng.testa", _sentences(8, seed=1))
    _write_conll(folder / "eng.testb", _sentences(5, seed=2), columns=1)
    return folder


@pytest.mark.long
def test_run_ner_train_eval_predict_and_reload(tmp_path, data):
    config, vocab = _tiny_model(tmp_path)
    out = tmp_path / "out"
    common = [f"--bert_config_file={config}", f"--vocab_file={vocab}", f"--output_dir={out}",
              f"--data_dir={data}", "--max_seq_length=16", "--doc_stride=8"]
    proc = _run(common + ["--do_train", "--do_eval", "--do_predict", "--train_batch_size=4",
                          "--num_train_epochs=4", "--learning_rate=5e-3",
                          "--save_checkpoints_steps=10", "--eval_batch_size=3"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Num steps = 24" in proc.stderr  # int(24 sentences / 4 * 4 epochs)
    assert (out / "label_list.txt").read_text().split() == list(ner.CONLL2003_LABELS)
    state = (out / "checkpoint").read_text()
    assert 'model_checkpoint_path: "model.ckpt-24"' in state
    assert (out / "model.ckpt-10.index").exists() and (out / "model.ckpt-20.index").exists()
    train = read_results(out / "train_results.txt")
    assert train["loss"] < 0.5 * train["first_loss"], train

    # Evaluation: the conlleval input holds every word of eng.testa with its gold tag and a
    # prediction; the results and the report are conlleval's numbers for that file.
    gold = ner.read_conll_file(data / "eng.testa")
    rows = conlleval.read_conlleval_file(out / "eval_predictions.txt")
    assert [[g for g, _ in s] for s in rows] == [s.labels for s in gold]
    words = [line.split()[0] for line in (out / "eval_predictions.txt").read_text().splitlines()
             if line]
    assert words == [w for s in gold for w in s.words]
    result = conlleval.evaluate_sentences(rows)
    metrics = read_results(out / "eval_results.txt")
    assert set(metrics) == {"precision", "recall", "f1", "token_accuracy", "eval_loss",
                            "num_sentences", "global_step"}
    assert metrics["f1"] == pytest.approx(result.f1)
    assert metrics["precision"] == pytest.approx(result.precision)
    assert metrics["recall"] == pytest.approx(result.recall)
    assert metrics["global_step"] == 24 and metrics["num_sentences"] == 8
    assert metrics["token_accuracy"] > 60.0  # the tagger learnt more than "all O" on tokens
    assert (out / "eval_conlleval.txt").read_text() == conlleval.format_report(result)
    # Prediction of an untagged file: `token predicted`, one tag per word.
    test_words = [s.words for s in ner.read_conll_file(data / "eng.testb", require_labels=False)]
    lines = (out / "test_predictions.txt").read_text().split("\n\n")[:-1]
    assert [[row.split()[0] for row in block.splitlines()] for block in lines] == test_words
    assert all(row.split()[1] in ner.CONLL2003_LABELS for block in lines
               for row in block.splitlines())
    assert not (out / "test_results.txt").exists()

    # Evaluation only: the latest checkpoint in --output_dir gives the same predictions.
    first = (out / "eval_predictions.txt").read_text()
    (out / "eval_predictions.txt").unlink()
    again = ner.run_ner(ner.NerRunOptions(
        bert_config_file=config, vocab_file=vocab, output_dir=str(out),
        eval_file=str(data / "eng.testa"), do_eval=True, max_seq_length=16, doc_stride=8,
        eval_batch_size=5))
    assert (out / "eval_predictions.txt").read_text() == first
    assert again["eval"]["f1"] == pytest.approx(metrics["f1"])
    assert again["eval"]["global_step"] == 24


@pytest.mark.slow  # two script runs (train + evaluate in a fresh process)
def test_run_ner_feature_based_keeps_bert_frozen(tmp_path, data):
    import tensorflow as tf

    from bert_tf.checkpoints import save_original_checkpoint
    from bert_tf.modeling import BertConfig, BertEncoder

    config, vocab = _tiny_model(tmp_path, layers=4)
    encoder = BertEncoder(BertConfig.from_json_file(config)).build_from_config_shapes()
    init = save_original_checkpoint(encoder, tmp_path / "init" / "bert_model.ckpt")
    out = tmp_path / "out"
    common = [f"--bert_config_file={config}", f"--vocab_file={vocab}", f"--output_dir={out}",
              f"--data_dir={data}", "--max_seq_length=16", "--document_context",
              "--feature_based", "--feature_layers=concat_last_four", "--lstm_units=16",
              "--lstm_layers=2"]
    proc = _run(common + [f"--init_checkpoint={init}", "--do_train", "--do_eval",
                          "--train_batch_size=4", "--num_train_epochs=3",
                          "--learning_rate=1e-2"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    train = read_results(out / "train_results.txt")
    assert train["loss"] < 0.6 * train["first_loss"], train
    trained = tf.train.load_checkpoint(str(out / "model.ckpt-18"))
    original = tf.train.load_checkpoint(init)
    bert_names = [n for n in original.get_variable_to_shape_map() if n.startswith("bert/")]
    assert len(bert_names) == 16 * 4 + 7
    for name in bert_names:
        np.testing.assert_array_equal(trained.get_tensor(name), original.get_tensor(name),
                                      err_msg=name)
    assert "feature_based_tagger/bilstm_1/forward_lstm_1/lstm_cell/kernel" in \
        trained.get_variable_to_shape_map()
    first = (out / "eval_predictions.txt").read_text()
    # A fresh process rebuilds the tagger from the flags and reloads it from the checkpoint.
    (out / "eval_predictions.txt").unlink()
    proc = _run(common + ["--do_eval"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "eval_predictions.txt").read_text() == first


@pytest.mark.long
def test_bad_input_is_named(tmp_path, data):
    config, vocab = _tiny_model(tmp_path)
    common = [f"--bert_config_file={config}", f"--vocab_file={vocab}",
              f"--output_dir={tmp_path / 'out'}"]
    bad = tmp_path / "bad.train"
    bad.write_text("John NNP I-NP I-PER\nSmith NNP I-PER\n")
    proc = _run(common + [f"--train_file={bad}", "--do_train"])
    assert proc.returncode != 0
    assert f"{bad}:2: 3 columns, expected 4" in proc.stderr and "Traceback" not in proc.stderr
    bad.write_text("John NNP I-NP I-PER\n\nParis NNP I-NP I-CITY\n")
    proc = _run(common + [f"--data_dir={data}", f"--eval_file={bad}", "--do_train", "--do_eval"])
    assert proc.returncode != 0
    assert f"{bad}:3: unknown tag 'I-CITY'" in proc.stderr and "Traceback" not in proc.stderr
    proc = _run(common + [f"--data_dir={tmp_path / 'nowhere'}", "--do_eval"])
    assert proc.returncode != 0 and "eng.testa does not exist" in proc.stderr
