"""GPT-1 LM pretraining through the BERT pretraining loop, on real text (the pydoc corpus of
bert_tf.corpora, written to windows by the real lm_data tool with a WordPiece vocabulary), a tiny
GPT with dropout 0.1 as users run it."""
from __future__ import annotations

import json
import math
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import UserInputError

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
N_CTX = 32


def _words(corpus: pathlib.Path) -> list[str]:
    text = corpus.read_text(encoding="utf-8").lower()
    return sorted({w for w in "".join(c if c.isalpha() else " " for c in text).split()})


@pytest.fixture(scope="module")
def lm_data(tmp_path_factory):
    """(train glob, held-out glob, config path) of windows of the pydoc corpus."""
    from bert_tf.corpora import write_pydoc_corpus
    from bert_tf.gpt.config import GptConfig
    from bert_tf.pretraining_data.gpt_lm import EncoderSpec, LmDataOptions, create_gpt_lm_data
    root = tmp_path_factory.mktemp("gpt_lm")
    corpus = root / "pydoc.txt"
    write_pydoc_corpus(str(corpus))
    vocab = root / "vocab.txt"
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(".,:;()'\"-_=*/[]<>0123456789")
    vocab.write_text("\n".join(tokens + _words(corpus)) + "\n", encoding="utf-8")
    n_vocab = len(vocab.read_text(encoding="utf-8").splitlines())
    create_gpt_lm_data(str(corpus), str(root / "data" / "lm"), EncoderSpec(vocab_file=str(vocab)),
                       LmDataOptions(n_ctx=N_CTX, held_out_fraction=0.1, docs_per_shard=1000),
                       num_workers=1)
    config = GptConfig(n_vocab=n_vocab, n_special=3, n_ctx=N_CTX, n_embd=32, n_head=2,
                       n_layer=2, embd_pdrop=0.1, attn_pdrop=0.1, resid_pdrop=0.1,
                       clf_pdrop=0.1)
    config_path = root / "gpt_config.json"
    config.to_json_file(config_path)
    train = str(root / "data" / "lm-*.tfrecord")
    heldout = str(root / "data" / "lm_heldout-*.tfrecord")
    assert tf.io.gfile.glob(train) and tf.io.gfile.glob(heldout)
    return train, heldout, str(config_path)


def _run(lm_data, output_dir, **overrides):
    from bert_tf.runs.gpt_pretraining import GptPretrainingRun
    train, heldout, config = lm_data
    kwargs = dict(gpt_config_file=config, input_file=train, eval_input_file=heldout,
                  output_dir=str(output_dir), do_train=True, do_eval=False, train_batch_size=8,
                  eval_batch_size=8, learning_rate=2e-3, num_train_steps=8, num_warmup_steps=1,
                  lr_schedule="warmup_linear", save_checkpoints_steps=4, iterations_per_loop=2,
                  max_eval_steps=1000, seed=7)
    kwargs.update(overrides)
    return GptPretrainingRun(**kwargs)


def _checkpoint_tensors(prefix: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(prefix)
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if k != "_CHECKPOINTABLE_OBJECT_GRAPH"}


