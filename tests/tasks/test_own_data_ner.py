"""NER on your own CoNLL-format files and tag set (bert_tf.tasks.ner, `--label_list`): the label
list from the training file (the nine CoNLL-2003 tags, a set of your own sorted, a typo among
CoNLL-2003 tags refused), `--label_list` (comma-separated, a file, `train`), two-column files,
one-line errors for an unseen dev/test tag and for another run's label_list.txt, nothing written
before the data is checked. End to end (`long`): tools/run_ner.py trains on two-column files
written from real CoNLL-2003 rows with the tags renamed (PERSON, PLACE, GROUP, OTHER; IOB2),
evaluates, predicts, and a later predict-only run reads label_list.txt back."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from bert_tf.tasks import ner
from tests.helpers import TINY_CONFIG

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = PROJECT_ROOT / "tools" / "run_ner.py"
RENAMED = {"PER": "PERSON", "LOC": "PLACE", "ORG": "GROUP", "MISC": "OTHER"}


def _write(path: pathlib.Path, sentences: list[list[tuple[str, str]]]) -> pathlib.Path:
    """Two-column CoNLL: `word tag`, blank line between sentences."""
    path.write_text("".join("".join(f"{w}\t{t}\n" for w, t in s) + "\n" for s in sentences),
                    encoding="utf-8")
    return path


DRUGS = [[("Take", "O"), ("aspirin", "B-DRUG"), ("daily", "B-FREQ")],
         [("Ibuprofen", "B-DRUG"), ("twice", "B-FREQ"), ("a", "I-FREQ"), ("day", "I-FREQ")],
         [("No", "O"), ("dose", "O")]]


# ---------------------------------------------------------------------------------------------
# Label lists (no TensorFlow)
# ---------------------------------------------------------------------------------------------
def test_own_tag_set_from_a_two_column_training_file(tmp_path):
    sentences = ner.read_conll_file(_write(tmp_path / "train.txt", DRUGS))
    assert sentences[1].words == ["Ibuprofen", "twice", "a", "day"]
    assert ner.training_label_list(sentences) == ["B-DRUG", "B-FREQ", "I-FREQ", "O"]
    # the order of the rows does not change the ids
    reordered = ner.read_conll_file(_write(tmp_path / "r.txt", DRUGS[::-1]))
    assert ner.training_label_list(reordered) == ["B-DRUG", "B-FREQ", "I-FREQ", "O"]
    # only CoNLL-2003 tags (any subset): the nine, in their order (the original layout)
    conll = [[("EU", "I-ORG"), ("rejects", "O")]]
    assert ner.training_label_list(
        ner.read_conll_file(_write(tmp_path / "c.txt", conll))) == list(ner.CONLL2003_LABELS)


def test_mixed_tags_are_a_typo_unless_label_list_says_train(tmp_path):
    mixed = ner.read_conll_file(_write(tmp_path / "m.txt", [[("EU", "B-ORG"), ("x", "O")],
                                                            [("rejects", "B-FOO")]]))
    with pytest.raises(ner.NerDataError) as error:
        ner.training_label_list(mixed)
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'm.txt'}:4: unknown tag 'B-FOO'")
    assert "--label_list=train" in message and "\n" not in message
    assert ner.training_label_list(mixed, "train") == ["B-FOO", "B-ORG", "O"]


def test_label_list_flag(tmp_path):
    sentences = ner.read_conll_file(_write(tmp_path / "train.txt", DRUGS))
    order = ner.parse_label_list("O, B-DRUG,B-FREQ,I-FREQ,I-DRUG")
    assert order == ["O", "B-DRUG", "B-FREQ", "I-FREQ", "I-DRUG"]
    assert ner.training_label_list(sentences, order) == order  # given order, unused tag kept
    with pytest.raises(ner.NerDataError, match=r"train\.txt:3: unknown tag 'B-FREQ'.*"
                                               r"\(--label_list; add it there\)"):
        ner.training_label_list(sentences, ["O", "B-DRUG", "I-DRUG"])
    listed = tmp_path / "tags.txt"
    listed.write_text("O\nB-DRUG\nB-FREQ\nI-FREQ\n")
    assert ner.parse_label_list(str(listed)) == ["O", "B-DRUG", "B-FREQ", "I-FREQ"]
    assert ner.parse_label_list("train") == "train" and ner.parse_label_list(None) is None
    for bad, why in [("O", "at least 2 tags"), ("O,,B-X", "empty tag"),
                     ("O,B-X,O", "given twice"), (str(tmp_path / "missing.txt"), "no such file")]:
        with pytest.raises(ner.NerDataError, match=why):
            ner.parse_label_list(bad)
    one = ner.read_conll_file(_write(tmp_path / "one.txt", [[("a", "X"), ("b", "X")]]))
    with pytest.raises(ner.NerDataError, match=r"one\.txt: 1 distinct tag\(s\) \['X'\]"):
        ner.training_label_list(one)


# ---------------------------------------------------------------------------------------------
# run_ner's checks before any work (TensorFlow is not needed for these errors)
# ---------------------------------------------------------------------------------------------
def _opts(tmp_path, **kw) -> ner.NerRunOptions:
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n")
    return ner.NerRunOptions(bert_config_file=str(config), vocab_file=str(vocab),
                             output_dir=str(tmp_path / "out"), **kw)


def test_unseen_dev_tag_and_another_runs_labels_are_one_line(tmp_path):
    train = _write(tmp_path / "train.txt", DRUGS)
    dev = _write(tmp_path / "dev.txt", [[("Tylenol", "B-DRUG"), ("now", "B-TIME")]])
    with pytest.raises(ner.NerDataError) as error:
        ner.run_ner(_opts(tmp_path, train_file=str(train), eval_file=str(dev), do_train=True,
                          do_eval=True))
    assert str(error.value) == (
        f"{dev}:2: unknown tag 'B-TIME'; the model's 4 labels (the training file's tags) are "
        "B-DRUG, B-FREQ, I-FREQ, O")
    assert not (tmp_path / "out").exists()  # nothing written
    # an output_dir holding another tag set: refused before training
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ner.LABEL_LIST_FILE).write_text("\n".join(ner.CONLL2003_LABELS) + "\n")
    with pytest.raises(ner.NerDataError, match=r"label_list\.txt holds the tags O, B-PER.*use "
                                               r"another --output_dir"):
        ner.run_ner(_opts(tmp_path, train_file=str(train), do_train=True))
    # predict-only: the saved tags are the model's; --label_list must agree
    with pytest.raises(ner.NerDataError, match=r"--label_list=O,B-DRUG differs from .*label_list"):
        ner.run_ner(_opts(tmp_path, predict_file=str(dev), do_predict=True,
                          label_list="O,B-DRUG"))
    with pytest.raises(ner.NerDataError, match="--label_list=train needs --do_train"):
        ner.run_ner(_opts(tmp_path, predict_file=str(dev), do_predict=True, label_list="train"))
    assert sorted(os.listdir(tmp_path / "out")) == [ner.LABEL_LIST_FILE]


# ---------------------------------------------------------------------------------------------
# tools/run_ner.py end to end on real CoNLL-2003 rows with a tag set of our own
# ---------------------------------------------------------------------------------------------
def _renamed_conll(shared_data: pathlib.Path, n: int) -> list[list[tuple[str, str]]]:
    """The first n sentences of CoNLL-2003's eng.train, tags renamed and made IOB2."""
    path = shared_data / "conll2003" / "eng.train"
    if not path.exists():
        pytest.skip(f"{path} (real CoNLL-2003 rows) is absent")
    out = []
    for s in ner.read_conll_file(str(path))[:n]:
        tags, previous = [], "O"
        for tag in s.labels:
            if tag == "O":
                tags.append("O")
            else:
                kind = RENAMED[tag[2:]]
                begin = tag.startswith("B-") or previous[2:] != tag[2:]
                tags.append(("B-" if begin else "I-") + kind)
            previous = tag
        out.append(list(zip(s.words, tags)))
    return out


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, cwd=PROJECT_ROOT, timeout=600)


