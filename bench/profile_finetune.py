#!/usr/bin/env python3
"""Where fine-tuning and prediction time goes: op-ms per category of bert_tf's fine-tuning
train step and of one `predict_arrays` call, from the TF profiler (issue 35).

  python bench/profile_finetune.py                                   # the default cases
  python bench/profile_finetune.py --tasks classifier --modes predict --predict_jit 0,1
  python bench/profile_finetune.py --onednn 1,0                      # TF_ENABLE_ONEDNN_OPTS A/B
  python bench/profile_finetune.py --modes train --fused 0,1         # fused_kernels A/B
  python bench/profile_finetune.py --modes train_alternating --steps 6  # the same, one process
  python bench/profile_finetune.py --modes predict --inference_fusion 0,1  # fused inference A/B
  python bench/profile_finetune.py --modes predict_alternating --steps 6   # the same, one process
  python bench/profile_finetune.py --tasks classifier --modes cls_only_alternating --steps 6
  git worktree add /tmp/before <commit>
  python bench/profile_finetune.py --compare_with /tmp/before        # same-run A/B ratios

Model: the all-MiniLM-L6-v2 shape that `bench/bench_finetune_vs_hf.py` runs (L6 H384 A12 I1536,
vocab 30,522), seeded random weights, so no ../shared or weights package is needed: the op mix
does not depend on the values (`--shape small`: the study grid's `small` model, L2 H128 A2
I512, instead). Tasks: "classifier" (`BertClassifier`, 2 labels, the MRPC /
IMDb case) and "token" (`BertTokenClassifier`, 9 labels, the CoNLL-2003 case). Inputs: `--seq`
long, example lengths drawn (seeded) uniformly in [`--min_length`, seq], as task features are.

Modes, each the code path the bench times:
  * train: `finetuning.make_train_step` (the original AdamWeightDecay, clipping at 1.0, dropout
    0.1) in one `tf.function` with a dynamic sequence axis, on batches of `--batch` cut to
    their longest example rounded up to 8 (what `train_model` runs by default); `--fused 1`
    with `make_train_step(fused_kernels=True)` (`FinetuneOptions.fused_kernels`);
  * train_alternating: both train steps (op-by-op and fused) on one model in one process,
    one step each per round in alternating order for `--steps` rounds, no profiler: per-round
    wall ratios op-by-op / fused (what a loaded machine disturbs least);
  * predict: one `predict_arrays(model, inputs, --predict_batch, ["logits"])` call on
    `--predict_examples` examples (length-bucketed, the default), after an untimed call that
    traces (the function is cached with the model, so the profiled call runs no trace);
    `--predict_jit 1` runs the same batches through `tf.function(jit_compile=True)` (XLA);
    `--inference_fusion 0` traces it with the inference fusions off
    (`bert_tf.modeling.embeddings.FUSED_INFERENCE_LAYER_NORM`: each LayerNorm as Keras' op
    chain instead of the graph oneDNN's remapper fuses into one `_MklLayerNorm`;
    `bert_tf.modeling.attention.FUSED_INFERENCE_SCORES`: 1/sqrt(D) folded into the query
    kernel and the key mask added apart instead of one `_MklFusedBatchMatMulV2`);
  * predict_alternating: two copies of the model (same weights), one traced with the inference
    fusions off, one with them on, one `predict_arrays` call each per round in alternating
    order for `--steps` rounds, no profiler: per-round wall ratios off / on, and the largest
    difference of their logits;
  * cls_only_alternating (classifier): two copies of the model, one traced with the last block
    at every position, one at [CLS] only (`BertEncoder(pooled_only=True)`, what
    `BertClassifier` runs), one train step and one prediction call each per round in
    alternating order for `--steps` rounds, no profiler: per-round wall ratios full / cls_only.

Each case runs in its own process (`--worker`; the tree first on PYTHONPATH; `--threads`
intra-op threads, 0 = all cores; one inter-op thread, as the bench), in alternating order when
there are two trees, oneDNN settings, fused settings or inference-fusion settings. Categories: `bench/profile_train_step.py`'s
(`categorize`): matmul (MatMul / BatchMatMul / Einsum and oneDNN's fused MatMul+BiasAdd(+GELU)),
elementwise, gelu, softmax, layer_norm, dropout_rng, dropout_apply, cast, bias_grad,
gather_scatter, loss, optimizer, xla (an XLA cluster, e.g. the whole predict step under
`--predict_jit 1`), other.

stdout: one JSON object: per case, op-ms per step (train) or per call (predict) by category,
op counts, the wall time outside TF ops (tracing, Python; "wall_minus_op_ms"), the top op types (which show the matmul kernels oneDNN's remapper chose, e.g.
`_MklFusedMatMul` vs `MatMul` + `BiasAdd`), and the traced wall ms (loaded-machine timing: use
the same-run ratios, never the ms); with two trees, oneDNN or fused settings,
`ratio_b_over_a` per category. A profiling tool: nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
              intermediate_size=1536, max_position_embeddings=512, type_vocab_size=2,
              hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
# --shape small: the study grid's `small` model (`bert_tf.studies`, L2 H128 A2 I512), same vocab.
SHAPES = {"minilm": MINILM, "small": {**MINILM, "hidden_size": 128, "num_hidden_layers": 2,
                                      "num_attention_heads": 2, "intermediate_size": 512}}
NUM_LABELS = {"classifier": 2, "token": 9}
ALTERNATING = ("train_alternating", "predict_alternating", "cls_only_alternating")


def make_arrays(task: str, n: int, seq: int, min_length: int, seed: int = 0) -> dict:
    """Seeded task features [n, seq]: ids, mask and type ids of random lengths, and labels."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = rng.integers(min(min_length, seq), seq + 1, size=n)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(1000, MINILM["vocab_size"], size=(n, seq)).astype(np.int32) * mask
    ids[:, 0] = 101
    types = np.zeros_like(ids)
    if task == "token":
        labels = rng.integers(0, NUM_LABELS[task], size=(n, seq)).astype(np.int32) * mask
    else:
        labels = rng.integers(0, NUM_LABELS[task], size=n).astype(np.int32)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types,
            "label_ids": labels}


