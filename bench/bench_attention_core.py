#!/usr/bin/env python3
"""The attention core alone (scores, mask, softmax, context) in TensorFlow as bert_tf's inference
graph runs it, against PyTorch's batched matmuls and its one fused call
(`scaled_dot_product_attention`, what Hugging Face's BERT runs on CPU): why long-sequence
prediction (IMDb at 256) trails HF more than short sequences do (issue 35).

  python bench/bench_attention_core.py                       # [16, 12, 256, 32], one thread
  python bench/bench_attention_core.py --seq 128 --threads 2

Cases, each on the same random q, k, v [batch, heads, seq, head_dim] (float32) and an additive
key mask [batch, 1, 1, seq] (0 or -10000, the last quarter of the keys masked):
  * tf_ops: `tf.matmul(q, k, transpose_b=True) + mask` (oneDNN fuses the add into one
    `_MklFusedBatchMatMulV2`; bert_tf folds 1/sqrt(D) into the query kernel at inference),
    `tf.nn.softmax`, `tf.matmul(probs, v)`, in one `tf.function` (what the encoder's attention
    runs between its projections);
  * tf_scores / tf_context: the two batched matmuls alone;
  * torch_bmm: the same three steps with `torch.matmul` and `torch.softmax`;
  * torch_sdpa: `torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)`
    with q pre-scaled by sqrt(D) so that it computes the same function (one call; PyTorch's CPU
    kernel works in query blocks and never writes the [seq, seq] scores to memory).
The largest difference of the outputs against tf_ops is reported (float rounding). Without
PyTorch the torch cases are skipped. stdout: one JSON object with the CPU, the settings and per
case the median ms of `--repeats` calls after `--warmup` and the batched-matmul GFLOP/s
(4 · batch · heads · seq² · head_dim per call, the two matmuls). A benchmark: nothing is asserted;
compare ratios within one run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def _median_ms(run, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--head_dim", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads of both (0: all)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np

    import bert_tf  # noqa: F401  (first: it picks TensorFlow's CPU kernels, bert_tf.cpu_setup)
    import tensorflow as tf

    from host import cpu_description  # bench/ is on sys.path

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    b, n, s, d = args.batch, args.heads, args.seq, args.head_dim
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((b, n, s, d)).astype(np.float32) for _ in range(3))
    q /= np.sqrt(d)  # the scale folded into the query, as bert_tf's inference graph does
    mask = np.zeros((b, 1, 1, s), np.float32)
    mask[..., (3 * s) // 4:] = -10000.0
    tq, tk, tv, tmask = (tf.constant(x) for x in (q, k, v, mask))

    @tf.function
    def tf_ops():
        scores = tf.matmul(tq, tk, transpose_b=True) + tmask
        return tf.matmul(tf.nn.softmax(scores, axis=-1), tv)

    probs = tf.nn.softmax(tf.matmul(tq, tk, transpose_b=True) + tmask, axis=-1)
    tf_scores = tf.function(lambda: tf.matmul(tq, tk, transpose_b=True))
    tf_context = tf.function(lambda: tf.matmul(probs, tv))
    want = tf_ops().numpy()
    flops = 4.0 * b * n * s * s * d
    cases: dict = {}
    for name, run in (("tf_ops", lambda: tf_ops().numpy()),
                      ("tf_scores", lambda: tf_scores().numpy()),
                      ("tf_context", lambda: tf_context().numpy())):
        cases[name] = {"ms": _median_ms(run, args.warmup, args.repeats)}
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        if args.threads:
            torch.set_num_threads(args.threads)
        pq, pk, pv, pmask = (torch.from_numpy(x) for x in (q, k, v, mask))
        scale_back = float(np.sqrt(d))  # sdpa divides by sqrt(D) itself

        def bmm():
            return torch.matmul(torch.softmax(torch.matmul(pq, pk.transpose(-1, -2)) + pmask,
                                              dim=-1), pv)

        def sdpa():
            return torch.nn.functional.scaled_dot_product_attention(
                pq * scale_back, pk, pv, attn_mask=pmask)

        with torch.inference_mode():
            for name, run in (("torch_bmm", bmm), ("torch_sdpa", sdpa)):
                cases[name] = {"ms": _median_ms(run, args.warmup, args.repeats),
                               "max_abs_diff_vs_tf_ops": float(np.abs(run().numpy() - want).max())}
        cases["torch_version"] = torch.__version__
    for name, case in cases.items():
        if isinstance(case, dict) and name in ("tf_ops", "torch_bmm", "torch_sdpa"):
            case["gflops"] = round(flops / case["ms"] / 1e6, 1)
        elif isinstance(case, dict):
            case["gflops"] = round(flops / 2 / case["ms"] / 1e6, 1)
    summary = {"bench": "bert_tf attention core", "cpu": cpu_description(),
               "onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
               "tensorflow": tf.__version__,
               "settings": {**vars(args)}, "cases": cases,
               "loadavg_1_5_15": list(os.getloadavg())}
    if "torch_sdpa" in cases:
        summary["tf_ops_over_torch_sdpa"] = round(cases["tf_ops"]["ms"] /
                                                  cases["torch_sdpa"]["ms"], 3)
        summary["tf_ops_over_torch_bmm"] = round(cases["tf_ops"]["ms"] /
                                                 cases["torch_bmm"]["ms"], 3)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
