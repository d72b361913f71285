"""`GptClassifier`: GPT-1 fine-tuned on a task as in the paper, with the auxiliary LM loss."""
from __future__ import annotations

from typing import Any, Mapping

import keras
import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.gpt import losses as gpt_losses
from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.dropout import GptDropout
from bert_tf.gpt.heads import GptClassifierHead, classify_positions
from bert_tf.gpt.model import GptModel

TASKS = ("classification", "entailment", "similarity", "multiple_choice")


@keras.saving.register_keras_serializable(package="bert_tf")
class GptClassifier(keras.Model):
    """The decoder (`transformer`, a `GptModel` without its own classifier) plus a task head
    read at the extract (classify) token of each sequence, as `input_transforms` builds them.

    - "classification", "entailment": token_ids [B, S] -> logits [B, num_classes].
    - "similarity": token_ids [B, 2, S] (both orders) -> the two extract states are **summed**,
      then dropout and a linear layer -> logits [B, num_classes].
    - "multiple_choice": token_ids [B, C, S], any C -> one score per choice, the original's `clf`
      (w [n_embd, 1]; one dropout mask per example shared by its choices) -> logits [B, C],
      softmax over the choices.
    - `regression=True` (STS-B; classification, entailment or similarity): the same head with one
      output unit, logits [B, 1] = the predicted score, trained with the squared error.

    Variables of the head: `clf/w` [n_embd, num_classes or 1], `clf/b`. `clf_pdrop` dropout on
    the extract states in training.

    `compute_losses` gives mean(cross-entropy) + lm_coef · mean(per-sequence LM losses), the
    paper's L3 = L2 + λ·L1 with the original's LM averaging (mean squared error instead of the
    cross-entropy for a regression); `lm_coef` 0 turns the LM term off.
    """

    def __init__(self, config: GptConfig | Mapping[str, Any], task: str,
                 num_classes: int | None = None, clf_token: int | None = None,
                 lm_coef: float = 0.5, regression: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.config = config if isinstance(config, GptConfig) else GptConfig.from_dict(config)
        if task not in TASKS:
            raise UserInputError(f"GptClassifier: task {task!r} is unknown; expected one of "
                                 f"{', '.join(TASKS)}")
        if regression:
            if task == "multiple_choice":
                raise UserInputError("GptClassifier: a regression head needs the classification, "
                                     "entailment or similarity task, not multiple_choice")
            if num_classes not in (None, 1):
                raise UserInputError(f"GptClassifier: a regression has one output, got "
                                     f"num_classes={num_classes!r}")
            num_classes = 1
        elif task != "multiple_choice" and (num_classes is None or num_classes < 2):
            raise UserInputError(f"GptClassifier: task {task!r} needs num_classes >= 2, got "
                                 f"{num_classes!r}")
        if lm_coef < 0:
            raise UserInputError(f"GptClassifier: lm_coef must be >= 0, got {lm_coef}")
        self.task, self.lm_coef, self.regression = task, float(lm_coef), bool(regression)
        self.num_classes = None if task == "multiple_choice" else int(num_classes)
        self.transformer = GptModel(self.config, clf_token=clf_token, classifier=False,
                                    name="transformer")
        self.clf_token = self.transformer.clf_token
        c = self.config
        if task == "multiple_choice":
            self.clf = GptClassifierHead(c.n_embd, self.clf_token, c.clf_pdrop, name="clf")
            self.clf.build()
        else:
            self.clf_dropout = GptDropout(c.clf_pdrop, noise_shape=(None, 1, None),
                                          name="clf_dropout")
            self.clf_w = self.add_weight(name="w", shape=(c.n_embd, self.num_classes),
                                         initializer=keras.initializers.RandomNormal(stddev=0.02))
            self.clf_b = self.add_weight(name="b", shape=(self.num_classes,), initializer="zeros")
        self.built = True

    def _expected_rank(self) -> int:
        return 2 if self.task in ("classification", "entailment") else 3

    def call(self, inputs: Mapping[str, Any], training: bool | None = None,
             with_lm_logits: bool = True) -> dict:
        """inputs: {"token_ids": int [B, S] or [B, C, S], optional "position_ids"}.
        Returns {"logits": [B, num_classes] or [B, C], "hidden_states": [..., S, n_embd]} and,
        unless `with_lm_logits=False` (prediction only), "lm_logits" [..., S-1, table_rows];
        in training also "lm_table" (`GptModel`'s), which `compute_losses` reads."""
        token_ids = tf.convert_to_tensor(inputs["token_ids"])
        if token_ids.shape.rank != self._expected_rank():
            raise UserInputError(
                f"GptClassifier({self.task}): token_ids must have rank {self._expected_rank()} "
                f"({'[B, S]' if self._expected_rank() == 2 else '[B, C, S]'}), got shape "
                f"{token_ids.shape}")
        if self.task == "similarity" and token_ids.shape[1] not in (None, 2):
            raise UserInputError(f"GptClassifier(similarity): token_ids must hold the 2 orders "
                                 f"[B, 2, S], got shape {token_ids.shape}")
        out = self.transformer(inputs, training=training, with_lm_logits=with_lm_logits)
        hidden = out["hidden_states"]
        if self.task == "multiple_choice":
            logits, _, _ = self.clf(hidden, token_ids, training=training)
        else:
            positions = classify_positions(token_ids, self.clf_token)
            states = tf.gather(hidden, positions, batch_dims=len(positions.shape))
            if self.task == "similarity":
                states = tf.reduce_sum(states, axis=1)  # the two orders, summed
            states = self.clf_dropout(states[:, tf.newaxis], training=training)[:, 0]
            logits = tf.matmul(states, tf.cast(self.clf_w, states.dtype))
            logits = logits + tf.cast(self.clf_b, states.dtype)
        # float32 under a 16-bit policy (probabilities, losses and metrics from full-precision
        # logits); a no-op in float32.
        result = {"logits": tf.cast(logits, tf.float32), "hidden_states": hidden}
        if with_lm_logits:
            result["lm_logits"] = out["lm_logits"]
        if "lm_table" in out:  # training: `compute_losses` applies the head at the mask only
            result["lm_table"] = out["lm_table"]
        return result

    def compute_losses(self, outputs: Mapping[str, tf.Tensor], token_ids: Any, mask: Any,
                       labels: Any) -> dict[str, tf.Tensor]:
        """labels int [B] (float [B] scores for a regression); mask float like token_ids.
        Returns clf_losses [B] (cross-entropy, or squared error), lm_losses [...], train_loss [].
        From a training call's outputs the LM losses apply the head at the mask's positions only
        (`losses.masked_lm_losses`: the same values, without the padding's logits)."""
        if self.regression:
            clf_losses = gpt_losses.regression_losses(outputs["logits"], labels)
        else:
            clf_losses = gpt_losses.classification_losses(outputs["logits"], labels)
        if "lm_table" in outputs:  # training: the LM head at the mask's positions only
            lm = gpt_losses.masked_lm_losses(outputs["hidden_states"], outputs["lm_table"],
                                             token_ids, mask)
        else:
            lm = gpt_losses.lm_losses(gpt_losses.lm_token_losses(outputs["lm_logits"], token_ids),
                                      mask)
        return {"clf_losses": clf_losses, "lm_losses": lm,
                "train_loss": gpt_losses.train_loss(clf_losses, lm, self.lm_coef)}

    def get_config(self) -> dict:
        return {"config": self.config.to_dict(), "task": self.task,
                "num_classes": self.num_classes, "clf_token": self.clf_token,
                "lm_coef": self.lm_coef, "regression": self.regression, "name": self.name,
                "trainable": self.trainable}

    @classmethod
    def from_config(cls, config: dict) -> "GptClassifier":
        return cls(**config)