def build_model(task: str, shape: str = "minilm"):
    import keras

    from bert_tf.modeling import BertClassifier, BertConfig, BertTokenClassifier
    keras.utils.set_random_seed(1)
    config = BertConfig(**SHAPES[shape])
    cls = BertTokenClassifier if task == "token" else BertClassifier
    return cls(config, num_labels=NUM_LABELS[task]).build_from_config_shapes()


def build_train(args, model, arrays, fused: bool | None = None):
    """-> run() doing one train step on the next cut batch (`fused`: `make_train_step`'s
    fused_kernels, by default `--fused`)."""
    import tensorflow as tf

    from bert_tf.tasks.classifier import classification_loss
    from bert_tf.tasks.ner.scoring import ner_loss_fn
    from bert_tf.training.finetuning import make_train_step
    from bert_tf.training.length_batching import (DEFAULT_LENGTH_MULTIPLE, example_lengths,
                                                  round_up_length)
    from bert_tf.training.optimization import create_optimizer

    steps = args.warmup + args.steps
    optimizer = create_optimizer(2e-5, 1000, 100)
    loss_fn = ner_loss_fn if args.task == "token" else (
        lambda outputs, batch: classification_loss(outputs["logits"], batch["label_ids"]))
    seq = arrays["input_mask"].shape[1]
    step_fn = make_train_step(model, optimizer, loss_fn, padded_length=seq,
                              length_key="input_mask",
                              fused_kernels=bool(int(args.fused)) if fused is None else fused)
    signature = {k: tf.TensorSpec([None, None] if v.ndim == 2 else [None], tf.as_dtype(v.dtype))
                 for k, v in arrays.items()}
    step = tf.function(step_fn, input_signature=[signature])
    batches = []
    n = len(arrays["input_mask"])
    for i in range(steps):
        start = (i * args.batch) % max(n - args.batch + 1, 1)
        batch = {k: v[start:start + args.batch] for k, v in arrays.items()}
        length = round_up_length(int(example_lengths(batch["input_mask"]).max()),
                                 DEFAULT_LENGTH_MULTIPLE, seq)
        batches.append({k: v[:, :length] if v.ndim == 2 else v for k, v in batch.items()})
    state = {"i": 0}

    def run():
        batch = batches[state["i"] % len(batches)]
        state["i"] += 1
        return float(step(batch)["loss"].numpy())

    return run


