"""Fine-tuning under `--mixed_precision=mixed_bfloat16`: every fine-tuning model computes in
bfloat16 and returns float32 logits, the run restores Keras' global policy, the checkpoints stay
float32 under the original names, a trained run predicts like its checkpoint loaded in float32,
and mixed_float16 (no loss scaling in the fine-tuning step) is refused in one line."""
from __future__ import annotations

import json
import pathlib
import random
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.modeling import (BertClassifier, BertConfig, BertMultipleChoice, BertSpanLabeler,
                              BertTokenClassifier)
from bert_tf.training.precision import (FINETUNING_PRECISION_POLICIES, precision_policy,
                                        runs_under_precision_policy)

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]

# A real configuration's dropout (0.1), at a size that trains in seconds.
CONFIG = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
          "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 64,
          "max_position_embeddings": 64, "num_attention_heads": 2, "num_hidden_layers": 2,
          "type_vocab_size": 2, "vocab_size": 30522}
POSITIVE = "good great fine nice happy".split()
NEGATIVE = "bad awful poor sad ugly".split()
FILLER = "the film was a story of people and it".split()


@pytest.fixture(autouse=True)
def _float32_after():
    yield
    keras.mixed_precision.set_global_policy("float32")


def _inputs(batch=2, seq=8, lead=()):
    ids = tf.fill([*lead, batch, seq], 7)
    return {"input_word_ids": ids, "input_mask": tf.ones_like(ids),
            "input_type_ids": tf.zeros_like(ids)}


@pytest.mark.parametrize("build", [
    lambda c: BertClassifier(c, num_labels=3),
    lambda c: BertSpanLabeler(c),
    lambda c: BertTokenClassifier(c, num_labels=5),
    lambda c: BertMultipleChoice(c, num_choices=2),
], ids=["classifier", "span_labeler", "token_classifier", "multiple_choice"])
def test_models_compute_in_bfloat16_and_return_float32_logits(build):
    config = BertConfig.from_dict(CONFIG)
    with precision_policy("mixed_bfloat16"):
        model = build(config)
        inputs = _inputs()
        if isinstance(model, BertMultipleChoice):
            inputs = {k: tf.stack([v, v], axis=1) for k, v in inputs.items()}
            encoder_out = model.encoder({k: tf.reshape(v, [-1, 8]) for k, v in inputs.items()})
        else:
            encoder_out = model.encoder(inputs)
        outputs = model(inputs, training=True)
    assert keras.mixed_precision.global_policy().name == "float32"  # restored
    assert encoder_out["sequence_output"].dtype == tf.bfloat16
    assert {v.dtype for v in model.trainable_variables} == {"float32"}
    assert outputs and all(v.dtype == tf.float32 for v in outputs.values())


def test_gpt_classifier_returns_float32_logits():
    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.task_model import GptClassifier

    config = GptConfig(n_vocab=50, n_special=3, n_ctx=16, n_embd=32, n_head=2, n_layer=2)
    with precision_policy("mixed_bfloat16"):
        model = GptClassifier(config, task="classification", num_classes=2)
        out = model({"token_ids": tf.constant([[1, 2, 3, 52, 0, 0]])}, training=True)
    assert out["hidden_states"].dtype == tf.bfloat16
    assert out["logits"].dtype == tf.float32


def test_run_function_restores_the_policy_and_refuses_float16():
    seen = []

    @runs_under_precision_policy(FINETUNING_PRECISION_POLICIES)
    def run(opts):
        seen.append(keras.mixed_precision.global_policy().name)
        raise RuntimeError("inside")

    class Opts:
        mixed_precision = "mixed_bfloat16"

    with pytest.raises(RuntimeError):
        run(Opts())
    assert seen == ["mixed_bfloat16"]
    assert keras.mixed_precision.global_policy().name == "float32"
    Opts.mixed_precision = "mixed_float16"
    with pytest.raises(UserInputError, match=r"--mixed_precision='mixed_float16'.*loss scaling"):
        run(Opts())
    assert seen == ["mixed_bfloat16"]


