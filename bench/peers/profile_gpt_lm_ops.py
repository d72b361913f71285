#!/usr/bin/env python
"""Per-op-type time breakdown of one GPT LM train step of a bench_gpt_lm adapter (graph mode).

Builds the adapter's `LmTrainStep` exactly as bench/bench_gpt_lm.py's worker does (same random
batch), traces a few steps with the TF profiler, reads the host XPlane and sums the TF-op events
by op type (and, with --by_name, by op name). Run it under the Python of the adapter's venv:

  .venv/bin/python bench/peers/profile_gpt_lm_ops.py --impl bench/peers/gpt_bert_tf_lm.py [--precision mixed_bfloat16]
  /work/venvs/kh/bin/python bench/peers/profile_gpt_lm_ops.py --impl bench/peers/gpt2_kerashub_lm.py

Prints one JSON line: ms per step by op type (summed over threads; inter-op overlap possible),
op count per step and the wall time per traced step.
"""
from __future__ import annotations

import argparse
import collections
import glob
import importlib.util
import json
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _bench_host():
    """bench/host.py, loaded by path (this file sits in bench/peers/)."""
    spec = importlib.util.spec_from_file_location(
        "bench_host", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                   "host.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    host = _bench_host()
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", required=True, help="path of an LM adapter (bench/peers/*_lm.py)")
    ap.add_argument("--n_layer", type=int, default=4)
    ap.add_argument("--n_embd", type=int, default=256)
    ap.add_argument("--n_head", type=int, default=4)
    ap.add_argument("--n_ctx", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--n_vocab", type=int, default=40478)
    ap.add_argument("--jit", type=int, default=0)
    ap.add_argument("--precision", choices=("float32", "mixed_bfloat16"), default="float32")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--by_name", action="store_true", help="also sum by op name")
    ap.add_argument("--onednn", choices=host.ONEDNN_CHOICES, default="auto",
                    help=host.ONEDNN_HELP + "; set before TensorFlow loads")
    args = ap.parse_args()

    onednn_vars, onednn_record = host.onednn_env(args.onednn)
    os.environ.update(onednn_vars)

    import numpy as np
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    spec = importlib.util.spec_from_file_location("lm_adapter", os.path.abspath(args.impl))
    adapter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(adapter)
    cfg = dict(n_layer=args.n_layer, n_embd=args.n_embd, n_head=args.n_head, n_ctx=args.n_ctx,
               n_vocab=args.n_vocab, n_special=3, dropout=0.1, batch=args.batch)
    rng = np.random.default_rng(0)  # as bench_gpt_lm.py's worker
    tokens = rng.integers(0, cfg["n_vocab"], size=(cfg["batch"], cfg["n_ctx"] + 1), dtype=np.int32)
    step = adapter.LmTrainStep(cfg, tokens, 2.5e-4, bool(args.jit), args.precision)
    for _ in range(args.warmup):
        step()
    logdir = tempfile.mkdtemp(prefix="profile_gpt_lm_")
    tf.profiler.experimental.start(logdir)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    wall = (time.perf_counter() - t0) / args.steps
    tf.profiler.experimental.stop()
    space = xplane_pb2.XSpace()
    with open(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0], "rb") as f:
        space.ParseFromString(f.read())
    by_type, count, by_name = collections.Counter(), collections.Counter(), collections.Counter()
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            for ev in line.events:
                name = plane.event_metadata[ev.metadata_id].name
                if ":" not in name or name.startswith(("$", "Python")) or " " in name:
                    continue
                op_name, op_type = name.rsplit(":", 1)
                if not op_type or not (op_type[0].isupper() or op_type[0] == "_") or op_type in (
                        "Process", "Run", "Record"):
                    continue
                by_type[op_type] += ev.duration_ps / 1e9
                count[op_type] += 1
                by_name[op_name] += ev.duration_ps / 1e9
    import shutil
    shutil.rmtree(logdir, ignore_errors=True)
    result = {"impl": args.impl, "cfg": cfg, "jit": args.jit, "precision": args.precision,
              "tf": tf.__version__, "onednn": onednn_record,
              "wall_ms_per_step_traced": round(wall * 1e3, 1),
              "op_ms_per_step_total": round(sum(by_type.values()) / args.steps, 1),
              "ops_per_step": int(sum(count.values()) / args.steps),
              "ms_per_step_by_op_type": {k: round(v / args.steps, 1)
                                         for k, v in by_type.most_common(args.top)},
              "count_per_step_by_op_type": {k: count[k] // args.steps
                                            for k, _ in by_type.most_common(args.top)}}
    if args.by_name:
        result["ms_per_step_by_op_name"] = {k: round(v / args.steps, 1)
                                            for k, v in by_name.most_common(args.top)}
    if hasattr(step, "close"):
        step.close()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
