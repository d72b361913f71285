"""Drill: `tools/run_pretraining.py --gradient_accumulation_steps=4` (micro-batches of 2, dropout
0.1), killed with SIGKILL while an update's micro-steps run (twice) and restarted with the same
command, ends bit-identical to the uninterrupted accumulated run (one device): every variable of
the final training checkpoint (weights, Adam slots, step, dropout streams) and of
`model.ckpt-N`. Checkpoints happen only on update boundaries, so a resume repeats the
interrupted update from its first micro-batch (bert_tf.training.accumulation)."""
from __future__ import annotations

import re

import pytest

from drill_tools import (PRETRAINING_STEPS as STEPS, KilledRun, assert_identical,
                         checkpoint_variables, pretraining_flags, run_tool)

pytestmark = pytest.mark.drills

ACCUMULATION = "--gradient_accumulation_steps=4"
KILL_POINTS = [  # the log line after which the next update's micro-steps are running
    ("mid-update 4 (update 3 done)", r"step 3/10 "),
    ("mid-update 7 (update 6 done, checkpoint 6 being written or written)", r"step 6/10 "),
]


def test_killed_between_micro_steps_resumes_bit_identical(dropout_config, pretraining_records,
                                                          tmp_path):
    full_dir, drill_dir = tmp_path / "uninterrupted", tmp_path / "killed"
    done = run_tool("run_pretraining", *pretraining_flags(dropout_config, pretraining_records,
                                                          full_dir), ACCUMULATION)
    assert done.returncode == 0, done.stderr[-3000:]
    for i, (what, pattern) in enumerate(KILL_POINTS):
        run = KilledRun("run_pretraining",
                        *pretraining_flags(dropout_config, pretraining_records, drill_dir),
                        ACCUMULATION, log_path=tmp_path / f"run{i}.log")
        killed = run.kill_when(lambda: re.search(pattern, run.log()) is not None)
        assert killed, f"kill {i} ({what}): the run ended first:\n{run.log()[-3000:]}"
    last = run_tool("run_pretraining",
                    *pretraining_flags(dropout_config, pretraining_records, drill_dir),
                    ACCUMULATION)
    assert last.returncode == 0, last.stderr[-3000:]
    assert re.search(r"Resumed from .*ckpt-\d+ at step \d+", last.stderr), last.stderr[-3000:]
    assert_identical(checkpoint_variables(full_dir / "training_checkpoints" / f"ckpt-{STEPS}"),
                     checkpoint_variables(drill_dir / "training_checkpoints" / f"ckpt-{STEPS}"),
                     "training checkpoint")
    assert_identical(checkpoint_variables(full_dir / f"model.ckpt-{STEPS}"),
                     checkpoint_variables(drill_dir / f"model.ckpt-{STEPS}"), "model.ckpt")
