#!/usr/bin/env python3
"""bert_tf's own BERT pretraining step (`PretrainingTrainer`'s train loop, what run_pretraining.py
runs), timed per step, optionally against another checkout of bert_tf in the same run.

  python bench/bench_bert_trainer_step.py                          # this checkout, fp32
  python bench/bench_bert_trainer_step.py --precision mixed_bfloat16
  git worktree add /tmp/before <commit>
  python bench/bench_bert_trainer_step.py --compare_with /tmp/before --passes 3

`bench_encoder.py --task pretrain` times a harness-owned step (the harness's loss and Adam) beside
the peers; this one times the trainer's step itself: the distributed iterator's next batch,
BertPretrainer forward with dropout, the original's masked-LM + NSP losses (and the accuracy
sums the loop logs), the gradient, global-norm clip 1.0, AdamWeightDecay (fused), the global step
and the step's history record. Config S (L4 H256 A4 I1024, vocab 30,522), batch 32, sequence 128,
20 masked positions, a fixed random batch, the trainer's defaults (last block at the predictions
only, XLA GELU).

Each pass runs every tree once, each in its own process (`--worker`, the tree first on
PYTHONPATH), in alternating order; a process traces, warms up, then times `--steps` steps. Run on
a quiet machine. stdout: one JSON object (median step ms per pass and overall; `ratio` = the
other tree's median / this one's, > 1: this checkout is faster). A benchmark: nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def worker(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    import bert_tf
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
    set_mixed_precision(args.precision)
    keras.utils.set_random_seed(1)
    with tempfile.TemporaryDirectory(prefix="bench_trainer_step_") as output_dir:
        options = TrainerOptions(output_dir=output_dir, train_batch_size=args.batch,
                                 learning_rate=1e-4, num_train_steps=10000, num_warmup_steps=10)
        trainer = PretrainingTrainer(config, options, strategy)
        rng = np.random.default_rng(0)
        b, s, p = args.batch, args.seq, args.masked
        ids = rng.integers(1000, config.vocab_size, (b, s)).astype(np.int32)
        positions = np.stack([np.sort(rng.choice(np.arange(1, s), p, replace=False))
                              for _ in range(b)]).astype(np.int32)
        batch = {k: tf.constant(v) for k, v in {
            "input_ids": ids, "input_mask": np.ones((b, s), np.int32),
            "segment_ids": np.zeros((b, s), np.int32), "masked_lm_positions": positions,
            "masked_lm_ids": np.take_along_axis(ids, positions, 1),
            "masked_lm_weights": np.ones((b, p), np.float32),
            "next_sentence_labels": rng.integers(0, 2, (b, 1)).astype(np.int32)}.items()}
        iterator = iter(strategy.distribute_datasets_from_function(
            lambda ctx: tf.data.Dataset.from_tensors(batch).repeat()))
        train_loop = trainer._make_train_loop()  # the loop train() runs
        one = tf.constant(1)
        for _ in range(args.warmup):
            train_loop(iterator, one)
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            loss = float(train_loop(iterator, one)["loss"].numpy()[0])
            times.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"bert_tf": os.path.dirname(os.path.dirname(bert_tf.__file__)),
                      "step_ms_median": round(statistics.median(times), 1),
                      "step_ms": [round(t, 1) for t in times], "last_loss": loss}))


def run_worker(tree: pathlib.Path, args: argparse.Namespace) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tree)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--precision", args.precision,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch),
           "--seq", str(args.seq), "--masked", str(args.masked)]
    proc = subprocess.run(cmd, env=env, cwd=str(tree), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"worker for {tree} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if pathlib.Path(result["bert_tf"]).resolve() != tree.resolve():
        raise SystemExit(f"worker for {tree} imported bert_tf from {result['bert_tf']}")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--precision", choices=["float32", "mixed_bfloat16"], default="float32")
    ap.add_argument("--compare_with", default=None,
                    help="another bert_tf checkout (e.g. a git worktree of an earlier commit)")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--masked", type=int, default=20)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    trees = {"this": ROOT}
    if args.compare_with:
        other = pathlib.Path(args.compare_with)
        if not (other / "bert_tf" / "__init__.py").is_file():
            ap.error(f"--compare_with={args.compare_with!r}: no bert_tf/ package there")
        trees["other"] = other
    per_pass: dict[str, list[float]] = {name: [] for name in trees}
    load_before = os.getloadavg()
    for i in range(args.passes):
        order = list(trees) if i % 2 == 0 else list(reversed(trees))
        for name in order:
            per_pass[name].append(run_worker(trees[name], args)["step_ms_median"])
    out = {"bench": "bert_tf bench_bert_trainer_step", "precision": args.precision,
           "config": "S (L4 H256 A4 I1024, vocab 30522)", "batch": args.batch, "seq": args.seq,
           "masked": args.masked, "steps_per_pass": args.steps,
           "trees": {k: str(v) for k, v in trees.items()},
           "step_ms_median_per_pass": per_pass,
           "step_ms_median": {k: round(statistics.median(v), 1) for k, v in per_pass.items()},
           "loadavg_1_5_15_before": [round(x, 2) for x in load_before],
           "loadavg_1_5_15_after": [round(x, 2) for x in os.getloadavg()]}
    if "other" in trees:
        out["ratio"] = round(out["step_ms_median"]["other"] / out["step_ms_median"]["this"], 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
