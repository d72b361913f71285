"""Helpers shared by test files (import them as `from tests.helpers import ...`; fixtures belong in
conftest.py)."""
from __future__ import annotations

# A tiny random BERT's bert_config.json (2 layers of width 32, the English uncased vocab size, no
# dropout): the model the end-to-end tool tests fine-tune for a few steps. A test that needs
# other values writes them as explicit overrides, e.g. `{**TINY_CONFIG, "hidden_dropout_prob": 0.1}`.
TINY_CONFIG = {"attention_probs_dropout_prob": 0.0, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.0, "hidden_size": 32, "initializer_range": 0.02,
               "intermediate_size": 64, "max_position_embeddings": 64,
               "num_attention_heads": 2, "num_hidden_layers": 2, "type_vocab_size": 2,
               "vocab_size": 30522}


def run_local_workers(command: list[str], workers: list[str], env: dict,
                      timeout: float = 600) -> list[dict]:
    """Runs `command` once per address of `workers` (the `local_workers` fixture's cluster), all
    at once, process i with `env` plus a TF_CONFIG naming it worker i of that cluster.

    Returns: each process's last stdout line as JSON, in worker order (the chief's first).
    Fails the test with a worker's stderr tail when one exits non-zero (the others are killed).
    """
    import json
    import subprocess

    procs = []
    try:
        for index in range(len(workers)):
            tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            procs.append(subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env={**env, "TF_CONFIG": json.dumps(tf_config)}))
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, err[-4000:]
            outputs.append(json.loads(out.strip().splitlines()[-1]))
        return outputs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def write_tiny_model(folder, vocab_tokens: list[str], **overrides) -> tuple[str, str]:
    """Writes folder/vocab.txt (`vocab_tokens`, one a line) and folder/bert_config.json
    (TINY_CONFIG with the vocab's size and `overrides`, e.g. `hidden_dropout_prob=0.1`).

    Returns: (the config's path, the vocab's path) as strings.
    """
    import json
    import pathlib

    folder = pathlib.Path(folder)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(vocab_tokens) + "\n")
    config = folder / "bert_config.json"
    config.write_text(json.dumps({**TINY_CONFIG, "vocab_size": len(vocab_tokens), **overrides}))
    return str(config), str(vocab)


def run_tool(script, args: list[str], timeout: float = 300):
    """`python script *args` from the project root on the CPU (TF's C++ logging at warnings and
    above): the finished `subprocess.CompletedProcess`, stdout and stderr captured as text."""
    import os
    import pathlib
    import subprocess
    import sys

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          env=env, cwd=pathlib.Path(__file__).resolve().parents[1],
                          timeout=timeout)


def read_results(path) -> dict[str, float]:
    """A tool's "name = value" results file (train_results.txt, eval_results.txt) as floats."""
    import pathlib

    return {k: float(v) for k, v in (line.split(" = ")
                                     for line in pathlib.Path(path).read_text().splitlines())}