def build_predict(args, model, arrays):
    """-> run() doing one whole prediction call."""
    import numpy as np
    import tensorflow as tf

    from bert_tf.training.finetuning import predict_arrays
    from bert_tf.training.length_batching import plan_length_batches, example_lengths

    inputs = {k: arrays[k][:args.predict_examples]
              for k in ("input_word_ids", "input_mask", "input_type_ids")}
    if not int(args.predict_jit):
        def run():
            out = predict_arrays(model, inputs, args.predict_batch, ["logits"], progress=False)
            return float(np.abs(out["logits"]).mean())

        return run
    # XLA: the same length-sorted, cut batches through one jit-compiled function (one XLA
    # compile per distinct (batch, length) shape, all done in the untimed warm-up call).
    plan = plan_length_batches(example_lengths(inputs["input_mask"]), args.predict_batch,
                               inputs["input_mask"].shape[1])
    forward = tf.function(lambda b: model(b, training=False)["logits"], jit_compile=True)
    batches = [{k: v[p.indices][:, :p.length] for k, v in inputs.items()} for p in plan]

    def run():
        return float(sum(float(tf.reduce_mean(tf.abs(forward(b)))) for b in batches))

    return run


def set_inference_fusion(on: bool) -> None:
    """The inference fusions of bert_tf's BERT layers on / off (read when a function traces);
    a checkout from before them has nothing to switch."""
    from bert_tf.modeling import attention, embeddings
    for module, name in ((embeddings, "FUSED_INFERENCE_LAYER_NORM"),
                         (attention, "FUSED_INFERENCE_SCORES")):
        if hasattr(module, name):
            setattr(module, name, on)


def alternate_inference_fusion(args, model, arrays) -> dict:
    """--modes predict_alternating: `predict_arrays` on two copies of `model` (same weights),
    the first traced with the inference fusions off, the second with them on, one call each
    per round in alternating order (no profiler): per-round wall ratios off / on."""
    import numpy as np

    twin = build_model(args.task, args.shape)
    twin.set_weights(model.get_weights())
    runs, logits = {}, {}
    for name, copy, on in (("off", model, False), ("on", twin, True)):
        set_inference_fusion(on)
        runs[name] = build_predict(args, copy, arrays)
        runs[name]()  # traces with the setting
    from bert_tf.training.finetuning import predict_arrays
    inputs = {k: arrays[k][:args.predict_examples]
              for k in ("input_word_ids", "input_mask", "input_type_ids")}
    for name, copy in (("off", model), ("on", twin)):
        logits[name] = predict_arrays(copy, inputs, args.predict_batch, ["logits"],
                                      progress=False)["logits"]
    per = f"predict call of {args.predict_examples} examples, one per round and variant"
    return {**_alternating_rounds(runs, args.steps, per),
            "max_abs_logit_difference": float(np.max(np.abs(logits["off"] - logits["on"])))}


def alternate_fused(args, model, arrays) -> dict:
    """--modes train_alternating: the op-by-op and the fused train step of one model in this
    process, one step each per round in alternating order (no profiler): per-round wall ratios
    op-by-op / fused, which a loaded machine disturbs less than two processes' figures."""
    runs = {"op_by_op": build_train(args, model, arrays, fused=False),
            "fused": build_train(args, model, arrays, fused=True)}
    for run in runs.values():
        for _ in range(args.warmup):
            run()
    return _alternating_rounds(runs, args.steps, "train step, one per round and variant")