@pytest.mark.long
def test_trains_loss_falls_and_writes_every_output(lm_data, tmp_path):
    from bert_tf.runs.gpt_pretraining import run_gpt_pretraining
    from bert_tf.checkpoints.openai import read_original_param_files
    out = tmp_path / "run"
    result = run_gpt_pretraining(_run(lm_data, out, num_train_steps=30,
                                      save_checkpoints_steps=30, iterations_per_loop=10,
                                      do_eval=True, export_dir=str(tmp_path / "export")))
    losses = [r["loss"] for r in result["train"]]
    assert len(losses) == 30 and all(math.isfinite(x) for x in losses)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5, losses
    assert result["train"][0]["learning_rate"] == 0.0  # the original's first update at lr 0
    assert (out / "curves.png").stat().st_size > 0
    assert tf.io.gfile.glob(str(out / "train" / "events.out.tfevents.*"))
    assert tf.train.latest_checkpoint(str(out / "training_checkpoints")).endswith("ckpt-30")
    arrays = read_original_param_files(out / "original_params")
    assert arrays[0].shape == (N_CTX, 32)  # positions first, as the original layout
    # eval_results.txt: held-out perplexity = exp(token-weighted mean LM loss).
    lines = dict(line.split(" = ") for line in
                 (out / "eval_results.txt").read_text().strip().splitlines())
    assert {"global_step", "loss", "lm_loss", "perplexity", "lm_accuracy",
            "eval_tokens"} <= set(lines)
    assert int(lines["global_step"]) == 30
    assert math.isclose(float(lines["perplexity"]), math.exp(float(lines["lm_loss"])),
                        rel_tol=1e-9)
    # The SavedModel's LM loss on the held-out windows, computed here, gives the same perplexity.
    from bert_tf.pretraining_data.gpt_lm import lm_dataset
    served = tf.saved_model.load(str(tmp_path / "export")).signatures["serving_default"]
    nll, count = 0.0, 0
    for batch in lm_dataset(lm_data[1], N_CTX, batch_size=8, is_training=False):
        ids = batch["input_ids"]
        logits = served(token_ids=ids)["lm_logits"]
        nll += float(tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=ids[:, 1:], logits=logits)))
        count += int(tf.size(ids[:, 1:]))
    assert count == int(lines["eval_tokens"])
    np.testing.assert_allclose(float(lines["perplexity"]), math.exp(nll / count), rtol=1e-4)


@pytest.mark.long
def test_resume_is_bit_identical_with_dropout(lm_data, tmp_path):
    """A run stopped after its step-4 checkpoint and restarted (new trainer, same output_dir)
    ends with the uninterrupted run's checkpoint: weights, Adam slots, step, dropout streams."""
    from bert_tf.runs.gpt_pretraining import run_gpt_pretraining
    full = run_gpt_pretraining(_run(lm_data, tmp_path / "full"))
    # Interrupted: a first process that stops at step 4 (num_train_steps is the same, so the
    # schedule is), then a fresh trainer resumes from output_dir.
    from bert_tf.gpt.config import GptConfig
    from bert_tf.runs.gpt_pretraining import GptPretrainingTrainer, lm_input_fn
    import keras
    run = _run(lm_data, tmp_path / "resumed")
    keras.utils.set_random_seed(run.seed)
    first = GptPretrainingTrainer(GptConfig.from_json_file(run.gpt_config_file), run)
    first.train(lm_input_fn(run.input_file, N_CTX, 8, True, run.seed), stop_after_step=4)
    keras.utils.set_random_seed(999)  # a restart does not depend on fresh initial values
    second = run_gpt_pretraining(run)
    assert [r["step"] for r in second["train"]] == [5, 6, 7, 8]
    assert [r["loss"] for r in second["train"]] == [r["loss"] for r in full["train"][4:]]
    a = _checkpoint_tensors(str(tmp_path / "full" / "training_checkpoints" / "ckpt-8"))
    b = _checkpoint_tensors(str(tmp_path / "resumed" / "training_checkpoints" / "ckpt-8"))
    assert a.keys() == b.keys()
    assert any("random_state" in k for k in a), sorted(a)[:5]
    assert any("optimizer" in k for k in a)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.long
