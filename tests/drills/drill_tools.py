"""Helpers of the reliability drills: run the real tools as a user does, kill them with SIGKILL,
list what they leave behind.

The drills use the tiny fixture model (L2 H128, the original's bert_config with dropout 0.1, as
every real config has) and the original's pretraining TFRecords, so each process is a few
seconds; every drill is a real `python tools/<tool>.py ...` process.
"""
from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOLS = PROJECT_ROOT / "tools"

# Names that only temporary files/folders of the project's writers have.
TEMP_MARKERS = (".tmp-", ".tmp", "_temp", ".old-", ".ckpt_tmp_", ".partial")


def tool_env() -> dict:
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT), TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONUNBUFFERED="1")
    env.pop("TF_CONFIG", None)
    return env


def tool_command(tool: str, *args: str) -> list[str]:
    return [sys.executable, str(TOOLS / f"{tool}.py"), *map(str, args)]


def run_tool(tool: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Runs `tools/<tool>.py args` to completion (stdout/stderr captured as text)."""
    return subprocess.run(tool_command(tool, *args), capture_output=True, text=True,
                          env=tool_env(), timeout=timeout, cwd=PROJECT_ROOT)


class KilledRun:
    """`tools/<tool>.py` in its own process group, killed with SIGKILL (the whole group, workers
    included) once `ready()` says so, as the OOM killer or a preempted machine would."""

    def __init__(self, tool: str, *args: str, log_path: pathlib.Path):
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(tool_command(tool, *args), stdout=self._log,
                                     stderr=subprocess.STDOUT, env=tool_env(), cwd=PROJECT_ROOT,
                                     start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill_when(self, ready, timeout: float = 240, poll: float = 0.02) -> bool:
        """SIGKILLs the process group as soon as `ready()` is true. Returns False if the
        process ended first (nothing was killed)."""
        started = time.time()
        deadline = started + timeout
        try:
            while time.time() < deadline:
                if self.proc.poll() is not None:
                    self._log.write(f"\n[drill] ended first, exit {self.proc.returncode}\n")
                    return False
                if ready():
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=60)
                    self._log.write(f"\n[drill] SIGKILL after {time.time() - started:.2f} s\n")
                    return True
                time.sleep(poll)
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)
            raise AssertionError(
                f"timed out waiting for the kill point; log:\n{self.log()[-3000:]}")
        finally:
            self._log.close()


def temporaries(*roots: pathlib.Path) -> list[str]:
    """Every file or folder under `roots` whose name marks it as temporary (see TEMP_MARKERS)."""
    found = []
    for root in roots:
        if not root.exists():
            continue
        for path in root.rglob("*"):
            if any(m in path.name for m in TEMP_MARKERS):
                found.append(str(path.relative_to(root)))
    return sorted(found)



def extra_files(folder: pathlib.Path, reference: pathlib.Path) -> tuple[list[str], list[str]]:
    """(files under `folder` that `reference` lacks, files of `reference` that `folder` lacks),
    TensorBoard event files aside (one per process, named by host, pid and time)."""
    def files(root):
        return {str(p.relative_to(root)) for p in root.rglob("*")
                if p.is_file() and "tfevents" not in p.name}
    got, want = files(folder), files(reference)
    return sorted(got - want), sorted(want - got)


def logged_losses(train_dir: pathlib.Path) -> list[dict[int, float]]:
    """Per process (events file, in order of creation): {step: loss} of the TensorBoard
    scalars it wrote (a killed process's unfinished tail is ignored)."""
    import tensorflow as tf

    runs = []
    for path in sorted(train_dir.glob("events.out.tfevents.*"),
                       key=lambda p: (int(p.name.split(".")[3]), p.name)):
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


def checkpoint_variables(prefix) -> dict:
    """name -> array of every variable of a checkpoint (TF1 or TF2 object-based)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()
            if n != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def assert_identical(a: dict, b: dict, what: str) -> None:
    import numpy as np

    assert sorted(a) == sorted(b), what
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=f"{what}: {name}")


PRETRAINING_STEPS = 10


def pretraining_flags(config, records, output_dir) -> list[str]:
    """run_pretraining.py: 10 steps of batch 8, a checkpoint every 2."""
    return [f"--bert_config_file={config}", f"--input_file={records}",
            f"--output_dir={output_dir}", "--do_train=True", "--train_batch_size=8",
            "--max_seq_length=128", "--max_predictions_per_seq=20",
            f"--num_train_steps={PRETRAINING_STEPS}", "--num_warmup_steps=2",
            "--learning_rate=1e-4", "--save_checkpoints_steps=2", "--iterations_per_loop=1"]
