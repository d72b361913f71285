"""tools/export_savedmodel.py end to end: writes <export_dir>/<version>/, refuses an existing
version without --overwrite (leaving it intact), and names the flag on bad input."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from serving_setup import SEQ_LENGTH

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "export_savedmodel.py")


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.path.abspath(os.path.join(os.path.dirname(TOOL), ".."))}
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.mark.slow  # four tool processes, each importing TensorFlow: ~60 s
def test_export_versions_and_refusals(fixture_model, tmp_path):
    base = tmp_path / "preprocessor"
    args = ["--model_type=preprocessor", f"--vocab_file={fixture_model['vocab_file']}",
            f"--seq_length={SEQ_LENGTH}", f"--export_dir={base}"]
    proc = _run(*args, "--version=3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith(os.path.join("preprocessor", "3"))
    saved = (base / "3" / "saved_model.pb").read_bytes()
    assert (base / "3" / "assets" / "vocab_uncased.txt").exists()

    proc = _run(*args, "--version=3")
    assert proc.returncode != 0 and "already exists" in proc.stderr
    assert "--overwrite" in proc.stderr
    assert (base / "3" / "saved_model.pb").read_bytes() == saved
    assert sorted(os.listdir(base)) == ["3"]


@pytest.mark.parametrize("args, message", [
    (["--model_type=classifier", "--export_dir=/tmp/never"], "--bert_config_file is required"),
    (["--model_type=preprocessor", "--export_dir=/tmp/never", "--vocab_file=/no/such/vocab.txt"],
     "--vocab_file=/no/such/vocab.txt does not exist"),
    (["--model_type=preprocessor", "--export_dir=/tmp/never", "--version=0"],
     "version must be a positive integer"),
])
def test_bad_flags_are_named(args, message):
    proc = _run(*args)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]
