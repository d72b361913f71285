#!/usr/bin/env python3
"""GPT LM train-step throughput: bert_tf's GPT-1 vs keras-hub's GPT-2 at the same size, one run.

  python bench/bench_gpt_lm.py                       # L4 H256 A4, n_ctx 128, batch 8, fp32
  python bench/bench_gpt_lm.py --size base           # GPT-1 base: L12 H768 A12, n_ctx 512, batch 4
                                                     # (5 steps per pass, budget 20 min)
  python bench/bench_gpt_lm.py --passes 5 --steps 20 --jit 1
  python bench/bench_gpt_lm.py --precision mixed_bfloat16   # both sides under Keras' bf16 policy

What runs (see bench/peers/gpt_bert_tf_lm.py and bench/peers/gpt2_kerashub_lm.py):
  bert_tf  : the train loop of bert_tf.runs.gpt_pretraining.GptPretrainingTrainer (what
             tools/run_gpt_pretraining.py runs): GptModel (GPT-1, post-LN, LM head tied to the
             whole table), the mean LM loss, global-norm clip 1.0, OpenAIAdam (L2 0.01 inside the
             step, warmup_cosine), one step per call; bert_tf's .venv.
  kerashub : keras_hub.models.GPT2Backbone + GPT2CausalLM, compile(Adam, sparse CE) +
             train_on_batch (keras-hub's own path; --peer_loop custom: a GradientTape step);
             the keras-hub peer venv ($VENVS/kh, see ../shared/bench-peers/README.md).
Same layers, width, heads, n_ctx, vocabulary (n_vocab + n_special), parameter count, batch,
precision (--precision: float32, or mixed_bfloat16 on both sides: Keras' mixed policy, float32
variables, bfloat16 matmuls, the loss in float32), dropout (--dropout, on by default as in
training), XLA setting (--jit, both sides) and TensorFlow CPU kernels (--onednn, both sides;
default auto: oneDNN wherever `import bert_tf` turns it on, as bert_tf's tools run).
Both sides train on the same random token batch, reused every step (the model, not the input).

Method (as the shared harness ../shared/bench-peers, whose CpuWatch and quiet-machine wait this
script reuses): one worker process per implementation, each under its own venv's Python, started
once (import, build, trace, --warmup steps), then --passes interleaved passes (the order is
reversed on odd passes), each pass timing --steps clean steps per implementation while the other
worker waits idle on its pipe; a step during which other processes used > 5% of the CPUs is
left out (up to --max_steps_factor x --steps timed). Each implementation's figure is the median
over passes of its per-pass median step time; the ratio bert_tf / kerashub is also given per pass.
stdout: one JSON object (also written to --out/summary.json); progress on stderr.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

from host import ONEDNN_CHOICES, ONEDNN_HELP, cpu_description, onednn_env

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_HARNESS = os.environ.get("BENCH_PEERS_DIR", os.path.normpath(
    os.path.join(REPO, "..", "shared", "bench-peers")))
DEFAULT_VENVS = os.environ.get("BENCH_VENVS", "/work/venvs")
PROTOCOL = "@@bench_gpt_lm "  # prefix of the worker's protocol lines on its stdout

# impl -> (adapter file, peer venv folder under --venvs (None: bert_tf's .venv), module to probe)
IMPLS = {
    "bert_tf": (os.path.join(HERE, "peers", "gpt_bert_tf_lm.py"), None, "bert_tf.gpt"),
    "kerashub": (os.path.join(HERE, "peers", "gpt2_kerashub_lm.py"), "kh", "keras_hub"),
}

SIZES = {
    # name: model and batch (n_vocab / n_special: GPT-1's BPE vocabulary and its 3 specials)
    "default": dict(n_layer=4, n_embd=256, n_head=4, n_ctx=128, batch=8),
    "base": dict(n_layer=12, n_embd=768, n_head=12, n_ctx=512, batch=4),
}
# size: (clean steps per pass and side, time budget in s) unless --steps / --time_budget_s
SIZE_RUN = {"default": (20, 240.0), "base": (5, 1200.0)}


def log(msg: str) -> None:
    print(f"[bench_gpt_lm {datetime.datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def load_harness_module(harness: str, name: str):
    """bench_bert.py / run_all.py of the shared harness, imported by path (stdlib only at import)."""
    path = os.path.join(harness, name + ".py")
    spec = importlib.util.spec_from_file_location(f"bench_peers_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def model_gflop_per_step(cfg: dict, batch: int) -> float:
    """Nominal model FLOPs of one train step (3 x forward), the same number for both sides:
    per token 2·L·(4H² + 8H²) (qkv, proj, two FFN matmuls) + 2·L·2·S·H (QKᵀ, AV, unmasked) +
    2·H·(n_vocab + n_special) (tied LM head), over batch · n_ctx tokens."""
    L, H, S = cfg["n_layer"], cfg["n_embd"], cfg["n_ctx"]
    per_token = 2 * L * 12 * H * H + 2 * L * 2 * S * H + 2 * H * (cfg["n_vocab"] + cfg["n_special"])
    return 3 * per_token * batch * S / 1e9


# ---- worker (runs under the implementation's own Python) -----------------------------------------
def worker(args) -> None:
    import numpy as np  # noqa: F401 (the adapters need it; fail early here if missing)

    bench_bert = load_harness_module(args.harness, "bench_bert")
    cfg = json.loads(args.cfg)
    t0 = time.perf_counter()
    import tensorflow as tf
    spec = importlib.util.spec_from_file_location("bench_gpt_lm_adapter", args.worker)
    adapter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(adapter)
    import_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg["n_vocab"], size=(cfg["batch"], cfg["n_ctx"] + 1), dtype=np.int32)
    t0 = time.perf_counter()
    step = adapter.LmTrainStep(cfg, tokens, cfg["learning_rate"], bool(cfg["jit"]),
                               cfg["precision"])
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    first_loss = step()
    first_step_s = time.perf_counter() - t0
    for _ in range(max(cfg["warmup"] - 1, 0)):
        step()

    def say(obj: dict) -> None:
        sys.stdout.write(PROTOCOL + json.dumps(obj) + "\n")
        sys.stdout.flush()

    say({"ready": True, "versions": dict(tensorflow=tf.__version__, **adapter.VERSIONS),
         "framework": adapter.FRAMEWORK, "description": step.description,
         "params": step.n_params, "import_s": round(import_s, 2), "build_s": round(build_s, 2),
         "first_step_s": round(first_step_s, 2), "first_loss": round(first_loss, 4)})
    watch = bench_bert.CpuWatch()
    for line in sys.stdin:
        command = line.strip()
        if command == "quit":
            break
        if command != "run":
            continue
        times, foreign, losses, n_clean = [], [], [], 0
        while n_clean < cfg["steps"] and len(times) < cfg["steps"] * cfg["max_steps_factor"]:
            watch.start()
            losses.append(step())
            wall, fr = watch.stop()
            times.append(wall)
            foreign.append(fr)
            n_clean += fr <= bench_bert.FOREIGN_MAX
        clean = [t for t, fr in zip(times, foreign) if fr <= bench_bert.FOREIGN_MAX]
        say({"step_ms_median": round(statistics.median(clean or times) * 1e3, 2),
             "step_ms_median_all_steps": round(statistics.median(times) * 1e3, 2),
             "clean_steps": len(clean), "timed_steps": len(times),
             "foreign_cpu_frac_median": round(statistics.median(foreign), 3),
             "last_loss": round(losses[-1], 4)})
    if hasattr(step, "close"):
        step.close()


# ---- driver -----------------------------------------------------------------------------------
class Worker:
    """One implementation's worker process and its line protocol."""

    def __init__(self, name: str, python: str, args, cfg: dict, out_dir: str):
        self.name = name
        # stderr to a file: a pipe nobody reads would block a chatty worker
        self.stderr_path = os.path.join(out_dir, f"{name}.stderr.log")
        self._stderr = open(self.stderr_path, "w")
        cmd = [python, os.path.abspath(__file__), "--worker", IMPLS[name][0],
               "--harness", args.harness, "--cfg", json.dumps(cfg)]
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2",
                   BENCH_GPT2_LOOP=args.peer_loop)
        log(f"start {name}: {python}")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True, env=env, cwd=REPO)
        self.info: dict | None = None
        self.error: str | None = None

    def read(self) -> dict | None:
        for line in self.proc.stdout:
            if line.startswith(PROTOCOL):
                return json.loads(line[len(PROTOCOL):])
        self.proc.wait()
        with open(self.stderr_path) as f:
            tail = f.read()[-1500:]
        self.error = f"{self.name} worker exited rc={self.proc.returncode}: {tail}"
        return None

    def send(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(timeout=60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()


def check_python(py: str, module: str) -> str | None:
    """None when `py` exists and imports `module`, else why not."""
    if not os.path.exists(py):
        return f"python not found: {py}"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    p = subprocess.run([py, "-c", f"import {module}"], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=300)
    if p.returncode:
        return f"import {module} failed under {py}: {p.stderr.strip().splitlines()[-1:]}"
    return None


def summarize(cfg: dict, runs: dict, infos: dict) -> dict:
    results = {}
    for name, per_pass in runs.items():
        if not per_pass:
            continue
        med_ms = statistics.median(r["step_ms_median"] for r in per_pass)
        results[name] = {
            "seq_per_s": round(cfg["batch"] / (med_ms / 1e3), 2),
            "tokens_per_s": round(cfg["batch"] * cfg["n_ctx"] / (med_ms / 1e3), 1),
            "step_ms_median": round(med_ms, 1),
            "achieved_gflops": round(model_gflop_per_step(cfg, cfg["batch"]) / (med_ms / 1e3), 1),
            "seq_per_s_per_pass": [round(cfg["batch"] / (r["step_ms_median"] / 1e3), 2)
                                   for r in per_pass],
            "clean_steps_per_pass": [r["clean_steps"] for r in per_pass],
            "timed_steps_per_pass": [r["timed_steps"] for r in per_pass],
            "foreign_cpu_frac_median_per_pass": [r["foreign_cpu_frac_median"] for r in per_pass],
            "seq_per_s_all_steps_per_pass": [
                round(cfg["batch"] / (r["step_ms_median_all_steps"] / 1e3), 2) for r in per_pass],
            "loss_first_last": [infos[name]["first_loss"], per_pass[-1]["last_loss"]],
            **{k: infos[name][k] for k in ("params", "description", "versions", "import_s",
                                           "build_s", "first_step_s")},
        }
        if any(r["clean_steps"] == 0 for r in per_pass):
            results[name]["warning"] = ("a pass had 0 clean steps: its median is over all "
                                        "(contaminated) steps")
    ratios = {}
    if "bert_tf" in results and "kerashub" in results:
        ratios["bert_tf/kerashub"] = round(results["bert_tf"]["seq_per_s"]
                                           / results["kerashub"]["seq_per_s"], 3)
        ratios["bert_tf/kerashub_per_pass"] = [
            round(k["step_ms_median"] / b["step_ms_median"], 3)
            for b, k in zip(runs["bert_tf"], runs["kerashub"])]
    return {"results": results, "ratios": ratios}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="default",
                    help="default: L4 H256 A4 n_ctx 128 batch 8; base: GPT-1 base (L12 H768 A12 "
                         "n_ctx 512) batch 4")
    for key in ("n_layer", "n_embd", "n_head", "n_ctx", "batch"):
        ap.add_argument(f"--{key}", type=int, default=None, help="overrides --size")
    ap.add_argument("--n_vocab", type=int, default=40478, help="GPT-1's BPE vocabulary")
    ap.add_argument("--n_special", type=int, default=3)
    ap.add_argument("--dropout", type=float, default=0.1,
                    help="embedding / attention / residual dropout on both sides (training mode)")
    ap.add_argument("--learning_rate", type=float, default=2.5e-4)
    ap.add_argument("--jit", type=int, choices=(0, 1), default=0, help="XLA on both sides")
    ap.add_argument("--precision", choices=("float32", "mixed_bfloat16"), default="float32",
                    help="Keras dtype policy on both sides (bert_tf: set_mixed_precision, as "
                         "run_gpt_pretraining's --mixed_precision; keras-hub: the global policy "
                         "and GPT2Backbone(dtype=...))")
    ap.add_argument("--peer_loop", choices=("native", "custom"), default="native",
                    help="keras-hub: compile + train_on_batch (native) or a GradientTape step")
    ap.add_argument("--impls", default="bert_tf,kerashub")
    ap.add_argument("--onednn", choices=ONEDNN_CHOICES, default="auto", help=ONEDNN_HELP)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--steps", type=int, default=None,
                    help="clean timed steps per pass and impl (default 20; --size base: 5)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps after start (1st traces)")
    ap.add_argument("--max_steps_factor", type=int, default=2,
                    help="a pass gives up after steps x factor timed steps")
    ap.add_argument("--quiet_wait_s", type=float, default=10,
                    help="max wait for a quiet machine before each timed pass")
    ap.add_argument("--time_budget_s", type=float, default=None,
                    help="no new pass starts when the last pass's duration would end it past "
                         "this (from the start; 0 = no limit; default 240, --size base: 1200); "
                         "passes left out are reported")
    ap.add_argument("--harness", default=DEFAULT_HARNESS, help="dir of the shared harness")
    ap.add_argument("--venvs", default=DEFAULT_VENVS, help="dir holding the peer venv kh/")
    ap.add_argument("--env", action="append", default=[],
                    help="IMPL=/path/to/python (IMPL: bert_tf, kerashub)")
    ap.add_argument("--out", default=None, help="results dir (default bench/results/gpt_lm-<time>)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cfg", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.harness, "bench_bert.py")):
        ap.error(f"harness not found: {args.harness}/bench_bert.py (set --harness or "
                 "BENCH_PEERS_DIR)")
    if args.worker:
        worker(args)
        return
    # Set once here: both workers inherit it.
    onednn_vars, onednn_record = onednn_env(args.onednn)
    os.environ.update(onednn_vars)

    size = dict(SIZES[args.size])
    if args.steps is None:
        args.steps = SIZE_RUN[args.size][0]
    if args.time_budget_s is None:
        args.time_budget_s = SIZE_RUN[args.size][1]
    for key in size:
        if getattr(args, key) is not None:
            size[key] = getattr(args, key)
    if size["n_embd"] % size["n_head"]:
        ap.error(f"--n_embd={size['n_embd']} is not a multiple of --n_head={size['n_head']}")
    cfg = dict(size, n_vocab=args.n_vocab, n_special=args.n_special, dropout=args.dropout,
               learning_rate=args.learning_rate, jit=args.jit, precision=args.precision,
               steps=args.steps,
               warmup=args.warmup, max_steps_factor=args.max_steps_factor)
    impls = [s.strip() for s in args.impls.split(",") if s.strip()]
    for name in impls:
        if name not in IMPLS:
            ap.error(f"--impls: unknown {name!r}; expected some of {sorted(IMPLS)}")
    overrides = dict(e.split("=", 1) for e in args.env)
    run_all = load_harness_module(args.harness, "run_all")
    out_dir = args.out or os.path.join(HERE, "results",
                                       f"gpt_lm-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    os.makedirs(out_dir, exist_ok=True)

    t_start = time.time()
    pythons, missing = {}, {}
    for name in impls:
        venv = IMPLS[name][1]
        default = (os.path.join(REPO, ".venv", "bin", "python") if venv is None
                   else os.path.join(args.venvs, venv, "bin", "python"))
        py = overrides.get(name, default)
        reason = check_python(py, IMPLS[name][2])
        if reason:
            missing[name] = reason
            log(f"MISSING {name}: {reason} -- skipped (make the venv as ../shared/bench-peers/"
                f"README.md says, or pass --env {name}=/path/to/python)")
        else:
            pythons[name] = py

    workers = {name: Worker(name, py, args, cfg, out_dir) for name, py in pythons.items()}
    infos, errors = {}, {}
    skipped_passes = 0
    runs: dict[str, list] = {name: [] for name in workers}
    try:
        for name, w in list(workers.items()):
            info = w.read()
            if info is None:
                errors[name] = w.error
                log(w.error)
                del workers[name]
            else:
                infos[name] = info
                log(f"{name} ready: {info['params']:,} params, first step {info['first_step_s']} s")
        order = list(workers)
        last_pass_s = 0.0
        for p in range(args.passes):
            elapsed = time.time() - t_start
            if args.time_budget_s and p and elapsed + last_pass_s > args.time_budget_s:
                skipped_passes = args.passes - p
                log(f"time budget {args.time_budget_s:.0f} s: {skipped_passes} pass(es) left out")
                break
            t_pass = time.time()
            for name in (order if p % 2 == 0 else order[::-1]):
                busy = run_all.wait_quiet(args.quiet_wait_s)
                w = workers[name]
                w.send("run")
                r = w.read()
                if r is None:
                    errors[name] = w.error
                    log(w.error)
                    order.remove(name)
                    continue
                r["pre_run_busy_frac"] = round(busy, 3)
                runs[name].append(r)
                log(f"pass {p} {name}: {r['step_ms_median']} ms/step ({r['clean_steps']} clean of "
                    f"{r['timed_steps']}, machine busy {busy:.2f} before)")
            last_pass_s = time.time() - t_pass
    finally:
        for w in workers.values():
            w.close()

    summary = {"bench": "bert_tf bench_gpt_lm", "task": "LM train step",
               "model": {k: cfg[k] for k in ("n_layer", "n_embd", "n_head", "n_ctx", "n_vocab",
                                            "n_special", "dropout")},
               "batch": cfg["batch"], "precision": args.precision, "jit": bool(args.jit),
               "peer_loop": args.peer_loop, "passes": args.passes - skipped_passes,
               "passes_left_out_by_time_budget": skipped_passes,
               "steps_wanted_per_pass": args.steps, "warmup": args.warmup,
               "foreign_cpu_max": 0.05, "cpu": cpu_description(),
               "onednn": onednn_record,
               "model_gflop_per_step": round(model_gflop_per_step(cfg, cfg["batch"]), 2),
               "tokens_per_step": cfg["batch"] * cfg["n_ctx"],
               "pythons": pythons, "missing": missing, "errors": errors}
    summary.update(summarize(cfg, runs, infos))
    if summary["passes"] < 3:
        summary["warning"] = (f"{summary['passes']} pass(es): quote medians of >= 3 passes "
                              "(raise --time_budget_s or lower --steps)")
    summary["wall_s"] = round(time.time() - t_start, 1)
    summary["runs"] = runs
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
