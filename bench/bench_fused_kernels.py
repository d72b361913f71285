"""The training step's fused elementwise kernels against the memory they move (issue 35).

  python bench/bench_fused_kernels.py [--threads=0] [--dtypes=float32,bfloat16] [--rounds=5]
      [--calls=20] [--xla_flag_sweep]

Prints one JSON object (never asserts anything). Per dtype, the time per call of each kernel
below, timed as `--calls` calls chained inside ONE traced function (each call's input depends
on the previous result, so Python's dispatch and TensorFlow's per-call overhead are not in the
figure; the chain's own add is timed as "chain_only" and subtracted), median over `--rounds`
rounds that alternate the kernels:

  * plain_xla_scale_add: XLA `x * s + r` over [rows, H] (the memory-speed reference);
  * layer_norm_forward / layer_norm_backward: `bert_tf.modeling.fused`'s dropout + residual +
    LayerNorm kernels over [rows, H] with a bool keep mask;
  * bias_gelu_forward / bias_gelu_backward: its bias + GELU kernels over [rows, 4H];
  * gelu_recompute_forward_backward vs bias_gelu_forward_backward: a dropped alternative that
    keeps only the biased input and recomputes tanh in the backward;
  * fused_batch_norm_layer_norm vs fused_layer_norm_forward_backward: a dropped alternative, the
    LayerNorm (+ dropout, residual, gamma, beta) through `FusedBatchNormV3` on [1, rows, H, 1]
    NCHW (the Keras 2 trick; oneDNN's kernel where oneDNN is on).

Each kernel's "gb_per_s" is the bytes its inputs and outputs hold divided by its time; the
"hlo_kernels" of the four bert_tf kernels count the fusions, custom calls and reductions in
XLA's optimised HLO (`experimental_get_compiler_ir(stage="optimized_hlo")`), i.e. how many
passes XLA's CPU compiler made of one kernel. Also recorded: a numpy copy's bandwidth (the
VM's memory speed) and the CPU. `--xla_flag_sweep` runs the same in one child process per XLA
flag set (XLA_FLAGS is read once per process): none, YNNPACK fusions off, 512-bit vectors, the
fusion emitters off. Shapes: config S's [4,096, 256] (batch 32 x 128 positions, H 256).
"""
from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

from absl import app, flags
from host import cpu_description

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

FLAGS = flags.FLAGS
flags.DEFINE_integer("threads", 0, "intra-op threads (0: all cores); one inter-op thread")
DTYPES = ("float32", "bfloat16")
flags.DEFINE_list("dtypes", list(DTYPES), "the kernels' input dtypes (float32, bfloat16)")
flags.DEFINE_integer("rounds", 5, "alternating rounds; the median is reported")
flags.DEFINE_integer("calls", 20, "chained calls per timed traced function")
flags.DEFINE_integer("rows", 4096, "rows (batch x positions)")
flags.DEFINE_integer("hidden", 256, "H; the GELU runs over [rows, 4H]")
flags.DEFINE_bool("xla_flag_sweep", False, "one child process per XLA flag set")
flags.register_validator("dtypes", lambda v: bool(v) and set(v) <= set(DTYPES),
                         message=f"--dtypes: a comma-separated subset of {', '.join(DTYPES)}")
for _name in ("threads", "rounds", "calls", "rows", "hidden"):
    flags.register_validator(_name, lambda v, n=_name: v >= (0 if n == "threads" else 1),
                             message=f"--{_name}: expected an integer >= "
                                     f"{0 if _name == 'threads' else 1}")

SWEEP = {"default": "", "ynn_fusions_off": "--xla_cpu_experimental_ynn_fusion_type=",
         "vector_width_512": "--xla_cpu_prefer_vector_width=512",
         "fusion_emitters_off": "--xla_cpu_use_fusion_emitters=false"}


