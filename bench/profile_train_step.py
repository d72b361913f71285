#!/usr/bin/env python3
"""Where a pretraining step's time goes: op-ms per category of one BERT config-S step and one
GPT-1 LM step, float32 and mixed_bfloat16, XLA off and on, from the TF profiler.

  python bench/profile_train_step.py                                  # all 8 cases, this checkout
  python bench/profile_train_step.py --models bert --precisions mixed_bfloat16 --jit 0
  git worktree add /tmp/before <commit>
  python bench/profile_train_step.py --compare_with /tmp/before       # same-run A/B ratios

The steps are the trainers' own train loops, one step per call, as the benches time them:
BERT as `bench/bench_bert_trainer_step.py` (config S: L4 H256 A4 I1024, vocab 30,522, batch 32,
seq 128, 20 masked positions, `PretrainingTrainer` defaults), GPT-1 as `bench/bench_gpt_lm.py`
(`bench/peers/gpt_bert_tf_lm.py`: L4 H256 A4, n_ctx 128, batch 8, the trainer's defaults).
Each case runs in its own process (`--worker`; the tree first on PYTHONPATH), in alternating
tree order: it traces, warms up, then profiles `--steps` steps with `tf.profiler` and sums the
host's TF-op events (ms summed over the executor threads, so the total can exceed the wall time).

Categories (`categorize`): matmul (MatMul / BatchMatMul / Einsum, also oneDNN's fused
MatMul+BiasAdd(+GELU)), elementwise (Mul / Add / Sub and the other arithmetic ops outside the
named parts), gelu, softmax, layer_norm, dropout_rng (the random draws and the keep-mask compare),
dropout_apply (the mask multiplies), cast, bias_grad (BiasAddGrad and Sum reductions),
gather_scatter, loss (the XLA cross-entropy), optimizer (the update, the clip, the global norm),
xla (a compiled cluster not attributed to a part above, e.g. the whole step under `--jit 1`), other.

stdout: one JSON object: per case and tree, op-ms per step by category, the op count, the traced
wall ms (loaded-machine timing: use the ratios, not the ms) and the top op types; with
`--compare_with`, `ratio_other_over_this` per category (> 1: this checkout does less work).
A profiling tool: nothing is asserted.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
CATEGORIES = ("matmul", "elementwise", "gelu", "softmax", "layer_norm", "dropout_rng",
              "dropout_apply", "cast", "bias_grad", "gather_scatter", "loss", "optimizer", "xla",
              "other")
_MATMUL = re.compile(r"MatMul|Einsum|Conv2D")
_RNG = {"StatelessRandomUniformFullIntV2", "StatelessRandomUniformV2",
        "StatelessRandomUniformIntV2",
        "StatelessRandomGetKeyCounter", "StatelessRandomUniform", "StatelessRandomUniformFullInt",
        "RandomUniform", "RandomUniformInt", "Bitcast", "RngReadAndSkip", "RngSkip"}
_GATHER = re.compile(r"Gather|Scatter|UnsortedSegment|SparseSegment|DynamicStitch|Unique")
_OPTIMIZER_TYPES = re.compile(r"^ResourceApply|^ApplyAdam|^ResourceSparseApply")
_ELEMENTWISE = {"Mul", "Add", "AddV2", "Sub", "RealDiv", "Neg", "Square", "SquaredDifference",
                "Rsqrt", "RsqrtGrad", "Sqrt", "Maximum", "Minimum", "Select", "SelectV2", "Tanh",
                "TanhGrad", "Pow", "AddN", "_MklAdd", "_MklAddV2", "_MklMul", "_MklSub",
                "_MklSquaredDifference", "_MklMaximum", "Exp", "Log", "Reciprocal", "DivNoNan",
                "Erf", "Relu", "ReluGrad", "BiasAdd", "_FusedBatchMatMul", "ZerosLike",
                "OnesLike", "Fill", "GreaterEqual", "Greater", "Less", "LessEqual", "Equal",
                "LogicalAnd", "Softplus"}
_REDUCTIONS = {"Sum", "Mean", "Max", "Min", "Prod", "BiasAddGrad"}


def categorize(op_name: str, op_type: str) -> str:
    """The category of one TF op event (`op_name`: its full name with scopes; `op_type`)."""
    name = op_name.lower()
    if op_type in ("XlaCluster", "_XlaRun", "XlaLaunch", "XlaLaunchV2"):
        if "gelu" in name:
            return "gelu"
        if "cross_entropy" in name or "xla_ce" in name or "softmax_cross" in name:
            return "loss"
        if "layer_norm" in name or "layernorm" in name or "fused_ln" in name:
            return "layer_norm"
        if "fused_softmax" in name:  # bert_tf.modeling.fused.attention_softmax_dropout
            return "softmax"
        if "widened_bias_add" in name:  # fused.widened_bias_add: with the casts it replaces
            return "cast"
        return "xla"
    if _MATMUL.search(op_type):
        return "matmul"
    if op_type == "Cast":
        return "cast"
    if op_type in _RNG:
        return "dropout_rng"
    if _OPTIMIZER_TYPES.search(op_type) or "optimizer" in name or "adam" in name or \
            "global_norm" in name or "clip_by" in name:
        return "optimizer"
    if _GATHER.search(op_type):
        return "gather_scatter"
    if "cross_entropy" in name or "log_softmax" in name or "sparse_softmax" in name:
        return "loss"
    if "gelu" in name or op_type in ("Gelu", "GeluGrad", "_MklGelu"):
        return "gelu"
    if "softmax" in name or op_type.startswith("Softmax") or op_type == "_MklSoftmax":
        return "softmax"
    if "layernorm" in name or "layer_norm" in name or re.search(r"/ln_[12f](_\d+)?/", name) or \
            "fused_ln" in name or "moments" in name or "batchnorm" in name:
        return "layer_norm"
    if "dropout" in name:
        return "dropout_rng" if op_type in ("GreaterEqual", "Reshape", "StridedSlice") \
            else "dropout_apply"
    if op_type == "BiasAddGrad" or op_type in _REDUCTIONS:
        return "bias_grad"
    if op_type in _ELEMENTWISE:
        return "elementwise"
    return "other"


def read_events(logdir: str):
    """(op name, op type, ms) of every TF-op event on the host planes of the trace in `logdir`.

    An XLA cluster (a `jit_compile` function called from the step, or the whole step under
    `--jit 1`) is one `CpuExecutable::ExecuteAsyncOnStream` event inside the executor's
    `ProcessAsync::Start` of the call op: it is reported as op type "XlaCluster" under the call
    op's name (bert_tf names its XLA calls' scopes, e.g. `gelu_xla/`). Runtime wrappers (the
    executor's Start/Done, thread-pool and iterator events) are skipped: they enclose other events.
    """
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    space = xplane_pb2.XSpace()
    with open(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0], "rb") as f:
        space.ParseFromString(f.read())
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            calls = []  # (start, end, call op name) of ProcessAsync::Start events on this line
            events = sorted(line.events, key=lambda e: e.offset_ps)
            for ev in events:
                name = plane.event_metadata[ev.metadata_id].name
                if name == "ExecutorState::ProcessAsync::Start":
                    call = next((s.str_value or stat_names.get(s.ref_value, "")
                                 for s in ev.stats if stat_names.get(s.metadata_id) == "name"), "")
                    calls.append((ev.offset_ps, ev.offset_ps + ev.duration_ps, call))
            for ev in events:
                name = plane.event_metadata[ev.metadata_id].name
                if name == "CpuExecutable::ExecuteAsyncOnStream":
                    inside = [c for s, e, c in calls
                              if s <= ev.offset_ps and ev.offset_ps + ev.duration_ps <= e]
                    yield (inside[-1] if inside else "xla"), "XlaCluster", ev.duration_ps / 1e9
                    continue
                if ":" not in name or name.startswith(
                        ("$", "Python", "ExecutorState", "ThunkExecutor")) or \
                        " " in name:
                    continue
                op_name, op_type = name.rsplit(":", 1)
                if not op_type or not (op_type[0].isupper() or op_type[0] == "_") or op_type in (
                        "Process", "Run", "Record", "Start", "Done", "Await", "Generator",
                        "RunWithBorrowedArgs", "ExecuteAsyncOnStream"):
                    continue
                yield op_name, op_type, ev.duration_ps / 1e9


def build_bert_step(jit: bool, precision: str):
    from profile_common import bert_pretraining_step  # the step bench_bert_trainer_step times
    return bert_pretraining_step(precision, jit=jit)


def build_gpt_step(jit: bool, precision: str):
    import importlib.util

    import numpy as np
    spec = importlib.util.spec_from_file_location(
        "gpt_bert_tf_lm", str(ROOT / "bench" / "peers" / "gpt_bert_tf_lm.py"))
    adapter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(adapter)
    cfg = dict(n_layer=4, n_embd=256, n_head=4, n_ctx=128, n_vocab=40478, n_special=3,
               dropout=0.1, batch=8)
    rng = np.random.default_rng(0)  # as bench_gpt_lm.py's worker
    tokens = rng.integers(0, cfg["n_vocab"], size=(cfg["batch"], cfg["n_ctx"] + 1), dtype=np.int32)
    step = adapter.LmTrainStep(cfg, tokens, 2.5e-4, jit, precision)
    return step, step.close


def worker(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import bert_tf
    from profile_common import profile_calls
    build = build_bert_step if args.models == "bert" else build_gpt_step
    step, close = build(bool(int(args.jit)), args.precisions)
    for _ in range(args.warmup):
        step()
    tally, loss, wall = profile_calls(step, args.steps)
    close()
    summary = tally.by_category(CATEGORIES)
    out = {"bert_tf": os.path.dirname(os.path.dirname(bert_tf.__file__)),
           "wall_ms_per_step_traced": round(wall * 1e3, 1), "last_loss": loss,
           "op_ms_per_step": summary["op_ms"], "ops_per_step": summary["ops"],
           "op_ms_by_category": summary["op_ms_by_category"],
           "ops_by_category": summary["ops_by_category"],
           "top_op_types_ms": tally.top_types(args.top)}
    if args.by_name:
        out["top_op_names_ms"] = tally.top_names(args.top)
    print(json.dumps(out))


def run_worker(tree: pathlib.Path, model: str, precision: str, jit: int,
               args: argparse.Namespace) -> dict:
    from profile_common import run_in_tree
    return run_in_tree(__file__, tree, [
        "--models", model, "--precisions", precision, "--jit", str(jit), "--steps",
        str(args.steps), "--warmup", str(args.warmup), "--top", str(args.top)] + (
            ["--by_name"] if args.by_name else []), f"{model} {precision} jit={jit}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--models", default="bert,gpt", help="comma list of bert, gpt")
    ap.add_argument("--precisions", default="float32,mixed_bfloat16",
                    help="comma list of float32, mixed_bfloat16")
    ap.add_argument("--jit", default="0,1", help="comma list of 0 (XLA off), 1 (XLA on)")
    ap.add_argument("--compare_with", default=None,
                    help="another bert_tf checkout (e.g. a git worktree of an earlier commit)")
    ap.add_argument("--steps", type=int, default=3, help="profiled steps per case")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--top", type=int, default=15, help="how many op types to list")
    ap.add_argument("--by_name", action="store_true", help="also list the top op names")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    models = [m for m in args.models.split(",") if m]
    precisions = [p for p in args.precisions.split(",") if p]
    jits = [int(j) for j in args.jit.split(",") if j]
    for m in models:
        if m not in ("bert", "gpt"):
            ap.error(f"--models: {m!r} is not bert or gpt")
    for p in precisions:
        if p not in ("float32", "mixed_bfloat16"):
            ap.error(f"--precisions: {p!r} is not float32 or mixed_bfloat16")
    if any(j not in (0, 1) for j in jits):
        ap.error(f"--jit={args.jit!r}: expected a comma list of 0 and 1")
    from host import cpu_description  # bench/host.py: the CPU the profile ran on
    from profile_common import checkout_trees, report_tail
    trees = checkout_trees(ap, args.compare_with)
    cases = {}
    load_before = os.getloadavg()
    for i, (m, p, j) in enumerate((m, p, j) for m in models for p in precisions for j in jits):
        order = list(trees) if i % 2 == 0 else list(reversed(trees))
        case = {name: run_worker(trees[name], m, p, j, args) for name in order}
        if "other" in trees:
            a, b = case["this"]["op_ms_by_category"], case["other"]["op_ms_by_category"]
            case["ratio_other_over_this"] = {
                c: round(b[c] / a[c], 3) for c in CATEGORIES if a[c] > 0.05 and b[c] > 0.05}
            case["ratio_other_over_this"]["total_op_ms"] = round(
                case["other"]["op_ms_per_step"] / case["this"]["op_ms_per_step"], 3)
        cases[f"{m} {p} jit={j}"] = case
    print(json.dumps({"bench": "bert_tf profile_train_step", "host": cpu_description(),
                      "trees": {k: str(v) for k, v in trees.items()}, "steps": args.steps,
                      **report_tail(load_before), "cases": cases}))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    main()
