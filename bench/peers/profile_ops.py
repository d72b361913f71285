#!/usr/bin/env python
"""Per-op-type time breakdown of one harness adapter's encoder forward or train step (graph mode).

Runs the same forward the harness times (`tf.function(lambda b: enc(b, training=False))` on the
harness's random batch), traces a few steps with the TF profiler, reads the host XPlane and sums
the TF-op events by op type. Run it under the Python of the venv that holds the implementation:

  .venv/bin/python bench/peers/profile_ops.py --impl bench/peers/bert_tf_impl.py
  /work/venvs/mg21/bin/python bench/peers/profile_ops.py --impl modelgarden
  /work/venvs/kh/bin/python bench/peers/profile_ops.py --impl kerashub

Prints one JSON line: ms per step by op type (summed over threads; inter-op overlap is possible),
the op count per step, and the wall time per traced step. Also `--graph_ops` lists the op types
of the traced (pre-Grappler) graph, to compare the graphs the implementations build.
"""
import argparse
import collections
import glob
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", required=True)
    ap.add_argument("--harness", default=os.environ.get("BENCH_PEERS_DIR", os.path.normpath(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared",
                     "bench-peers"))))
    ap.add_argument("--task", choices=["infer", "pretrain"], default="infer",
                    help="infer: encoder forward; pretrain: the harness's custom train step")
    ap.add_argument("--config", default=None, help="default: base (infer), S (pretrain)")
    ap.add_argument("--batch", type=int, default=None, help="default: 8 (infer), 32 (pretrain)")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--jit", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--graph_ops", action="store_true")
    ap.add_argument("--precision", choices=["fp32", "mixed_bf16"], default="fp32",
                    help="mixed_bf16: the harness's Keras 'mixed_bfloat16' policy")
    ap.add_argument("--by_name", action="store_true", help="also sum by op name (top --top)")
    args = ap.parse_args()

    sys.path.insert(0, args.harness)
    import bench_bert  # the harness itself: same config, batch and adapter loading
    import numpy as np
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    impl_arg = os.path.abspath(args.impl) if args.impl.endswith(".py") else args.impl
    impl = bench_bert.load_impl(impl_arg)
    args.config = args.config or ("S" if args.task == "pretrain" else "base")
    args.batch = args.batch or (32 if args.task == "pretrain" else 8)
    cfg = dict(bench_bert.CONFIGS[args.config])
    cfg.update(vocab_size=30522, max_position=512, type_vocab_size=2, dropout=0.1,
               dtype_policy=None if args.precision == "fp32" else "mixed_bfloat16")
    data = bench_bert.make_batch(tf, np, cfg, args.batch, args.seq, 20)
    if args.task == "pretrain":
        pt = impl.Pretrainer(cfg)
        pt.build(data)
        fwd = bench_bert.custom_train_step(tf, pt, pt.make_optimizer(1e-4), bool(args.jit))

        def run_once():
            return float(fwd(data).numpy())
    else:
        enc = impl.Encoder(cfg)
        fwd = tf.function(lambda b: enc(b, training=False), jit_compile=bool(args.jit))

        def run_once():
            return float(tf.reduce_sum(fwd(data)[1]).numpy())
    for _ in range(args.warmup):
        run_once()

    result = {"impl": args.impl, "task": args.task, "config": args.config, "batch": args.batch, "seq": args.seq,
              "jit": args.jit, "precision": args.precision, "tf": tf.__version__}
    if args.graph_ops:
        graph = fwd.get_concrete_function(data).graph
        ops = collections.Counter(op.type for op in graph.get_operations())
        result["graph_op_types"] = dict(ops.most_common())
        result["graph_op_count"] = sum(ops.values())

    logdir = tempfile.mkdtemp(prefix="profile_ops_")
    tf.profiler.experimental.start(logdir)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        run_once()
    wall = (time.perf_counter() - t0) / args.steps
    tf.profiler.experimental.stop()

    paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    space = xplane_pb2.XSpace()
    with open(paths[0], "rb") as f:
        space.ParseFromString(f.read())
    shutil.rmtree(logdir, ignore_errors=True)  # the trace is read; nothing else needs it
    by_type = collections.Counter()
    by_name = collections.Counter()
    count = collections.Counter()
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        meta = plane.event_metadata
        for line in plane.lines:
            for ev in line.events:
                name = meta[ev.metadata_id].name
                # TF op events are "op_name:OpType"; python/runtime TraceMe events are skipped
                if ":" not in name or name.startswith(("$", "Python")) or " " in name:
                    continue
                op_type = name.rsplit(":", 1)[1]
                if not op_type or not (op_type[0].isupper() or op_type[0] == "_") or op_type in ("Process", "Run", "Record"):
                    continue
                by_type[op_type] += ev.duration_ps / 1e9  # ms
                by_name[name.rsplit(":", 1)[0]] += ev.duration_ps / 1e9
                count[op_type] += 1
    total = sum(by_type.values())
    result["wall_ms_per_step_traced"] = round(wall * 1e3, 1)
    result["op_ms_per_step_total"] = round(total / args.steps, 1)
    result["ops_per_step"] = int(sum(count.values()) / args.steps)
    result["ms_per_step_by_op_type"] = {
        k: round(v / args.steps, 1) for k, v in by_type.most_common(args.top)}
    result["count_per_step_by_op_type"] = {
        k: count[k] // args.steps for k, _ in by_type.most_common(args.top)}
    if args.by_name:
        result["ms_per_step_by_op_name"] = {
            k: round(v / args.steps, 1) for k, v in by_name.most_common(args.top)}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
