"""Training, for both model families: the optimizers (the original `AdamWeightDecay`, `FusedAdam`,
LAMB and their schedule in `optimization`; GPT-1's `OpenAIAdam` and schedules in `openai_adam`),
distribution strategies, mixed precision, length batching, and the two loops: pretraining
(`pretraining_loop.PretrainingTrainer`) and fine-tuning (`finetuning`). The drivers that run them
live above, in `bert_tf.runs` and `bert_tf.tasks`."""
from bert_tf.training.optimization import (AdamWeightDecay, FusedAdam, WarmupPolynomialDecay,
                                           clip_by_global_norm, create_optimizer)

__all__ = ["AdamWeightDecay", "FusedAdam", "WarmupPolynomialDecay", "clip_by_global_norm", "create_optimizer"]
