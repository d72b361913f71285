#!/usr/bin/env python3
"""bert_tf vs TF Model Garden vs keras-hub: encoder inference (and pretraining step) throughput.

Drives the shared side-by-side harness (default ../shared/bench-peers next to the checkout:
bench_bert.py, run_all.py, matmul_peak.py) in ONE invocation:

  1. matmul_peak.py under bert_tf's Python -> the measured fp32 matmul peak (MFU denominator);
  2. for each pass, the process matrix (impl x XLA off/on), one fresh process per measurement, each
     under the Python of the venv that holds that implementation, via run_all.py
     (`--env NAME=PYTHON`), which waits for a quiet machine and retries contaminated runs;
  3. prints ONE JSON summary on stdout: per impl and XLA setting the median over passes of seq/s,
     MFU vs the measured peak, clean steps per pass, and the ratio bert_tf / each peer and
     bert_tf / the faster peer.

bert_tf is one more adapter (bench/peers/bert_tf_impl.py), passed to the harness as a path
(bench_bert.py's `--impl` accepts a .py file), so the harness itself is used unmodified.

Default: BERT-base inference (L12 H768 A12 I3072), seq 128, batch 8, fp32, XLA off and on:

  python bench/bench_encoder.py                                 # 2 passes x 20 clean steps
  python bench/bench_encoder.py --passes 3 --steps 20 --jit 0   # XLA off only
  python bench/bench_encoder.py --task pretrain                 # config S train step, custom loop
  python bench/bench_encoder.py --impls bert_tf,kerashub --peak 448   # skip the peak run

Peers live in their own venvs (see bench/README.md); by default $BENCH_VENVS (or /work/venvs)
/mg21 and /kh. A missing venv is reported in the summary under "missing" and that peer is skipped;
bert_tf alone still runs. TensorFlow's CPU kernels are the same for every implementation and the
peak (`--onednn`, default auto: oneDNN wherever `import bert_tf` turns it on, as bert_tf's tools
run; the harness imports TensorFlow before loading an adapter, so the variable is set for the
whole process tree). Raw JSON lines (one per process) go to --out (bench/results/... by default).
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

from host import ONEDNN_CHOICES, ONEDNN_HELP, cpu_description, onednn_env

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ADAPTER = os.path.join(HERE, "peers", "bert_tf_impl.py")
# Not an implementation: the step's matrix products alone (a lower bound; peers/matmul_floor_impl.py).
FLOOR_ADAPTER = os.path.join(HERE, "peers", "matmul_floor_impl.py")
# ../shared/bench-peers next to the checkout (BENCH_PEERS_DIR or --harness to use another).
DEFAULT_HARNESS = os.environ.get("BENCH_PEERS_DIR", os.path.normpath(
    os.path.join(REPO, "..", "shared", "bench-peers")))
DEFAULT_VENVS = os.environ.get("BENCH_VENVS", "/work/venvs")

# impl name -> (env name in run_all.py, harness impl argument, module the venv must import)
IMPLS = {
    "bert_tf": ("bert_tf", ADAPTER, "bert_tf.modeling"),
    "modelgarden": ("mg21", "modelgarden", "official.nlp.modeling"),
    "kerashub": ("kh", "kerashub", "keras_hub"),
    "kerashub_nsp": ("kh", "kerashub_nsp", "keras_hub"),
    "matmul_floor": ("bert_tf", FLOOR_ADAPTER, "bert_tf.training"),
}
PEERS = ("modelgarden", "kerashub", "kerashub_nsp")

TASK_DEFAULTS = {
    # task: (config, batch, seq, masked, default impls)
    "infer": ("base", 8, 128, 20, "bert_tf,modelgarden,kerashub"),
    "pretrain": ("S", 32, 128, 20, "bert_tf,modelgarden,kerashub_nsp,kerashub"),
}


def default_python(name: str, venvs: str) -> str:
    if IMPLS[name][0] == "bert_tf":  # bert_tf and the matmul floor: the project's venv
        venv_py = os.path.join(REPO, ".venv", "bin", "python")
        return venv_py if os.path.exists(venv_py) else sys.executable
    return os.path.join(venvs, IMPLS[name][0], "bin", "python")


def check_python(py: str, module: str, timeout: int = 300) -> str | None:
    """None if `py` exists and can import `module`, else a reason."""
    if not os.path.exists(py):
        return f"python not found: {py}"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    try:
        p = subprocess.run([py, "-c", f"import {module}"], capture_output=True, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return f"import {module} timed out under {py}"
    if p.returncode:
        return f"import {module} failed under {py}: {p.stderr.strip().splitlines()[-1:]}"
    return None


def _busy_jiffies() -> int:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)


def wait_quiet(max_wait_s: float, thresh: float = 0.05, window: float = 2.0) -> float:
    """As run_all.py: wait (bounded) until all processes use < thresh of the CPUs over `window`."""
    hz, ncpu = os.sysconf("SC_CLK_TCK"), os.cpu_count()
    t_end = time.time() + max_wait_s
    while True:
        b0 = _busy_jiffies()
        time.sleep(window)
        frac = (_busy_jiffies() - b0) / hz / (window * ncpu)
        if frac < thresh or time.time() > t_end:
            return frac


def log(msg: str) -> None:
    print(f"[bench_encoder {datetime.datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def run_peak(args, py: str, path: str) -> dict | None:
    cmd = [py, os.path.join(args.harness, "matmul_peak.py"), "--dtypes", args.peak_dtypes,
           "--jit", args.peak_jit, "--trials", str(args.peak_trials)]
    if args.peak_shapes:
        cmd += ["--shapes", args.peak_shapes]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    best = None
    # The peak is the MFU denominator: a contaminated one inflates every MFU. Wait for a quiet
    # machine first, and re-measure (up to --attempts) while the headline shape has no clean trial.
    for attempt in range(1, args.attempts + 1):
        busy = wait_quiet(args.quiet_wait_s)
        log(f"matmul peak attempt {attempt} (machine busy {busy:.2f}): " + " ".join(cmd))
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        res = None
        for line in reversed(p.stdout.strip().splitlines()):
            if line.startswith("{"):
                res = json.loads(line)
                break
        if res is None:
            log(f"matmul_peak failed rc={p.returncode}: {p.stderr[-1500:]}")
            continue
        head = res.get("results", {}).get("float32_jit0", {}).get("square_2048", {})
        res["headline_clean_trials"] = head.get("clean_trials", 0)
        res["attempt"] = attempt
        if best is None or res["headline_clean_trials"] > best["headline_clean_trials"]:
            best = res
        if res["headline_clean_trials"] >= max(args.peak_trials // 2, 1):
            break
    if best is not None:
        if not best["headline_clean_trials"]:
            log("WARNING: the matmul peak had no clean trial (machine busy): MFU is unreliable")
        with open(path, "w") as f:
            f.write(json.dumps(best) + "\n")
    return best


def load_peak(spec: str, out_dir: str, args, py: str) -> tuple[float | None, dict]:
    """--peak run | skip | NUMBER | path/to/matmul_peak.json -> (fp32 GFLOP/s, info)."""
    if spec == "skip":
        return None, {"source": "skipped"}
    try:
        return float(spec), {"source": "given", "peak_fp32_gflops": float(spec)}
    except ValueError:
        pass
    if spec != "run":
        res = json.load(open(spec))
        src = spec
    else:
        res = run_peak(args, py, os.path.join(out_dir, "matmul_peak.json"))
        src = "measured"
        if res is None:
            return None, {"source": "failed"}
    info = {"source": src}
    for k in ("headline_clean_trials", "attempt", "peak_fp32_gflops", "peak_fp32_gflops_xla", "peak_bf16_gflops",
              "peak_bf16_gflops_xla", "tf_version", "intra_op_threads", "inter_op_threads"):
        if k in res:
            info[k] = res[k]
    # the per-shape fp32 figures at the BERT shapes (what the model's matmuls can reach)
    shapes = {}
    for key, per in res.get("results", {}).items():
        for name, r in per.items():
            if key.startswith("float32") and isinstance(r, dict):
                shapes[f"{key}/{name}"] = r.get("gflops_median_clean", r.get("gflops_median_all"))
    if shapes:
        info["fp32_gflops_by_shape"] = shapes
        g = [v for k, v in shapes.items() if k.startswith("float32_jit0/") and v]
        if g:
            # square_2048 (the harness's peak) can be below what BERT-shaped matmuls reach on a
            # small CPU; MFU against the best measured shape is the stricter figure.
            info["peak_fp32_gflops_best_shape"] = max(g)
    return res.get("peak_fp32_gflops"), info


def run_pass(args, envs: dict, impls: list[str], jits: list[int], out_path: str,
             pass_idx: int, peak: float | None) -> None:
    config, batch, seq, masked, _ = TASK_DEFAULTS[args.task]
    extra = ["--config", args.config or config, "--batch", str(args.batch or batch),
             "--seq", str(args.seq or seq), "--max_steps_factor", str(args.max_steps_factor)]
    if args.task == "pretrain":
        extra += ["--masked", str(args.masked or masked)]
    if peak:
        extra += ["--peak_gflops", str(peak)]
    if args.threads:
        extra += ["--threads", str(args.threads)]
    if args.precision != "fp32":
        extra += ["--precision", args.precision]
    # Interleave the impls inside each XLA setting, and reverse the impl order on odd passes, so
    # slow drifts of the machine's background load fall on every impl alike.
    order = impls if pass_idx % 2 == 0 else impls[::-1]
    cases = []
    for jit in jits:
        for name in order:
            env_name, impl_arg, _ = IMPLS[name]
            cases += ["--case", f"{env_name} {impl_arg} {args.task} {args.loop} {jit}"]
    cmd = [sys.executable, os.path.join(args.harness, "run_all.py"), "--out", out_path,
           "--attempts", str(args.attempts), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--quiet_wait_s", str(args.quiet_wait_s),
           "--timeout", str(args.timeout), "--tag", f"pass{pass_idx}",
           "--extra", " ".join(extra)]
    for env_name, py in envs.items():
        cmd += ["--env", f"{env_name}={py}"]
    cmd += cases
    log(f"pass {pass_idx}: " + " ".join(cmd))
    subprocess.run(cmd, check=False)


def impl_name_of(r: dict) -> str:
    impl = r.get("impl", "")
    if impl.endswith(".py") and os.path.basename(impl) == os.path.basename(ADAPTER):
        return "bert_tf"
    if impl.endswith(".py") and os.path.basename(impl) == os.path.basename(FLOOR_ADAPTER):
        return "matmul_floor"
    return impl


def summarize(records: list[dict], peak: float | None, jits: list[int], impls: list[str],
              peak_best: float | None = None, peak_bf16: float | None = None) -> dict:
    """Per impl and XLA setting: seq/s, MFU against the fp32 peak (and, when the peak run measured
    bfloat16 too, `mfu_vs_bf16_peak`: the figure for `--precision mixed_bf16`), ratios."""
    groups: dict = {}
    errors = []
    for r in records:
        name = impl_name_of(r)
        if "error" in r:
            errors.append({"impl": name, "env": r.get("env"), "error": r["error"],
                           "stderr_tail": r.get("stderr_tail", "")[-600:]})
            continue
        groups.setdefault((name, int(r["jit_compile"])), []).append(r)
    results = {}
    for (name, jit), rs in sorted(groups.items()):
        batch = rs[0]["batch"]
        gflop = rs[0]["model_gflop_per_step"]
        steps = [r["step_ms_median"] for r in rs]
        med = statistics.median(steps)
        sps = batch / (med / 1e3)
        res = {
            "seq_per_s": round(sps, 2),
            "seq_per_s_per_pass": [r["seq_per_s"] for r in rs],
            "step_ms_median": round(med, 1),
            "achieved_gflops": round(gflop / (med / 1e3), 1),
            "mfu": round(gflop / (med / 1e3) / peak, 3) if peak else None,
            "mfu_vs_best_shape_peak": (round(gflop / (med / 1e3) / peak_best, 3)
                                       if peak_best else None),
            "mfu_vs_bf16_peak": (round(gflop / (med / 1e3) / peak_bf16, 3)
                                 if peak_bf16 else None),
            "passes": len(rs),
            "clean_steps_per_pass": [r["clean_steps"] for r in rs],
            "timed_steps_per_pass": [r["timed_steps"] for r in rs],
            "foreign_cpu_frac_median_per_pass": [r["foreign_cpu_frac_median"] for r in rs],
            "seq_per_s_all_steps_per_pass": [round(batch / (r["step_ms_median_all_steps"] / 1e3), 2)
                                             for r in rs],
            "attempts_per_pass": [r.get("attempt") for r in rs],
            "first_step_s": statistics.median(r["first_step_s"] for r in rs),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
            "params": rs[0].get("params_trainable_or_total"),
            "nsp_head": rs[0].get("nsp_head"),
            "versions": rs[0].get("versions"),
        }
        if any(c == 0 for c in res["clean_steps_per_pass"]):
            res["warning"] = ("a pass had 0 clean steps: bench_bert.py then reports the median over "
                              "all (contaminated) steps for that pass")
        results.setdefault(name, {})[f"xla{jit}"] = res
    ratios = {}
    for jit in jits:
        key = f"xla{jit}"
        ours = results.get("bert_tf", {}).get(key)
        if not ours:
            continue
        rat = {}
        peers = {p: results[p][key]["seq_per_s"] for p in PEERS
                 if p in results and key in results[p]}
        for p, v in peers.items():
            rat[f"bert_tf/{p}"] = round(ours["seq_per_s"] / v, 3)
        floor = results.get("matmul_floor", {}).get(key)
        if floor:
            # The share of the matrix-products-only step that bert_tf's step reaches.
            rat["bert_tf/matmul_floor"] = round(ours["seq_per_s"] / floor["seq_per_s"], 3)
        if peers:
            fastest = max(peers, key=peers.get)
            rat["faster_peer"] = fastest
            rat["bert_tf/faster_peer"] = round(ours["seq_per_s"] / peers[fastest], 3)
            if floor:
                # The highest bert_tf / faster-peer ratio the matrix products alone leave possible.
                rat["matmul_floor/faster_peer"] = round(floor["seq_per_s"] / peers[fastest], 3)
        else:
            rat["note"] = "no peer result for this setting (see 'missing' / 'errors')"
        ratios[key] = rat
    return {"results": results, "ratios": ratios, "errors": errors}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=sorted(TASK_DEFAULTS), default="infer")
    ap.add_argument("--loop", choices=["custom", "native"], default="custom",
                    help="pretrain only: harness-owned GradientTape step (custom) or each impl's own")
    ap.add_argument("--impls", default=None,
                    help=f"comma list of {sorted(IMPLS)} (default per task: "
                         f"{ {t: d[4] for t, d in TASK_DEFAULTS.items()} })")
    ap.add_argument("--jit", default="0,1", help="XLA settings to run: 0, 1 or 0,1")
    ap.add_argument("--passes", type=int, default=2, help="passes over the whole matrix")
    ap.add_argument("--steps", type=int, default=20, help="clean timed steps wanted per process")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--max_steps_factor", type=int, default=3,
                    help="a process gives up after steps*factor timed steps")
    ap.add_argument("--attempts", type=int, default=3,
                    help="run_all.py re-runs a case with too few clean steps, keeping the best")
    ap.add_argument("--quiet_wait_s", type=float, default=120,
                    help="max wait for a quiet machine before each process")
    ap.add_argument("--timeout", type=int, default=1800, help="per-process timeout (s)")
    ap.add_argument("--config", default=None, help="harness config S|base|large|tiny")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--masked", type=int, default=None)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--onednn", choices=ONEDNN_CHOICES, default="auto",
                    help=ONEDNN_HELP + "; the matmul peak runs with the same setting")
    ap.add_argument("--precision", choices=["fp32", "mixed_bf16"], default="fp32")
    ap.add_argument("--peak", default="run",
                    help="run (measure now) | skip | a number (GFLOP/s) | a matmul_peak.json")
    ap.add_argument("--peak_dtypes", default="float32")
    ap.add_argument("--peak_jit", default="both", choices=["0", "1", "both"])
    ap.add_argument("--peak_trials", type=int, default=15)
    ap.add_argument("--peak_shapes", default="square_2048,base_ffn_up_1024x768x3072,"
                    "base_ffn_down_1024x3072x768,base_proj_1024x768x768,base_attn_qk_b96_128x64x128")
    ap.add_argument("--harness", default=DEFAULT_HARNESS, help="dir of the shared harness")
    ap.add_argument("--venvs", default=DEFAULT_VENVS, help="dir holding the peer venvs mg21/, kh/")
    ap.add_argument("--env", action="append", default=[],
                    help="override a Python: IMPL=/path/to/python (IMPL: bert_tf, modelgarden, "
                         "kerashub)")
    ap.add_argument("--out", default=None,
                    help="results dir (default bench/results/<task>-<timestamp>)")
    ap.add_argument("--summarize_only", metavar="DIR", default=None,
                    help="no runs: rebuild the JSON summary from DIR/runs.jsonl (+ matmul_peak.json)")
    ap.add_argument("--no_import_check", action="store_true",
                    help="only check that each venv's python exists (skip the import probe)")
    args = ap.parse_args()
    # Set once here: the peak and every pass's processes inherit it.
    onednn_vars, onednn_record = onednn_env(args.onednn)
    os.environ.update(onednn_vars)

    impls = [s.strip() for s in (args.impls or TASK_DEFAULTS[args.task][4]).split(",") if s.strip()]
    for name in impls:
        if name not in IMPLS:
            ap.error(f"unknown impl {name!r}; choose from {sorted(IMPLS)}")
    jits = [int(j) for j in args.jit.split(",")]
    if not os.path.exists(os.path.join(args.harness, "bench_bert.py")):
        ap.error(f"harness not found: {args.harness}/bench_bert.py (set --harness or BENCH_PEERS_DIR)")
    overrides = dict(e.split("=", 1) for e in args.env)

    if args.summarize_only:
        d = args.summarize_only
        pf = os.path.join(d, "matmul_peak.json")
        peak, peak_info = (load_peak(pf, d, args, sys.executable) if os.path.exists(pf)
                           else (None, {"source": "none"}))
        with open(os.path.join(d, "runs.jsonl")) as f:
            records = [json.loads(line) for line in f if line.strip()]
        summary = {"bench": "bert_tf bench_encoder", "summarized_from": d,
                   "peak_fp32_gflops": peak, "peak": peak_info}
        if records:
            r0 = next((r for r in records if "error" not in r), records[0])
            summary.update({k: r0.get(k) for k in ("task", "loop", "config", "batch", "seq_len",
                                                    "masked_per_seq", "dtype")})
            summary["passes"] = len({r.get("tag") for r in records})
        # MFU recomputed against this dir's peak (the per-run mfu used the peak given at run time)
        summary.update(summarize(records, peak, sorted({int(r["jit_compile"]) for r in records
                                                        if "jit_compile" in r}), impls,
                                 peak_info.get("peak_fp32_gflops_best_shape"),
                                 peak_info.get("peak_bf16_gflops")))
        print(json.dumps(summary))
        return

    out_dir = args.out or os.path.join(
        HERE, "results", f"{args.task}-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    os.makedirs(out_dir, exist_ok=True)
    jsonl = os.path.join(out_dir, "runs.jsonl")

    # Which implementations can run here?
    envs, missing, pythons = {}, {}, {}
    for name in impls:
        env_name, _, module = IMPLS[name]
        py = overrides.get(name) or overrides.get(env_name) or default_python(name, args.venvs)
        reason = (None if (args.no_import_check and os.path.exists(py))
                  else check_python(py, module))
        if args.no_import_check and not os.path.exists(py):
            reason = f"python not found: {py}"
        if reason:
            missing[name] = reason
            log(f"MISSING {name}: {reason} -- skipped (create the venv as in bench/README.md "
                f"or pass --env {name}=/path/to/python)")
            continue
        envs[env_name] = py
        pythons[name] = py
    runnable = [n for n in impls if n in pythons]
    if "bert_tf" not in pythons:
        log("bert_tf itself cannot run: nothing to compare")

    peak, peak_info = (None, {"source": "skipped"})
    if runnable:
        peak, peak_info = load_peak(args.peak, out_dir, args,
                                    pythons.get("bert_tf") or next(iter(pythons.values())))
        log(f"fp32 matmul peak: {peak} GFLOP/s ({peak_info.get('source')})")

    for i in range(args.passes if runnable else 0):
        run_pass(args, envs, runnable, jits, jsonl, i, peak)

    records = []
    if os.path.exists(jsonl):
        with open(jsonl) as f:
            records = [json.loads(line) for line in f if line.strip()]
    config, batch, seq, masked, _ = TASK_DEFAULTS[args.task]
    summary = {
        "bench": "bert_tf bench_encoder",
        "task": args.task, "loop": args.loop,
        "config": args.config or config, "batch": args.batch or batch, "seq_len": args.seq or seq,
        "masked_per_seq": (args.masked or masked) if args.task == "pretrain" else None,
        "precision": args.precision,
        "passes": args.passes, "steps_wanted_per_pass": args.steps, "warmup": args.warmup,
        "foreign_cpu_max": 0.05,
        "cpu": cpu_description(),
        "onednn": onednn_record,
        "peak_fp32_gflops": peak, "peak": peak_info,
        "impls_requested": impls, "pythons": pythons, "missing": missing,
        "bert_tf_optimizer": (None if args.task != "pretrain" else "keras.optimizers.Adam"
                              if os.environ.get("BERT_TF_BENCH_OPTIMIZER") == "keras"
                              else "bert_tf.training.FusedAdam"),
        "bert_tf_last_layer": (None if args.task != "pretrain" else "every position"
                               if os.environ.get("BERT_TF_BENCH_LAST_LAYER") == "full"
                               else "[CLS] + masked positions only"),
        "bert_tf_training_gelu": (None if args.task != "pretrain" else "ops"
                                  if os.environ.get("BERT_TF_BENCH_GELU") == "ops" else "xla"),
        "out": jsonl,
    }
    summary.update(summarize(records, peak, jits, impls,
                             peak_info.get("peak_fp32_gflops_best_shape"),
                             peak_info.get("peak_bf16_gflops")))
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
