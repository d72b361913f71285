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
        deadline = time.time() + timeout
        try:
            while time.time() < deadline:
                if self.proc.poll() is not None:
                    return False
                if ready():
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=60)
                    return True
                time.sleep(poll)
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)
            raise AssertionError(f"timed out waiting for the kill point; log:\n{self.log()[-3000:]}")
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