def _write_sst2(data_dir, n_train=64, n_dev=16, n_test=8):
    rng = random.Random(0)
    data_dir.mkdir(parents=True)

    def sentence(positive):
        words = rng.sample(FILLER, 4) + [rng.choice(POSITIVE if positive else NEGATIVE)]
        rng.shuffle(words)
        return " ".join(words)

    for split, n in (("train", n_train), ("dev", n_dev)):
        (data_dir / f"{split}.tsv").write_text("sentence\tlabel\n" + "".join(
            f"{sentence(i % 2 == 1)}\t{i % 2}\n" for i in range(n)), encoding="utf-8")
    (data_dir / "test.tsv").write_text("index\tsentence\n" + "".join(
        f"{i}\t{sentence(i % 2 == 1)}\n" for i in range(n_test)), encoding="utf-8")


@pytest.mark.long
def test_run_classifier_in_mixed_bfloat16(tmp_path, original_fixtures):
    from bert_tf.tasks.classifier import ClassifierRunOptions, run_classifier

    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(CONFIG))
    data_dir, out = tmp_path / "sst2", tmp_path / "out"
    _write_sst2(data_dir)
    common = dict(task_name="SST-2", data_dir=str(data_dir), bert_config_file=str(config),
                  vocab_file=str(original_fixtures / "vocab_uncased.txt"), output_dir=str(out),
                  max_seq_length=16, eval_batch_size=5, predict_batch_size=4, plot_curves=False)
    result = run_classifier(ClassifierRunOptions(
        **common, do_train=True, do_eval=True, do_predict=True, train_batch_size=16,
        num_train_epochs=24, learning_rate=1e-3, save_checkpoints_steps=1000,
        mixed_precision="mixed_bfloat16"))
    assert keras.mixed_precision.global_policy().name == "float32"
    losses = [r["loss"] for r in result["train"]["history"]]
    assert np.isfinite(losses).all() and losses[-1] < 0.5 * losses[0]
    bf16_eval = result["eval"]["dev"]
    assert bf16_eval["acc"] >= 0.75
    bf16_probs = np.loadtxt(out / "test_results.tsv", delimiter="\t")
    np.testing.assert_allclose(bf16_probs.sum(axis=1), 1.0, rtol=1e-6)  # float32 softmax

    # The checkpoint is float32 under the original names: float32 evaluation of it agrees with
    # the bfloat16 run up to bfloat16's rounding.
    reader = tf.train.load_checkpoint(str(out / "model.ckpt-96"))
    dtypes = reader.get_variable_to_dtype_map()
    assert dtypes["bert/embeddings/word_embeddings"] == tf.float32
    assert dtypes["output_weights"] == tf.float32
    (out / "test_results.tsv").unlink()
    again = run_classifier(ClassifierRunOptions(**common, do_eval=True, do_predict=True))
    fp32_probs = np.loadtxt(out / "test_results.tsv", delimiter="\t")
    np.testing.assert_allclose(fp32_probs, bf16_probs, atol=0.05)
    # ... and differs from it by more than float32 re-evaluation does (1e-6, see
    # tests/tools/test_run_classifier.py): the trained run predicted in bfloat16.
    assert np.abs(fp32_probs - bf16_probs).max() > 5e-6
    assert again["eval"]["dev"]["acc"] == pytest.approx(bf16_eval["acc"], abs=1 / 16)
    assert again["eval"]["dev"]["eval_loss"] == pytest.approx(bf16_eval["eval_loss"], abs=0.05)


def test_cli_refuses_mixed_float16_in_one_line(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "tools" / "run_classifier.py"), "--task_name=SST-2",
         f"--data_dir={tmp_path}", f"--vocab_file={tmp_path / 'vocab.txt'}",
         f"--bert_config_file={tmp_path / 'bert_config.json'}", f"--output_dir={out}",
         "--do_train", "--mixed_precision=mixed_float16"],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=300)
    assert proc.returncode != 0
    error_lines = [l for l in proc.stderr.splitlines() if "--mixed_precision" in l]
    assert len(error_lines) == 1 and "loss scaling" in error_lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not out.exists()
