"""The pretraining loop: same losses under MirroredStrategy (2 logical CPUs) as on one device, and
a run stopped after a checkpoint and restarted continues exactly (weights, slots, step, input)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import run_local_workers

WORKER = os.path.join(os.path.dirname(__file__), "_pretrain_worker.py")


def _run(original_fixtures, *args, policy="float32", dropout=None):
    env = dict(os.environ, BERT_TF_FIXTURES=str(original_fixtures), BERT_TF_POLICY=policy)
    if dropout is not None:
        env["BERT_TF_DROPOUT"] = str(dropout)
    proc = subprocess.run([sys.executable, WORKER, *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def uninterrupted(original_fixtures, tmp_path_factory):
    return _run(original_fixtures, "one_device", tmp_path_factory.mktemp("full"), 6)


def test_learning_rate_and_progress(uninterrupted):
    assert [r["step"] for r in uninterrupted] == [1, 2, 3, 4, 5, 6]
    assert [round(r["learning_rate"], 9) for r in uninterrupted] == [0, 5e-5, 8e-5, 7e-5, 6e-5, 5e-5]
    assert uninterrupted[-1]["masked_lm_loss"] < uninterrupted[0]["masked_lm_loss"]


@pytest.mark.long
def test_mirrored_two_replicas_equals_one_device(original_fixtures, tmp_path, uninterrupted):
    mirrored = _run(original_fixtures, "mirrored", tmp_path / "mirrored", 6, 2)
    for a, b in zip(uninterrupted, mirrored):
        for key in ("loss", "masked_lm_loss", "next_sentence_loss", "grad_norm"):
            assert b[key] == pytest.approx(a[key], abs=1e-5), (a["step"], key)


@pytest.mark.long
def test_resume_after_checkpoint_matches(original_fixtures, tmp_path, uninterrupted):
    out = tmp_path / "resumed"
    first = _run(original_fixtures, "one_device", out, 3)
    assert [r["step"] for r in first] == [1, 2, 3]
    assert os.path.exists(out / "training_checkpoints" / "ckpt-3.index")
    second = _run(original_fixtures, "one_device", out, 6)  # a new process: resumes at step 3
    assert [r["step"] for r in second] == [4, 5, 6]
    for a, b in zip(uninterrupted, first + second):
        assert b["loss"] == pytest.approx(a["loss"], abs=1e-6), a["step"]


def _checkpoint_values(prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


@pytest.fixture(scope="module")
def uninterrupted_dropout(original_fixtures, tmp_path_factory):
    out = tmp_path_factory.mktemp("full_dropout")
    return out, _run(original_fixtures, "one_device", out, 6, dropout=0.1)


@pytest.mark.long
def test_resume_with_dropout_is_bit_identical(original_fixtures, tmp_path, uninterrupted_dropout):
    """Dropout 0.1 (every real config): the dropout streams are in the training checkpoint, so a
    new process resuming at step 3 draws the masks the uninterrupted run drew."""
    full_dir, full = uninterrupted_dropout
    out = tmp_path / "resumed"
    first = _run(original_fixtures, "one_device", out, 3, dropout=0.1)
    second = _run(original_fixtures, "one_device", out, 6, dropout=0.1)
    assert [r["step"] for r in first + second] == [1, 2, 3, 4, 5, 6]
    assert [r["loss"] for r in first + second] == [r["loss"] for r in full]
    names = [n for n, _ in tf.train.list_variables(str(out / "training_checkpoints" / "ckpt-6"))]
    assert any(n.startswith("random_state/") for n in names)
    a = _checkpoint_values(full_dir / "training_checkpoints" / "ckpt-6")
    b = _checkpoint_values(out / "training_checkpoints" / "ckpt-6")
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.long
def test_mirrored_resume_with_dropout_tracks_one_device(original_fixtures, tmp_path, uninterrupted,
                                                        uninterrupted_dropout):
    """The dropout run really drops (losses differ from the no-dropout run); two mirrored
    replicas, stopped after step 3 and resumed in a new process, give the uninterrupted
    one-device losses within float rounding (each replica draws its slice of the one-device
    mask from the checkpointed state; the input resumes at the right batch per replica)."""
    _, full = uninterrupted_dropout
    assert all(a["loss"] != b["loss"] for a, b in zip(uninterrupted[1:], full[1:]))
    first = _run(original_fixtures, "mirrored", tmp_path / "parts", 3, 2, dropout=0.1)
    second = _run(original_fixtures, "mirrored", tmp_path / "parts", 6, 2, dropout=0.1)
    assert [r["step"] for r in first + second] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(full, first + second):
        assert b["loss"] == pytest.approx(a["loss"], abs=1e-5), a["step"]


@pytest.mark.long
def test_leftover_temporaries_of_a_killed_run_are_removed(original_fixtures, tmp_path):
    out = tmp_path / "left"
    _run(original_fixtures, "one_device", out, 3)
    leftovers = [out / "training_checkpoints" / "ckpt-6_temp", out / ".ckpt_tmp_abc123"]
    for d in leftovers:
        d.mkdir()
        (d / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x" * 10)
    (out / "training_checkpoints" / "checkpoint.tmp0123456789abcdef").write_text("x")
    (out / ".eval_results.txt.k2j3.tmp").write_text("x")
    _run(original_fixtures, "one_device", out, 4)
    hidden = [p for p in out.rglob("*") if p.name.startswith(".") or "_temp" in p.name
              or ".tmp" in p.name]
    assert hidden == []
    assert (out / "training_checkpoints" / "ckpt-3.index").exists()


@pytest.mark.long
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_tracks_float32(original_fixtures, tmp_path, uninterrupted, policy):
    mixed = _run(original_fixtures, "one_device", tmp_path / policy, 3, policy=policy)
    assert [r["step"] for r in mixed] == [1, 2, 3]
    for a, b in zip(uninterrupted, mixed):
        # bfloat16 keeps 8 mantissa bits: losses agree to a few hundredths, not to 1e-5
        assert b["loss"] == pytest.approx(a["loss"], abs=0.1), (policy, a["step"])
        assert b["learning_rate"] == pytest.approx(a["learning_rate"], abs=1e-9)


@pytest.mark.long
def test_multi_worker_two_processes_agree(original_fixtures, tmp_path, uninterrupted,
                                          local_workers):
    outputs = run_local_workers(
        [sys.executable, WORKER, "multi_worker_mirrored", str(tmp_path / "mw"), "6"],
        local_workers, dict(os.environ, BERT_TF_FIXTURES=str(original_fixtures)))
    chief = outputs[0]
    for a, b in zip(uninterrupted, chief):
        for key in ("loss", "masked_lm_loss", "next_sentence_loss"):
            assert b[key] == pytest.approx(a[key], abs=1e-5), (a["step"], key)
    for a, b in zip(chief, outputs[1]):
        assert b["loss"] == pytest.approx(a["loss"], abs=1e-6)
    assert os.path.exists(tmp_path / "mw" / "shared" / "training_checkpoints" / "ckpt-6.index")
    assert os.path.isdir(tmp_path / "mw" / "shared" / "workers" / "worker_1")