def copy_bandwidth_gb_per_s() -> dict:
    """numpy copies of 16 and 256 MB: bytes read + written per second (median of 10)."""
    import numpy as np
    out = {}
    for mb in (16, 256):
        a = np.ones(mb * 2**20 // 4, np.float32)
        b = np.empty_like(a)
        np.copyto(b, a)
        times = []
        for _ in range(10):
            t0 = time.perf_counter()
            np.copyto(b, a)
            times.append(time.perf_counter() - t0)
        out[f"copy_{mb}mb"] = round(2 * mb / 1024 / statistics.median(times), 2)
    return out


def hlo_kernels(fn, *args) -> int:
    """The fusions, custom calls and reductions in the ENTRY computation of `fn`'s optimised
    HLO for `args` (each one pass of the kernel)."""
    text = fn.experimental_get_compiler_ir(*args)(stage="optimized_hlo")
    entry = text[text.index("\nENTRY"):]
    return len(re.findall(r"= \S+ (?:fusion|custom-call|reduce|reduce-window)\(", entry))


def measure(dtype_name: str) -> dict:
    import numpy as np
    import tensorflow as tf

    from bert_tf.modeling import fused

    kernels = fused.xla_kernels()
    ln_forward, ln_backward = kernels["layer_norm_forward"], kernels["layer_norm_backward"]
    gelu_forward, gelu_backward = kernels["bias_gelu_forward"], kernels["bias_gelu_backward"]
    rows, h = FLAGS.rows, FLAGS.hidden
    dtype = tf.as_dtype(dtype_name)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((rows, h)), dtype)
    residual = tf.constant(rng.standard_normal((rows, h)), dtype)
    keep = tf.constant(rng.random((rows, h)) >= 0.1)
    gamma = tf.constant(rng.standard_normal(h), tf.float32)
    beta = tf.constant(rng.standard_normal(h), tf.float32)
    scale = tf.constant(1 / 0.9, dtype)
    eps = tf.constant(1e-12, tf.float32)
    wide = tf.constant(rng.standard_normal((rows, 4 * h)), dtype)
    bias = tf.constant(rng.standard_normal(4 * h) * 0.1, dtype)
    _, normalized, rstd = ln_forward(x, keep, residual, gamma, beta, eps, None, scale)
    _, gelu_x, gelu_t = gelu_forward(wide, bias)
    upstream = tf.constant(rng.standard_normal((rows, h)), dtype)
    wide_upstream = tf.constant(rng.standard_normal((rows, 4 * h)), dtype)

    scale_add = tf.function(lambda a, r: a * scale + r, jit_compile=True, autograph=False)
    c, k = math.sqrt(2 / math.pi), 0.044715

    @tf.function(jit_compile=True, autograph=False)
    def recompute_forward(hh, b):
        s = hh + b
        v = tf.cast(s, tf.float32)
        return tf.cast(0.5 * v * (1.0 + tf.tanh(c * (v + k * v * v * v))), hh.dtype), s

    @tf.function(jit_compile=True, autograph=False)
    def recompute_backward(dy, s):
        v = tf.cast(s, tf.float32)
        t = tf.tanh(c * (v + k * v * v * v))
        du = c * (1.0 + 3.0 * k * v * v)
        dx = tf.cast(tf.cast(dy, tf.float32) * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du),
                     dy.dtype)
        return dx, tf.cast(tf.reduce_sum(tf.cast(dx, tf.float32), axis=0), dy.dtype)

    @tf.custom_gradient
    def gelu_recompute(hh, b):
        y, s = recompute_forward(hh, b)
        return y, lambda dy: recompute_backward(dy, s)

    ones, zeros = tf.ones([rows]), tf.zeros([rows])

    def batch_norm_layer_norm(v):
        s = tf.where(keep, v * scale, tf.zeros([], dtype)) + residual
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(
            tf.reshape(s, [1, rows, h, 1]), ones, zeros, epsilon=1e-12, data_format="NCHW",
            is_training=True)
        return tf.cast(tf.cast(tf.reshape(y, [rows, h]), tf.float32) * gamma + beta, dtype)

    def grad_of(fn, up):
        def run(v):
            with tf.GradientTape() as tape:
                tape.watch(v)
                y = fn(v)
            return tape.gradient(y, v, output_gradients=up)
        return run

    # Each case: (function of the chained [rows, H] input, bytes of its inputs and outputs).
    isz, f32 = dtype.size, 4
    n, nw = rows * h, rows * 4 * h
    cases = {
        "chain_only": (lambda v: v, 0),
        "plain_xla_scale_add": (lambda v: scale_add(v, residual), 3 * n * isz),
        "layer_norm_forward": (lambda v: ln_forward(v, keep, residual, gamma, beta, eps,
                                                        None, scale)[0],
                               n * (3 * isz + 1 + f32)),
        "layer_norm_backward": (lambda v: ln_backward(v, keep, normalized, rstd, gamma,
                                                          scale, False)[0],
                                n * (3 * isz + 1 + f32)),
        "bias_gelu_forward": (lambda v: gelu_forward(
            tf.tile(v, [1, 4]), bias)[0], nw * (2 * isz + 2 * f32)),
        "bias_gelu_backward": (lambda v: gelu_backward(
            tf.tile(v, [1, 4]), gelu_x, gelu_t)[0], nw * (2 * isz + 2 * f32)),
        "tile_only": (lambda v: tf.tile(v, [1, 4]), 0),
        "bias_gelu_forward_backward": (lambda v: grad_of(
            lambda u: fused.bias_gelu(u, bias), wide_upstream)(tf.tile(v, [1, 4])), 0),
        "gelu_recompute_forward_backward": (lambda v: grad_of(
            lambda u: gelu_recompute(u, bias), wide_upstream)(tf.tile(v, [1, 4])), 0),
        "fused_layer_norm_forward_backward": (grad_of(
            lambda u: fused.dropout_residual_layer_norm(u, keep, residual, gamma, beta, 1e-12,
                                                        keep_scale=1 / 0.9), upstream), 0),
        "fused_batch_norm_layer_norm": (grad_of(batch_norm_layer_norm, upstream), 0),
    }

    def chained(body):
        @tf.function(autograph=False)
        def run():
            acc = tf.zeros([], tf.float32)
            v = x
            for _ in range(FLAGS.calls):
                acc += tf.cast(body(v)[0, 0], tf.float32)
                v = v + tf.cast(acc * 0.0, dtype)  # the next call waits for this one
            return acc
        return run

    def rel_diff(a, b):  # the dropped alternatives compute the same values (up to rounding)
        a, b = (tf.cast(t, tf.float32).numpy() for t in (a, b))
        return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(a))), 1e-30))

    result: dict = {"alternatives_max_rel_diff": {
        "gelu_recompute_gradient": rel_diff(cases["bias_gelu_forward_backward"][0](x),
                                            cases["gelu_recompute_forward_backward"][0](x)),
        "batch_norm_layer_norm_gradient": rel_diff(
            cases["fused_layer_norm_forward_backward"][0](x),
            cases["fused_batch_norm_layer_norm"][0](x))}}
    runs = {name: chained(body) for name, (body, _) in cases.items()}
    for run in runs.values():
        run()
    times: dict = {name: [] for name in runs}
    for _ in range(FLAGS.rounds):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run().numpy()
            times[name].append((time.perf_counter() - t0) / FLAGS.calls * 1000)
    ms = {name: statistics.median(v) for name, v in times.items()}
    # A case's own time: without the chain's add (and the GELU cases' tile to [rows, 4H]).
    own = {name: ms[name] - ms["chain_only"] - (ms["tile_only"] - ms["chain_only"]
                                                if "gelu" in name else 0.0) for name in ms}
    for name, (_, nbytes) in cases.items():
        entry = {"ms_per_call": round(own[name], 3),
                 "rounds_ms": [round(t, 3) for t in times[name]]}
        if nbytes and own[name] > 0:
            entry["gb_per_s"] = round(nbytes / own[name] / 1e6, 2)
        result[name] = entry
    result["gelu_recompute_speedup"] = round(
        own["bias_gelu_forward_backward"] / own["gelu_recompute_forward_backward"], 3)
    result["batch_norm_layer_norm_speed"] = round(
        own["fused_layer_norm_forward_backward"] / own["fused_batch_norm_layer_norm"], 3)
    result["hlo_kernels"] = {
        "layer_norm_forward": hlo_kernels(ln_forward, x, keep, residual, gamma, beta, eps,
                                          None, scale),
        "layer_norm_backward": hlo_kernels(ln_backward, upstream, keep, normalized, rstd,
                                           gamma, scale, False),
        "bias_gelu_forward": hlo_kernels(gelu_forward, wide, bias),
        "bias_gelu_backward": hlo_kernels(gelu_backward, wide_upstream, gelu_x,
                                          gelu_t)}
    return result


