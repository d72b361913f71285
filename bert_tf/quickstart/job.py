"""The main job on embedded data (no download, no ../shared): raw text -> pretrained BERT and
GPT-1 -> fine-tuned -> served, with a picture and a short report.

Stages (each one's results are kept in `<output_dir>/.quickstart/<stage>.json` when it ends, so
a killed run resumes at the first unfinished stage, and the training stages resume from their
own checkpoints inside a stage):

1. `data`: the topic task (`topic_task`: paragraphs of Python's documentation, three topic
   groups, split by document) -> `corpus.txt` / `held_out_corpus.txt` (the training / held-out
   topics in the pretraining input format) -> `vocab.txt` (WordPiece, tensorflow-text's builder,
   training text only) -> `pretraining_data/{train,held_out}.tfrecord` (the original
   `create_pretraining_data`, faithful mode) and `gpt_lm_data/` (`bert_tf.pretraining_data.gpt_lm`, WordPiece
   ids, n_ctx windows).
2. `bert_pretraining`: a small BERT (the original `PretrainingTrainer`, AdamWeightDecay, MLM + NSP
   by default) with held-out masked-LM accuracy/loss before and after -> `bert_model.ckpt`
   (original names) + `bert_config.json`.
3. `gpt_pretraining`: a GPT-1 of the same size, the same steps and batch on the same text and
   vocab (`GptModel`'s LM loss, `OpenAIAdam`, the shared loop `training.finetuning.train_model`),
   held-out perplexity before and after -> `gpt_model/` (the original params_*.npy format).
4. `finetuning`: the topic task from the pretrained BERT, from the pretrained GPT
   (`GptClassifier`, classification transform, lm_coef 0.5) and from scratch (the same BERT and
   GPT-1, random init), for each seed (`train_model` / `predict_arrays`); held-out accuracy per
   model and seed.
5. `export`: the fine-tuned BERT classifier (the BERT run with the best held-out accuracy) as a
   SavedModel with its raw-text
   signature, loaded by the TF C API loader harness (TF Serving's loader) and asked a few raw
   texts; its probabilities are compared with Python's.
6. `report`: `curves.png`, `report.md`, `summary.json` and the summary table.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Any, Callable

from bert_tf import io_utils
from bert_tf.errors import UserInputError
from bert_tf.options import integer_list, option
from bert_tf.quickstart import report, topic_task
from bert_tf.quickstart.report import FINETUNE_LABELS

MARKER = ".bert_tf_quickstart"
STATE_DIR = ".quickstart"
STAGES = ("data", "bert_pretraining", "gpt_pretraining", "finetuning", "export", "report")

# The recipe (measured on this corpus, 2 CPU cores; see docs/quickstart.md). The
# model stays the original's (post-LN BERT, 15% masking 80/10/10, AdamWeightDecay, MLM + NSP);
# what makes the masked LM leave the unigram plateau in a few minutes is the recipe:
# - sequences of 64 (a step costs about half of 128's): 2,000 steps in the time of ~1,000. At
#   length 128, 600 steps and peak learning rate 1e-3 the encoder collapsed onto the unigram
#   distribution (held-out MLM accuracy 0.074, next-sentence accuracy unchanged: it ignored its
#   input) and fine-tuned to chance; 3e-4 left the plateau there (0.141) but too slowly. At
#   length 64 the peak 1e-3 trains stably (held-out MLM accuracy 0.201 after 2,000 steps; 5e-4:
#   0.184);
# - dupe_factor 10 (the original's default): twice the masking patterns of the same text, less
#   overfitting of the masked LM over 2,000 steps;
# - fine-tuning for 3 epochs (the original's choice for GLUE): from pretrained weights the
#   training loss is near 0 long before 6 epochs, and the held-out topics suffer.
DEFAULT_PRETRAINING_STEPS = 2000
BERT_BATCH_SIZE = 32
BERT_LEARNING_RATE = 1e-3
DUPE_FACTOR = 10
FINETUNING_EPOCHS = 3.0

SAMPLE_REQUESTS = [
    "The for statement is used to iterate over the elements of a sequence.",
    "A slicing selects a range of items in a sequence object with an expression.",
    "The __len__ method is called to implement the built-in function len().",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class QuickstartOptions:
    """Flags of tools/quickstart.py."""

    output_dir: str = option("quickstart_output", "Where every file is written. A finished run "
                             "there is reused, a killed one resumed; a folder the quickstart did "
                             "not write is refused.")
    steps: int = option(0, "Pretraining steps of each model (BERT: batch 32, GPT: batch 8); 0: "
                        f"{DEFAULT_PRETRAINING_STEPS} x --scale.")
    scale: float = option(1.0, "Makes the job longer (or shorter): multiplies the pretraining "
                          "steps (unless --steps is given) and the fine-tuning epochs.")
    seeds: str = option("1,2", "Fine-tuning seeds (comma-separated): each model is fine-tuned "
                        "once per seed.")
    objective: str = option("mlm+nsp", "BERT pretraining objective: the original's masked LM "
                            "+ next-sentence prediction, or the masked LM only.",
                            choices=["mlm+nsp", "mlm"])
    vocab_size: int = option(4000, "Target WordPiece vocab size.")
    num_layers: int = option(2, "Transformer blocks (BERT and GPT).")
    hidden_size: int = option(128, "Hidden size (BERT and GPT).")
    num_heads: int = option(2, "Attention heads (BERT and GPT).")
    max_seq_length: int = option(64, "Sequence length (BERT) and n_ctx (GPT).")
    seed: int = option(12345, "Seed of the data split, the pretraining data and the weights.")

    def pretraining_steps(self) -> int:
        return self.steps if self.steps > 0 else max(1, round(DEFAULT_PRETRAINING_STEPS
                                                              * self.scale))

    def finetuning_epochs(self) -> float:
        return FINETUNING_EPOCHS * self.scale

    def seed_list(self) -> list[int]:
        return integer_list(self.seeds, "seeds", UserInputError)

    def validate(self) -> None:
        if self.steps < 0:
            raise UserInputError(f"--steps={self.steps}: expected >= 0 (0: "
                                 f"{DEFAULT_PRETRAINING_STEPS} x --scale)")
        if not self.scale > 0:
            raise UserInputError(f"--scale={self.scale}: expected a positive number")
        if self.hidden_size % self.num_heads:
            raise UserInputError(f"--hidden_size={self.hidden_size} is not a multiple of "
                                 f"--num_heads={self.num_heads}")
        for name in ("vocab_size", "num_layers", "hidden_size", "num_heads"):
            if getattr(self, name) <= 0:
                raise UserInputError(f"--{name}={getattr(self, name)}: expected > 0")
        if not 32 <= self.max_seq_length <= 512:
            raise UserInputError(f"--max_seq_length={self.max_seq_length}: expected 32..512")
        self.seed_list()


# ---------------------------------------------------------------------------------------------
# The output folder: fresh, finished (reuse) or killed (resume)
# ---------------------------------------------------------------------------------------------
class RunFolder:
    """`output_dir` with the quickstart's bookkeeping: settings in `.quickstart/run.json`, one
    `<stage>.json` per finished stage."""

    def __init__(self, output_dir: str):
        self.root = output_dir

    def path(self, *names: str) -> str:
        return os.path.join(self.root, *names)

    def _state(self, name: str) -> str:
        return self.path(STATE_DIR, name + ".json")

    def open(self, settings: dict, say: Callable[[str], None]) -> str:
        """Prepares the folder; returns "fresh", "finished" or "resumed". Refuses (one line) a
        non-empty folder the quickstart did not write, or one with another run's settings."""
        root = self.root
        if os.path.isfile(root):
            raise UserInputError(f"--output_dir={root} is a file; expected a folder")
        if os.path.isdir(root) and os.listdir(root):
            if not os.path.exists(self.path(MARKER)):
                raise UserInputError(
                    f"--output_dir={root} is not empty and was not written by the quickstart; "
                    "choose another --output_dir (nothing was changed)")
            old = self.load("run")
            if old is not None and old != settings:
                changed = sorted(k for k in set(old) | set(settings)
                                 if old.get(k) != settings.get(k))
                raise UserInputError(
                    f"--output_dir={root} holds a quickstart run with other settings ("
                    + ", ".join(f"{k}: {old.get(k)} there, {settings.get(k)} now"
                                for k in changed)
                    + "); choose another --output_dir or delete that folder to start over "
                    "(nothing was changed)")
            done = [s for s in STAGES if self.load(s) is not None]
            if len(done) == len(STAGES):
                say(f"{root} holds a finished run with these settings: reusing it (delete the "
                    "folder or choose another --output_dir to run again).")
                return "finished"
            if old is not None:
                left = [s for s in STAGES if s not in done]
                say(f"{root} holds an interrupted run: resuming ({', '.join(done) or 'no stage'}"
                    f" done; continuing with {left[0]}, training resumes from its last "
                    "checkpoint).")
                self.save("run", settings)
                return "resumed"
        io_utils.makedirs(root)
        io_utils.atomic_write_text(self.path(MARKER), "written by tools/quickstart.py\n")
        self.save("run", settings)
        return "fresh"

    def load(self, stage: str) -> dict | None:
        path = self._state(stage)
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def save(self, stage: str, result: dict) -> None:
        io_utils.makedirs(self.path(STATE_DIR))
        io_utils.atomic_write_text(self._state(stage), json.dumps(result, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------
# Stages
# ---------------------------------------------------------------------------------------------
def _data_stage(run: RunFolder, o: QuickstartOptions, say) -> dict:
    from bert_tf.pretraining_data.gpt_lm import EncoderSpec, LmDataOptions, create_gpt_lm_data
    from bert_tf.pretraining_data import PretrainingDataOptions, create_pretraining_data
    from bert_tf.tokenization import FullTokenizer, build_wordpiece_vocab

    split = topic_task.topic_split(seed=o.seed)
    train_docs = topic_task.write_corpus(split.train_documents, run.path("corpus.txt"))
    held_docs = topic_task.write_corpus(split.held_out_documents, run.path("held_out_corpus.txt"))
    io_utils.atomic_write_text(run.path("topic_task.json"), json.dumps({
        "labels": list(topic_task.LABELS), "train_topics": split.train_topics,
        "held_out_topics": split.held_out_topics,
        "train": [{"text": t, "label": topic_task.LABELS[y]} for t, y in split.train],
        "held_out": [{"text": t, "label": topic_task.LABELS[y]} for t, y in split.held_out],
    }, indent=1) + "\n")
    say(f"  task: {len(split.train)} training / {len(split.held_out)} held-out paragraphs, "
        f"{len(topic_task.LABELS)} balanced classes; {len(split.held_out_topics)} of "
        f"{len(split.train_topics) + len(split.held_out_topics)} topics held out")
    vocab = build_wordpiece_vocab([run.path("corpus.txt")], run.path("vocab.txt"),
                                  vocab_size=o.vocab_size, do_lower_case=True)
    tokenizer = FullTokenizer(run.path("vocab.txt"), do_lower_case=True)
    seq = o.max_seq_length
    data_options = PretrainingDataOptions(max_seq_length=seq,
                                          max_predictions_per_seq=round(0.15 * seq),
                                          dupe_factor=DUPE_FACTOR, random_seed=o.seed)
    io_utils.makedirs(run.path("pretraining_data"))
    counts = {}
    for name, corpus, dupe in (("train", "corpus.txt", DUPE_FACTOR),
                               ("held_out", "held_out_corpus.txt", 1)):
        result = create_pretraining_data(
            run.path(corpus), run.path("pretraining_data", f"{name}.tfrecord"), tokenizer,
            dataclasses.replace(data_options, dupe_factor=dupe), log_examples=0,
            vocab_file=run.path("vocab.txt"))
        counts[name] = result.get("instances")
    spec = EncoderSpec(vocab_file=run.path("vocab.txt"), do_lower_case=True)
    windows = {}
    for name, corpus in (("train", "corpus.txt"), ("held_out", "held_out_corpus.txt")):
        result = create_gpt_lm_data(run.path(corpus), run.path("gpt_lm_data", name), spec,
                                    LmDataOptions(n_ctx=seq, random_seed=o.seed),
                                    progress=False, overwrite=True)
        windows[name] = result.get("windows", result.get("train", {}).get("windows"))
    return {"documents": {"train": train_docs[0], "held_out": held_docs[0]},
            "sentences": {"train": train_docs[1], "held_out": held_docs[1]},
            "vocab_size": len(vocab), "bert_instances": counts, "gpt_windows": windows,
            "task": {"train": len(split.train), "held_out": len(split.held_out),
                     "classes": list(topic_task.LABELS),
                     "held_out_topics": split.held_out_topics},
            "max_predictions_per_seq": data_options.max_predictions_per_seq}


def _bert_config(o: QuickstartOptions, vocab_size: int):
    from bert_tf.modeling import BertConfig

    return BertConfig(vocab_size=vocab_size, hidden_size=o.hidden_size,
                      num_hidden_layers=o.num_layers, num_attention_heads=o.num_heads,
                      intermediate_size=4 * o.hidden_size, max_position_embeddings=512,
                      type_vocab_size=2)


def _gpt_config(o: QuickstartOptions, vocab_size: int):
    from bert_tf.gpt.config import GptConfig

    return GptConfig(n_vocab=vocab_size, n_special=3, n_ctx=o.max_seq_length,
                     n_embd=o.hidden_size, n_head=o.num_heads, n_layer=o.num_layers)


def _bert_pretraining_stage(run: RunFolder, o: QuickstartOptions, data: dict, bar_title) -> dict:
    import keras

    from bert_tf.checkpoints import save_original_checkpoint
    from bert_tf.pretraining_data.tfrecord_reader import pretraining_dataset
    from bert_tf.quickstart.trainers import QuickstartBertTrainer
    from bert_tf.training.pretraining_loop import TrainerOptions

    keras.utils.set_random_seed(o.seed)
    config = _bert_config(o, data["vocab_size"])
    config.to_json_file(run.path("bert_config.json"))
    steps = o.pretraining_steps()
    seq, preds = o.max_seq_length, data["max_predictions_per_seq"]
    trainer = QuickstartBertTrainer(config, TrainerOptions(
        output_dir=run.path("bert_pretraining"), train_batch_size=BERT_BATCH_SIZE,
        eval_batch_size=32, learning_rate=BERT_LEARNING_RATE, num_train_steps=steps, num_warmup_steps=max(1, steps // 10),
        save_checkpoints_steps=max(50, steps // 4), iterations_per_loop=10,
        max_eval_steps=1000), mlm_only=o.objective == "mlm", title=bar_title)
    held_out = run.path("pretraining_data", "held_out.tfrecord")

    def evaluate():
        return trainer.evaluate(lambda ctx: pretraining_dataset(
            held_out, seq, preds, 32, False, input_context=ctx))

    before_file = run.path(STATE_DIR, "bert_before.json")
    if os.path.exists(before_file):  # a resumed run: measured before its first step
        with open(before_file, encoding="utf-8") as f:
            before = json.load(f)
    else:
        before = evaluate()
        run.save("bert_before", before)
    records = trainer.train(lambda ctx: pretraining_dataset(
        run.path("pretraining_data", "train.tfrecord"), seq, preds, BERT_BATCH_SIZE, True,
        input_context=ctx, seed=o.seed))
    after = evaluate()
    save_original_checkpoint(trainer.model, run.path("bert_model.ckpt"), overwrite=True)
    keys = ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy")
    history = _history_from_events(run.path("bert_pretraining", "train"),
                                   ("loss", "masked_lm_loss"), records)
    return {"steps": steps, "objective": o.objective, "batch_size": BERT_BATCH_SIZE,
            "learning_rate": BERT_LEARNING_RATE,
            "before": {k: round(float(before[k]), 4) for k in keys},
            "after": {k: round(float(after[k]), 4) for k in keys},
            "first_loss": history["masked_lm_loss"][0][1] if history["masked_lm_loss"] else None,
            "last_loss": history["masked_lm_loss"][-1][1] if history["masked_lm_loss"] else None,
            "curve": history}


def _history_from_events(logdir: str, tags, records) -> dict:
    """Per-tag [(step, value)] from TensorBoard events (all runs of a resumed stage), else from
    this call's records."""
    from bert_tf.plotting import read_scalars

    try:
        curves = read_scalars(logdir, tags)
    except (FileNotFoundError, ValueError):
        curves = {}
    return {t: [(int(s), round(float(v), 4)) for s, v in curves.get(t, [])]
            or [(r["step"], round(float(r[t]), 4)) for r in records if t in r] for t in tags}


def _lm_windows(pattern: str, n_ctx: int):
    import numpy as np

    from bert_tf.pretraining_data.gpt_lm import lm_dataset

    rows = [r["input_ids"].numpy() for r in lm_dataset(pattern, n_ctx, is_training=False)]
    return np.stack(rows).astype(np.int32)


def _lm_nll(model, windows, batch_size: int = 32) -> float:
    """Mean next-token negative log-likelihood of `windows` [N, n_ctx] (training=False)."""
    import numpy as np
    import tensorflow as tf

    from bert_tf.gpt import losses as gpt_losses

    @tf.function
    def nll(ids):
        losses = gpt_losses.lm_token_losses(model({"token_ids": ids}, training=False)["lm_logits"],
                                            ids)
        return tf.reduce_sum(losses), tf.cast(tf.size(losses), tf.float32)

    total = count = 0.0
    for start in range(0, len(windows), batch_size):
        s, c = nll(tf.constant(windows[start:start + batch_size]))
        total, count = total + float(s), count + float(c)
    return float(total / max(count, 1.0)) if count else float(np.nan)


GPT_BATCH_SIZE = 8
"""The pretraining budget: the same steps for both models, and batches of about the same cost per
step: BERT 32 sequences (up to 10 masked tokens each predicted at length 64, ~300 targets, but
every position through the encoder), GPT 8 windows (every next token predicted: 504 targets at
n_ctx 64; its LM head over all positions is what costs)."""


def _gpt_pretraining_stage(run: RunFolder, o: QuickstartOptions, data: dict) -> dict:
    import keras
    import tensorflow as tf

    from bert_tf.gpt.model import GptModel
    from bert_tf.training.openai_adam import OpenAIAdam
    from bert_tf.checkpoints.openai import save_original_params
    from bert_tf.training.finetuning import FinetuneOptions, train_model

    keras.utils.set_random_seed(o.seed)
    config = _gpt_config(o, data["vocab_size"])
    io_utils.atomic_write_text(run.path("gpt_config.json"),
                               json.dumps(config.to_dict(), indent=2) + "\n")
    model = GptModel(config, classifier=False, name="gpt")
    train = _lm_windows(run.path("gpt_lm_data", "train-*.tfrecord"), config.n_ctx)
    held_out = _lm_windows(run.path("gpt_lm_data", "held_out-*.tfrecord"), config.n_ctx)
    steps = o.pretraining_steps()
    lr, warmup = 1e-3, 0.1
    before_file = run.path(STATE_DIR, "gpt_before.json")
    if os.path.exists(before_file):
        with open(before_file, encoding="utf-8") as f:
            before = json.load(f)["nll"]
    else:
        before = _lm_nll(model, held_out)
        run.save("gpt_before", {"nll": before})

    def loss_fn(outputs, batch):
        mask = tf.ones_like(batch["token_ids"], dtype=tf.float32)  # windows hold no padding
        return model.compute_losses(outputs, batch["token_ids"], mask)["train_loss"]

    result = train_model(
        model, {"token_ids": train}, loss_fn,
        FinetuneOptions(output_dir=run.path("gpt_pretraining"), learning_rate=lr,
                        num_train_steps=steps, num_warmup_steps=int(steps * warmup),
                        train_batch_size=GPT_BATCH_SIZE,
                        save_checkpoints_steps=max(50, steps // 4),
                        keep_checkpoint_max=1, seed=o.seed, shuffle_buffer=1000,
                        plot_curves=False),
        input_keys=("token_ids",),
        optimizer_fn=lambda: OpenAIAdam(lr, t_total=steps, schedule="warmup_linear",
                                        warmup=warmup, l2=0.01, max_grad_norm=0.0))
    after = _lm_nll(model, held_out)
    if os.path.isdir(run.path("gpt_model")):
        import shutil

        shutil.rmtree(run.path("gpt_model"))
    save_original_params(model, run.path("gpt_model"))
    history = _history_from_events(run.path("gpt_pretraining", "train"), ("loss",),
                                   result["history"])
    return {"steps": steps, "batch_size": GPT_BATCH_SIZE, "learning_rate": lr,
            "train_windows": int(len(train)), "held_out_windows": int(len(held_out)),
            "before": {"lm_loss": round(before, 4), "perplexity": round(math.exp(before), 1)},
            "after": {"lm_loss": round(after, 4), "perplexity": round(math.exp(after), 1)},
            "curve": history}


FINETUNE_LEARNING_RATE = 5e-4
"""Peak learning rate of every fine-tuning run (warm-up 10%, linear decay; batch 32)."""
FINETUNE_MODELS = ("bert_pretrained", "bert_scratch", "gpt_pretrained", "gpt_scratch")


def _task_examples(run: RunFolder):
    with open(run.path("topic_task.json"), encoding="utf-8") as f:
        task = json.load(f)
    return task


def _bert_arrays(examples, tokenizer, seq: int, split: str):
    from bert_tf.tasks import glue

    rows = [glue.InputExample(guid=f"{split}-{i}", text_a=e["text"], label=e["label"])
            for i, e in enumerate(examples)]
    features = glue.convert_examples_to_features(rows, list(topic_task.LABELS), seq, tokenizer,
                                                 split, log_examples=0)
    return glue.features_to_arrays(features, regression=False)


def _gpt_arrays(examples, encoder, config):
    import numpy as np

    from bert_tf.gpt.input_transforms import SpecialTokens, classification_inputs

    ids = encoder.encode([e["text"] for e in examples], verbose=False)
    x = classification_inputs(ids, config.n_ctx, SpecialTokens.for_config(config),
                              max_len=config.n_ctx - 2)
    labels = np.array([topic_task.LABELS.index(e["label"]) for e in examples], np.int32)
    return {"token_ids": x.token_ids.astype(np.int32), "mask": x.mask.astype(np.float32),
            "label_ids": labels}


def _finetune_one(run: RunFolder, o: QuickstartOptions, data: dict, kind: str, seed: int,
                  task: dict) -> dict:
    import keras
    import numpy as np

    from bert_tf.training.finetuning import (FinetuneOptions, init_model,
                                             num_train_and_warmup_steps, predict_arrays,
                                             train_model)

    out_dir = run.path("finetuning", f"{kind}-seed{seed}")
    n = len(task["train"])
    batch = 32
    steps, warmup = num_train_and_warmup_steps(n, batch, o.finetuning_epochs(), 0.1)
    keras.utils.set_random_seed(seed)
    if kind.startswith("bert"):
        from bert_tf.modeling import BertClassifier
        from bert_tf.tasks.classifier import classification_loss
        from bert_tf.tokenization import FullTokenizer

        tokenizer = FullTokenizer(run.path("vocab.txt"), do_lower_case=True)
        config = _bert_config(o, data["vocab_size"])
        model = BertClassifier(config, num_labels=len(topic_task.LABELS))
        init_model(model, run.path("bert_model.ckpt") if kind == "bert_pretrained" else None)
        train = _bert_arrays(task["train"], tokenizer, o.max_seq_length, "train")
        held = _bert_arrays(task["held_out"], tokenizer, o.max_seq_length, "held_out")
        lr = FINETUNE_LEARNING_RATE
        result = train_model(
            model, train, lambda out, b: classification_loss(out["logits"], b["label_ids"]),
            FinetuneOptions(output_dir=out_dir, learning_rate=lr, num_train_steps=steps,
                            num_warmup_steps=warmup, train_batch_size=batch,
                            save_checkpoints_steps=steps, keep_checkpoint_max=1, seed=seed,
                            plot_curves=False))
        logits = predict_arrays(model, held, 64, ["logits"], progress=False)["logits"]
    else:
        from bert_tf.training.openai_adam import OpenAIAdam
        from bert_tf.checkpoints.openai import load_original_params
        from bert_tf.gpt.task_model import GptClassifier
        from bert_tf.tokenization.gpt_text_encoder import WordPieceTextEncoder

        config = _gpt_config(o, data["vocab_size"])
        encoder = WordPieceTextEncoder(run.path("vocab.txt"), do_lower_case=True)
        model = GptClassifier(config, task="classification",
                              num_classes=len(topic_task.LABELS), lm_coef=0.5)
        if kind == "gpt_pretrained":
            load_original_params(model.transformer, run.path("gpt_model"),
                                 n_transfer=config.n_layer, seed=seed)
        train = _gpt_arrays(task["train"], encoder, config)
        held = _gpt_arrays(task["held_out"], encoder, config)
        lr = FINETUNE_LEARNING_RATE

        def loss_fn(outputs, b):
            return model.compute_losses(outputs, b["token_ids"], b["mask"],
                                        b["label_ids"])["train_loss"]

        result = train_model(
            model, train, loss_fn,
            FinetuneOptions(output_dir=out_dir, learning_rate=lr, num_train_steps=steps,
                            num_warmup_steps=warmup, train_batch_size=batch,
                            save_checkpoints_steps=steps, keep_checkpoint_max=1, seed=seed,
                            plot_curves=False),
            input_keys=("token_ids",),
            optimizer_fn=lambda: OpenAIAdam(lr, t_total=steps, schedule="warmup_linear",
                                            warmup=0.1, l2=0.01, max_grad_norm=0.0))
        logits = predict_arrays(model, held, 64, ["logits"], input_keys=("token_ids",),
                                progress=False)["logits"]
    accuracy = float(np.mean(logits.argmax(-1) == held["label_ids"]))
    history = _history_from_events(os.path.join(out_dir, "train"), ("loss",),
                                   result["history"])
    return {"model": kind, "seed": seed, "steps": steps, "learning_rate": lr,
            "held_out_accuracy": round(accuracy, 4), "checkpoint": result["checkpoint"],
            "curve": history}


def _export_stage(run: RunFolder, o: QuickstartOptions, data: dict, finetuning: dict) -> dict:
    import numpy as np

    from bert_tf.export import loader_harness
    from bert_tf.export.exporter import ExportOptions, export_savedmodel
    from bert_tf.modeling import BertClassifier
    from bert_tf.tokenization import FullTokenizer
    from bert_tf.training.finetuning import init_model, predict_arrays

    # The BERT classifier that answers best on the held-out topics (ties: pretrained, seed order).
    bert_runs = [r for r in finetuning["runs"] if r["model"].startswith("bert")]
    first = max(bert_runs, key=lambda r: r["held_out_accuracy"])
    export_dir = export_savedmodel(ExportOptions(
        model_type="classifier", export_dir=run.path("export", "topic_classifier"), version=1,
        bert_config_file=run.path("bert_config.json"), init_checkpoint=first["checkpoint"],
        vocab_file=run.path("vocab.txt"), seq_length=o.max_seq_length,
        label_list=list(topic_task.LABELS), overwrite=True))
    harness = loader_harness.build_harness(run.path("export", "harness"))
    responses, proc = loader_harness.run_signature(
        harness, export_dir, [{"text": np.array([t], dtype=object)} for t in SAMPLE_REQUESTS])
    if len(responses) != len(SAMPLE_REQUESTS) or any(isinstance(r, str) for r in responses):
        raise RuntimeError(f"the C API loader did not answer: rc={proc.returncode} "
                           f"{responses!r} {proc.stderr[-2000:]}")
    served = np.concatenate([r["probabilities"] for r in responses])
    # Python: the same weights, tokenized by FullTokenizer, run by Keras.
    tokenizer = FullTokenizer(run.path("vocab.txt"), do_lower_case=True)
    model = BertClassifier(_bert_config(o, data["vocab_size"]), num_labels=len(topic_task.LABELS))
    init_model(model, first["checkpoint"])
    arrays = _bert_arrays([{"text": t, "label": topic_task.LABELS[0]} for t in SAMPLE_REQUESTS],
                          tokenizer, o.max_seq_length, "request")
    logits = predict_arrays(model, arrays, 8, ["logits"], progress=False)["logits"]
    python = np.exp(logits - logits.max(-1, keepdims=True))
    python /= python.sum(-1, keepdims=True)
    labels = [r["labels"][0].decode() if isinstance(r["labels"][0], bytes) else str(r["labels"][0])
              for r in responses] if "labels" in responses[0] else []
    return {"model": FINETUNE_LABELS[first["model"]], "seed": first["seed"],
            "held_out_accuracy": first["held_out_accuracy"],
            "export_dir": os.path.relpath(export_dir, run.root), "harness": "C API loader "
            "(TF_LoadSessionFromSavedModel, as tensorflow_model_server)",
            "requests": [{"text": t, "label": lab, "probabilities": [round(float(p), 4)
                                                                    for p in served[i]]}
                         for i, (t, lab) in enumerate(zip(SAMPLE_REQUESTS, labels or
                                                          [""] * len(SAMPLE_REQUESTS)))],
            "max_abs_diff_vs_python": float(np.max(np.abs(served - python)))}


# ---------------------------------------------------------------------------------------------
# The job
# ---------------------------------------------------------------------------------------------
def run_quickstart(options: QuickstartOptions, say: Callable[[str], None] = print) -> dict:
    """Runs (or resumes, or reuses) every stage; returns the summary (also `summary.json`)."""

    options.validate()
    run = RunFolder(options.output_dir)
    settings = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)
                if f.name != "output_dir"}
    state = run.open(settings, say)
    if state == "finished":
        summary = run.load("report")["summary"]
        say(report.summary_table(summary))
        return summary
    t_job = time.perf_counter()
    results: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    n = len(STAGES)

    def stage(index: int, name: str, title: str, fn: Callable[[], dict]) -> dict:
        done = run.load(name)
        if done is not None:
            say(f"[{index}/{n}] {title}: done in an earlier run (reused)")
            seconds[name] = done.pop("_seconds", 0.0)
            return done
        say(f"[{index}/{n}] {title}")
        t = time.perf_counter()
        result = fn()
        seconds[name] = round(time.perf_counter() - t, 1)
        run.save(name, {**result, "_seconds": seconds[name]})
        return result

    results["data"] = stage(1, "data", "data: topic task, WordPiece vocab, BERT pretraining data "
                            "(faithful), GPT LM windows", lambda: _data_stage(run, options, say))
    data = results["data"]
    steps = options.pretraining_steps()
    results["bert_pretraining"] = stage(
        2, "bert_pretraining", f"BERT pretraining ({options.objective}, {steps} steps)",
        lambda: _bert_pretraining_stage(run, options, data, None))
    results["gpt_pretraining"] = stage(
        3, "gpt_pretraining", f"GPT-1 pretraining (LM, {steps} steps)",
        lambda: _gpt_pretraining_stage(run, options, data))

    def finetune_all() -> dict:
        task = _task_examples(run)
        runs = []
        for seed in options.seed_list():
            for kind in FINETUNE_MODELS:
                say(f"  fine-tuning {FINETUNE_LABELS[kind]}, seed {seed}")
                key = f"finetune_{kind}_seed{seed}"
                done = run.load(key)
                if done is None:
                    done = _finetune_one(run, options, data, kind, seed, task)
                    run.save(key, done)
                say(f"    held-out accuracy {done['held_out_accuracy']:.3f}")
                runs.append(done)
        return {"runs": runs, "chance": round(1 / len(topic_task.LABELS), 4)}

    results["finetuning"] = stage(4, "finetuning", "fine-tuning: which part of the reference a "
                                  "paragraph comes from (held-out topics)", finetune_all)
    results["export"] = stage(5, "export", "export the BERT classifier, serve raw text through "
                              "the C API loader", lambda: _export_stage(
                                  run, options, data, results["finetuning"]))

    def write_report() -> dict:
        summary = report.build_summary(run.root, options, results, seconds)
        report.write_outputs(run.root, summary, results)
        return {"summary": summary}

    summary = stage(6, "report", "report: curves.png, report.md, summary.json",
                    write_report)["summary"]
    say(f"done in {time.perf_counter() - t_job:.0f} s" + (" (this part)" if state == "resumed"
                                                           else ""))
    say(report.summary_table(summary))
    return summary
