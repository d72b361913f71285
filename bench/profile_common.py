"""What bench/profile_train_step.py and bench/profile_finetune.py share (found by the duplicate
finder): the checkouts an A/B compares, one worker process per case run in a given checkout,
the profiled calls under `tf.profiler`, their op events summed per category, and the load
average and timing note of the JSON report; and, with bench/bench_bert_trainer_step.py, the BERT
config-S pretraining step both run.

  trees = checkout_trees(ap, args.compare_with)      # {"this": ROOT[, "other": path]}
  result = run_in_tree(script, tree, worker_args, what)  # the worker's last stdout JSON line
  step, close = bert_pretraining_step("float32")     # step() -> the step's loss
  tally, value, wall_s = profile_calls(run, calls)   # op-ms by category, type and name
  report.update(report_tail(load_before))            # or load_averages(load_before)

A helper of the bench scripts (run from bench/, not part of the bert_tf package).
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable, Sequence

ROOT = pathlib.Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
TIMING_NOTE = ("op-ms from the TF profiler summed over threads; compare ratios within one run, "
               "not ms across runs or machines")
_GRAPPLER_SCOPE = re.compile(r"\w*Optimizer/")


def checkout_trees(ap, compare_with: str | None) -> dict[str, pathlib.Path]:
    """{"this": this checkout} and, with `compare_with`, {"other": that checkout}; an argparse
    error naming the flag when it holds no bert_tf/ package."""
    trees = {"this": ROOT}
    if compare_with:
        other = pathlib.Path(compare_with)
        if not (other / "bert_tf" / "__init__.py").is_file():
            ap.error(f"--compare_with={compare_with!r}: no bert_tf/ package there")
        trees["other"] = other
    return trees


def run_in_tree(script: str, tree: pathlib.Path, worker_args: Sequence[str], what: str,
                env: dict | None = None) -> dict:
    """Runs `python script --worker *worker_args` with `tree` (then bench/) first on PYTHONPATH
    and `tree` as the working folder; returns the JSON of its last stdout line. Exits with the
    worker's stderr tail when it fails, or when it imported bert_tf from another checkout (its
    JSON's "bert_tf")."""
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tree), str(BENCH)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run([sys.executable, os.path.abspath(script), "--worker", *worker_args],
                          env=env, cwd=str(tree), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"worker {what} for {tree} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if pathlib.Path(result["bert_tf"]).resolve() != tree.resolve():
        raise SystemExit(f"worker for {tree} imported bert_tf from {result['bert_tf']}")
    return result


def bert_pretraining_step(precision: str, batch: int = 32, seq: int = 128, masked: int = 20,
                          jit: bool = False) -> tuple[Callable[[], float], Callable[[], None]]:
    """One step of `PretrainingTrainer`'s own train loop (what run_pretraining.py runs) per call,
    for BERT config S (L4 H256 A4 I1024, vocab 30,522; the trainer's defaults: learning rate
    1e-4, 10 warm-up steps, XLA GELU, `jit` = `jit_compile`) in `precision`, on one fixed
    random batch (seed 0) of `batch` rows of `seq` tokens with `masked` predictions each
    (positions in 1..seq-1), through the strategy's distributed iterator, one device.

    Sets the global Keras policy and seed (1). Works with checkouts from before
    bert_tf/training/precision.py (`--compare_with`), and before `jit_compile` when `jit` is off.

    Returns: (step() -> the step's loss as a float, close() removing the trainer's output folder).
    """
    import keras
    import numpy as np
    import tensorflow as tf

    from bert_tf.modeling import BertConfig
    from bert_tf.training.distribution import create_strategy
    from bert_tf.training.pretraining_loop import PretrainingTrainer, TrainerOptions
    try:
        from bert_tf.training.precision import set_mixed_precision
    except ImportError:  # a --compare_with checkout from before bert_tf/training/precision.py
        from bert_tf.training.pretraining_loop import set_mixed_precision
    config = BertConfig(vocab_size=30522, hidden_size=256, num_hidden_layers=4,
                        num_attention_heads=4, intermediate_size=1024)
    strategy = create_strategy("one_device")
    set_mixed_precision(precision)
    keras.utils.set_random_seed(1)
    output_dir = tempfile.mkdtemp(prefix="bert_pretraining_step_")
    options = TrainerOptions(output_dir=output_dir, train_batch_size=batch, learning_rate=1e-4,
                             num_train_steps=10000, num_warmup_steps=10,
                             **({"jit_compile": True} if jit else {}))
    trainer = PretrainingTrainer(config, options, strategy)
    rng = np.random.default_rng(0)
    b, s, p = batch, seq, masked
    ids = rng.integers(1000, config.vocab_size, (b, s)).astype(np.int32)
    positions = np.stack([np.sort(rng.choice(np.arange(1, s), p, replace=False))
                          for _ in range(b)]).astype(np.int32)
    features = {k: tf.constant(v) for k, v in {
        "input_ids": ids, "input_mask": np.ones((b, s), np.int32),
        "segment_ids": np.zeros((b, s), np.int32), "masked_lm_positions": positions,
        "masked_lm_ids": np.take_along_axis(ids, positions, 1),
        "masked_lm_weights": np.ones((b, p), np.float32),
        "next_sentence_labels": rng.integers(0, 2, (b, 1)).astype(np.int32)}.items()}
    iterator = iter(strategy.distribute_datasets_from_function(
        lambda ctx: tf.data.Dataset.from_tensors(features).repeat()))
    train_loop = trainer._make_train_loop()  # the loop train() runs
    one = tf.constant(1)

    def step() -> float:
        return float(train_loop(iterator, one)["loss"].numpy()[0])

    def another_step() -> Callable[[], float]:
        """A second trace of the same loop (same trainer, model, optimizer and batches), made
        with whatever model settings are in effect when it is first called."""
        loop = trainer._make_train_loop()
        return lambda: float(loop(iterator, one)["loss"].numpy()[0])

    step.trainer, step.another_step = trainer, another_step  # for in-process A/B (--toggle)
    return step, lambda: shutil.rmtree(output_dir, ignore_errors=True)


@dataclasses.dataclass
class OpTally:
    """Op events of `calls` profiled calls, summed (ms) and counted per category, op type
    ("<type> (<category>)") and op name."""

    calls: int
    ms: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    count: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    type_ms: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    type_count: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    name_ms: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def by_category(self, categories: Sequence[str]) -> dict:
        """Per call: total op-ms, op count, op-ms and op count per category."""
        n = self.calls
        return {"op_ms": round(sum(self.ms.values()) / n, 1),
                "ops": int(sum(self.count.values()) // n),
                "op_ms_by_category": {c: round(self.ms[c] / n, 2) for c in categories},
                "ops_by_category": {c: int(self.count[c] // n) for c in categories}}

    def top_types(self, top: int, with_counts: bool = False) -> dict:
        """The `top` op types by op-ms per call (with their op count per call)."""
        n = self.calls
        return {k: [round(v / n, 2), int(self.type_count[k] // n)] if with_counts
                else round(v / n, 2) for k, v in self.type_ms.most_common(top)}

    def top_names(self, top: int) -> dict:
        return {k: round(v / self.calls, 2) for k, v in self.name_ms.most_common(top)}


def profile_calls(run: Callable[[], float], calls: int, fine_names: bool = False
                  ) -> tuple[OpTally, float, float]:
    """Runs `run()` `calls` times under `tf.profiler` and tallies the host's TF-op events by
    `profile_train_step.categorize`.

    `fine_names`: drop the profiler's StartRegion/StopRegion markers, strip grappler's
    "<Name>Optimizer/" scope from op names (or "optimizer" would claim e.g. the arithmetic
    optimizer's AddN of the residual adds) and name ops "<name> (<type>, <category>)".

    Returns: (the tally, run()'s last value, wall seconds per call).
    """
    import tensorflow as tf

    from profile_train_step import categorize, read_events  # bench/ is on sys.path
    logdir = tempfile.mkdtemp(prefix="profile_trace_")
    tally = OpTally(calls)
    try:
        tf.profiler.experimental.start(logdir)
        start = time.perf_counter()
        try:
            for _ in range(calls):
                value = run()
            wall = (time.perf_counter() - start) / calls
        finally:
            tf.profiler.experimental.stop()
        for op_name, op_type, ms in read_events(logdir):
            if fine_names:
                if op_type in ("StartRegion", "StopRegion"):  # profiler markers, not ops
                    continue
                op_name = _GRAPPLER_SCOPE.sub("", op_name)
            cat = categorize(op_name, op_type)
            tally.ms[cat] += ms
            tally.count[cat] += 1
            tally.type_ms[f"{op_type} ({cat})"] += ms
            tally.type_count[f"{op_type} ({cat})"] += 1
            tally.name_ms[f"{op_name} ({op_type}, {cat})" if fine_names else op_name] += ms
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    return tally, value, wall


def load_averages(load_before: Sequence[float]) -> dict:
    """The load averages (1, 5, 15 min) before the run and now."""
    return {"loadavg_1_5_15_before": [round(x, 2) for x in load_before],
            "loadavg_1_5_15_after": [round(x, 2) for x in os.getloadavg()]}


def report_tail(load_before: Sequence[float]) -> dict:
    """The timing note and the load averages (1, 5, 15 min) before the run and now."""
    return {"timing_note": TIMING_NOTE, **load_averages(load_before)}
