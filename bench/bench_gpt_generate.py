#!/usr/bin/env python3
"""GPT-1 generation throughput: bert_tf's KV-cache loop vs keras-hub's GPT2CausalLM.generate and vs
bert_tf's own no-cache loop, at the same size, in one run.

  python bench/bench_gpt_generate.py                 # L12 H768 A12, n_ctx 512, batch 1 and 8,
                                                     # 32-token prompts, 128 new tokens, greedy
  python bench/bench_gpt_generate.py --batches 1 --new_tokens 32 --repeats 1   # a quick look

What runs (random weights, float32, greedy, eval mode; one worker process per case, started
once: build, one untimed warm-up call that traces/compiles, then --repeats timed calls; the
figure is the median):
  bert_tf_cache   : `GptGenerator.generate` (bert_tf.gpt.generation): prefill of the prompt, then
                    one [batch, 1] forward per new token with the key/value cache, the whole loop
                    one tf.function; bert_tf's .venv.
  bert_tf_cache_xla: the same, jit_compile=True (the loop XLA-compiled).
  bert_tf_nocache : the loop without a cache: at each step a full forward of the sequence so far
                    (one tf.function over [batch, None]) and the next-token row of the tied head.
  matvec_floor    : not a generator: an XLA loop of --new_tokens iterations doing only a decode
                    step's matrix products with the same model's weights ([batch, 768] times
                    c_attn, c_proj, c_fc, mlp c_proj of every layer, each with its bias, then
                    the 40,478 token rows of the tied table), chained so that nothing is hoisted.
                    Its tokens/s is what the cached loop would give if everything but streaming
                    the weights (attention, LayerNorm, GELU, cache writes, argmax, dispatch) were
                    free: at batch 1 a step reads ~464 MB of float32 weights (340 MB of layers,
                    124 MB of table) for ~0.2 GFLOP, so it is memory-bound, and
                    bert_tf_cache_xla / matvec_floor says how close to that floor it runs.
  kerashub        : keras_hub.models.GPT2CausalLM(GPT2Backbone(vocabulary_size = 40,478 + 3,
                    12 layers, 12 heads, 768, 3072, max_sequence_length 512), preprocessor=None)
                    .generate({"token_ids", "padding_mask"}, stop_token_ids=None) with the greedy
                    sampler (keras-hub's own KV-cache loop; XLA as its compile() default, or
                    --kerashub_jit), in the keras-hub peer venv ($BENCH_VENVS/kh, default
                    /work/venvs/kh, made as ../shared/bench-peers/README.md says). Skipped, and
                    said so, when that venv or keras_hub is missing.
tokens/s = batch x new tokens / time of one generate call (prefill included).
stdout: one JSON object (with the CPU, bench/host.py); progress on stderr.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from host import cpu_description  # noqa: E402

DEFAULT_VENVS = os.environ.get("BENCH_VENVS", "/work/venvs")
SIZE = dict(n_layer=12, n_embd=768, n_head=12, n_ctx=512, n_vocab=40478, n_special=3)
MARK = "@@bench_gpt_generate "


def log(msg: str) -> None:
    print(f"[bench_gpt_generate {datetime.datetime.now():%H:%M:%S}] {msg}", file=sys.stderr,
          flush=True)


def _prompts(batch: int, prompt_len: int, n_vocab: int):
    import numpy as np

    return np.random.RandomState(0).randint(0, n_vocab, size=(batch, prompt_len)).astype("int32")


def worker_bert_tf(args) -> dict:
    sys.path.insert(0, REPO)
    import keras
    import numpy as np
    import tensorflow as tf

    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.generation import GptGenerator
    from bert_tf.gpt.model import GptModel

    keras.utils.set_random_seed(1)
    config = GptConfig(**SIZE)
    model = GptModel(config, classifier=False)
    prompts = _prompts(args.batch, args.prompt_len, config.n_vocab)
    if args.impl == "matvec_floor":
        return _time(_matvec_floor(model, config, args), args,
                     {"tensorflow": tf.__version__, "keras": keras.__version__})
    if args.impl in ("bert_tf_cache", "bert_tf_cache_xla"):
        generator = GptGenerator(model, jit_compile=args.impl == "bert_tf_cache_xla")

        def run():
            out = generator.generate(prompts.tolist(), max_new_tokens=args.new_tokens)
            assert all(len(g) == args.new_tokens for g in out.generated)
            return out.sequences
    else:
        table_rows = config.n_vocab

        @tf.function(input_signature=[tf.TensorSpec([args.batch, None], tf.int32)],
                     jit_compile=False)
        def next_token(ids):
            hidden = model({"token_ids": ids}, training=False, with_lm_logits=False)[
                "hidden_states"]
            logits = tf.matmul(hidden[:, -1], model.embedding.we[:table_rows], transpose_b=True)
            return tf.argmax(logits, -1, output_type=tf.int32)

        def run(new_tokens=args.new_tokens):
            ids = tf.constant(prompts)
            for _ in range(new_tokens):
                ids = tf.concat([ids, next_token(ids)[:, None]], axis=1)
            return ids.numpy().tolist()

        # one trace serves every length ([batch, None]): the warm-up needs only two tokens
        return _time(run, args, {"tensorflow": tf.__version__, "keras": keras.__version__},
                     warmup=lambda: run(2))

    return _time(run, args, {"tensorflow": tf.__version__, "keras": keras.__version__})


def _matvec_floor(model, config, args):
    """run() for the matvec_floor case (see the module docstring)."""
    import tensorflow as tf

    layers = [(conv.w, conv.b) for block in model.blocks
              for conv in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc,
                           block.mlp.c_proj)]
    rows = model.embedding.we[:config.n_vocab]
    width = config.n_embd

    @tf.function(jit_compile=True)
    def loop(h):
        def body(i, h):
            x = h
            for w, b in layers:
                w = tf.reshape(w, w.shape[1:])
                if x.shape[-1] != w.shape[0]:  # c_attn's q, k, v (summed: every column used)
                    x = tf.add_n(tf.split(x, x.shape[-1] // w.shape[0], axis=-1))
                x = tf.tanh(tf.nn.bias_add(tf.matmul(x, w), b))
            logits = tf.matmul(x, rows, transpose_b=True)
            # the next input depends on every product (nothing hoisted or pruned)
            return i + 1, x + 1e-6 * tf.reduce_max(logits, -1, keepdims=True)

        return tf.while_loop(lambda i, h: i < args.new_tokens, body, (0, h))[1]

    h0 = tf.random.stateless_normal([args.batch, width], [1, 2])

    def run():
        return loop(h0).numpy()

    return run


def worker_kerashub(args) -> dict:
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import keras_hub
    import numpy as np
    import tensorflow as tf

    keras.utils.set_random_seed(1)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=SIZE["n_vocab"] + SIZE["n_special"], num_layers=SIZE["n_layer"],
        num_heads=SIZE["n_head"], hidden_dim=SIZE["n_embd"], intermediate_dim=4 * SIZE["n_embd"],
        dropout=0.1, max_sequence_length=SIZE["n_ctx"])
    lm = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    compile_args = {} if args.jit < 0 else {"jit_compile": bool(args.jit)}
    lm.compile(sampler="greedy", **compile_args)
    total = args.prompt_len + args.new_tokens
    ids = np.zeros([args.batch, total], np.int32)
    ids[:, :args.prompt_len] = _prompts(args.batch, args.prompt_len, SIZE["n_vocab"])
    mask = np.zeros([args.batch, total], bool)
    mask[:, :args.prompt_len] = True

    def run():
        out = lm.generate({"token_ids": ids, "padding_mask": mask}, stop_token_ids=None)
        return out["token_ids"].tolist()

    result = _time(run, args, {"tensorflow": tf.__version__, "keras": keras.__version__,
                               "keras_hub": keras_hub.__version__})
    result["jit_compile"] = bool(getattr(lm, "jit_compile", None))
    return result


def _time(run, args, versions, warmup=None) -> dict:
    start = time.perf_counter()
    (warmup or run)()
    warmup_s = time.perf_counter() - start
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return {"impl": args.impl, "batch": args.batch, "warmup_call_s": round(warmup_s, 2),
            "call_s": [round(t, 3) for t in times], "call_s_median": round(median, 3),
            "tokens_per_s": round(args.batch * args.new_tokens / median, 2),
            "versions": versions}


def run_worker(impl: str, batch: int, args, python: str) -> dict | None:
    cmd = [python, os.path.abspath(__file__), "--worker", impl, "--batch", str(batch),
           "--prompt_len", str(args.prompt_len), "--new_tokens", str(args.new_tokens),
           "--repeats", str(args.repeats), "--jit", str(args.kerashub_jit)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    log(f"{impl} batch {batch} ...")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout_s)
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            result = json.loads(line[len(MARK):])
            log(f"{impl} batch {batch}: {result['tokens_per_s']} tokens/s")
            return result
    log(f"{impl} batch {batch} failed: {done.stderr.strip().splitlines()[-1:]}")
    return {"impl": impl, "batch": batch, "error": done.stderr.strip()[-500:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--prompt_len", type=int, default=32)
    parser.add_argument("--new_tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jit", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--kerashub_jit", type=int, default=-1,
                        help="keras-hub: -1 its compile() default, 0 off, 1 on")
    parser.add_argument("--impls", default="bert_tf_cache,bert_tf_cache_xla,kerashub,"
                                           "bert_tf_nocache,matvec_floor")
    parser.add_argument("--venvs", default=DEFAULT_VENVS)
    parser.add_argument("--timeout_s", type=float, default=3600)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--impl", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.impl = args.worker
        result = (worker_kerashub if args.worker == "kerashub" else worker_bert_tf)(args)
        print(MARK + json.dumps(result), flush=True)
        return

    kh_python = os.path.join(args.venvs, "kh", "bin", "python")
    results, skipped = [], {}
    for batch in [int(b) for b in args.batches.split(",")]:
        for impl in args.impls.split(","):
            if impl == "kerashub":
                probe = subprocess.run([kh_python, "-c", "import keras_hub"],
                                       capture_output=True) if os.path.exists(kh_python) else None
                if probe is None or probe.returncode:
                    skipped["kerashub"] = (f"no keras_hub in {kh_python} (make the peer venv as "
                                           "../shared/bench-peers/README.md says)")
                    continue
                results.append(run_worker(impl, batch, args, kh_python))
            else:
                results.append(run_worker(impl, batch, args, sys.executable))
    ratios = {}
    for batch in {r["batch"] for r in results}:
        by = {r["impl"]: r.get("tokens_per_s") for r in results if r["batch"] == batch}
        for ours in ("bert_tf_cache", "bert_tf_cache_xla"):
            for other in ("kerashub", "bert_tf_nocache", "matvec_floor"):
                if by.get(ours) and by.get(other):
                    ratios[f"batch{batch}_{ours}_vs_{other}"] = round(by[ours] / by[other], 2)
    summary = {"bench": "bench_gpt_generate", "date": datetime.date.today().isoformat(),
               "size": SIZE, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
               "sampler": "greedy", "precision": "float32",
               "repeats": args.repeats, "host": cpu_description(),
               "load_average_at_end": os.getloadavg(), "results": results, "ratios": ratios,
               "skipped": skipped}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
