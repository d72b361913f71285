"""The runs inside a study's cells: BERT / GPT pretraining and fine-tuning on a task, with the
library's own pieces (original data generation, `PretrainingTrainer`, `train_model`,
`BertClassifier`, `GptClassifier`, `OpenAIAdam`)."""
from __future__ import annotations

import dataclasses
import math
import os
import re

import numpy as np

from bert_tf.training.pretraining_loop import PretrainingTrainer
from bert_tf.studies.baselines import ner_per_example, squad_per_example
from bert_tf.studies.statistics import per_example_from_predictions
from bert_tf.studies.data import TaskData, TaskExample
from bert_tf.studies.declarations import Scale, Variant


def bert_config(scale: Scale, vocab_size: int):
    from bert_tf.modeling import BertConfig

    return BertConfig(vocab_size=vocab_size, hidden_size=scale.hidden_size,
                      num_hidden_layers=scale.num_layers, num_attention_heads=scale.num_heads,
                      intermediate_size=4 * scale.hidden_size,
                      max_position_embeddings=max(512, scale.max_seq_length), type_vocab_size=2)


def gpt_config(scale: Scale, vocab_size: int):
    from bert_tf.gpt.config import GptConfig

    return GptConfig(n_vocab=vocab_size, n_special=3, n_ctx=scale.max_seq_length,
                     n_embd=scale.hidden_size, n_head=scale.num_heads, n_layer=scale.num_layers)


def _curve(logdir: str, tag: str, significant: int = 0) -> list:
    """[[step, value], ...] of a TensorBoard scalar: values rounded to 4 decimals, or to
    `significant` significant digits (learning rates)."""
    from bert_tf.plotting import read_scalars

    def fmt(v: float) -> float:
        return float(f"{v:.{significant}g}") if significant else round(v, 4)

    try:
        return [[int(s), fmt(float(v))] for s, v in read_scalars(logdir, [tag]).get(tag, [])]
    except (FileNotFoundError, ValueError):
        return []


# ---------------------------------------------------------------------------------------------
# Pretraining
# ---------------------------------------------------------------------------------------------
def _phase_data_options(scale: Scale, variant: Variant, seq: int, seed: int,
                        dupe_factor: int):
    """The original's data options of a pretraining (phase) at length `seq`: masked-LM
    predictions scaled with the length (15%), the variant's objective and masking mixture."""
    from bert_tf.pretraining_data import PretrainingDataOptions

    mask, keep, rnd = variant.masking
    return PretrainingDataOptions(
        max_seq_length=seq, max_predictions_per_seq=max(1, round(0.15 * seq)),
        dupe_factor=dupe_factor, random_seed=seed,
        next_sentence_prediction=variant.objective == "mlm+nsp",
        mask_token_prob=mask, keep_token_prob=keep, random_token_prob=rnd)


def phase_bounds(scale: Scale) -> list[tuple[int, int, int]]:
    """[(first step, last step, sequence length), ...] of the pretraining's phases
    (`Scale.pretraining_phases`), in global steps: phase k runs steps first+1 .. last."""
    bounds, end = [], 0
    for steps, seq in scale.pretraining_phases():
        bounds.append((end, end + steps, seq))
        end += steps
    return bounds


def _phase_summary(scale: Scale, targets_per_sequence) -> list[dict]:
    """The cell result's "phases": steps, length, tokens and prediction targets of each."""
    batch = scale.pretraining_batch
    return [{"first_step": first + 1, "last_step": last, "steps": last - first,
             "max_seq_length": seq, "tokens": (last - first) * batch * seq,
             "targets_per_step": batch * targets_per_sequence(seq)}
            for first, last, seq in phase_bounds(scale)]


def _phase_fields(scale: Scale, phases: list[dict], curve: list) -> dict:
    """tokens_seen, targets_per_step (step-weighted mean over the phases) and each phase's own
    part of the loss curve ("phase_curves"), for a pretraining cell's result."""
    steps = sum(p["steps"] for p in phases)
    out = {"tokens_seen": sum(p["tokens"] for p in phases),
           "targets_per_step": round(sum(p["targets_per_step"] * p["steps"] for p in phases)
                                     / max(1, steps)),
           "phases": phases}
    if len(phases) > 1:
        out["phase_curves"] = [[c for c in curve if p["first_step"] <= c[0] <= p["last_step"]]
                               for p in phases]
    return out


def _checkpoint_step(prefix: str | None) -> int:
    """The step of a `.../<name>-<step>` checkpoint prefix (0: none)."""
    if not prefix:
        return 0
    match = re.search(r"-(\d+)$", prefix)
    return int(match.group(1)) if match else 0


def gate_step(scale: Scale) -> int | None:
    """The step at which `scale.pretraining_gate` is read (None: no gate): its fraction of the
    total steps, as `gates.pretraining_gate` computes it."""
    if scale.pretraining_gate is None:
        return None
    return scale.pretraining_gate.by_step(scale.pretraining_steps)


def _stops(first: int, last: int, stop: int, gate_at: int | None) -> list[int]:
    """The steps a phase [first, last] trains to, in order: the gate's step when it falls in
    the phase (and before `stop`), then `stop`."""
    if gate_at is not None and first <= gate_at < stop:
        return [gate_at, stop]
    return [stop]


def _stopped_at_gate(scale: Scale, model: str, curve: list) -> dict | None:
    """The gate's reading of `curve` (`gates.pretraining_gate`, up to `gate_step`) when it is
    NOT passed; None when passed."""
    from bert_tf.studies.gates import pretraining_gate

    gate = pretraining_gate(scale.pretraining_gate, model, curve, scale.pretraining_steps)
    return None if gate["gate_passed"] else gate


