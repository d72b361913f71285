#!/usr/bin/env python3
"""GPT-1 fine-tuning with the auxiliary LM loss (lm_coef > 0): one train step with the tied LM
head over every position (`lm_logits`, the padding included, then the masked mean) against the
head at the mask's positions only (`GptClassifier.compute_losses` on a training call's
`lm_table`, `bert_tf.gpt.losses.masked_lm_losses`), alternating in one process (issue 35).

  python bench/bench_gpt_aux_lm_step.py                        # the study grid's small GPT
  python bench/bench_gpt_aux_lm_step.py --n_embd 768 --n_layer 12 --n_vocab 40478 \\
      --n_ctx 512 --batch 8 --min_len 8 --max_len 64          # GPT-1 on SST-2-like sentences

The batch holds `--batch` classification inputs of random lengths in [min_len, max_len] (a
`[start] text [classify]` layout, padding after), cut to its longest rounded up to 8 as the
fine-tuning loop's length bucketing does. Both steps run `GptClassifier` with dropout on, the
same GradientTape + Adam update, in one `tf.function` each (tests/gpt/test_masked_lm_losses.py
checks that the two give the same losses and gradients). stdout: one JSON object with the CPU, the settings, the share
of real targets, per round the ms of each step (mean of `--calls` calls) and the medians and
their ratio. A benchmark: nothing is asserted; compare ratios within one run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n_embd", type=int, default=128)
    parser.add_argument("--n_layer", type=int, default=2)
    parser.add_argument("--n_head", type=int, default=2)
    parser.add_argument("--n_vocab", type=int, default=30522)
    parser.add_argument("--n_ctx", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--min_len", type=int, default=4)
    parser.add_argument("--max_len", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import numpy as np

    import bert_tf  # noqa: F401  (oneDNN on AVX2 CPUs, as the tools run)
    import keras
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    from bert_tf.gpt import losses as gpt_losses
    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.task_model import GptClassifier
    from host import cpu_description

    rng = np.random.default_rng(args.seed)
    lengths = rng.integers(args.min_len, args.max_len + 1, size=args.batch)
    width = min(args.n_ctx, int(-(-lengths.max() // 8) * 8))
    config = GptConfig(n_vocab=args.n_vocab, n_special=3, n_ctx=args.n_ctx, n_embd=args.n_embd,
                       n_head=args.n_head, n_layer=args.n_layer)
    keras.utils.set_random_seed(args.seed)
    model = GptClassifier(config, task="classification", num_classes=2, lm_coef=0.5)
    tokens = rng.integers(0, args.n_vocab, size=(args.batch, width)).astype(np.int32)
    real = np.arange(width)[None] < lengths[:, None]
    tokens = np.where(real, tokens, 0).astype(np.int32)
    tokens[np.arange(args.batch), lengths - 1] = model.clf_token
    batch = {"token_ids": tf.constant(tokens), "mask": tf.constant(real.astype(np.float32)),
             "label_ids": tf.constant(rng.integers(0, 2, size=args.batch).astype(np.int32))}

    def full_head(outputs, b):  # the LM head over every position, then the masked mean
        clf = gpt_losses.classification_losses(outputs["logits"], b["label_ids"])
        lm = gpt_losses.lm_losses(gpt_losses.lm_token_losses(outputs["lm_logits"],
                                                             b["token_ids"]), b["mask"])
        return gpt_losses.train_loss(clf, lm, model.lm_coef)

    def mask_only(outputs, b):  # what the fine-tuning loops run
        return model.compute_losses(outputs, b["token_ids"], b["mask"],
                                    b["label_ids"])["train_loss"]

    optimizer = keras.optimizers.Adam(1e-4)

    def step_of(loss_fn):
        @tf.function
        def step(b):
            with tf.GradientTape() as tape:
                loss = loss_fn(model({"token_ids": b["token_ids"]}, training=True), b)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return step

    steps = {"full_head": step_of(full_head), "mask_only": step_of(mask_only)}
    for step in steps.values():  # trace, warm up
        step(batch)
        step(batch)
    rounds = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(args.calls):
                step(batch).numpy()
            rounds[name].append(round((time.perf_counter() - start) / args.calls * 1000, 1))
    medians = {name: statistics.median(v) for name, v in rounds.items()}
    print(json.dumps({
        "bench": "gpt_aux_lm_step", "cpu": cpu_description(), "settings": vars(args),
        "width": width, "real_target_share": round(float(real[:, 1:].mean()), 3),
        "ms_per_round": rounds, "median_ms": medians,
        "full_head_over_mask_only": round(medians["full_head"] / medians["mask_only"], 3)},
        indent=1))


if __name__ == "__main__":
    main()
