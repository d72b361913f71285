"""bert_tf's own sides of the benchmarks run against the library's current API: the GPT LM
adapter (bench/peers/gpt_bert_tf_lm.py, bench_gpt_lm.py's bert_tf side) and
bench_bert_trainer_step.py. Both broke once when set_mixed_precision moved to
bert_tf.training.precision: bench_gpt_lm then reported keras-hub alone, and the trainer-step
bench failed. The benchmarks assert nothing; these tests only check that they still run."""
from __future__ import annotations

import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"
ADAPTER = BENCH / "peers" / "gpt_bert_tf_lm.py"
CFG = dict(n_layer=1, n_embd=32, n_head=2, n_ctx=16, n_vocab=97, n_special=3, dropout=0.1)


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
def test_gpt_lm_adapter_trains_one_step_at_a_time(precision):
    spec = importlib.util.spec_from_file_location("bench_gpt_bert_tf_lm", ADAPTER)
    adapter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(adapter)
    tokens = np.random.default_rng(0).integers(0, CFG["n_vocab"], (4, CFG["n_ctx"] + 1))
    try:
        step = adapter.LmTrainStep(CFG, tokens.astype(np.int32), learning_rate=1e-2, jit=False,
                                   precision=precision)
        try:
            losses = [step() for _ in range(4)]
        finally:
            step.close()
    finally:
        keras.config.set_dtype_policy("float32")  # the adapter sets the run's global policy
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]  # the same batch four times: the optimizer updates the model
    assert precision in step.description


@pytest.mark.long
def test_bert_trainer_step_bench_runs_the_trainers_step(tmp_path):
    """One pass of one step, at a tiny batch, through the script's worker process."""
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_bert_trainer_step.py"), "--passes", "1", "--steps",
         "1", "--warmup", "1", "--batch", "2", "--seq", "16", "--masked", "2"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["step_ms_median"]["this"] > 0


@pytest.mark.long
def test_bert_trainer_step_bench_toggles_a_model_setting_in_one_process(tmp_path):
    """`--toggle`: the masked-LM head's XLA widening traced both ways in one process (bf16, where
    the setting changes the graph), alternated; the setting is restored on the model."""
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_bert_trainer_step.py"), "--precision",
         "mixed_bfloat16", "--toggle", "masked_lm.xla_in_training", "--rounds", "2", "--warmup",
         "1", "--batch", "2", "--seq", "16", "--masked", "2"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["as_built"] is True and report["flipped"] is False
    assert len(report["step_ms"]["as_built"]) == len(report["step_ms"]["flipped"]) == 2
    assert report["ratio_flipped_over_as_built_median"] > 0
    bad = subprocess.run(
        [sys.executable, str(BENCH / "bench_bert_trainer_step.py"), "--toggle",
         "masked_lm.config", "--rounds", "1", "--warmup", "1", "--batch", "2", "--seq", "16",
         "--masked", "2"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert bad.returncode != 0 and "expected a bool attribute" in bad.stderr


@pytest.mark.long
def test_fused_kernels_bench_times_the_library_kernels(tmp_path):
    """bench_fused_kernels.py at a tiny shape: every case timed, the XLA pass counts read from
    the optimised HLO, and its dropped alternatives compute the library kernels' gradients."""
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_fused_kernels.py"), "--rows", "64", "--hidden", "32",
         "--rounds", "1", "--calls", "2", "--dtypes", "float32"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)["by_dtype"]["float32"]
    assert {"layer_norm_forward", "layer_norm_backward", "bias_gelu_forward",
            "bias_gelu_backward", "plain_xla_scale_add"} <= set(report)
    assert all(report[k]["rounds_ms"][0] > 0 for k in ("layer_norm_forward", "bias_gelu_forward"))
    assert all(n >= 1 for n in report["hlo_kernels"].values())
    assert max(report["alternatives_max_rel_diff"].values()) < 1e-4
