"""Drill: `tools/run_pretraining.py` with dropout 0.1, killed with SIGKILL at 5 points (at
checkpoint boundaries, mid-step, around a checkpoint write) and restarted each time with the same
command, ends bit-identical to the uninterrupted run (one device): every variable of the final
training checkpoint (weights, Adam slots, step, dropout random state) and of the original-format
`model.ckpt-N`, and every loss logged after each resume."""
from __future__ import annotations

import re

import numpy as np
import pytest

from drill_tools import KilledRun, run_tool, temporaries

pytestmark = pytest.mark.drills

STEPS = 10


def _flags(config, records, output_dir):
    return [f"--bert_config_file={config}", f"--input_file={records}",
            f"--output_dir={output_dir}", "--do_train=True", "--train_batch_size=8",
            "--max_seq_length=128", "--max_predictions_per_seq=20",
            f"--num_train_steps={STEPS}", "--num_warmup_steps=2", "--learning_rate=1e-4",
            "--save_checkpoints_steps=2", "--iterations_per_loop=1"]


def _logged_losses(output_dir) -> list[dict[int, float]]:
    """Per process (event file): {step: loss} of the TensorBoard scalars it wrote."""
    import tensorflow as tf

    runs = []
    for path in sorted((output_dir / "train").glob("events.out.tfevents.*")):
        losses = {}
        try:
            for event in tf.compat.v1.train.summary_iterator(str(path)):
                for value in event.summary.value:
                    if value.tag == "loss":
                        losses[int(event.step)] = float(tf.make_ndarray(value.tensor))
        except tf.errors.DataLossError:  # the tail a killed process did not finish writing
            pass
        runs.append(losses)
    return runs


def _variables(prefix) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()
            if n != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def _assert_identical(a: dict, b: dict, what: str) -> None:
    assert sorted(a) == sorted(b), what
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=f"{what}: {name}")


def _saw(log: str, pattern: str) -> bool:
    return re.search(pattern, log) is not None


# (description, regular expression on the current process's log that triggers the kill)
KILL_POINTS = [
    ("just after checkpoint 2 is saved", r"Saved checkpoint .*ckpt-2\b"),
    ("mid-step 4 (step 3 done, checkpoint 4 not yet saved)", r"step 3/10 "),
    ("step 6 done: while checkpoint 6 is being written", r"step 6/10 "),
    ("just after checkpoint 8 is saved", r"Saved checkpoint .*ckpt-8\b"),
    ("mid-step 10 (step 9 done)", r"step 9/10 "),
]


def test_five_kills_resume_bit_identical(dropout_config, pretraining_records, tmp_path):
    full_dir, drill_dir = tmp_path / "uninterrupted", tmp_path / "killed"
    full = run_tool("run_pretraining", *_flags(dropout_config, pretraining_records, full_dir))
    assert full.returncode == 0, full.stderr[-3000:]

    kills = 0
    for i, (what, pattern) in enumerate(KILL_POINTS):
        run = KilledRun("run_pretraining", *_flags(dropout_config, pretraining_records,
                                                   drill_dir), log_path=tmp_path / f"run{i}.log")
        killed = run.kill_when(lambda: _saw(run.log(), pattern))
        assert killed, f"kill {i} ({what}): the run ended first:\n{run.log()[-3000:]}"
        kills += 1
        if i:
            assert _saw(run.log(), r"Resumed from .*ckpt-\d+ at step \d+"), run.log()[-3000:]
    last = run_tool("run_pretraining", *_flags(dropout_config, pretraining_records, drill_dir))
    assert last.returncode == 0, last.stderr[-3000:]
    assert _saw(last.stderr, r"Resumed from .*ckpt-8 at step 8")
    assert kills == 5

    # Final state: bit-identical.
    _assert_identical(_variables(full_dir / "training_checkpoints" / f"ckpt-{STEPS}"),
                      _variables(drill_dir / "training_checkpoints" / f"ckpt-{STEPS}"),
                      "training checkpoint")
    _assert_identical(_variables(full_dir / f"model.ckpt-{STEPS}"),
                      _variables(drill_dir / f"model.ckpt-{STEPS}"), "model.ckpt")
    names = _variables(drill_dir / "training_checkpoints" / f"ckpt-{STEPS}")
    assert any(n.startswith("random_state/") for n in names), "no dropout state checkpointed"

    # Every loss any process logged equals the uninterrupted run's at that step.
    (reference,) = _logged_losses(full_dir)
    assert sorted(reference) == list(range(1, STEPS + 1))
    runs = _logged_losses(drill_dir)
    assert len(runs) == 6
    assert set(runs[-1]) == {9, 10}  # the last process resumed at checkpoint 8
    compared = 0
    for losses in runs:
        for step, loss in losses.items():
            assert loss == reference[step], (step, loss, reference[step])
            compared += 1
    assert compared >= 10
    assert temporaries(drill_dir) == []
