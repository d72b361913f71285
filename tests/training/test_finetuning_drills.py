"""Kill drills of fine-tuning: a real `tools/run_classifier.py` process (the original release's
tiny fixture BERT with its dropout 0.1, 64 real MRPC training pairs) is killed with SIGKILL right
after a checkpoint and again in the middle of a step, restarted each time with the same flags, and
its final checkpoint must equal the uninterrupted run's bit for bit (weights, adam slots, dropout
streams, global_step), as must the loss of every step logged to TensorBoard after each resume."""
from __future__ import annotations

import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from bert_tf.checkpoints import read_checkpoint
from bert_tf.plotting import read_scalars

pytestmark = pytest.mark.drills

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = PROJECT_ROOT / "tools" / "run_classifier.py"
NUM_STEPS = 16  # 64 examples / batch 8 * 2 epochs
SAVE_EVERY = 4


@pytest.fixture(scope="module")
def mrpc_subset(shared_data, tmp_path_factory) -> pathlib.Path:
    """The first 64 pairs of the real MRPC train.tsv (header with its BOM kept)."""
    lines = (shared_data / "glue" / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig") \
        .splitlines(keepends=True)
    data_dir = tmp_path_factory.mktemp("mrpc")
    (data_dir / "train.tsv").write_text("\ufeff" + "".join(lines[:65]), encoding="utf-8")
    return data_dir


def _command(original_fixtures, data_dir, output_dir) -> list[str]:
    ckpt = original_fixtures / "checkpoint"
    return [sys.executable, str(SCRIPT), "--task_name=MRPC", "--do_train=true",
            f"--data_dir={data_dir}", f"--vocab_file={original_fixtures / 'vocab_uncased.txt'}",
            f"--bert_config_file={ckpt / 'bert_config.json'}",  # dropout 0.1
            f"--init_checkpoint={ckpt / 'bert_model.ckpt'}", "--max_seq_length=64",
            "--train_batch_size=8", "--learning_rate=1e-4", "--num_train_epochs=2",
            f"--save_checkpoints_steps={SAVE_EVERY}", f"--output_dir={output_dir}"]


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def _run_to_end(cmd) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=PROJECT_ROOT, env=_env(),
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _latest_step(output_dir: pathlib.Path) -> int:
    state = output_dir / "checkpoint"
    if not state.exists():
        return 0
    first = state.read_text().splitlines()[0]
    return int(first.rsplit("-", 1)[1].rstrip('"'))


def _kill_after_checkpoint(cmd, output_dir: pathlib.Path, step: int, delay: float) -> int:
    """Starts the run, waits until the checkpoint of `step` is published, sleeps `delay` s and
    kills it with SIGKILL. Returns the step of the latest checkpoint left behind."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=PROJECT_ROOT, env=_env())
    try:
        deadline = time.time() + 300
        while _latest_step(output_dir) < step:
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.time() < deadline, "the run did not reach its checkpoint"
            time.sleep(0.002)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return _latest_step(output_dir)


def test_kill_at_checkpoint_and_mid_step_then_resume_is_bit_identical(
        original_fixtures, mrpc_subset, tmp_path):
    full_dir, drill_dir = tmp_path / "uninterrupted", tmp_path / "killed"
    _run_to_end(_command(original_fixtures, mrpc_subset, full_dir))
    cmd = _command(original_fixtures, mrpc_subset, drill_dir)
    # 1. at a checkpoint boundary: killed as soon as model.ckpt-4 is published
    left = _kill_after_checkpoint(cmd, drill_dir, SAVE_EVERY, delay=0.0)
    assert SAVE_EVERY <= left < NUM_STEPS
    # 2. mid-step: killed a random moment (within about two steps) after the next checkpoint
    delay = random.Random(os.getpid()).uniform(0.01, 0.15)
    left = _kill_after_checkpoint(cmd, drill_dir, left + SAVE_EVERY, delay=delay)
    assert left < NUM_STEPS, "the run finished before it could be killed"
    _run_to_end(cmd)

    final = f"model.ckpt-{NUM_STEPS}"
    expected = read_checkpoint(full_dir / final)
    got = read_checkpoint(drill_dir / final)
    assert int(got["global_step"]) == NUM_STEPS
    assert sorted(got) == sorted(expected)
    assert "output_weights/adam_v" in got
    assert any(name.startswith("bert_tf/random_state/") for name in got)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    # Every step's loss as logged (after each resume, the resumed run's value) equals the
    # uninterrupted run's.
    full_losses = read_scalars(full_dir / "train", ["loss"])["loss"]
    drill_losses = read_scalars(drill_dir / "train", ["loss"])["loss"]
    assert [s for s, _ in full_losses] == list(range(1, NUM_STEPS + 1))
    assert drill_losses == full_losses
    assert len(list((drill_dir / "train").glob("*tfevents*"))) == 3  # three processes logged
    assert not list(drill_dir.glob(".ckpt_tmp_*"))  # no temp folder of the killed runs left
    assert (drill_dir / "curves.png").exists()
