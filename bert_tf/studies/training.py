"""The runs inside a study's cells: BERT / GPT pretraining and fine-tuning on a task, with the
library's own pieces (original data generation, `PretrainingTrainer`, `train_model`,
`BertClassifier`, `GptClassifier`, `OpenAIAdam`)."""
from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from bert_tf.training.pretraining_loop import PretrainingTrainer
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


def _curve(logdir: str, tag: str) -> list:
    from bert_tf.plotting import read_scalars

    try:
        return [[int(s), round(float(v), 4)] for s, v in read_scalars(logdir, [tag]).get(tag, [])]
    except (FileNotFoundError, ValueError):
        return []


# ---------------------------------------------------------------------------------------------
# Pretraining
# ---------------------------------------------------------------------------------------------
def pretrain_bert(cell_dir: str, variant: Variant, scale: Scale, data: dict, seed: int) -> dict:
    """MLM+NSP or MLM-only BERT with the variant's masking mixture; writes bert_model.ckpt.

    Returns the cell result: steps, tokens seen, held-out masked-LM accuracy (tiny scale), loss
    curve."""
    import keras

    from bert_tf.checkpoints import save_original_checkpoint
    from bert_tf.pretraining_data import PretrainingDataOptions, create_pretraining_data
    from bert_tf.pretraining_data.tfrecord_reader import pretraining_dataset
    from bert_tf.tokenization import FullTokenizer
    from bert_tf.training.pretraining_loop import TrainerOptions

    seq = scale.max_seq_length
    mask, keep, rnd = variant.masking
    options = PretrainingDataOptions(
        max_seq_length=seq, max_predictions_per_seq=max(1, round(0.15 * seq)),
        dupe_factor=scale.dupe_factor, random_seed=seed,
        next_sentence_prediction=variant.objective == "mlm+nsp",
        mask_token_prob=mask, keep_token_prob=keep, random_token_prob=rnd)
    tokenizer = FullTokenizer(data["vocab_file"], do_lower_case=True)
    train_file = os.path.join(cell_dir, "train.tfrecord")
    if not os.path.exists(train_file):  # written atomically: present = complete
        create_pretraining_data(data["corpus"], train_file, tokenizer, options, log_examples=0,
                                vocab_file=data["vocab_file"])
    held_file = None
    if data.get("held_out_corpus"):
        held_file = os.path.join(cell_dir, "held_out.tfrecord")
        if not os.path.exists(held_file):
            create_pretraining_data(data["held_out_corpus"], held_file, tokenizer,
                                    dataclasses.replace(options, dupe_factor=1),
                                    log_examples=0, vocab_file=data["vocab_file"])
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
    preds = options.max_predictions_per_seq
    trainer.train(lambda ctx: pretraining_dataset(train_file, seq, preds, batch, True,
                                                  input_context=ctx, seed=seed))
    result = {"model": "bert", "objective": variant.objective, "masking": list(variant.masking),
              "steps": steps, "tokens_seen": steps * batch * seq}
    if held_file:
        after = trainer.evaluate(lambda ctx: pretraining_dataset(
            held_file, seq, preds, batch, False, input_context=ctx))
        result["held_out_masked_lm_accuracy"] = round(float(after["masked_lm_accuracy"]), 4)
        result["held_out_masked_lm_loss"] = round(float(after["masked_lm_loss"]), 4)
    save_original_checkpoint(trainer.model, os.path.join(cell_dir, "bert_model.ckpt"),
                             overwrite=True)
    result["curve"] = _curve(os.path.join(cell_dir, "pretraining", "train"), "masked_lm_loss")
    result["checkpoint"] = os.path.join(cell_dir, "bert_model.ckpt")
    return result


class BertStudyTrainer(PretrainingTrainer):
    """`PretrainingTrainer`; `mlm_only=True` minimises the masked-LM loss alone (BERT Table 5's
    No NSP: the data has single segments, the NSP loss is logged, not trained)."""

    def __init__(self, config, options, mlm_only: bool = False, strategy=None):
        self.mlm_only = mlm_only
        super().__init__(config, options, strategy)

    def replica_losses(self, outputs, batch, ctx):
        losses = super().replica_losses(outputs, batch, ctx)
        if self.mlm_only:  # 0 x NSP: its head gets zero gradients, not None (the all-reduce)
            losses = {**losses, "loss": losses["masked_lm_loss"]
                      + 0.0 * losses["next_sentence_loss"]}
        return losses


