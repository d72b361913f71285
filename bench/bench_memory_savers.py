#!/usr/bin/env python3
"""Peak memory (RSS) and step time of BERT fine-tuning with and without the memory savers
(issue 34): the plain step at batch 32, the same with `recompute_activations`, and batch 32 as
k=4 accumulated micro-batches of 8 (`gradient_accumulation_steps=4`).

  python bench/bench_memory_savers.py                       # BERT-Base, batch 32, seq 128
  python bench/bench_memory_savers.py --layers 2 --hidden 64 --heads 2 --intermediate 128 \
      --vocab 1000 --batch 8 --seq 16 --steps 2             # a smoke run

Each case runs in its own process (`--worker CASE`), so its peak RSS (`ru_maxrss`) is its own:
it builds a `BertClassifier` (2 labels, dropout 0.1 as the real configs), the fine-tuning loop's
step (`bert_tf.training.finetuning.make_train_step`: forward, loss, gradients, clip 1.0,
AdamWeightDecay) in one `tf.function` on a fixed random batch, traces and warms it up, then times
`--steps` steps. Reported per case: `peak_rss_mb` (the whole process: TensorFlow, weights, Adam
slots and the step's activations), `rss_before_step_mb` (after building the model and optimizer,
before the first step) and their difference `step_peak_mb`, and `step_ms` (median). The three
cases train on the same examples with the same update (accumulation: the same update up to
float rounding). Step times need a quiet machine; nothing is asserted. stdout: one JSON object.
`--out_dir DIR`: each case's result is written as DIR/<case>.json when it finishes (with the
load average then) and reused by a re-run with the same settings, so a killed bench keeps the
cases it finished.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
CASES = {"plain": {}, "recompute": {"recompute": True}, "accumulate_k4": {"k": 4}}


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def worker(args: argparse.Namespace) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    from bert_tf.modeling import BertClassifier, BertConfig
    from bert_tf.modeling.recompute import enable_recompute
    from bert_tf.training.finetuning import make_train_step
    from bert_tf.training.optimization import create_optimizer

    case = CASES[args.worker]
    keras.utils.set_random_seed(1)
    config = BertConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                        num_hidden_layers=args.layers, num_attention_heads=args.heads,
                        intermediate_size=args.intermediate, max_position_embeddings=512)
    model = BertClassifier(config, num_labels=2).build_from_config_shapes()
    if case.get("recompute"):
        enable_recompute(model)
    optimizer = create_optimizer(2e-5, 10000, 100)
    optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(0)
    ids = rng.integers(1, args.vocab, (args.batch, args.seq)).astype(np.int32)
    batch = {"input_word_ids": tf.constant(ids), "input_mask": tf.ones_like(ids),
             "input_type_ids": tf.zeros_like(ids),
             "label_ids": tf.constant(rng.integers(0, 2, args.batch).astype(np.int32))}

    def loss_fn(outputs, b):
        return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            b["label_ids"], outputs["logits"], from_logits=True))

    step = tf.function(make_train_step(model, optimizer, loss_fn,
                                       gradient_accumulation_steps=case.get("k", 1)))
    rss_before = _rss_mb()
    for _ in range(2):  # trace + warm-up
        step(batch)["loss"].numpy()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step(batch)["loss"].numpy()
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    return {"case": args.worker, "micro_batch": args.batch // case.get("k", 1),
            "peak_rss_mb": round(peak, 1), "rss_before_step_mb": round(rss_before, 1),
            "step_peak_mb": round(peak - rss_before, 1),
            "step_ms": round(1000 * statistics.median(times), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--intermediate", type=int, default=3072)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--out_dir", default=None,
                        help="each finished case as DIR/<case>.json, reused by a re-run")
    parser.add_argument("--worker", choices=tuple(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    sys.path.insert(0, str(HERE))
    from host import cpu_description

    results = []
    shared = [f"--{k}={getattr(args, k)}" for k in
              ("layers", "hidden", "heads", "intermediate", "vocab", "batch", "seq", "steps")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    config = {k: getattr(args, k) for k in
              ("layers", "hidden", "heads", "intermediate", "vocab", "batch", "seq", "steps")}
    for case in args.cases.split(","):
        path = os.path.join(args.out_dir, f"{case}.json") if args.out_dir else None
        if path and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
            if saved.get("config") != config:
                sys.exit(f"--out_dir: {path} was measured with {saved.get('config')}, not "
                         f"{config}; use another --out_dir")
            results.append(saved["result"])
            continue
        proc = subprocess.run([sys.executable, __file__, f"--worker={case}", *shared],
                              capture_output=True, text=True, env=env)
        if proc.returncode:
            sys.exit(f"case {case} failed:\n{proc.stderr[-3000:]}")
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        results[-1]["load_average_at_end"] = os.getloadavg()
        if path:
            os.makedirs(args.out_dir, exist_ok=True)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump({"config": config, "result": results[-1]}, f)
            os.replace(path + ".tmp", path)
    print(json.dumps({"bench": "memory_savers", "host": cpu_description(), "config": config,
                      "load_average": os.getloadavg(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
