"""Kill drills of fine-tuning with real `tools/run_classifier.py` processes: the original
release's tiny fixture BERT (L2 H128, its bert_config with dropout 0.1), 64 real MRPC training
pairs and 16 real dev pairs from ../shared/data, 16 steps, a checkpoint every 4.

* 5 kills at random points: 5 separate output folders (two at a time), each run killed with SIGKILL at a random
  moment (after a random step's log line, plus a random delay: mid-step, during or just after a
  checkpoint write) and run again with the same flags. 5/5 final checkpoints must equal the
  uninterrupted run's bit for bit (weights, Adam slots, dropout streams, global_step), and every
  loss any process logged to TensorBoard (the resumed ones included) must equal the
  uninterrupted run's loss of that step. The points come from `BERT_TF_DRILL_SEED` (default:
  a fresh seed, named in every failure message).
* 10 kills then a re-run, in one output folder, at varied points: during start-up, mid-step,
  while a checkpoint is being written, just after one, during evaluation and after training.
  The re-run must succeed, leave no temporary file, and leave exactly the uninterrupted run's
  files (TensorBoard event files aside, one per process) with the same final checkpoint and
  eval_results.txt.

The uninterrupted run is shared by both drills.
"""
from __future__ import annotations

import concurrent.futures
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "drills"))
from drill_tools import logged_losses  # noqa: E402  (tests/drills has no package)

pytestmark = pytest.mark.drills

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = PROJECT_ROOT / "tools" / "run_classifier.py"
NUM_STEPS = 16  # 64 examples / batch 8 * 2 epochs
SAVE_EVERY = 4
SEED = int(os.environ.get("BERT_TF_DRILL_SEED") or random.SystemRandom().randrange(2**31))
# Names only temporary files/folders of the project's writers have.
TEMP_MARKERS = (".tmp", "_temp", ".ckpt_tmp_", ".old-", ".partial")


@pytest.fixture(scope="module")
def mrpc_subset(shared_data, tmp_path_factory) -> pathlib.Path:
    """The first 64 pairs of the real MRPC train.tsv and 16 of dev.tsv (header, BOM kept)."""
    data_dir = tmp_path_factory.mktemp("mrpc")
    for split, rows in (("train", 64), ("dev", 16)):
        lines = (shared_data / "glue" / "MRPC" / f"{split}.tsv").read_text(
            encoding="utf-8-sig").splitlines(keepends=True)
        (data_dir / f"{split}.tsv").write_text("\ufeff" + "".join(lines[:rows + 1]),
                                              encoding="utf-8")
    return data_dir


def _command(original_fixtures, data_dir, output_dir) -> list[str]:
    ckpt = original_fixtures / "checkpoint"
    return [sys.executable, str(SCRIPT), "--task_name=MRPC", "--do_train=true",
            "--do_eval=true", f"--data_dir={data_dir}",
            f"--vocab_file={original_fixtures / 'vocab_uncased.txt'}",
            f"--bert_config_file={ckpt / 'bert_config.json'}",  # dropout 0.1
            f"--init_checkpoint={ckpt / 'bert_model.ckpt'}", "--max_seq_length=64",
            "--train_batch_size=8", "--eval_batch_size=8", "--learning_rate=1e-4",
            "--num_train_epochs=2", f"--save_checkpoints_steps={SAVE_EVERY}",
            f"--output_dir={output_dir}"]


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


def _run_to_end(cmd, log: pathlib.Path) -> str:
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          cwd=PROJECT_ROOT, env=_env(), timeout=600)
    log.write_text(proc.stderr)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


def _kill_when(cmd, log: pathlib.Path, ready, timeout: float = 300) -> bool:
    """Starts `cmd` (its own process group, stderr to `log`) and SIGKILLs the group as soon as
    `ready(log text, seconds since start)` is true. False if the run ended first."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=out, cwd=PROJECT_ROOT,
                                env=_env(), start_new_session=True)
        start = time.time()
        try:
            while time.time() - start < timeout:
                if proc.poll() is not None:
                    return False
                if ready(log.read_text(errors="replace"), time.time() - start):
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=60)
                    return proc.returncode == -signal.SIGKILL
                time.sleep(0.002)
            raise AssertionError(f"no kill point within {timeout} s:\n{log.read_text()[-3000:]}")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _latest_step(output_dir: pathlib.Path) -> int:
    state = output_dir / "checkpoint"
    if not state.exists():
        return 0
    first = state.read_text().splitlines()[0]
    return int(first.rsplit("-", 1)[1].rstrip('"'))


def _logged_losses(output_dir: pathlib.Path) -> list[dict[int, float]]:
    """Per process (events file, in order of creation): {step: loss} it logged."""
    return logged_losses(output_dir / "train")


def _files(folder: pathlib.Path) -> list[str]:
    """Every file under `folder` but TensorBoard event files (one per process)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and "tfevents" not in p.name)


def _temporaries(folder: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if any(m in p.name for m in TEMP_MARKERS))


def _assert_same_final_state(drill_dir, reference, what: str) -> None:
    from bert_tf.checkpoints import read_checkpoint

    final = f"model.ckpt-{NUM_STEPS}"
    got = read_checkpoint(drill_dir / final)
    assert int(got["global_step"]) == NUM_STEPS, what
    assert sorted(got) == sorted(reference["checkpoint"]), what
    assert "output_weights/adam_v" in got
    assert any(name.startswith("bert_tf/random_state/") for name in got), "no dropout state"
    for name, value in reference["checkpoint"].items():
        np.testing.assert_array_equal(got[name], value, err_msg=f"{what}: {name}")
    # Every loss any process logged (the killed ones' and each resumed one's) = the reference.
    compared = 0
    for losses in _logged_losses(drill_dir):
        for step, loss in losses.items():
            assert loss == reference["losses"][step], f"{what}: loss of step {step}"
            compared += 1
    assert compared >= NUM_STEPS, what
    assert _temporaries(drill_dir) == [], what
    assert _files(drill_dir) == reference["files"], what
    assert (drill_dir / "eval_results.txt").read_text() == reference["eval_results"], what


