"""Drill: `tools/run_pretraining.py` with dropout 0.1, killed with SIGKILL at 5 points (at
checkpoint boundaries, mid-step, around a checkpoint write) and restarted each time with the same
command, ends bit-identical to the uninterrupted run (one device): every variable of the final
training checkpoint (weights, Adam slots, step, dropout random state) and of the original-format
`model.ckpt-N`, and every loss logged after each resume."""
from __future__ import annotations

import re

import pytest

from drill_tools import (PRETRAINING_STEPS as STEPS, KilledRun, assert_identical,
                         checkpoint_variables, extra_files, logged_losses, pretraining_flags,
                         run_tool, temporaries)

pytestmark = pytest.mark.drills


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


def test_five_kills_resume_bit_identical(dropout_config, pretraining_records,
                                         pretraining_reference, tmp_path):
    full_dir, drill_dir = pretraining_reference, tmp_path / "killed"

    kills = 0
    for i, (what, pattern) in enumerate(KILL_POINTS):
        run = KilledRun("run_pretraining",
                        *pretraining_flags(dropout_config, pretraining_records, drill_dir),
                        log_path=tmp_path / f"run{i}.log")
        killed = run.kill_when(lambda: _saw(run.log(), pattern))
        assert killed, f"kill {i} ({what}): the run ended first:\n{run.log()[-3000:]}"
        kills += 1
        if i:
            assert _saw(run.log(), r"Resumed from .*ckpt-\d+ at step \d+"), run.log()[-3000:]
    last = run_tool("run_pretraining",
                    *pretraining_flags(dropout_config, pretraining_records, drill_dir))
    assert last.returncode == 0, last.stderr[-3000:]
    assert _saw(last.stderr, r"Resumed from .*ckpt-8 at step 8")
    assert kills == 5

    # Final state: bit-identical.
    assert_identical(checkpoint_variables(full_dir / "training_checkpoints" / f"ckpt-{STEPS}"),
                     checkpoint_variables(drill_dir / "training_checkpoints" / f"ckpt-{STEPS}"),
                     "training checkpoint")
    assert_identical(checkpoint_variables(full_dir / f"model.ckpt-{STEPS}"),
                     checkpoint_variables(drill_dir / f"model.ckpt-{STEPS}"), "model.ckpt")
    names = checkpoint_variables(drill_dir / "training_checkpoints" / f"ckpt-{STEPS}")
    assert any(n.startswith("random_state/") for n in names), "no dropout state checkpointed"

    # Every loss any process logged equals the uninterrupted run's at that step.
    (reference,) = logged_losses(full_dir / "train")
    assert sorted(reference) == list(range(1, STEPS + 1))
    runs = logged_losses(drill_dir / "train")
    assert len(runs) == 6
    assert set(runs[-1]) == {9, 10}  # the last process resumed at checkpoint 8
    compared = 0
    for losses in runs:
        for step, loss in losses.items():
            assert loss == reference[step], (step, loss, reference[step])
            compared += 1
    assert compared >= 10
    assert temporaries(drill_dir) == []
    assert extra_files(drill_dir, full_dir) == ([], [])  # (left over, missing)