def test_init_from_original_params_and_bad_inputs(lm_data, tmp_path):
    """--init_checkpoint takes the original params folder the run wrote; nonsense is one line."""
    from bert_tf.runs.gpt_pretraining import run_gpt_pretraining
    first = tmp_path / "first"
    run_gpt_pretraining(_run(lm_data, first, num_train_steps=2, save_checkpoints_steps=2))
    result = run_gpt_pretraining(_run(lm_data, tmp_path / "eval_only", do_train=False,
                                      do_eval=True,
                                      init_checkpoint=str(first / "original_params")))
    assert math.isfinite(result["eval"]["perplexity"])
    # Both kinds of init_checkpoint give the trained weights; the params folder holds no special
    # rows (train.py draws them afresh), everything else is equal.
    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.model import GptModel
    from bert_tf.runs.gpt_pretraining import load_gpt_weights
    config = GptConfig.from_json_file(lm_data[2])
    from_params, from_ckpt = (GptModel(config, classifier=False) for _ in range(2))
    assert load_gpt_weights(from_params, str(first / "original_params")) == "original"
    assert load_gpt_weights(from_ckpt, str(first / "training_checkpoints")) == "checkpoint"
    specials = slice(config.n_vocab, config.n_vocab + config.n_special)
    for (name, a), (_, b) in zip(from_params.original_variables(), from_ckpt.original_variables()):
        a, b = a.numpy(), b.numpy()
        if name == "model/we":
            a[specials] = b[specials] = 0
        np.testing.assert_array_equal(a, b, err_msg=name)
    with pytest.raises(UserInputError, match=r"--init_checkpoint=.*neither"):
        run_gpt_pretraining(_run(lm_data, tmp_path / "bad", init_checkpoint=str(tmp_path)))
    with pytest.raises(UserInputError, match="--lr_schedule"):
        run_gpt_pretraining(_run(lm_data, tmp_path / "bad2", lr_schedule="warmup_exp"))
    bad_ctx = json.loads(pathlib.Path(lm_data[2]).read_text())
    bad_ctx["n_ctx"] = N_CTX * 2
    (tmp_path / "c.json").write_text(json.dumps(bad_ctx))
    with pytest.raises(UserInputError, match="n_ctx"):
        run_gpt_pretraining(_run(lm_data, tmp_path / "bad3", gpt_config_file=str(tmp_path /
                                                                                  "c.json")))


