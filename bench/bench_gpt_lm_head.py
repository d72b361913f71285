#!/usr/bin/env python3
"""The tied LM head of a GPT LM train step, op by op (the part both sides of bench_gpt_lm.py share).

  python bench/bench_gpt_lm_head.py                    # bench_gpt_lm.py's default size
  python bench/bench_gpt_lm_head.py --tokens 2032 --repeats 9 --chunks 254,508

At bench_gpt_lm.py's default size (L4 H256, n_ctx 128, batch 8) one step predicts
N = 8 x 127 = 1,016 tokens over R = 40,478 + 3 + 128 = 40,609 table rows (GPT-1's table holds the
vocabulary, the specials and the positions; keras-hub's GPT-2 head has 40,481 rows) of width
H = 256. Timed here, each as one tf.function on random data (no dropout, no optimizer):

  fwd_h_WT     logits = h @ Wᵀ                      [N, H] x [R, H]ᵀ -> [N, R]   (2·N·H·R FLOP)
  grad_h_GW    dh = G @ W                           [N, R] x [R, H]  -> [N, H]
  grad_W_GTh   dW = Gᵀ @ h                          [N, R]ᵀ x [N, H] -> [R, H]
  xent         SparseSoftmaxCrossEntropyWithLogits on [N, R] (loss and its gradient, one op)
  xent_xla     bert_tf's cross-entropy (bert_tf.modeling.cross_entropy: two XLA kernels), loss
               and gradient, what bert_tf's GPT and BERT losses run
  lm_head_tape the whole head with its gradient: GradientTape around h @ Wᵀ + the summed sparse
               softmax cross-entropy, gradient w.r.t. h and W (what keras-hub's train step runs;
               `_xla_xent`: with bert_tf's cross-entropy, what bert_tf's step runs)
  lm_head_chunked_<C>  the same in chunks of C tokens, the gradient computed in the forward
               (the cross-entropy op's backprop output, then dh and dW per chunk): less memory
               traffic on the [N, R] logits, if it helps
  bf16_fwd_h_WT  the forward matmul in bfloat16 (inputs cast beforehand)
  bf16_lm_head_tape  the tape head as a mixed_bfloat16 policy runs it: float32 variables cast to
               bfloat16, bf16 matmul, the cross-entropy in float32
  square_<n>   an n x n x n float32 / bfloat16 matmul: this run's reference peak

Each figure: the median of --repeats timed calls (>= 5) after --warmup calls; matmuls also as
GFLOP/s. A CPU tf.function call returns when its outputs are computed. Run on a quiet machine
(the load averages before and after are recorded). stdout: one JSON object. A benchmark, not a
test: nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bert_tf.modeling.cross_entropy import sparse_softmax_cross_entropy  # noqa: E402


def median_ms(fn, warmup: int, repeats: int) -> float:
    """Median wall time in ms of `repeats` calls of `fn` after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def tf_xent(targets: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """TensorFlow's kernel on float32 logits (what keras-hub's loss and bert_tf before runs)."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets,
                                                          logits=tf.cast(logits, tf.float32))


def tape_head(h: tf.Variable, w: tf.Variable, targets: tf.Tensor, dtype: tf.DType,
              xent=tf_xent):
    """The tied LM head with its gradient: loss, [dh, dW] (matmul in `dtype`, loss in float32)."""
    with tf.GradientTape() as tape:
        logits = tf.matmul(tf.cast(h, dtype), tf.cast(w, dtype), transpose_b=True)
        loss = tf.reduce_sum(xent(targets, logits))
    return loss, tape.gradient(loss, [h, w])


def xla_xent_with_gradient(targets: tf.Tensor, logits: tf.Tensor):
    """bert_tf's cross-entropy (`bert_tf.modeling.cross_entropy`): loss and its gradient."""
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = tf.reduce_sum(sparse_softmax_cross_entropy(targets, logits))
    return loss, tape.gradient(loss, logits)


def chunked_head(h: tf.Variable, w: tf.Variable, targets: tf.Tensor, chunk: int):
    """The same loss and gradient, `chunk` tokens at a time, the gradient from the forward."""
    n = int(h.shape[0])
    sizes = [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])
    loss, dhs, dw = 0.0, [], None
    for hc, tc in zip(tf.split(h, sizes), tf.split(targets, sizes)):
        logits = tf.matmul(hc, w, transpose_b=True)
        token_losses, dlogits = tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(
            features=logits, labels=tc)
        loss += tf.reduce_sum(token_losses)
        dhs.append(tf.matmul(dlogits, w))
        g = tf.matmul(dlogits, hc, transpose_a=True)
        dw = g if dw is None else dw + g
    return loss, [tf.concat(dhs, 0), dw]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=8 * 127, help="N: predicted tokens per step")
    ap.add_argument("--rows", type=int, default=40478 + 3 + 128, help="R: rows of the tied table")
    ap.add_argument("--n_embd", type=int, default=256, help="H")
    ap.add_argument("--chunks", default="127,254,508", help="chunk sizes (tokens) to time")
    ap.add_argument("--square", type=int, default=2048, help="n of the reference n^3 matmul")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    if args.repeats < 5:
        ap.error(f"--repeats={args.repeats}: expected >= 5 (the figure is a median)")
    chunks = [int(c) for c in args.chunks.split(",") if c.strip()]
    if any(c <= 0 for c in chunks):
        ap.error(f"--chunks={args.chunks!r}: expected positive integers")

    n, r, hd = args.tokens, args.rows, args.n_embd
    rng = np.random.default_rng(0)
    h = tf.Variable(rng.normal(0, 0.1, (n, hd)).astype(np.float32))
    w = tf.Variable(rng.normal(0, 0.02, (r, hd)).astype(np.float32))  # GPT-1's init scale
    g = tf.constant(rng.normal(0, 1e-3, (n, r)).astype(np.float32))  # a logits gradient
    targets = tf.constant(rng.integers(0, r, n), tf.int32)
    h16, w16 = tf.cast(h, tf.bfloat16), tf.cast(w, tf.bfloat16)
    sq = args.square
    a_sq = tf.constant(rng.normal(size=(sq, sq)).astype(np.float32))
    a_sq16 = tf.cast(a_sq, tf.bfloat16)

    head_flop = 2 * n * hd * r
    ops = {  # name: (function, FLOP or None)
        "fwd_h_WT": (lambda: tf.matmul(h, w, transpose_b=True), head_flop),
        "grad_h_GW": (lambda: tf.matmul(g, w), head_flop),
        "grad_W_GTh": (lambda: tf.matmul(g, h, transpose_a=True), head_flop),
        "xent": (lambda: tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(
            features=g, labels=targets), None),
        "xent_xla": (lambda: xla_xent_with_gradient(targets, g), None),
        "lm_head_tape": (lambda: tape_head(h, w, targets, tf.float32), 3 * head_flop),
        "lm_head_tape_xla_xent": (lambda: tape_head(h, w, targets, tf.float32,
                                                    sparse_softmax_cross_entropy), 3 * head_flop),
        **{f"lm_head_chunked_{c}": ((lambda c=c: chunked_head(h, w, targets, c)), 3 * head_flop)
           for c in chunks},
        "bf16_fwd_h_WT": (lambda: tf.matmul(h16, w16, transpose_b=True), head_flop),
        "bf16_lm_head_tape": (lambda: tape_head(h, w, targets, tf.bfloat16), 3 * head_flop),
        "bf16_lm_head_tape_xla_xent": (lambda: tape_head(h, w, targets, tf.bfloat16,
                                                         sparse_softmax_cross_entropy),
                                       3 * head_flop),
        f"square_{sq}_fp32": (lambda: tf.matmul(a_sq, a_sq), 2 * sq ** 3),
        f"square_{sq}_bf16": (lambda: tf.matmul(a_sq16, a_sq16), 2 * sq ** 3),
    }
    load_before = os.getloadavg()
    results = {}
    t_start = time.time()
    for name, (fn, flop) in ops.items():
        ms = median_ms(tf.function(fn), args.warmup, args.repeats)
        results[name] = {"ms": round(ms, 1)}
        if flop:
            results[name]["gflop_per_s"] = round(flop / ms / 1e6, 1)
    out = {
        "bench": "bert_tf bench_gpt_lm_head", "tokens": n, "rows": r, "n_embd": hd,
        "head_matmul_gflop": round(head_flop / 1e9, 2), "warmup": args.warmup,
        "repeats": args.repeats, "statistic": "median ms per call",
        "tensorflow": tf.__version__, "intra_op_threads": tf.config.threading.
        get_intra_op_parallelism_threads(), "cpus": os.cpu_count(),
        "loadavg_1_5_15_before": [round(x, 2) for x in load_before],
        "loadavg_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.time() - t_start, 1), "ops": results,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