def alternate_cls_only(args, model, arrays) -> dict:
    """--modes cls_only_alternating (classifier): the train step and the prediction call with
    the last block at every position ("full", `bert_tf.modeling.models.CLS_ONLY_LAST_BLOCK`
    off while tracing) and at [CLS] only ("cls_only", the default), on two copies of the model
    (same weights) in this process, alternating: per-round wall ratios full / cls_only."""
    from bert_tf.modeling import models

    twin = build_model(args.task, args.shape)
    twin.set_weights(model.get_weights())
    train, predict = {}, {}
    try:
        for name, copy, on in (("full", model, False), ("cls_only", twin, True)):
            models.CLS_ONLY_LAST_BLOCK = on
            train[name] = build_train(args, copy, arrays)
            predict[name] = build_predict(args, copy, arrays)
            for _ in range(args.warmup):  # traces with the setting
                train[name]()
            predict[name]()
    finally:
        models.CLS_ONLY_LAST_BLOCK = True
    return {"train": _alternating_rounds(train, args.steps, "train step, one per round and variant"),
            "predict": _alternating_rounds(predict, args.steps, f"predict call of "
                                           f"{args.predict_examples} examples, one per round")}


def _alternating_rounds(runs: dict, rounds: int, per: str) -> dict:
    """`rounds` rounds of one call of each of the two `runs` ({name a: call, name b: call}), in
    alternating order (a b, b a, ...), timed by the wall clock: "ratio_<a>_over_<b>_per_round"
    (a's seconds / b's), its "ratio_median" (the upper median) and "wall_ms_per_round"; and by
    this process's CPU time (all its threads; what other jobs on a loaded machine disturb
    less than the wall clock): "cpu_ratio_<a>_over_<b>_per_round", "cpu_ratio_median"."""
    import time

    seconds = {k: [] for k in runs}
    cpu = {k: [] for k in runs}
    for r in range(rounds):
        for name in (list(runs) if r % 2 == 0 else list(reversed(runs))):
            start, start_cpu = time.perf_counter(), time.process_time()
            runs[name]()
            seconds[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    a, b = runs
    ratios = [x / y for x, y in zip(seconds[a], seconds[b])]
    cpu_ratios = [x / y for x, y in zip(cpu[a], cpu[b])]
    return {"per": per, f"ratio_{a}_over_{b}_per_round": [round(x, 3) for x in ratios],
            "ratio_median": round(sorted(ratios)[len(ratios) // 2], 3),
            f"cpu_ratio_{a}_over_{b}_per_round": [round(x, 3) for x in cpu_ratios],
            "cpu_ratio_median": round(sorted(cpu_ratios)[len(cpu_ratios) // 2], 3),
            "wall_ms_per_round": {k: [round(x * 1e3) for x in v] for k, v in seconds.items()}}


def worker(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import bert_tf  # first, as bert_tf's tools: it picks TensorFlow's CPU kernels (cpu_setup)
    import tensorflow as tf
    from profile_common import profile_calls
    from profile_train_step import CATEGORIES
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    n = max(args.predict_examples, args.batch * (args.warmup + args.steps))
    arrays = make_arrays(args.task, n, args.seq, args.min_length)
    model = build_model(args.task, args.shape)
    if args.mode in ALTERNATING:
        alternate = {"train_alternating": alternate_fused,
                     "predict_alternating": alternate_inference_fusion,
                     "cls_only_alternating": alternate_cls_only}[args.mode]
        print(json.dumps({"bert_tf": os.path.dirname(os.path.dirname(bert_tf.__file__)),
                          "loadavg_1_before": round(os.getloadavg()[0], 2),
                          **alternate(args, model, arrays),
                          "loadavg_1_after": round(os.getloadavg()[0], 2)}))
        return
    set_inference_fusion(bool(int(args.inference_fusion)))
    run = (build_train if args.mode == "train" else build_predict)(args, model, arrays)
    calls = args.steps if args.mode == "train" else 1
    for _ in range(args.warmup if args.mode == "train" else 1):
        run()
    tally, value, wall = profile_calls(run, calls, fine_names=True)
    summary = tally.by_category(CATEGORIES)
    print(json.dumps({
        "bert_tf": os.path.dirname(os.path.dirname(bert_tf.__file__)),
        "onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
        "fused_kernels": bool(int(args.fused)),
        "inference_fusion": bool(int(args.inference_fusion)),
        "per": "train step" if args.mode == "train" else
               f"predict call of {args.predict_examples} examples",
        "wall_ms_traced": round(wall * 1e3, 1), "last_value": value,
        "op_ms": summary["op_ms"],
        # Host time outside TF ops (tracing, Python, feeding); ops run one at a time here
        # (one inter-op thread), so wall - op-ms is that time.
        "wall_minus_op_ms": round(wall * 1e3 - summary["op_ms"], 1),
        "ops": summary["ops"],
        "op_ms_by_category": summary["op_ms_by_category"],
        "ops_by_category": summary["ops_by_category"],
        "top_op_types_ms": tally.top_types(args.top, with_counts=True),
        **({"top_op_names_ms": tally.top_names(args.top)} if args.by_name else {})}))


def run_worker(tree: pathlib.Path, side: tuple, case: dict, args) -> dict:
    """One case in its own process: `side` is (tree name, oneDNN setting, fused 0/1,
    inference fusion 0/1)."""
    from profile_common import run_in_tree
    _, onednn, fused, inference = side
    worker_args = ["--task", case["task"], "--mode", case["mode"], "--predict_jit",
                   str(case["jit"]), "--fused", str(fused), "--inference_fusion", str(inference)]
    for name in ("seq", "min_length", "batch", "predict_batch", "predict_examples", "steps",
                 "warmup", "threads", "top", "shape"):
        worker_args += [f"--{name}", str(getattr(args, name))]
    worker_args += ["--by_name"] if args.by_name else []
    return run_in_tree(__file__, tree, worker_args,
                       f"{case} (oneDNN {onednn}, fused {fused}, inference fusion {inference})",
                       env={} if onednn == "default" else {"TF_ENABLE_ONEDNN_OPTS": onednn})


def _side_name(side: tuple) -> str:
    tree, onednn, fused, inference = side
    return (f"{tree} onednn={onednn}" + (" fused" if fused else "")
            + ("" if inference else " inference_fusion=0"))


def _list(ap, value: str, allowed, what: str) -> list:
    items = [v for v in value.split(",") if v]
    for v in items:
        if v not in allowed:
            ap.error(f"--{what}: {v!r} is not one of {sorted(allowed)}")
    return items


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--task", default="classifier", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="train", help=argparse.SUPPRESS)
    ap.add_argument("--tasks", default="classifier,token", help="comma list: classifier, token")
    ap.add_argument("--modes", default="train,predict",
                    help="comma list: train, predict, train_alternating (the op-by-op and the "
                         "fused train step alternating in one process, --steps rounds), "
                         "predict_alternating (prediction with the inference fusions off and "
                         "on, alternating in one process, --steps rounds), cls_only_alternating "
                         "(classifier: training and prediction with the last block at every "
                         "position and at [CLS] only, alternating in one process)")
    ap.add_argument("--predict_jit", default="0", help="comma list of 0 (XLA off), 1 (XLA on)")
    ap.add_argument("--onednn", default="default",
                    help="comma list of TF_ENABLE_ONEDNN_OPTS values (default, 1, 0); two "
                         "values make an A/B in the same run")
    ap.add_argument("--fused", default="0",
                    help="comma list of 0, 1: train with make_train_step(fused_kernels=) off / "
                         "on (two values make an A/B in the same run; prediction ignores it)")
    ap.add_argument("--inference_fusion", default="1",
                    help="comma list of 0, 1: predict with bert_tf's inference fusions off / on "
                         "(two values make an A/B in the same run; training ignores it)")
    ap.add_argument("--compare_with", default=None,
                    help="another bert_tf checkout (e.g. a git worktree of an earlier commit)")
    ap.add_argument("--shape", default="minilm", choices=sorted(SHAPES),
                    help="the model: minilm (all-MiniLM-L6-v2's shape, the bench's) or small "
                         "(the study grid's L2 H128 A2 I512)")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--min_length", type=int, default=16)
    ap.add_argument("--batch", type=int, default=32, help="train batch")
    ap.add_argument("--predict_batch", type=int, default=32)
    ap.add_argument("--predict_examples", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3, help="profiled train steps per case")
    ap.add_argument("--warmup", type=int, default=2, help="untimed train steps (tracing)")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0: all cores)")
    ap.add_argument("--top", type=int, default=15, help="how many op types to list")
    ap.add_argument("--by_name", action="store_true", help="also list the top op names")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    tasks = _list(ap, args.tasks, NUM_LABELS, "tasks")
    modes = _list(ap, args.modes, ("train", "predict") + ALTERNATING, "modes")
    if "cls_only_alternating" in modes and tasks != ["classifier"]:
        ap.error("--modes cls_only_alternating: expected --tasks classifier (a token "
                 "classifier reads every position)")
    jits = [int(j) for j in _list(ap, args.predict_jit, ("0", "1"), "predict_jit")]
    onednn = _list(ap, args.onednn, ("default", "0", "1"), "onednn")
    fused = [int(f) for f in _list(ap, args.fused, ("0", "1"), "fused")]
    inference = [int(f) for f in _list(ap, args.inference_fusion, ("0", "1"),
                                       "inference_fusion")]
    sys.path.insert(0, str(ROOT / "bench"))
    from host import cpu_description  # bench/host.py: the CPU the profile ran on
    from profile_common import checkout_trees, report_tail
    from profile_train_step import CATEGORIES
    trees = checkout_trees(ap, args.compare_with)
    sides = [(t, o, f, i) for t in trees for o in onednn for f in fused for i in inference]
    if len(sides) > 2:
        ap.error("--compare_with, two --onednn, --fused or --inference_fusion values make more "
                 "than an A/B together; give one of them")
    cases = {}
    load_before = os.getloadavg()
    plan = [{"task": t, "mode": m, "jit": j} for t in tasks for m in modes
            for j in (jits if m == "predict" else [0])]
    for i, case in enumerate(plan):
        order = sides if i % 2 == 0 else list(reversed(sides))
        if case["mode"] in ALTERNATING:  # own A/B, one process
            order = [("this", "default", 0, 1)]
        got = {_side_name(side): run_worker(trees[side[0]], side, case, args) for side in order}
        if len(sides) == 2 and case["mode"] not in ALTERNATING:
            a, b = (got[_side_name(side)] for side in sides)
            got["ratio_b_over_a"] = {c: round(b["op_ms_by_category"][c] /
                                              a["op_ms_by_category"][c], 3)
                                     for c in CATEGORIES if a["op_ms_by_category"][c] > 0.05
                                     and b["op_ms_by_category"][c] > 0.05}
            got["ratio_b_over_a"]["total_op_ms"] = round(b["op_ms"] / a["op_ms"], 3)
        name = f"{case['task']} {case['mode']}" + (f" jit={case['jit']}"
                                                   if case["mode"] == "predict" else "")
        cases[name] = got
    print(json.dumps({"bench": "bert_tf profile_finetune", "cpu": cpu_description(),
                      "model": ("all-MiniLM-L6-v2 shape (L6 H384 A12 I1536)" if args.shape ==
                                "minilm" else "the study grid's small shape (L2 H128 A2 I512)")
                      + ", random weights",
                      "sides_a_b": [_side_name(side) for side in sides],
                      "trees": {k: str(v) for k, v in trees.items()},
                      "settings": {k: getattr(args, k) for k in (
                          "seq", "min_length", "batch", "predict_batch", "predict_examples",
                          "steps", "warmup", "threads")},
                      **report_tail(load_before), "cases": cases}))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    main()
