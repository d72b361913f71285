"""Training: the original optimizer and schedule, distribution strategies, the pretraining loop
(`pretraining_loop.PretrainingTrainer`), its driver (`pretraining_run.run_pretraining`) and the
fine-tuning loop (`finetuning`)."""
from bert_tf.training.optimization import (AdamWeightDecay, FusedAdam, WarmupPolynomialDecay,
                                           clip_by_global_norm, create_optimizer)

__all__ = ["AdamWeightDecay", "FusedAdam", "WarmupPolynomialDecay", "clip_by_global_norm", "create_optimizer"]
