"""Training: the original optimizer and schedule, the pretraining objective and train step."""
from bert_tf.training.optimization import (AdamWeightDecay, FusedAdam, WarmupPolynomialDecay,
                                           clip_by_global_norm, create_optimizer)
from bert_tf.training.pretraining import pretraining_losses, train_step

__all__ = ["AdamWeightDecay", "FusedAdam", "WarmupPolynomialDecay", "clip_by_global_norm", "create_optimizer",
           "pretraining_losses", "train_step"]