def pretrain_gpt(cell_dir: str, scale: Scale, data: dict, seed: int) -> dict:
    """The left-to-right model (GPT-1's `GptModel`, LM loss, `OpenAIAdam`) on the same corpus,
    vocab, steps, batch and length as BERT; writes gpt_params/ (original params format)."""
    import keras
    import tensorflow as tf

    from bert_tf.gpt.lm_data import lm_dataset
    from bert_tf.gpt.model import GptModel
    from bert_tf.gpt.optimization import OpenAIAdam
    from bert_tf.gpt.params_io import save_original_params
    from bert_tf.training.finetuning import FinetuneOptions, train_model

    keras.utils.set_random_seed(seed)
    config = gpt_config(scale, data["vocab_size"])
    model = GptModel(config, classifier=False, name="gpt")
    pattern = os.path.join(data["data_dir"], "gpt_lm_data", "train-*.tfrecord")
    windows = np.stack([r["input_ids"].numpy() for r in
                        lm_dataset(pattern, config.n_ctx, is_training=False)]).astype(np.int32)
    steps, lr = scale.pretraining_steps, scale.pretraining_lr

    def loss_fn(outputs, batch):
        mask = tf.ones_like(batch["token_ids"], dtype=tf.float32)  # windows hold no padding
        return model.compute_losses(outputs, batch["token_ids"], mask)["train_loss"]

    result = train_model(
        model, {"token_ids": windows}, loss_fn,
        FinetuneOptions(output_dir=os.path.join(cell_dir, "pretraining"), learning_rate=lr,
                        num_train_steps=steps, num_warmup_steps=max(1, steps // 10),
                        train_batch_size=scale.pretraining_batch,
                        save_checkpoints_steps=max(50, steps // 4), keep_checkpoint_max=1,
                        seed=seed, shuffle_buffer=1000, progress=False, plot_curves=False),
        input_keys=("token_ids",),
        optimizer_fn=lambda: OpenAIAdam(lr, t_total=steps, schedule="warmup_linear", warmup=0.1,
                                        l2=0.01, max_grad_norm=0.0))
    params = os.path.join(cell_dir, "gpt_params")
    if os.path.isdir(params):  # an earlier run killed while writing them
        import shutil

        shutil.rmtree(params)
    save_original_params(model, params)
    return {"model": "gpt", "steps": steps,
            "tokens_seen": steps * scale.pretraining_batch * scale.max_seq_length,
            "windows": int(len(windows)), "final_lm_loss": round(float(result["loss"]), 4),
            "curve": _curve(os.path.join(cell_dir, "pretraining", "train"), "loss"),
            "params": params}


# ---------------------------------------------------------------------------------------------
# Fine-tuning
# ---------------------------------------------------------------------------------------------
def _bert_arrays(examples: list[TaskExample], labels: list[str], tokenizer, seq: int, split: str):
    from bert_tf.tasks import glue

    rows = [glue.InputExample(guid=f"{split}-{i}", text_a=e.text_a, text_b=e.text_b,
                              label=e.label) for i, e in enumerate(examples)]
    features = glue.convert_examples_to_features(rows, labels, seq, tokenizer, split,
                                                 log_examples=0)
    return glue.features_to_arrays(features, regression=False)


def _gpt_arrays(examples: list[TaskExample], labels: list[str], encoder, config, pair: bool):
    from bert_tf.gpt.input_transforms import (SpecialTokens, classification_inputs,
                                              entailment_inputs)

    special = SpecialTokens.for_config(config)
    a = encoder.encode([e.text_a for e in examples], verbose=False)
    if pair:
        b = encoder.encode([e.text_b or "" for e in examples], verbose=False)
        x = entailment_inputs(a, b, config.n_ctx, special, max_len=(config.n_ctx - 3) // 2)
    else:
        x = classification_inputs(a, config.n_ctx, special, max_len=config.n_ctx - 2)
    return {"token_ids": x.token_ids.astype(np.int32), "mask": x.mask.astype(np.float32),
            "label_ids": np.array([labels.index(e.label) for e in examples], np.int32)}


def finetune(cell_dir: str, variant: Variant, scale: Scale, data: dict, task: TaskData,
             seed: int, pretraining: dict | None) -> dict:
    """Fine-tunes the variant's model on `task` and scores the held-out split (accuracy)."""
    import keras

    from bert_tf.training.finetuning import (FinetuneOptions, init_model,
                                             num_train_and_warmup_steps, predict_arrays,
                                             train_model)

    steps, warmup = num_train_and_warmup_steps(len(task.train), scale.finetuning_batch,
                                               scale.finetuning_epochs, 0.1)
    steps = max(1, steps)
    lr = scale.finetuning_lr
    keras.utils.set_random_seed(seed)
    options = FinetuneOptions(output_dir=os.path.join(cell_dir, "finetuning"), learning_rate=lr,
                              num_train_steps=steps, num_warmup_steps=warmup,
                              train_batch_size=scale.finetuning_batch,
                              save_checkpoints_steps=steps, keep_checkpoint_max=1, seed=seed,
                              progress=False, plot_curves=False)
    if variant.model == "bert":
        from bert_tf.modeling import BertClassifier
        from bert_tf.tasks.classifier import classification_loss
        from bert_tf.tokenization import FullTokenizer

        tokenizer = FullTokenizer(data["vocab_file"], do_lower_case=True)
        model = BertClassifier(bert_config(scale, data["vocab_size"]),
                               num_labels=len(task.labels))
        init_model(model, pretraining["checkpoint"] if pretraining else None)
        train = _bert_arrays(task.train, task.labels, tokenizer, scale.max_seq_length, "train")
        held = _bert_arrays(task.held_out, task.labels, tokenizer, scale.max_seq_length, "dev")
        train_model(model, train,
                    lambda out, b: classification_loss(out["logits"], b["label_ids"]), options)
        logits = predict_arrays(model, held, 64, ["logits"], progress=False)["logits"]
    else:
        from bert_tf.gpt.optimization import OpenAIAdam
        from bert_tf.gpt.params_io import load_original_params
        from bert_tf.gpt.task_model import GptClassifier
        from bert_tf.gpt.text_encoder import WordPieceTextEncoder
        from bert_tf.tasks.classifier import classification_loss

        config = gpt_config(scale, data["vocab_size"])
        encoder = WordPieceTextEncoder(data["vocab_file"], do_lower_case=True)
        train = _gpt_arrays(task.train, task.labels, encoder, config, task.pair)
        held = _gpt_arrays(task.held_out, task.labels, encoder, config, task.pair)
        if variant.head == "bilstm":
            from bert_tf.studies.bilstm_head import LtrBiLstmClassifier

            model = LtrBiLstmClassifier(config, num_classes=len(task.labels))
            input_keys = ("token_ids", "mask")

            def loss_fn(outputs, b):
                return classification_loss(outputs["logits"], b["label_ids"])
        else:
            model = GptClassifier(config, task="entailment" if task.pair else "classification",
                                  num_classes=len(task.labels), lm_coef=variant.lm_coef)
            input_keys = ("token_ids",)

            def loss_fn(outputs, b):
                return model.compute_losses(outputs, b["token_ids"], b["mask"],
                                            b["label_ids"])["train_loss"]
        model({k: train[k][:1] for k in input_keys})  # builds the weights
        if pretraining:
            load_original_params(model.transformer, pretraining["params"],
                                 n_transfer=config.n_layer, seed=seed)
        train_model(model, train, loss_fn, options, input_keys=input_keys,
                    optimizer_fn=lambda: OpenAIAdam(lr, t_total=steps, schedule="warmup_linear",
                                                    warmup=0.1, l2=0.01, max_grad_norm=0.0))
        logits = predict_arrays(model, held, 64, ["logits"], input_keys=input_keys,
                                progress=False)["logits"]
    accuracy = float(np.mean(logits.argmax(-1) == held["label_ids"]))
    if not math.isfinite(accuracy):
        raise FloatingPointError(f"{cell_dir}: held-out accuracy is not finite")
    return {"metric": "accuracy", "value": round(100 * accuracy, 2), "steps": steps,
            "train_examples": len(task.train), "held_out_examples": len(task.held_out),
            "loss_curve": _curve(os.path.join(cell_dir, "finetuning", "train"), "loss")}