def run_here() -> dict:
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return {"xla_flags": os.environ.get("XLA_FLAGS", ""),
            "by_dtype": {d: measure(d) for d in FLAGS.dtypes}}


def main(argv):
    del argv
    summary = {"bench": "bert_tf bench_fused_kernels", "cpu": cpu_description(),
               "threads": FLAGS.threads, "rows": FLAGS.rows, "hidden": FLAGS.hidden,
               "calls": FLAGS.calls, "rounds": FLAGS.rounds,
               "loadavg_before": list(os.getloadavg()),
               "memory_gb_per_s": copy_bandwidth_gb_per_s()}
    if not FLAGS.xla_flag_sweep:
        summary.update(run_here())
    else:
        summary["sweep"] = {}
        for name, flag in SWEEP.items():
            args = [sys.executable, os.path.abspath(__file__)] + [
                a for a in sys.argv[1:] if not a.startswith("--xla_flag_sweep")]
            env = dict(os.environ, XLA_FLAGS=flag, TF_CPP_MIN_LOG_LEVEL="2")
            done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                summary["sweep"][name] = {"error": done.stderr.strip().splitlines()[-1:]}
                continue
            child = json.loads(done.stdout.strip().splitlines()[-1])
            summary["sweep"][name] = {"xla_flags": flag, "by_dtype": child["by_dtype"]}
    summary["loadavg_after"] = list(os.getloadavg())
    print(json.dumps(summary))


if __name__ == "__main__":
    app.run(main)