@pytest.mark.drills
def test_tool_killed_and_restarted_ends_like_the_uninterrupted_run(lm_data, tmp_path):
    """The real tools/run_gpt_pretraining.py, SIGKILLed after its first checkpoint and restarted,
    ends with the uninterrupted run's final checkpoint bit for bit."""
    train, heldout, config = lm_data

    def command(out):
        return [sys.executable, "tools/run_gpt_pretraining.py", f"--gpt_config_file={config}",
                f"--input_file={train}", f"--eval_input_file={heldout}", f"--output_dir={out}",
                "--do_train", "--do_eval", "--train_batch_size=8", "--num_train_steps=30",
                "--num_warmup_steps=1", "--save_checkpoints_steps=3", "--iterations_per_loop=1",
                "--learning_rate=2e-3", "--lr_schedule=warmup_linear", "--seed=7"]

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    subprocess.run(command(tmp_path / "full"), cwd=PROJECT_ROOT, env=env, check=True,
                   capture_output=True, timeout=600)
    killed = tmp_path / "killed"
    # Killed once ckpt-3 is recorded in the `checkpoint` state file, which CheckpointManager
    # writes after the ckpt-3 files: a kill between the two leaves no checkpoint to resume from,
    # and the restart then rightly starts over. This model's steps take ~15 ms, so the state file
    # is polled every 10 ms and the run goes on to step 30 (~0.5 s after ckpt-3). On a loaded
    # host the poll can come after the run's last checkpoint (or its end): that run had nothing
    # left to resume, so it is started over, up to 3 runs (the drill is about the kill, not
    # about the host's speed).
    state = killed / "training_checkpoints" / "checkpoint"
    for _ in range(3):
        shutil.rmtree(killed, ignore_errors=True)
        proc = subprocess.Popen(command(killed), cwd=PROJECT_ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 300
        while (proc.poll() is None and time.time() < deadline
               and not (state.exists() and '"ckpt-3"' in state.read_text())):
            time.sleep(0.01)
        proc.kill()  # SIGKILL (nothing if the run has ended)
        proc.wait()
        assert proc.returncode in (0, -signal.SIGKILL), f"the run failed: {proc.returncode}"
        if (proc.returncode == -signal.SIGKILL
                and not (killed / "training_checkpoints" / "ckpt-30.index").exists()):
            break
    else:
        pytest.fail("3 runs reached their step-30 checkpoint before the kill")
    done = subprocess.run(command(killed), cwd=PROJECT_ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Resumed from" in done.stderr
    a = _checkpoint_tensors(str(tmp_path / "full" / "training_checkpoints" / "ckpt-30"))
    b = _checkpoint_tensors(str(killed / "training_checkpoints" / "ckpt-30"))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert (tmp_path / "full" / "eval_results.txt").read_text() == \
        (killed / "eval_results.txt").read_text()
    bad = subprocess.run(command(tmp_path / "bad")[:-1] + ["--lr_schedule=cosine"],
                         cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "lr_schedule" in bad.stderr


_STRATEGY_WORKER = r"""
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from bert_tf.gpt.config import GptConfig
from bert_tf.runs.gpt_pretraining import GptPretrainingTrainer, GptTrainerOptions, lm_input_fn
name, config_path, train, output_dir, stop = sys.argv[1:6]
strategy = (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]) if name == "mirrored"
            else tf.distribute.OneDeviceStrategy("/cpu:0"))
keras.utils.set_random_seed(7)
options = GptTrainerOptions(output_dir=output_dir, train_batch_size=8, num_train_steps=6,
                            num_warmup_steps=1, save_checkpoints_steps=3, iterations_per_loop=1,
                            learning_rate=2e-3, lr_schedule="warmup_linear")
config = GptConfig.from_json_file(config_path)
trainer = GptPretrainingTrainer(config, options, strategy)
records = trainer.train(lm_input_fn(train, config.n_ctx, 8, True, 7), stop_after_step=int(stop))
weights = {n: v.numpy().tolist() for n, v in trainer.model.original_variables()[:3]}
print(json.dumps({"num_replicas": strategy.num_replicas_in_sync,
                  "losses": [r["loss"] for r in records], "weights": weights}))
"""


@pytest.mark.long
def test_mirrored_strategy_gives_the_one_device_run_and_checkpoints_cross_over(lm_data,
                                                                               tmp_path):
    """With dropout 0.1 everywhere (each replica applies its slice of the global batch's masks,
    and the whole table's one mask), 2 replicas give the one-device losses; a checkpoint
    written under MirroredStrategy resumes on one device."""
    train, _, config = lm_data
    assert {k: json.loads(pathlib.Path(config).read_text())[k]
            for k in ("embd_pdrop", "attn_pdrop", "resid_pdrop")} == dict.fromkeys(
                ("embd_pdrop", "attn_pdrop", "resid_pdrop"), 0.1)
    (tmp_path / "config.json").write_text(pathlib.Path(config).read_text())
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}

    def run(strategy, out, stop):
        proc = subprocess.run([sys.executable, "-c", _STRATEGY_WORKER, strategy,
                               str(tmp_path / "config.json"), train, str(tmp_path / out),
                               str(stop)], cwd=PROJECT_ROOT, env=env, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    one = run("one_device", "one", 6)
    first = run("mirrored", "mixed", 3)
    assert first["num_replicas"] == 2
    second = run("one_device", "mixed", 6)
    losses = first["losses"] + second["losses"]
    # The first two steps agree to float rounding (same windows per global batch, the same loss
    # and gradient scaling); after that the two replicas' gradient sum (another summation order)
    # differs in the last bits, which Adam (eps 1e-8) turns into full-size steps on tiny
    # gradient components: measured 1.7e-5 at step 3, 2.5e-3 at step 6. A wrong split or
    # scaling differs by far more from step 1 on.
    np.testing.assert_allclose(losses[:2], one["losses"][:2], atol=1e-5, rtol=0)
    np.testing.assert_allclose(losses, one["losses"], atol=1e-2, rtol=0)
    for name, value in one["weights"].items():
        np.testing.assert_allclose(second["weights"][name], value, atol=1e-2, rtol=0,
                                   err_msg=name)
