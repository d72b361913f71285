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