@pytest.mark.long
def test_tool_trains_and_predicts_an_own_tag_set_on_real_conll_rows(tmp_path, shared_data,
                                                                    original_fixtures):
    sentences = _renamed_conll(shared_data, 72)
    train = _write(tmp_path / "train.txt", sentences[:48])
    dev = _write(tmp_path / "dev.txt", sentences[48:64])
    test = tmp_path / "test.txt"  # words only
    test.write_text("".join("".join(f"{w}\n" for w, _ in s) + "\n" for s in sentences[64:]))
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    out = tmp_path / "out"
    common = [f"--bert_config_file={config}",
              f"--vocab_file={original_fixtures / 'vocab_uncased.txt'}", f"--output_dir={out}",
              "--max_seq_length=48", "--plot_curves=false"]
    proc = _run(*common, f"--train_file={train}", f"--eval_file={dev}",
                f"--predict_file={test}", "--do_train", "--do_eval", "--do_predict",
                "--train_batch_size=16", "--num_train_epochs=1", "--learning_rate=1e-3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    train_tags = {t for s in sentences[:48] for _, t in s}
    labels = (out / ner.LABEL_LIST_FILE).read_text().split()
    assert labels == sorted(train_tags) and "B-PERSON" in labels and "I-PER" not in labels
    results = dict(line.split(" = ") for line in
                   (out / "eval_results.txt").read_text().splitlines())
    assert {"precision", "recall", "f1", "eval_loss", "global_step"} <= set(results)
    assert int(results["global_step"]) == 3
    assert int(results["num_sentences"]) == 16
    predicted = [line.split() for line in
                 (out / "test_predictions.txt").read_text().splitlines() if line.strip()]
    assert [p[0] for p in predicted] == [w for s in sentences[64:] for w, _ in s]
    assert {p[-1] for p in predicted} <= set(labels)
    assert not (out / "test_results.txt").exists()  # no gold tags: not scored

    # a later predict-only run reads the tags back from label_list.txt
    first = (out / "test_predictions.txt").read_text()
    (out / "test_predictions.txt").unlink()
    proc = _run(*common, f"--predict_file={test}", "--do_predict")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "test_predictions.txt").read_text() == first