@pytest.fixture(scope="module")
def reference(original_fixtures, mrpc_subset, tmp_path_factory) -> dict:
    """The uninterrupted run: its final checkpoint, logged losses, files and eval results."""
    from bert_tf.checkpoints import read_checkpoint

    out = tmp_path_factory.mktemp("uninterrupted")
    full_dir = out / "run"
    _run_to_end(_command(original_fixtures, mrpc_subset, full_dir), out / "run.log")
    (losses,) = _logged_losses(full_dir)
    assert sorted(losses) == list(range(1, NUM_STEPS + 1))
    return {"checkpoint": read_checkpoint(full_dir / f"model.ckpt-{NUM_STEPS}"),
            "losses": losses, "files": _files(full_dir),
            "eval_results": (full_dir / "eval_results.txt").read_text()}


def test_five_random_kills_each_resume_bit_identical(original_fixtures, mrpc_subset, reference,
                                                      tmp_path):
    rng = random.Random(SEED)
    # 5 distinct steps of 1..14, a random delay after each one's log line (steps of this model
    # take ~0.05-0.3 s: the kill lands mid-step, in a checkpoint write or just after it).
    points = [(step, round(rng.uniform(0.0, 0.3), 3))
              for step in sorted(rng.sample(range(1, NUM_STEPS - 1), 5))]

    def kill_and_resume(i: int) -> tuple[str, pathlib.Path, int]:
        step, delay = points[i]
        what = f"kill {i + 1}/5 after step {step} + {delay} s (BERT_TF_DRILL_SEED={SEED})"
        drill_dir = tmp_path / f"killed{i}"
        cmd = _command(original_fixtures, mrpc_subset, drill_dir)
        seen = []

        def ready(log, _elapsed):
            if not seen and re.search(rf"step {step}/{NUM_STEPS} ", log):
                seen.append(time.time())
            return bool(seen) and time.time() - seen[0] >= delay

        assert _kill_when(cmd, tmp_path / f"killed{i}.log", ready), f"{what}: ended first"
        left = _latest_step(drill_dir)
        log = _run_to_end(cmd, tmp_path / f"resumed{i}.log")
        if left:
            assert re.search(rf"Resumed from \S*model\.ckpt-{left} at step {left}\b", log), what
        else:
            assert "Resumed from" not in log, what
        return what, drill_dir, left

    # The 5 runs are independent: two at a time (each is a fresh process importing TensorFlow).
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(kill_and_resume, range(len(points))))
    for what, drill_dir, left in runs:
        if left < NUM_STEPS:  # else the re-run has nothing to train (and logs nothing)
            assert len(_logged_losses(drill_dir)) == 2, what  # the killed and the resumed run
        _assert_same_final_state(drill_dir, reference, what)


def _temp_checkpoints(output_dir: pathlib.Path) -> set[str]:
    """The temporary folders of checkpoint writes (`.ckpt_tmp_*`) in `output_dir`."""
    return {n for n in (os.listdir(output_dir) if output_dir.is_dir() else ())
            if n.startswith(".ckpt_tmp_")}


def test_ten_kills_then_a_rerun_leave_no_temporaries(original_fixtures, mrpc_subset, reference,
                                                     tmp_path):
    rng = random.Random(SEED + 1)
    drill_dir = tmp_path / "killed"
    cmd = _command(original_fixtures, mrpc_subset, drill_dir)

    # Kill triggers, made when their run starts: ready(log, seconds since start) -> bool.
    def at_startup():
        after = rng.uniform(0.5, 4.0)
        return lambda log, elapsed: elapsed >= after

    def mid_step():
        seen = []

        def ready(log, elapsed):
            if not seen and re.search(rf"step \d+/{NUM_STEPS} ", log):
                seen.append(time.time())
            return bool(seen) and time.time() - seen[0] >= 0.05
        return ready

    def writing_checkpoint():  # a new temporary checkpoint folder (or, if missed, just after)
        old = _temp_checkpoints(drill_dir)
        return lambda log, elapsed: bool(_temp_checkpoints(drill_dir) - old) \
            or "Saved checkpoint" in log

    def after_checkpoint():
        return lambda log, elapsed: "Saved checkpoint" in log

    def evaluating():
        return lambda log, elapsed: "Running evaluation" in log

    schedule = [at_startup, mid_step, writing_checkpoint, after_checkpoint, at_startup,
                writing_checkpoint, after_checkpoint, mid_step, after_checkpoint, evaluating]
    mid_write = 0
    for i, make_trigger in enumerate(schedule):
        old = _temp_checkpoints(drill_dir)
        ready = make_trigger()

        def watch(log, elapsed, ready=ready, old=old):
            nonlocal mid_write
            if ready(log, elapsed):
                mid_write += bool(_temp_checkpoints(drill_dir) - old)
                return True
            return False

        assert _kill_when(cmd, tmp_path / f"run{i}.log", watch), \
            f"kill {i + 1}/10 ({make_trigger.__name__}): the run ended first " \
            f"(BERT_TF_DRILL_SEED={SEED})"
    assert mid_write >= 1, "no kill landed while a checkpoint was being written"
    log = _run_to_end(cmd, tmp_path / "rerun.log")
    assert "Resumed from" in log or "nothing to train" in log
    _assert_same_final_state(drill_dir, reference, f"10 kills (BERT_TF_DRILL_SEED={SEED})")
