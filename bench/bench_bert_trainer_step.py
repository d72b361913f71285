#!/usr/bin/env python3
"""bert_tf's own BERT pretraining step (`PretrainingTrainer`'s train loop, what run_pretraining.py
runs), timed per step, optionally against another checkout of bert_tf in the same run.

  python bench/bench_bert_trainer_step.py                          # this checkout, fp32
  python bench/bench_bert_trainer_step.py --precision mixed_bfloat16
  git worktree add /tmp/before <commit>
  python bench/bench_bert_trainer_step.py --compare_with /tmp/before --passes 3

`bench_encoder.py --task pretrain` times a harness-owned step (the harness's loss and Adam) beside
the peers; this one times the trainer's step itself: the distributed iterator's next batch,
BertPretrainer forward with dropout, the original's masked-LM + NSP losses (and the accuracy
sums the loop logs), the gradient, global-norm clip 1.0, AdamWeightDecay (fused), the global step
and the step's history record. Config S (L4 H256 A4 I1024, vocab 30,522), batch 32, sequence 128,
20 masked positions, a fixed random batch, the trainer's defaults (last block at the predictions
only, XLA GELU).

  python bench/bench_bert_trainer_step.py --precision mixed_bfloat16 \
      --toggle masked_lm.xla_in_training --rounds 40        # one process, A/B of a setting

With `--toggle ATTR` (a boolean attribute of the trainer's model, dotted, e.g.
`masked_lm.xla_in_training`), one process traces the loop twice on the same trainer, model and
batch, once with the attribute as built and once flipped, and alternates the two steps one by one
for `--rounds` rounds (the order swapped every round): a same-process A/B that a VM's drift of
several percent between processes and between seconds cannot bias. It prints the median step
of each and the per-round ratio flipped / as built (median and quartiles; > 1: the setting as
built is faster).

Otherwise each pass runs every tree once, each in its own process (`--worker`, the tree first on
PYTHONPATH), in alternating order; a process traces, warms up, then times `--steps` steps. Run on
a quiet machine. stdout: one JSON object (median step ms per pass and overall; `ratio` = the
other tree's median / this one's, > 1: this checkout is faster). A benchmark: nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import time

def worker(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import bert_tf
    from profile_common import bert_pretraining_step  # bench/ is on sys.path

    step, close = bert_pretraining_step(args.precision, args.batch, args.seq, args.masked)
    try:
        for _ in range(args.warmup):
            step()
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            loss = step()
            times.append((time.perf_counter() - start) * 1e3)
    finally:
        close()
    print(json.dumps({"bert_tf": os.path.dirname(os.path.dirname(bert_tf.__file__)),
                      "step_ms_median": round(statistics.median(times), 1),
                      "step_ms": [round(t, 1) for t in times], "last_loss": loss}))


def toggle_ab(args: argparse.Namespace) -> dict:
    """The `--toggle` A/B in this process (see the module doc)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np

    from profile_common import bert_pretraining_step

    step_built, close = bert_pretraining_step(args.precision, args.batch, args.seq, args.masked)
    *parents, attr = args.toggle.split(".")
    owner = step_built.trainer.model
    try:
        for name in parents:
            owner = getattr(owner, name)
        built = getattr(owner, attr)
    except AttributeError as e:
        close()
        raise SystemExit(f"--toggle {args.toggle}: no such attribute on the trainer's model "
                         f"({e})") from None
    if not isinstance(built, bool):
        close()
        raise SystemExit(f"--toggle {args.toggle}: expected a bool attribute, found "
                         f"{type(built).__name__} {built!r}")
    try:
        for _ in range(args.warmup):  # traces the trainer's loop with the setting as built
            step_built()
        setattr(owner, attr, not built)
        step_flipped = step_built.another_step()
        for _ in range(args.warmup):  # traces the second loop with the setting flipped
            step_flipped()
        setattr(owner, attr, built)
        times: dict[str, list[float]] = {"as_built": [], "flipped": []}
        for r in range(args.rounds):
            pair = [("as_built", step_built), ("flipped", step_flipped)]
            for name, fn in (pair if r % 2 == 0 else pair[::-1]):
                start = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - start) * 1e3)
    finally:
        close()
    ratios = np.array(times["flipped"]) / np.array(times["as_built"])
    return {"toggle": args.toggle, "as_built": built, "flipped": not built,
            "rounds": args.rounds,
            "step_ms_median": {k: round(statistics.median(v), 1) for k, v in times.items()},
            "ratio_flipped_over_as_built_median": round(float(np.median(ratios)), 3),
            "ratio_quartiles": [round(float(q), 3) for q in np.percentile(ratios, [25, 75])],
            "step_ms": {k: [round(t, 1) for t in v] for k, v in times.items()}}


def run_worker(tree: pathlib.Path, args: argparse.Namespace) -> dict:
    from profile_common import run_in_tree

    return run_in_tree(__file__, tree, [
        "--precision", args.precision, "--steps", str(args.steps), "--warmup", str(args.warmup),
        "--batch", str(args.batch), "--seq", str(args.seq), "--masked", str(args.masked)],
        f"{args.precision} step")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--precision", choices=["float32", "mixed_bfloat16"], default="float32")
    ap.add_argument("--compare_with", default=None,
                    help="another bert_tf checkout (e.g. a git worktree of an earlier commit)")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--masked", type=int, default=20)
    ap.add_argument("--toggle", default=None,
                    help="a bool attribute of the trainer's model (dotted): one-process A/B")
    ap.add_argument("--rounds", type=int, default=30, help="--toggle: alternating rounds")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if args.toggle:
        from profile_common import load_averages

        if args.compare_with:
            ap.error("--toggle compares two settings of this checkout; drop --compare_with")
        load_before = os.getloadavg()
        out = toggle_ab(args)
        print(json.dumps({"bench": "bert_tf bench_bert_trainer_step --toggle",
                          "precision": args.precision,
                          "config": "S (L4 H256 A4 I1024, vocab 30522)", "batch": args.batch,
                          "seq": args.seq, "masked": args.masked, **out,
                          **load_averages(load_before)}))
        return
    from profile_common import checkout_trees, load_averages

    trees = checkout_trees(ap, args.compare_with)
    per_pass: dict[str, list[float]] = {name: [] for name in trees}
    load_before = os.getloadavg()
    for i in range(args.passes):
        order = list(trees) if i % 2 == 0 else list(reversed(trees))
        for name in order:
            per_pass[name].append(run_worker(trees[name], args)["step_ms_median"])
    out = {"bench": "bert_tf bench_bert_trainer_step", "precision": args.precision,
           "config": "S (L4 H256 A4 I1024, vocab 30522)", "batch": args.batch, "seq": args.seq,
           "masked": args.masked, "steps_per_pass": args.steps,
           "trees": {k: str(v) for k, v in trees.items()},
           "step_ms_median_per_pass": per_pass,
           "step_ms_median": {k: round(statistics.median(v), 1) for k, v in per_pass.items()},
           **load_averages(load_before)}
    if "other" in trees:
        out["ratio"] = round(out["step_ms_median"]["other"] / out["step_ms_median"]["this"], 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
