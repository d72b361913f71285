"""The options every fine-tuning run shares (the original scripts' common flags).

`FinetuningRunOptions` holds the flags that run_classifier.py, run_squad.py, run_ner.py and
run_swag.py all have (same names, defaults and help as the original scripts) plus the TPU /
distribution flags (`bert_tf.training.distribution.DistributionOptions`).
`EvaluatingRunOptions` adds `--do_eval` / `--eval_batch_size` (all but SQuAD). Each task's
`*RunOptions` inherits one of them and adds its own fields; a task with other defaults
re-declares the field (e.g. SQuAD's `max_seq_length=384`). See `bert_tf.options` for how a field
becomes a flag.
"""
from __future__ import annotations

import dataclasses
from bert_tf.options import option
from bert_tf.training.accumulation import MemoryOptions
from bert_tf.training.distribution import DistributionOptions
from bert_tf.training.lora_finetuning import LoraOptions


@dataclasses.dataclass
class FinetuningRunOptions(DistributionOptions, LoraOptions, MemoryOptions):
    """The flags shared by every fine-tuning script (the first three may be given positionally;
    all three are required flags, a task may re-declare the model files as optional)."""

    # Required flags; the dataclass defaults (None) only let a task re-declare the model files
    # as optional (run_classifier with --bert_hub_module_handle) while they stay positional.
    bert_config_file: str | None = option(
        None, "The config json file corresponding to the pre-trained BERT model. This specifies "
        "the model architecture.", required=True)
    vocab_file: str | None = option(None, "The vocabulary file that the BERT model was trained "
                                    "on.", required=True)
    output_dir: str = option(None, "The output directory where the model checkpoints, results "
                             "and predictions will be written.", required=True)
    _: dataclasses.KW_ONLY
    init_checkpoint: str | None = option(
        None, "Initial checkpoint (usually from a pre-trained BERT model): original TF1 names "
        "(e.g. bert_model.ckpt), or a directory with a bert_tf encoder SavedModel.")
    do_lower_case: bool = option(True, "Whether to lower case the input text. Should be True "
                                 "for uncased models and False for cased models.")
    max_seq_length: int = option(128, "The maximum total input sequence length after WordPiece "
                                 "tokenization. Sequences longer than this will be truncated, "
                                 "and sequences shorter than this will be padded.")
    do_train: bool = option(False, "Whether to run training.")
    do_predict: bool = option(False, "Whether to run the model in inference mode on the test "
                              "set.")
    train_batch_size: int = option(32, "Total batch size for training.")
    predict_batch_size: int = option(8, "Total batch size for predict.")
    learning_rate: float = option(5e-5, "The initial learning rate for Adam.")
    num_train_epochs: float = option(3.0, "Total number of training epochs to perform.")
    warmup_proportion: float = option(0.1, "Proportion of training to perform linear learning "
                                      "rate warmup for. E.g., 0.1 = 10% of training.")
    save_checkpoints_steps: int = option(1000, "How often to save the model checkpoint.")
    keep_checkpoint_max: int = option(5, "How many recent checkpoints to keep.")
    seed: int = option(12345, "Seed of the example shuffle, input pipeline, new weights and "
                       "dropout.")
    plot_curves: bool = option(True, "After training, draw the training curves (the TensorBoard "
                               "scalars in output_dir/train) into output_dir/curves.png.")
    length_bucketing: bool = option(
        True, "Cut each training, evaluation and prediction batch to its longest example, "
        "rounded up to a multiple of 8 (the same results up to float rounding, faster on short "
        "examples). False: every batch at max_seq_length, the original's fixed shapes.")
    fused_kernels: bool = option(
        False, "Train BERT's blocks with XLA-fused kernels (GELU; dropout + residual + "
        "LayerNorm), as the pretraining trainer does: the same dropout masks, results equal up "
        "to float rounding, a faster step on CPU. False: the original's op pattern.")

    def finetune_options(self, num_train_steps: int, num_warmup_steps: int):
        """The `bert_tf.training.finetuning.FinetuneOptions` of this run's training."""
        from bert_tf.training.finetuning import FinetuneOptions

        return FinetuneOptions(
            output_dir=self.output_dir, learning_rate=self.learning_rate,
            num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps,
            train_batch_size=self.train_batch_size,
            save_checkpoints_steps=self.save_checkpoints_steps,
            keep_checkpoint_max=self.keep_checkpoint_max, seed=self.seed,
            plot_curves=self.plot_curves, length_bucketing=self.length_bucketing,
            fused_kernels=self.fused_kernels,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            recompute_activations=self.recompute_activations, **self.lora_options())

    def lora_options(self) -> dict:
        """This run's `--lora_*` values, as keyword arguments of `FinetuneOptions`."""
        return {"lora_rank": self.lora_rank, "lora_alpha": self.lora_alpha,
                "lora_targets": list(self.lora_targets), "lora_dropout": self.lora_dropout}


@dataclasses.dataclass
class EvaluatingRunOptions(FinetuningRunOptions):
    """`FinetuningRunOptions` plus evaluation on a dev set."""

    _: dataclasses.KW_ONLY
    do_eval: bool = option(False, "Whether to run eval on the dev set.")
    eval_batch_size: int = option(8, "Total batch size for eval.")

