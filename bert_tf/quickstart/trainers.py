"""The quickstart's BERT pretraining trainer: the original `PretrainingTrainer` with a progress
bar (with ETA) and, optionally, the masked-LM loss alone as the objective."""
from __future__ import annotations

import tensorflow as tf

from bert_tf.progress import progress_bar
from bert_tf.training.pretraining_loop import PretrainingTrainer, TrainerOptions


class QuickstartBertTrainer(PretrainingTrainer):
    """`PretrainingTrainer` + a `keras.utils.Progbar` over the steps; `mlm_only=True` minimises
    the masked-LM loss alone (the next-sentence loss is still computed and logged)."""

    def __init__(self, config, options: TrainerOptions, mlm_only: bool = False,
                 title: str | None = None, strategy: tf.distribute.Strategy | None = None):
        self.mlm_only = mlm_only
        self._bar = None
        self._title = title
        super().__init__(config, options, strategy)

    def replica_losses(self, outputs: dict, batch: dict,
                       ctx: tf.distribute.ReplicaContext) -> dict[str, tf.Tensor]:
        losses = super().replica_losses(outputs, batch, ctx)
        if self.mlm_only:
            # 0 x NSP keeps a (zero) gradient for the NSP head, which the all-reduce needs.
            losses = {**losses, "loss": losses["masked_lm_loss"]
                      + 0.0 * losses["next_sentence_loss"]}
        return losses

    def on_progress(self, record: dict, start_step: int, end_step: int) -> None:
        if self._bar is None:
            self._bar = progress_bar(end_step, "step", ["mlm_loss", "lr"])
            if start_step:
                self._bar.update(start_step)
        self._bar.update(record["step"], [("mlm_loss", record["masked_lm_loss"]),
                                          ("lr", record["learning_rate"])])