def pretrain_bert(cell_dir: str, variant: Variant, scale: Scale, data: dict, seed: int,
                  stop_after_step: int | None = None, stop_at_gate: bool = False
                  ) -> dict | None:
    """MLM+NSP or MLM-only BERT with the variant's masking mixture; writes bert_model.ckpt.

    With a two-phase scale (`Scale.short_seq_length`, BERT's section A.2) the steps of
    `scale.pretraining_phases()` run in order, each on its own data at its length
    (train_s<length>.tfrecord for the short phase, train.tfrecord at `max_seq_length`;
    masked-LM predictions 15% of each length). The phases are ONE training run: one
    `BertStudyTrainer` over the total steps, so the learning-rate schedule (warm-up over the
    first 10% of the total, linear decay to 0 at the total) is not restarted; the second phase
    starts from the first one's training checkpoint (weights, as the original's
    --init_checkpoint, and also the optimizer's moments and step) and reads its own data from
    its start (`BertStudyTrainer.input_offset`). A killed cell resumes in either phase from the
    newest training checkpoint, bit-identically to an unkilled run.

    Args:
      stop_after_step: stop at this global step (after its checkpoint) and return None: a kill
        at that step, for tests.
      stop_at_gate: read the scale's pretraining gate at its step (`gate_step`) and, when the
        run is under it, stop there: the result then has `stopped_at_gate` (the step), `gate`
        (the reading) and the curve so far, and no checkpoint (the study re-runs it at a lower
        rate, `run.retry_cell`). A run that passes goes on to the end, its weights those of a
        run without the stop (the loop resumes bit-identically from the gate step's
        checkpoint).

    Returns the cell result: steps (the total), tokens seen, phases, held-out masked-LM
    accuracy / perplexity (at `max_seq_length`), the loss curve (global steps) and each
    phase's part of it."""
    import keras

    from bert_tf.checkpoints import save_original_checkpoint
    from bert_tf.pretraining_data import create_pretraining_data
    from bert_tf.pretraining_data.tfrecord_reader import pretraining_dataset
    from bert_tf.tokenization import FullTokenizer
    from bert_tf.training.pretraining_loop import TrainerOptions

    seq = scale.max_seq_length
    tokenizer = FullTokenizer(data["vocab_file"], do_lower_case=scale.do_lower_case)
    phases = []  # (first step, last step, length, file, max predictions)
    for first, last, length in phase_bounds(scale):
        name = "train.tfrecord" if length == seq else f"train_s{length}.tfrecord"
        train_file = os.path.join(cell_dir, name)
        options = _phase_data_options(scale, variant, length, seed, scale.dupe_factor)
        if not os.path.exists(train_file):  # written atomically: present = complete
            create_pretraining_data(data["corpus"], train_file, tokenizer, options,
                                    log_examples=0, vocab_file=data["vocab_file"])
        phases.append((first, last, length, train_file, options.max_predictions_per_seq))
    full_options = _phase_data_options(scale, variant, seq, seed, 1)
    held_file = None
    if data.get("held_out_corpus"):
        held_file = os.path.join(cell_dir, "held_out.tfrecord")
        if not os.path.exists(held_file):
            create_pretraining_data(data["held_out_corpus"], held_file, tokenizer,
                                    full_options, log_examples=0,
                                    vocab_file=data["vocab_file"])
    keras.utils.set_random_seed(seed)
    config = bert_config(scale, data["vocab_size"])
    config.to_json_file(os.path.join(cell_dir, "bert_config.json"))
    steps, batch = scale.pretraining_steps, scale.pretraining_batch
    trainer = BertStudyTrainer(config, TrainerOptions(
        output_dir=os.path.join(cell_dir, "pretraining"), train_batch_size=batch,
        eval_batch_size=batch, learning_rate=scale.pretraining_lr, num_train_steps=steps,
        num_warmup_steps=max(1, steps // 10), save_checkpoints_steps=max(50, steps // 4),
        iterations_per_loop=max(1, min(100, steps // 20)), max_eval_steps=1000),
        mlm_only=variant.objective == "mlm")
    logdir = os.path.join(cell_dir, "pretraining", "train")
    gate_at = gate_step(scale) if stop_at_gate else None
    for first, last, length, train_file, preds in phases:
        if _checkpoint_step(trainer.latest_training_checkpoint) >= last:
            continue  # a resumed cell: this phase is done
        trainer.input_offset = first  # this phase's data is read from its own start
        stop = last if stop_after_step is None else min(last, stop_after_step)
        for to in _stops(first, last, stop, gate_at):
            if _checkpoint_step(trainer.latest_training_checkpoint) < to:
                trainer.train(lambda ctx, f=train_file, n=length, p=preds: pretraining_dataset(
                    f, n, p, batch, True, input_context=ctx, seed=seed), stop_after_step=to)
            if to == gate_at:
                curve = _curve(logdir, "masked_lm_loss")
                gate = _stopped_at_gate(scale, "bert", curve)
                if gate is not None:
                    return {"model": "bert", "objective": variant.objective,
                            "masking": list(variant.masking), "steps": steps,
                            "pretraining_lr": scale.pretraining_lr, "seed": seed,
                            "stopped_at_gate": to, "gate": gate, "curve": curve,
                            "learning_rate_curve": _curve(logdir, "learning_rate",
                                                          significant=6)}
        if stop < last:
            return None
    trainer.input_offset = 0
    trainer.restore_or_initialize()  # the trained weights, also when no phase was left to run
    # Prediction targets per step: at most max_predictions_per_seq masked positions a
    # sequence (15%), where the left-to-right model predicts every next token (`pretrain_gpt`).
    result = {"model": "bert", "objective": variant.objective, "masking": list(variant.masking),
              "steps": steps, "pretraining_lr": scale.pretraining_lr, "seed": seed}
    if held_file:
        after = trainer.evaluate(lambda ctx: pretraining_dataset(
            held_file, seq, full_options.max_predictions_per_seq, batch, False,
            input_context=ctx))
        result["held_out_masked_lm_accuracy"] = round(float(after["masked_lm_accuracy"]), 4)
        result["held_out_masked_lm_loss"] = round(float(after["masked_lm_loss"]), 4)
        # BERT Table 6's "LM (ppl)": exp of the mean masked-LM cross-entropy on held-out data.
        result["held_out_masked_lm_perplexity"] = round(
            math.exp(min(float(after["masked_lm_loss"]), 50.0)), 3)
    save_original_checkpoint(trainer.model, os.path.join(cell_dir, "bert_model.ckpt"),
                             overwrite=True)
    result["curve"] = _curve(logdir, "masked_lm_loss")
    result["learning_rate_curve"] = _curve(logdir, "learning_rate", significant=6)
    result.update(_phase_fields(scale, _phase_summary(
        scale, lambda n: max(1, round(0.15 * n))), result["curve"]))
    result["checkpoint"] = os.path.join(cell_dir, "bert_model.ckpt")
    return result


def held_out_masked_lm(cell_dir: str, variant: Variant, scale: Scale, data: dict,
                       pretraining: dict, seed: int, batch_size: int = 64) -> dict:
    """BERT Table 6's "LM (ppl)" with per-sequence scores for the paired bootstrap: the
    pretraining cell's checkpoint scored on ONE held-out masked-LM file shared by every
    variant and pretraining seed of a study (written here from the data cell's held-out corpus
    with the study's `seed`, dupe_factor 1, the variant's masking; identical for the variants
    of one data recipe, so their sequences pair).

    Returns {"metric": "held_out_masked_lm_perplexity", "value": exp(sum nll / sum n),
    "sequences": N, "predictions": sum n, "per_example": PerExample("nll", counts [N, 2] of
    (summed masked-LM cross-entropy, weighted predictions) per sequence) json}."""
    import tensorflow as tf

    from bert_tf.modeling import BertPretrainer
    from bert_tf.pretraining_data import PretrainingDataOptions, create_pretraining_data
    from bert_tf.pretraining_data.tfrecord_reader import pretraining_dataset
    from bert_tf.studies.statistics import PerExample
    from bert_tf.tokenization import FullTokenizer
    from bert_tf.training.finetuning import init_model

    if not data.get("held_out_corpus"):
        raise ValueError("the data cell has no held-out corpus: the scale holds out no "
                         "documents (Scale.held_out_every)")
    seq = scale.max_seq_length
    mask, keep, rnd = variant.masking
    options = PretrainingDataOptions(
        max_seq_length=seq, max_predictions_per_seq=max(1, round(0.15 * seq)), dupe_factor=1,
        random_seed=seed, next_sentence_prediction=variant.objective == "mlm+nsp",
        mask_token_prob=mask, keep_token_prob=keep, random_token_prob=rnd)
    held_file = os.path.join(cell_dir, "held_out.tfrecord")
    if not os.path.exists(held_file):  # written atomically: present = complete
        create_pretraining_data(data["held_out_corpus"], held_file,
                                FullTokenizer(data["vocab_file"],
                                              do_lower_case=scale.do_lower_case),
                                options, log_examples=0, vocab_file=data["vocab_file"])
    model = BertPretrainer(bert_config(scale, data["vocab_size"]))
    init_model(model, pretraining["checkpoint"])
    counts = []
    for batch in pretraining_dataset(held_file, seq, options.max_predictions_per_seq,
                                     batch_size, False, repeat=False):
        logits = model({"input_word_ids": batch["input_ids"],
                        "input_mask": batch["input_mask"],
                        "input_type_ids": batch["segment_ids"],
                        "masked_lm_positions": batch["masked_lm_positions"]},
                       training=False)["masked_lm_logits"]            # [B, P, V]
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
        ids = tf.cast(batch["masked_lm_ids"], tf.int32)
        nll = -tf.gather(log_probs, ids, axis=-1, batch_dims=2)          # [B, P]
        weights = tf.cast(batch["masked_lm_weights"], tf.float32)
        counts.append(np.stack([tf.reduce_sum(nll * weights, -1).numpy(),
                                tf.reduce_sum(weights, -1).numpy()], axis=-1))
    if not counts:
        raise ValueError(f"{held_file}: no held-out sequence to score")
    cell = PerExample("nll", counts=np.concatenate(counts).astype(np.float64))
    return {"metric": "held_out_masked_lm_perplexity", "value": round(float(cell.metric()), 3),
            "sequences": int(cell.size), "predictions": int(cell.counts[:, 1].sum()),
            "data_seed": seed, "per_example": cell.to_json()}


class BertStudyTrainer(PretrainingTrainer):
    """`PretrainingTrainer`; `mlm_only=True` minimises the masked-LM loss alone (BERT Table 5's
    No NSP: the data has single segments, the NSP loss is logged, not trained)."""

    def __init__(self, config, options, mlm_only: bool = False, strategy=None):
        self.mlm_only = mlm_only
        # The global step at which the current input starts (a two-phase pretraining's second
        # phase reads its own data from its first batch): `train` skips step - input_offset
        # batches of it when it resumes.
        self.input_offset = 0
        super().__init__(config, options, strategy)

    def restore_or_initialize(self) -> int:
        """The loop's restore; returns the batches of the CURRENT input already consumed (the
        global step minus `input_offset`), which is what `train` skips on resuming."""
        return super().restore_or_initialize() - self.input_offset

    def replica_losses(self, outputs, batch, ctx):
        losses = super().replica_losses(outputs, batch, ctx)
        if self.mlm_only:  # 0 x NSP: its head gets zero gradients, not None (the all-reduce)
            losses = {**losses, "loss": losses["masked_lm_loss"]
                      + 0.0 * losses["next_sentence_loss"]}
        return losses


GPT_PRETRAINING_CHECKPOINTS = 1000
"""Every checkpoint of the GPT pretraining (every steps/8) is kept: GPT-1 Figure 2 (right)
scores the zero-shot heuristics of each (`zero_shot`)."""


def pretrain_gpt(cell_dir: str, scale: Scale, data: dict, seed: int,
                 stop_after_step: int | None = None, stop_at_gate: bool = False
                 ) -> dict | None:
    """The left-to-right model (GPT-1's `GptModel`, LM loss, `OpenAIAdam`) on the same corpus,
    vocab, steps, batch and length as BERT; writes gpt_params/ (original params format) and
    keeps the checkpoints `pretraining/model.ckpt-<step>` (every steps/8).

    A two-phase scale (`Scale.short_seq_length`) runs BERT's phases here too (BERT Table 5
    compares the LTR model with BERT at equal tokens, lengths and updates): the first phase
    reads the data cell's contiguous `n_ctx` windows cut into windows of the short length (the
    same text), the second the full windows; one `train_model` run over both (the second call
    resumes the first's checkpoint: weights, OpenAIAdam's moments and step, so its
    `t_total` schedule over the total steps is not restarted). `stop_after_step`: stop there
    (after its checkpoint) and return None, a kill for tests. `stop_at_gate`: as
    `pretrain_bert`'s (the LM loss's perplexity against the gate's LTR threshold)."""
    import keras
    import tensorflow as tf

    from bert_tf.pretraining_data.gpt_lm import lm_dataset
    from bert_tf.gpt.model import GptModel
    from bert_tf.training.openai_adam import OpenAIAdam
    from bert_tf.checkpoints.openai import save_original_params
    from bert_tf.training.finetuning import FinetuneOptions, latest_checkpoint, train_model

    keras.utils.set_random_seed(seed)
    config = gpt_config(scale, data["vocab_size"])
    model = GptModel(config, classifier=False, name="gpt")
    pattern = os.path.join(data["data_dir"], "gpt_lm_data", "train-*.tfrecord")
    windows = np.stack([r["input_ids"].numpy() for r in
                        lm_dataset(pattern, config.n_ctx, is_training=False)]).astype(np.int32)
    steps, lr = scale.pretraining_steps, scale.pretraining_lr
    out_dir = os.path.join(cell_dir, "pretraining")

    def loss_fn(outputs, batch):
        mask = tf.ones_like(batch["token_ids"], dtype=tf.float32)  # windows hold no padding
        return model.compute_losses(outputs, batch["token_ids"], mask)["train_loss"]

    result = None
    logdir = os.path.join(out_dir, "train")
    gate_at = gate_step(scale) if stop_at_gate else None
    for first, last, length in phase_bounds(scale):
        if _checkpoint_step(latest_checkpoint(out_dir)) >= last:
            continue  # a resumed cell: this phase is done
        pieces = windows.shape[1] // length
        phase_windows = windows[:, :pieces * length].reshape(-1, length)
        stop = last if stop_after_step is None else min(last, stop_after_step)
        for to in _stops(first, last, stop, gate_at):
            if _checkpoint_step(latest_checkpoint(out_dir)) < to:
                result = train_model(
                    model, {"token_ids": phase_windows}, loss_fn,
                    FinetuneOptions(output_dir=out_dir, learning_rate=lr, num_train_steps=to,
                                    num_warmup_steps=max(1, steps // 10),
                                    train_batch_size=scale.pretraining_batch,
                                    save_checkpoints_steps=max(25, steps // 8),
                                    keep_checkpoint_max=GPT_PRETRAINING_CHECKPOINTS,
                                    seed=seed, shuffle_buffer=1000, progress=False,
                                    plot_curves=False),
                    input_keys=("token_ids",),
                    optimizer_fn=lambda: OpenAIAdam(lr, t_total=steps,
                                                    schedule="warmup_linear", warmup=0.1,
                                                    l2=0.01, max_grad_norm=0.0))
            if to == gate_at:
                curve = _curve(logdir, "loss")
                gate = _stopped_at_gate(scale, "gpt", curve)
                if gate is not None:
                    return {"model": "gpt", "steps": steps, "pretraining_lr": lr,
                            "seed": seed, "stopped_at_gate": to, "gate": gate,
                            "curve": curve, "learning_rate_curve": _curve(
                                logdir, "learning_rate", significant=6)}
        if stop < last:
            return None
    if result is None:  # every phase done (a cell killed after training): its weights
        from bert_tf.training.finetuning import load_checkpoint

        model({"token_ids": windows[:1]})
        load_checkpoint(model, latest_checkpoint(out_dir), heads="if_present")
    held_out = gpt_held_out_metrics(model, cell_dir, scale, data, seed)
    params = os.path.join(cell_dir, "gpt_params")
    if os.path.isdir(params):  # an earlier run killed while writing them
        import shutil

        shutil.rmtree(params)
    save_original_params(model, params)
    curve = _curve(logdir, "loss")
    final = result["loss"] if result is not None and math.isfinite(result["loss"]) else \
        (curve[-1][1] if curve else float("nan"))
    return {"model": "gpt", "steps": steps, "pretraining_lr": lr, "seed": seed,
            "windows": int(len(windows)), "final_lm_loss": round(float(final), 4),
            "curve": curve, "learning_rate_curve": _curve(logdir, "learning_rate", significant=6),
            **_phase_fields(scale, _phase_summary(scale, lambda n: n - 1), curve),
            "params": params, **held_out}


def gpt_held_out_metrics(model, cell_dir: str, scale: Scale, data: dict, seed: int,
                         batch_size: int = 32) -> dict:
    """Held-out LM perplexity and next-token accuracy of the left-to-right model on the data
    cell's held-out documents (the BERT cells' held-out masked-LM measure, for GPT): the
    held-out corpus cut into contiguous n_ctx windows as the training data, every window's
    S-1 next-token predictions counted. {} when the scale has no held-out corpus.

    Returns {"held_out_lm_loss", "held_out_lm_perplexity", "held_out_lm_accuracy",
    "held_out_lm_tokens"}."""
    import tensorflow as tf

    from bert_tf.pretraining_data.gpt_lm import EncoderSpec, LmDataOptions, create_gpt_lm_data, lm_dataset
    from bert_tf.runs.gpt_pretraining import lm_eval_sums

    if not data.get("held_out_corpus"):
        return {}
    prefix = os.path.join(cell_dir, "held_out_lm_data", "held_out")
    create_gpt_lm_data(data["held_out_corpus"], prefix,
                       EncoderSpec(vocab_file=data["vocab_file"],
                                   do_lower_case=scale.do_lower_case),
                       LmDataOptions(n_ctx=scale.max_seq_length, random_seed=seed),
                       progress=False, overwrite=True)
    nll, correct, count = 0.0, 0.0, 0
    for batch in lm_dataset(prefix + "-*.tfrecord", scale.max_seq_length, batch_size,
                            is_training=False):
        ids = tf.cast(batch["input_ids"], tf.int32)
        sums = lm_eval_sums(model({"token_ids": ids}, training=False)["lm_logits"], ids)
        nll += float(sums["nll_sum"])
        correct += float(sums["correct_sum"])
        count += int(sums["token_count"])
    if not count:
        return {}
    loss = nll / count
    return {"held_out_lm_loss": round(loss, 4),
            "held_out_lm_perplexity": round(math.exp(min(loss, 50.0)), 3),
            "held_out_lm_accuracy": round(correct / count, 4), "held_out_lm_tokens": count}


# ---------------------------------------------------------------------------------------------
# Fine-tuning
# ---------------------------------------------------------------------------------------------
def _bert_arrays(task: TaskData, examples: list[TaskExample], tokenizer, seq: int, split: str):
    from bert_tf.tasks import glue

    rows = [glue.InputExample(guid=f"{split}-{i}", text_a=e.text_a, text_b=e.text_b,
                              label=float(e.label) if task.regression else e.label)
            for i, e in enumerate(examples)]
    features = glue.convert_examples_to_features(rows, None if task.regression else task.labels,
                                                 seq, tokenizer, split, log_examples=0)
    return glue.features_to_arrays(features, regression=task.regression)


def gpt_transformation(task: TaskData, bilstm: bool = False) -> str:
    """GPT-1's input transformation for `task` ("classification", "entailment" or
    "similarity"): the paper's, as `run_classifier --model_family=gpt` uses it
    (`bert_tf.tasks.gpt_classifier.TASK_KINDS`: similarity for MRPC and STS-B), else entailment for
    pairs. A BiLSTM head pools one sequence: entailment's instead of similarity's two."""
    from bert_tf.tasks.gpt_classifier import TASK_KINDS

    kind = TASK_KINDS.get(task.name.lower(), "entailment" if task.pair else "classification")
    return "entailment" if bilstm and kind == "similarity" else kind


def _gpt_arrays(task: TaskData, examples: list[TaskExample], encoder, config,
                bilstm: bool = False, width: int | None = None):
    """GPT-1's input transformations (`gpt_transformation`): classification
    `[start; text; extract]` [N, W], entailment `[start; a; delim; b; extract]` [N, W],
    similarity both orders [N, 2, W]; W = `width` (the task's length, the BERT cells' budget),
    default n_ctx."""
    from bert_tf.gpt.input_transforms import (SpecialTokens, classification_inputs,
                                              entailment_inputs, similarity_inputs)

    special = SpecialTokens.for_config(config)
    width = min(config.n_ctx, width or config.n_ctx)
    a = encoder.encode([e.text_a for e in examples], verbose=False)
    if task.pair:
        b = encoder.encode([e.text_b or "" for e in examples], verbose=False)
        transform = similarity_inputs if gpt_transformation(task, bilstm) == "similarity" \
            else entailment_inputs
        x = transform(a, b, width, special, max_len=(width - 3) // 2)
    else:
        x = classification_inputs(a, width, special, max_len=width - 2)
    labels = np.array([float(e.label) for e in examples], np.float32) if task.regression else \
        np.array([task.labels.index(e.label) for e in examples], np.int32)
    return {"token_ids": x.token_ids.astype(np.int32), "mask": x.mask.astype(np.float32),
            "label_ids": labels}


def _epoch_ends(steps: int, num_examples: int, batch: int, epochs: float) -> list[int]:
    """Global steps at which epochs 1, 2, ... end (the last is `steps`)."""
    ends = [int(num_examples / batch * e) for e in range(1, math.ceil(epochs))]
    return sorted({max(1, min(e, steps)) for e in ends} | {steps})


def _train_in_epochs(model, train: dict, loss_fn, options, input_keys, optimizer_fn,
                     ends: list[int], score) -> list[float]:
    """Trains to each step of `ends` in turn (`train_model` resumes from its own checkpoint,
    the optimizer's schedule spans the whole run, so the result is the one uninterrupted run)
    and returns `score()` after each."""
    from bert_tf.training.finetuning import train_model

    scores = []
    for end in ends:
        train_model(model, train, loss_fn, dataclasses.replace(
            options, num_train_steps=end, save_checkpoints_steps=end),
            input_keys=input_keys, optimizer_fn=optimizer_fn)
        scores.append(score())
    return scores


def score_task(task: TaskData, logits: np.ndarray, labels: np.ndarray, cell_dir: str
               ) -> tuple[float, dict]:
    """The held-out score of `task` by its metric (`data.task_metric`), in % (2 decimals), and
    every official metric of a GLUE task (`bert_tf.evaluation.glue_metrics`, in %). A
    regression whose predictions are all equal scores 0 (its metrics say why); any other
    non-finite score raises FloatingPointError naming `cell_dir`.

    Args: logits float [N, num_labels] ([N, 1] for a regression); labels [N] (ids or scores).
    """
    from bert_tf.evaluation.glue_metrics import glue_metrics, task_names
    from bert_tf.studies.data import task_metric

    predictions = logits[:, 0] if task.regression else logits.argmax(-1)
    metrics = {}
    if task.name.lower() in task_names():
        metrics = {k: round(100 * float(v), 2)
                   for k, v in glue_metrics(task.name, predictions, labels).items()}
    metric = task_metric(task.name)
    value = float(np.mean(predictions == labels)) if metric == "accuracy" else \
        metrics[metric] / 100
    if not math.isfinite(value) and task.regression and np.all(np.isfinite(predictions)) \
            and np.ptp(predictions) == 0:
        # A model that collapsed to one score: Pearson's r is undefined (NaN, as SciPy and the
        # official GLUE script give). The study scores it 0 (no linear relation), as
        # matthews_corrcoef does for a constant classifier, and the cell says so.
        metrics = {k: (v if math.isfinite(v) else None) for k, v in metrics.items()}
        metrics["note"] = (f"every held-out prediction is {float(predictions[0]):.4g}: "
                           f"{metric} undefined, scored 0")
        return 0.0, metrics
    if not math.isfinite(value):
        raise FloatingPointError(f"{cell_dir}: held-out {metric} is not finite")
    return round(100 * value, 2), metrics


def cell_per_example(task: TaskData, logits: np.ndarray, labels: np.ndarray) -> dict:
    """The cell's per-example held-out scores (`statistics.PerExample` json) for the paired
    bootstrap: correct/incorrect, or the predictions and gold of a Matthews / Pearson task.

    Args: logits float [N, num_labels] ([N, 1] for a regression); labels [N]."""
    from bert_tf.studies.data import task_metric

    predictions = logits[:, 0] if task.regression else logits.argmax(-1)
    return per_example_from_predictions(task_metric(task.name), predictions,
                                        labels).to_json()


def _init_gpt(model, arrays: dict, input_keys, variant: Variant, config, pretraining,
              seed: int) -> None:
    """Builds a GPT fine-tuning model (`model.transformer` is its `GptModel`) on one row of
    `arrays` and, when there is a pretraining, loads its original-format params: all layers,
    or the variant's `transfer_layers` (GPT-1 Figure 2)."""
    from bert_tf.checkpoints.openai import load_original_params

    model({k: arrays[k][:1] for k in input_keys})  # builds the weights
    if pretraining:
        n_transfer = config.n_layer if variant.transfer_layers is None else \
            variant.transfer_layers
        load_original_params(model.transformer, pretraining["params"], n_transfer=n_transfer,
                             seed=seed)


def _gpt_optimizer(lr: float, steps: int):
    """GPT-1's fine-tuning optimizer: OpenAIAdam, warmup_linear over 10%, L2 0.01."""
    from bert_tf.training.openai_adam import OpenAIAdam

    return OpenAIAdam(lr, t_total=steps, schedule="warmup_linear", warmup=0.1, l2=0.01,
                      max_grad_norm=0.0)


def finetune(cell_dir: str, variant: Variant, scale: Scale, data: dict, task: TaskData,
             seed: int, pretraining: dict | None) -> dict:
    """Fine-tunes the variant's model on `task` and scores the held-out split by the task's
    metric (`data.task_metric`: accuracy, CoLA's Matthews correlation, STS-B's Pearson
    correlation; a regression task trains one output with squared error);
    `variant.per_epoch`: also after every epoch ("per_epoch")."""
    import keras

    from bert_tf.training.finetuning import (FinetuneOptions, checkpoint_variable_map,
                                             init_model, num_train_and_warmup_steps,
                                             predict_arrays)
    from bert_tf.training.optimization import create_optimizer

    seq = scale.seq_for(task.name)
    if task.name in scale.head_tail_tasks:
        from bert_tf.studies.data import head_tail_task
        from bert_tf.tokenization import FullTokenizer

        task = head_tail_task(task, FullTokenizer(data["vocab_file"],
                                                  do_lower_case=scale.do_lower_case), seq)
    steps, warmup = num_train_and_warmup_steps(len(task.train), scale.finetuning_batch,
                                               scale.finetuning_epochs, 0.1)
    steps = max(1, steps)
    ends = _epoch_ends(steps, len(task.train), scale.finetuning_batch,
                       scale.finetuning_epochs) if variant.per_epoch else [steps]
    lr = scale.finetuning_lr
    keras.utils.set_random_seed(seed)
    options = FinetuneOptions(output_dir=os.path.join(cell_dir, "finetuning"), learning_rate=lr,
                              num_train_steps=steps, num_warmup_steps=warmup,
                              train_batch_size=scale.finetuning_batch,
                              save_checkpoints_steps=steps, keep_checkpoint_max=1, seed=seed,
                              progress=False, plot_curves=False)
    if variant.model == "bert":
        from bert_tf.modeling import BertClassifier
        from bert_tf.tasks.classifier import classification_loss, regression_loss
        from bert_tf.tokenization import FullTokenizer

        tokenizer = FullTokenizer(data["vocab_file"], do_lower_case=scale.do_lower_case)
        model = BertClassifier(bert_config(scale, data["vocab_size"]),
                               num_labels=1 if task.regression else len(task.labels))
        init_model(model, pretraining["checkpoint"] if pretraining else None)
        train = _bert_arrays(task, task.train, tokenizer, seq, "train")
        held = _bert_arrays(task, task.held_out, tokenizer, seq, "dev")
        names = {var.path: name for name, var in checkpoint_variable_map(model).items()}
        input_keys = ("input_word_ids", "input_mask", "input_type_ids")
        task_loss = regression_loss if task.regression else classification_loss

        def loss_fn(out, b):
            return task_loss(out["logits"], b["label_ids"])

        def optimizer_fn():  # the original's AdamWeightDecay and schedule over all epochs
            return create_optimizer(lr, steps, warmup, variable_names=names)
    else:
        from bert_tf.gpt.task_model import GptClassifier
        from bert_tf.tokenization.gpt_text_encoder import WordPieceTextEncoder
        from bert_tf.tasks.classifier import classification_loss, regression_loss

        config = gpt_config(scale, data["vocab_size"])
        encoder = WordPieceTextEncoder(data["vocab_file"], do_lower_case=scale.do_lower_case)
        bilstm = variant.head == "bilstm"
        train = _gpt_arrays(task, task.train, encoder, config, bilstm, seq)
        held = _gpt_arrays(task, task.held_out, encoder, config, bilstm, seq)
        if bilstm:
            from bert_tf.studies.bilstm_head import LtrBiLstmClassifier

            model = LtrBiLstmClassifier(config, num_classes=1 if task.regression
                                        else len(task.labels))
            input_keys = ("token_ids", "mask")
            task_loss = regression_loss if task.regression else classification_loss

            def loss_fn(outputs, b):
                return task_loss(outputs["logits"], b["label_ids"])
        else:
            model = GptClassifier(config, task=gpt_transformation(task),
                                  num_classes=None if task.regression else len(task.labels),
                                  lm_coef=variant.lm_coef, regression=task.regression)
            input_keys = ("token_ids",)

            def loss_fn(outputs, b):
                return model.compute_losses(outputs, b["token_ids"], b["mask"],
                                            b["label_ids"])["train_loss"]
        _init_gpt(model, train, input_keys, variant, config, pretraining, seed)

        def optimizer_fn():
            return _gpt_optimizer(lr, steps)

    metrics: dict = {}
    last: dict = {}

    def score() -> float:
        logits = predict_arrays(model, held, 64, ["logits"], input_keys=input_keys,
                                progress=False)["logits"]
        value, found = score_task(task, logits, held["label_ids"], cell_dir)
        metrics.update(found)
        last["logits"] = logits
        return value

    scores = _train_in_epochs(model, train, loss_fn, options, input_keys, optimizer_fn, ends,
                              score)
    from bert_tf.studies.data import task_metric

    result = {"metric": task_metric(task.name), "value": scores[-1], "steps": steps,
              "train_examples": len(task.train), "held_out_examples": len(task.held_out),
              "loss_curve": _curve(os.path.join(cell_dir, "finetuning", "train"), "loss")}
    if metrics:
        result["metrics"] = metrics  # every official metric of the task (the last score's)
    if variant.model == "gpt":
        result["transformation"] = gpt_transformation(task, variant.head == "bilstm")
    result["max_seq_length"] = seq
    result["per_example"] = cell_per_example(task, last["logits"], held["label_ids"])
    if variant.per_epoch:
        result["per_epoch"] = [{"epoch": i + 1, "step": end, "value": v}
                               for i, (end, v) in enumerate(zip(ends, scores))]
    return result


def finetune_ner(cell_dir: str, variant: Variant, scale: Scale, data: dict, task,
                 seed: int, pretraining: dict | None) -> dict:
    """BERT Table 7: CoNLL-2003 NER, fine-tuned (`BertTokenClassifier`) or feature-based
    (`FeatureBasedTagger`: the frozen pretrained BERT's `variant.feature_layers` into a
    randomly initialised two-layer BiLSTM of `hidden_size` units per direction); the
    left-to-right model (`ltr_tagger.LtrTokenTagger`, GPT-1's optimizer; BERT Table 5's NER
    column); entity-level F1 (conlleval) on the held-out sentences."""
    import random

    import keras

    from bert_tf.tasks.ner.features import convert_sentences_to_features, features_to_arrays
    from bert_tf.tasks.ner.scoring import ner_loss_fn, score_predictions, word_predictions
    from bert_tf.tokenization import FullTokenizer
    from bert_tf.training.finetuning import (FinetuneOptions, init_model,
                                             num_train_and_warmup_steps, predict_arrays,
                                             train_model)

    seq = scale.seq_for(task.name)
    tokenizer = FullTokenizer(data["vocab_file"], do_lower_case=scale.do_lower_case)
    config = bert_config(scale, data["vocab_size"])
    keras.utils.set_random_seed(seed)
    model_inputs, input_keys, optimizer_fn = None, None, None
    if variant.model == "gpt":
        from bert_tf.gpt.input_transforms import SpecialTokens
        from bert_tf.studies.ltr_tagger import LtrTokenTagger, gpt_tagger_token_ids

        config = gpt_config(scale, data["vocab_size"])
        special, vocab = SpecialTokens.for_config(config), tokenizer.vocab
        input_keys = ("token_ids", "mask")

        def model_inputs(arrays: dict) -> dict:
            out = {"token_ids": gpt_tagger_token_ids(arrays["input_word_ids"],
                                                     arrays["input_mask"], vocab["[CLS]"],
                                                     vocab["[SEP]"], special),
                   "mask": arrays["input_mask"].astype(np.float32)}
            return {**out, **{k: arrays[k] for k in ("label_ids",) if k in arrays}}

        model = LtrTokenTagger(config, len(task.labels), bilstm=variant.head == "bilstm")
    elif variant.feature_layers is None:
        from bert_tf.modeling import BertTokenClassifier

        model = BertTokenClassifier(config, len(task.labels))
    else:
        from bert_tf.tasks.feature_based import FeatureBasedTagger

        model = FeatureBasedTagger(config, len(task.labels),
                                   feature_layers=variant.feature_layers,
                                   lstm_units=scale.hidden_size, lstm_layers=2)
    features = convert_sentences_to_features(task.train, tokenizer, task.labels, seq,
                                             max(1, seq // 2), log_examples=0)
    random.Random(seed).shuffle(features)
    train = features_to_arrays(features)
    train.pop("predict_mask")
    steps, warmup = num_train_and_warmup_steps(len(task.train), scale.finetuning_batch,
                                               scale.finetuning_epochs, 0.1)
    steps = max(1, steps)
    if model_inputs is None:
        init_model(model, pretraining["checkpoint"] if pretraining else None)
    else:
        train = model_inputs(train)
        _init_gpt(model, train, input_keys, variant, config, pretraining, seed)
        optimizer_fn = lambda: _gpt_optimizer(scale.finetuning_lr, steps)  # noqa: E731
    train_model(model, train, ner_loss_fn, FinetuneOptions(
        output_dir=os.path.join(cell_dir, "finetuning"), learning_rate=scale.finetuning_lr,
        num_train_steps=steps, num_warmup_steps=warmup,
        train_batch_size=scale.finetuning_batch, save_checkpoints_steps=steps,
        keep_checkpoint_max=1, seed=seed, progress=False, plot_curves=False),
        **({} if model_inputs is None else {"input_keys": input_keys,
                                            "optimizer_fn": optimizer_fn}))
    held_features = convert_sentences_to_features(task.held_out, tokenizer, task.labels, seq,
                                                  max(1, seq // 2), log_examples=0)
    arrays = features_to_arrays(held_features)
    if model_inputs is not None:
        arrays = {**model_inputs(arrays), "predict_mask": arrays["predict_mask"]}
    logits = predict_arrays(model, arrays, 64, ["logits"], progress=False,
                            **({} if input_keys is None else {"input_keys": input_keys})
                            )["logits"]
    predictions = word_predictions(held_features, np.argmax(logits, axis=-1), task.held_out,
                                   task.labels)
    scored = score_predictions(task.held_out, predictions)
    f1 = float(scored.f1)
    if not math.isfinite(f1):
        raise FloatingPointError(f"{cell_dir}: held-out F1 is not finite")
    return {"metric": "f1", "value": round(f1, 2), "steps": steps,
            "precision": round(float(scored.precision), 2),
            "recall": round(float(scored.recall), 2), "max_seq_length": seq,
            "per_example": ner_per_example(task.held_out, predictions).to_json(),
            "train_examples": len(task.train), "held_out_examples": len(task.held_out),
            "loss_curve": _curve(os.path.join(cell_dir, "finetuning", "train"), "loss")}


def squad_window_sizes(max_seq_length: int) -> tuple[int, int]:
    """(doc_stride, max_query_length) of the SQuAD windows at `max_seq_length`: the original's
    128 and 64 at its 384 and longer, scaled down for short windows (32 and 24 at length 64:
    a window then holds at least 37 context pieces)."""
    return min(128, max_seq_length // 2), min(64, (3 * max_seq_length) // 8)


def finetune_squad(cell_dir: str, variant: Variant, scale: Scale, data: dict, task,
                   seed: int, pretraining: dict | None) -> dict:
    """SQuAD v1.1 on the dev-article split (`data.SpanTaskData`): BERT (`BertSpanLabeler`,
    AdamWeightDecay) or the left-to-right model (`LtrSpanLabeler`: span head on GPT-1's
    transformer, with the BiLSTM of BERT Table 5's "+ BiLSTM" row when the variant's head is
    "bilstm", `OpenAIAdam`) on the original's windows (`squad_window_sizes`), trained for the
    original's number of steps (training questions / batch x epochs), scored by the official
    v1.1 F1 (and exact match) on the held-out articles after the original's n-best
    post-processing."""
    import keras

    from bert_tf.evaluation.squad import evaluate_squad_v1
    from bert_tf.tasks.squad.features import convert_examples_to_features, features_to_arrays
    from bert_tf.tasks.squad.postprocess import compute_predictions
    from bert_tf.tasks.squad.run import predict_logits, squad_loss
    from bert_tf.tokenization import FullTokenizer
    from bert_tf.training.finetuning import FinetuneOptions, init_model, train_model

    seq = scale.seq_for("SQuAD")
    doc_stride, max_query = squad_window_sizes(seq)
    tokenizer = FullTokenizer(data["vocab_file"], do_lower_case=scale.do_lower_case)
    train_features = convert_examples_to_features(task.train, tokenizer, seq, doc_stride,
                                                  max_query, is_training=True, log_examples=0)
    held_features = convert_examples_to_features(task.held_out, tokenizer, seq, doc_stride,
                                                 max_query, is_training=False, log_examples=0)
    train = features_to_arrays(train_features, is_training=True)
    train.pop("unique_ids")
    steps = max(1, int(len(task.train) / scale.finetuning_batch * scale.finetuning_epochs))
    warmup = int(steps * 0.1)
    lr = scale.finetuning_lr
    options = FinetuneOptions(output_dir=os.path.join(cell_dir, "finetuning"), learning_rate=lr,
                              num_train_steps=steps, num_warmup_steps=warmup,
                              train_batch_size=scale.finetuning_batch,
                              save_checkpoints_steps=steps, keep_checkpoint_max=1, seed=seed,
                              progress=False, plot_curves=False)
    keras.utils.set_random_seed(seed)
    if variant.model == "bert":
        from bert_tf.modeling import BertSpanLabeler
        from bert_tf.training.finetuning import checkpoint_variable_map
        from bert_tf.training.optimization import create_optimizer

        model = BertSpanLabeler(bert_config(scale, data["vocab_size"]))
        init_model(model, pretraining["checkpoint"] if pretraining else None)
        names = {var.path: name for name, var in checkpoint_variable_map(model).items()}
        train_model(model, train, lambda out, b: squad_loss(
            out["start_logits"], out["end_logits"], b["start_positions"], b["end_positions"]),
            options, optimizer_fn=lambda: create_optimizer(lr, steps, warmup,
                                                           variable_names=names))
        results = predict_logits(model, held_features, 64, progress=False)
    else:
        from bert_tf.gpt.input_transforms import SpecialTokens
        from bert_tf.studies.ltr_span_labeler import LtrSpanLabeler, gpt_span_token_ids

        config = gpt_config(scale, data["vocab_size"])
        special = SpecialTokens.for_config(config)
        vocab = tokenizer.vocab

        def gpt_arrays(arrays: dict) -> dict:
            out = {"token_ids": gpt_span_token_ids(arrays["input_word_ids"],
                                                   arrays["input_mask"], vocab["[CLS]"],
                                                   vocab["[SEP]"], special),
                   "mask": arrays["input_mask"].astype(np.float32)}
            return {**out, **{k: arrays[k] for k in ("start_positions", "end_positions")
                              if k in arrays}}

        model = LtrSpanLabeler(config, bilstm=variant.head == "bilstm",
                               lm_coef=variant.lm_coef)
        gpt_train = gpt_arrays(train)
        input_keys = ("token_ids", "mask")
        _init_gpt(model, gpt_train, input_keys, variant, config, pretraining, seed)
        train_model(model, gpt_train, model.compute_loss_value, options, input_keys=input_keys,
                    optimizer_fn=lambda: _gpt_optimizer(lr, steps))
        results = predict_logits(model, held_features, 64, progress=False,
                                 model_inputs=gpt_arrays, input_keys=input_keys)
    predictions = compute_predictions(task.held_out, held_features, results, n_best_size=20,
                                      max_answer_length=30,
                                      do_lower_case=scale.do_lower_case)
    scored = evaluate_squad_v1(task.held_out_articles, predictions.predictions, warn=None)
    f1 = float(scored["f1"])
    if not math.isfinite(f1):
        raise FloatingPointError(f"{cell_dir}: held-out SQuAD F1 is not finite")
    return {"metric": "f1", "value": round(f1, 2), "steps": steps,
            "metrics": {"exact_match": round(float(scored["exact_match"]), 2),
                        "f1": round(f1, 2)},
            "train_examples": len(task.train), "train_windows": len(train_features),
            "held_out_examples": len(task.held_out), "held_out_windows": len(held_features),
            "doc_stride": doc_stride, "max_query_length": max_query, "max_seq_length": seq,
            "per_example": squad_per_example(task.held_out_articles,
                                             predictions.predictions).to_json(),
            "loss_curve": _curve(os.path.join(cell_dir, "finetuning", "train"), "loss")}


def zero_shot(cell_dir: str, scale: Scale, data: dict, task: TaskData, pretraining: dict,
              prompt: str, label_words: dict, seed: int, max_examples: int = 1000) -> dict:
    """GPT-1 Figure 2 (right): zero-shot accuracy of the LM after each saved pretraining
    checkpoint (and at step 0, the random initialisation of the pretraining's seed).

    Each held-out example's text (its last tokens) is followed by `prompt` and a label's word;
    the predicted label is the one whose word's tokens the LM finds likeliest (mean of the
    tokens' log-probabilities, so a word split into several WordPieces is not penalised). Returns {"metric", "curve": [[step, accuracy %], ...], ...}."""
    import keras
    import tensorflow as tf

    from bert_tf.gpt.model import GptModel
    from bert_tf.tokenization.gpt_text_encoder import WordPieceTextEncoder
    from bert_tf.training.finetuning import latest_checkpoint, load_checkpoint

    config = gpt_config(scale, data["vocab_size"])
    encoder = WordPieceTextEncoder(data["vocab_file"], do_lower_case=scale.do_lower_case)
    examples = task.held_out[:max_examples]
    labels = [lab for lab in task.labels if lab in label_words]
    prompt_ids = encoder.encode_text(prompt)
    word_ids = [encoder.encode_text(" " + label_words[lab]) for lab in labels]
    texts = encoder.encode([e.text_a for e in examples], verbose=False)
    n_ctx = config.n_ctx
    rows, targets = [], []  # one row per (example, label)
    for ids in texts:
        for words in word_ids:
            keep = n_ctx - len(prompt_ids) - len(words)
            seq = list(ids[-keep:]) + prompt_ids + words if keep > 0 else \
                (prompt_ids + words)[-n_ctx:]
            start = len(seq) - len(words)
            rows.append(seq + [0] * (n_ctx - len(seq)))
            targets.append((start, len(seq)))
    token_ids = np.array(rows, np.int32)
    gold = np.array([labels.index(e.label) for e in examples])

    keras.utils.set_random_seed(seed)
    model = GptModel(config, classifier=False, name="gpt")
    model({"token_ids": token_ids[:1]})
    folder = os.path.join(pretraining["params"], os.pardir, "pretraining")
    state = os.path.join(folder, "checkpoint")
    prefixes = []
    if os.path.exists(state):  # the kept checkpoints, as the state file lists them
        with open(state, encoding="utf-8") as f:
            listed = f.read()
        prefixes = sorted({int(m.group(1)): os.path.join(folder, m.group(0)) for m in
                           re.finditer(r"model\.ckpt-(\d+)", listed)}.items())
        prefixes = [(step, p) for step, p in prefixes if os.path.exists(p + ".index")]
    if not prefixes and latest_checkpoint(folder):
        prefixes = [(pretraining["steps"], latest_checkpoint(folder))]
    if not prefixes:  # e.g. a pretraining cell exported without them (`run.export_cells`)
        from bert_tf.studies.declarations import StudyError

        raise StudyError(f"zero-shot: no pretraining checkpoint under {folder}; the curve "
                         f"needs them: delete {os.path.dirname(folder)} to pretrain again")

    @tf.function
    def log_probs(batch):
        logits = model({"token_ids": batch}, training=False)["lm_logits"]  # [B, S-1, V]
        return tf.nn.log_softmax(logits[..., :config.n_vocab], axis=-1)

    def accuracy() -> float:
        scores = np.zeros(len(rows))
        for b in range(0, len(rows), 64):
            lp = log_probs(tf.constant(token_ids[b:b + 64])).numpy()
            for i in range(lp.shape[0]):
                start, end = targets[b + i]
                pos = np.arange(start, end)
                scores[b + i] = lp[i, pos - 1, token_ids[b + i, pos]].mean()
        predicted = scores.reshape(len(examples), len(labels)).argmax(-1)
        return round(100 * float(np.mean(predicted == gold)), 2)

    curve = [[0, accuracy()]]
    for step, prefix in prefixes:
        load_checkpoint(model, prefix, heads="if_present")
        curve.append([step, accuracy()])
    majority = max(np.mean(gold == i) for i in range(len(labels)))
    return {"metric": "zero_shot_accuracy", "value": curve[-1][1], "curve": curve,
            "steps": curve[-1][0], "examples": len(examples), "prompt": prompt,
            "label_words": label_words, "majority_class": round(100 * float(majority), 2)}


def cloze_items(scale: Scale, data: dict, seed: int):
    """The cloze probe's items of the data cell's held-out corpus (`cloze.make_items`, at most
    `scale.cloze_items`, at the pretraining length)."""
    from bert_tf.studies import cloze
    from bert_tf.tokenization import FullTokenizer

    tokenizer = FullTokenizer(data["vocab_file"], do_lower_case=scale.do_lower_case)
    with open(data["held_out_corpus"], encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    return cloze.make_items(lines, tokenizer.tokenize, scale.max_seq_length - 2,
                            max_items=scale.cloze_items, seed=seed), tokenizer.vocab


def cloze_probe(cell_dir: str, variant: Variant, scale: Scale, data: dict, pretraining: dict,
                seed: int) -> dict:
    """The cloze probe of a pretraining cell (`bert_tf.studies.cloze`): BERT by its masked-LM
    logits at the [MASK], the left-to-right model by sentence likelihood; no fine-tuning."""
    from bert_tf.studies import cloze

    items, vocab = cloze_items(scale, data, seed)
    if not items:
        raise ValueError(f"{data['held_out_corpus']}: no cloze item (lines of at least "
                         f"{2 * cloze.MIN_CONTEXT + 1} WordPieces with a whole-word target)")
    if variant.model == "gpt":
        from bert_tf.checkpoints.openai import load_original_params
        from bert_tf.gpt.model import GptModel

        model = GptModel(gpt_config(scale, data["vocab_size"]), classifier=False, name="gpt")
        model({"token_ids": np.zeros((1, 4), np.int32)})
        load_original_params(model, pretraining["params"], n_transfer=scale.num_layers,
                             seed=seed)
        choices = cloze.score_ltr(model, vocab, items, scale.max_seq_length)
    else:
        from bert_tf.modeling import BertPretrainer
        from bert_tf.training.finetuning import init_model

        model = BertPretrainer(bert_config(scale, data["vocab_size"]))
        init_model(model, pretraining["checkpoint"])
        choices = cloze.score_bert(model, vocab, items, scale.max_seq_length)
    return cloze.result(items, choices)
