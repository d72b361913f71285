"""GPT-1 on STS-B (a regression: similarity transformation, one output unit, squared error) on
real GLUE STS-B rows, and the learning rate the fine-tuning loop reports (OpenAIAdam's scheduled
one, not its peak). A tiny GPT (dropout 0.1) with a WordPiece vocabulary built from the rows.
Skips when ../shared/data is absent."""
from __future__ import annotations

import math
import os
import pathlib

import numpy as np
import pytest

from bert_tf.errors import UserInputError

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
STSB = pathlib.Path(os.environ.get("BERT_TF_DATA",
                                  PROJECT_ROOT.parent / "shared" / "data")) / "glue" / "STS-B"
N_CTX = 64


def _head(path: pathlib.Path, n: int) -> str:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(lines[:1 + n])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """STS-B/ with 48 train, 24 dev and 8 test rows of the real files, a vocab, a tiny config."""
    if not all((STSB / f).exists() for f in ("train.tsv", "dev.tsv", "test.tsv")):
        pytest.skip(f"needs the GLUE STS-B files under {STSB} (../shared/data)")
    from bert_tf.gpt.config import GptConfig
    from bert_tf.tokenization import BasicTokenizer
    root = tmp_path_factory.mktemp("gpt_stsb")
    (root / "STS-B").mkdir()
    for name, n in (("train.tsv", 48), ("dev.tsv", 24), ("test.tsv", 8)):
        (root / "STS-B" / name).write_text(_head(STSB / name, n), encoding="utf-8")
    basic = BasicTokenizer(do_lower_case=True)
    words = set()
    for path in (root / "STS-B").glob("*.tsv"):
        for line in path.read_text(encoding="utf-8").splitlines()[1:]:
            words |= set(basic.tokenize(" ".join(line.split("\t")[7:9])))
    tokens = sorted(words)
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + tokens)
                                    + "\n", encoding="utf-8")
    GptConfig(n_vocab=4 + len(tokens), n_special=3, n_ctx=N_CTX, n_embd=32, n_head=2,
              n_layer=2).to_json_file(root / "gpt_config.json")
    return root


def _opts(data, output_dir, **overrides):
    from bert_tf.tasks.gpt_classifier import GptClassifierRunOptions
    kwargs = dict(task_name="sts-b", data_dir=str(data / "STS-B"),
                  gpt_config_file=str(data / "gpt_config.json"), output_dir=str(output_dir),
                  vocab_file=str(data / "vocab.txt"), max_seq_length=N_CTX, do_train=True,
                  do_eval=True, do_predict=True, train_batch_size=8, eval_batch_size=8,
                  predict_batch_size=8, learning_rate=1e-3, num_train_epochs=2.0,
                  warmup_proportion=0.25, lr_schedule="warmup_linear",
                  save_checkpoints_steps=1000, seed=5)
    kwargs.update(overrides)
    return GptClassifierRunOptions(**kwargs)


@pytest.mark.long
def test_stsb_regression_trains_evaluates_predicts_and_logs_the_scheduled_lr(data, tmp_path):
    from bert_tf.evaluation.glue_metrics import glue_metrics
    from bert_tf.tasks.gpt_classifier import run_gpt_classifier
    out = tmp_path / "stsb"
    result = run_gpt_classifier(_opts(data, out))
    assert result["kind"] == "similarity"
    history = result["train"]["history"]
    steps = result["train"]["global_step"]
    assert steps == 12 and len(history) == 12  # 48 rows / 8 * 2 epochs
    assert all(math.isfinite(h["loss"]) for h in history)
    # The loss (squared error of the score + 0.5 LM loss) falls.
    assert np.mean([h["loss"] for h in history[-4:]]) < np.mean([h["loss"] for h in history[:4]])
    # The lr shown (progress bar, log, TensorBoard, history) is lr·warmup_linear(t / t_total) of
    # each update (t = updates before it), not the peak 1e-3.
    for k, h in enumerate(history):
        x = k / steps
        s = float(x <= 0.25)
        expected = 1e-3 * (s * (x / 0.25) + (1 - s)) * (1 - x)
        assert h["learning_rate"] == pytest.approx(expected, rel=1e-5, abs=1e-12), k
    assert history[0]["learning_rate"] == 0.0
    metrics = dict(line.split(" = ") for line in
                   (out / "eval_results.txt").read_text().strip().splitlines())
    assert set(glue_metrics("sts-b", [0.0, 1.0, 2.0], [0.0, 1.0, 3.0])) <= set(metrics)
    assert {"pearson", "spearmanr", "corr", "eval_loss", "global_step"} <= set(metrics)
    assert all(math.isfinite(float(metrics[k])) for k in ("pearson", "spearmanr", "eval_loss"))
    assert -1.0 <= float(metrics["pearson"]) <= 1.0
    # eval_loss is the mean squared error of the dev scores: recompute it from the model.
    from bert_tf.tasks.gpt_classifier import _load_splits, build_text_encoder, transform_rows
    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.input_transforms import SpecialTokens
    opts = _opts(data, out)
    config = GptConfig.from_json_file(opts.gpt_config_file)
    splits, labels = _load_splits("sts-b", opts)
    assert labels is None and splits["dev"][0].labels.dtype == np.float32
    dev = transform_rows(splits["dev"][0], "similarity", build_text_encoder(opts, config), N_CTX,
                         SpecialTokens.for_config(config))
    assert dev["token_ids"].shape == (24, 2, N_CTX)  # both orders
    gold = [float(line.split("\t")[-1]) for line in
            (data / "STS-B" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    np.testing.assert_allclose(dev["label_ids"], gold, rtol=0, atol=1e-6)
    predictions = (out / "test_results.tsv").read_text().splitlines()
    assert len(predictions) == 8
    scores = [float(p) for p in predictions]  # one score per line, as run_classifier's STS-B
    assert len(set(scores)) > 1


def test_regression_head_loss_is_the_squared_error():
    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.task_model import GptClassifier
    config = GptConfig(n_vocab=20, n_special=3, n_ctx=8, n_embd=16, n_head=2, n_layer=1)
    model = GptClassifier(config, "similarity", regression=True, lm_coef=0.0)
    assert model.num_classes == 1 and model.get_config()["regression"] is True
    ids = np.random.default_rng(0).integers(0, 20, size=(3, 2, 8)).astype(np.int32)
    ids[..., 5] = 22  # the extract token
    out = model({"token_ids": ids}, training=False)
    assert out["logits"].shape == (3, 1)
    labels = np.array([0.5, 2.0, 4.8], np.float32)
    losses = model.compute_losses(out, ids, np.ones_like(ids, np.float32), labels)
    expected = np.square(out["logits"].numpy()[:, 0] - labels)
    np.testing.assert_allclose(losses["clf_losses"].numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(float(losses["train_loss"]), expected.mean(), rtol=1e-6)
    # The two orders are summed before the head: swapping them gives the same score.
    swapped = model({"token_ids": ids[:, ::-1]}, training=False)["logits"].numpy()
    np.testing.assert_allclose(swapped, out["logits"].numpy(), rtol=1e-5, atol=1e-6)
    clone = GptClassifier.from_config(model.get_config())
    assert clone.regression and clone.num_classes == 1
    with pytest.raises(UserInputError, match="multiple_choice"):
        GptClassifier(config, "multiple_choice", regression=True)
    with pytest.raises(UserInputError, match="one output"):
        GptClassifier(config, "similarity", num_classes=3, regression=True)
