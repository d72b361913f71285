"""run_classifier pieces without training: the losses against NumPy, eval_results.txt format,
test_results.tsv and GLUE submission files (MNLI-m/-mm, STS-B, AX from the real diagnostic file)."""
from __future__ import annotations

import numpy as np
import pytest

from bert_tf.tasks import classifier, glue


def test_losses_match_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 3)).astype(np.float32)
    labels = np.array([0, 2, 1, 1, 0, 2])
    expected = -np.log(np.exp(logits) / np.exp(logits).sum(-1, keepdims=True))[np.arange(6),
                                                                                labels].mean()
    assert float(classifier.classification_loss(logits, labels)) == pytest.approx(expected,
                                                                                  rel=1e-5)
    assert classifier.per_example_losses(logits, labels, False).mean() == pytest.approx(
        expected, rel=1e-6)
    scores = rng.normal(size=(6, 1)).astype(np.float32)
    gold = rng.uniform(0, 5, size=6).astype(np.float32)
    mse = np.mean((scores[:, 0] - gold) ** 2)
    assert float(classifier.regression_loss(scores, gold)) == pytest.approx(mse, rel=1e-5)
    assert classifier.per_example_losses(scores, gold, True).mean() == pytest.approx(mse,
                                                                                     rel=1e-5)


def test_eval_results_format():
    text = classifier.format_eval_results({"global_step": 343, "acc": 0.84, "eval_loss": 0.4})
    assert text == "acc = 0.84\neval_loss = 0.4\nglobal_step = 343\n"
    assert classifier.primary_score({"metric_key": "f1", "eval": {"dev": {"f1": 0.9}}}) == 0.9
    assert classifier.primary_score({"metric_key": "f1", "eval": None}) is None


def _split(name, n, leaderboard):
    return glue.EvalSplit(name, [glue.InputExample(f"test-{i}", "a", "b", None, str(100 + i))
                                 for i in range(n)], leaderboard)


def test_test_outputs_mnli_and_stsb(tmp_path):
    mnli = glue.get_processor("mnli")
    logits = np.array([[3.0, 0.0, 0.0], [0.0, 0.0, 2.0]])
    paths = classifier.write_test_outputs(str(tmp_path), mnli, _split("test_matched", 2,
                                                                      "MNLI-m"), logits, "MNLI-m")
    probs = np.loadtxt(paths["test_results"], delimiter="\t")
    assert paths["test_results"].endswith("/test_results.tsv") and probs.shape == (2, 3)
    np.testing.assert_allclose(probs.sum(1), 1.0)
    assert (tmp_path / "MNLI-m.tsv").read_text() == ("index\tprediction\n100\tcontradiction\n"
                                                     "101\tneutral\n")
    paths = classifier.write_test_outputs(str(tmp_path), mnli, _split("test_mismatched", 1,
                                                                      "MNLI-mm"),
                                          logits[1:], "MNLI-mm")
    assert paths["test_results"].endswith("/test_results_mismatched.tsv")
    assert (tmp_path / "MNLI-mm.tsv").read_text() == "index\tprediction\n100\tneutral\n"
    sts = glue.get_processor("sts-b")
    classifier.write_test_outputs(str(tmp_path), sts, _split("test", 2, "STS-B"),
                                  np.array([[4.5], [0.25]]), "STS-B")
    assert (tmp_path / "STS-B.tsv").read_text() == ("index\tprediction\n100\t4.500000\n"
                                                    "101\t0.250000\n")
    assert (tmp_path / "test_results.tsv").read_text() == "4.5\n0.25\n"


def test_test_results_print_float32_as_the_original(tmp_path):
    """The original writes `str()` of each float32 probability (its estimator's softmax):
    0.38892138, not the float64 0.38892136581181347; STS-B scores likewise."""
    mrpc = glue.get_processor("mrpc")
    logits = np.array([[0.0, np.log(0.6110786341881865 / 0.38892136581181347)]])
    classifier.write_test_outputs(str(tmp_path), mrpc, _split("test", 1, None), logits, None)
    assert (tmp_path / "test_results.tsv").read_text() == "0.38892138\t0.6110786\n"
    sts = glue.get_processor("sts-b")
    classifier.write_test_outputs(str(tmp_path), sts, _split("test", 1, None),
                                  np.array([[3.1]], np.float32), None)
    assert (tmp_path / "test_results.tsv").read_text() == "3.1\n"  # not 3.0999999046325684


def test_diagnostic_file_found_and_read(tmp_path, shared_data):
    glue_dir = shared_data / "glue"
    if not (glue_dir / "diagnostic" / "diagnostic.tsv").exists():
        pytest.skip("GLUE diagnostic file absent")
    mnli_dir = tmp_path / "MNLI"
    mnli_dir.mkdir()
    assert classifier.find_diagnostic_file(str(mnli_dir), None) is None
    path = classifier.find_diagnostic_file(str(glue_dir / "RTE"), None)  # ../diagnostic/
    assert path == str(glue_dir / "diagnostic" / "diagnostic.tsv")
    split = classifier.read_diagnostic(path)
    assert (split.name, split.leaderboard_name, len(split.examples)) == ("diagnostic", "AX", 1104)
    assert split.examples[0].text_a == "The cat sat on the mat." and split.examples[0].index == "0"
    with pytest.raises(ValueError, match="--diagnostic_file=nope.tsv does not exist"):
        classifier.find_diagnostic_file(str(mnli_dir), "nope.tsv")
