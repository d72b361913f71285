"""The gates of a study's cells (docs/studies.md, "Method: gates, baselines, verdicts"):

* **pretraining gate**: a pretraining run must leave the unigram plateau early: its training
  perplexity (exp of the masked-LM loss for BERT, of the LM loss for the left-to-right model,
  read from the loss curve the cell records from its TensorBoard events) must reach the scale's
  threshold (`PretrainingGate`) within the first `fraction` of its steps. A run that does not
  is run again once at `retry_lr_factor` x its learning rate (a cell of its own, recorded in
  the study's rows); if that one fails too, its fine-tuning cells are "not learned";
* **task gate**: a fine-tuning cell must score above its task's best trivial baseline on the
  same split (`baselines.task_baselines`); a cell that does not is "not learned" and takes no
  part in an ordering or a claim's better side (`statistics.judge_claims`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence


@dataclasses.dataclass(frozen=True)
class PretrainingGate:
    """A scale's pretraining gate.

    Attributes:
      bert_perplexity: the training masked-LM perplexity (exp of masked_lm_loss) a BERT run
        must reach (<=) within `fraction` of its steps.
      gpt_perplexity: the same for the left-to-right model's LM loss.
      fraction: the share of the steps within which the threshold must be reached.
      retry_lr_factor: the learning rate of the one re-run, as a factor of the scale's.
    """

    bert_perplexity: float
    gpt_perplexity: float
    fraction: float = 0.2
    retry_lr_factor: float = 0.5

    def threshold(self, model: str) -> float:
        return self.gpt_perplexity if model == "gpt" else self.bert_perplexity

    def by_step(self, steps: int) -> int:
        """The last step at which a run of `steps` steps may reach the threshold."""
        return max(1, int(self.fraction * steps))


def pretraining_gate(gate: PretrainingGate | None, model: str, curve: Sequence, steps: int
                     ) -> dict:
    """Checks a pretraining cell's loss curve ([[step, loss], ...]) against `gate`.

    Returns {"gate_passed": bool, "threshold_perplexity", "by_step": the last step allowed,
    "reached_at": the first step at or under the threshold (None), "best_perplexity_by_step"}.
    No gate (None): passed, nothing measured."""
    if gate is None:
        return {"gate_passed": True, "gate": "none at this scale"}
    threshold = gate.threshold(model)
    by_step = gate.by_step(steps)
    early = [(int(s), float(v)) for s, v in curve if int(s) <= by_step and math.isfinite(v)]
    reached = next((s for s, v in early if math.exp(min(v, 50.0)) <= threshold), None)
    best = min((v for _, v in early), default=math.inf)
    return {"gate_passed": reached is not None, "threshold_perplexity": threshold,
            "by_step": by_step, "reached_at": reached,
            "best_perplexity_by_step": round(math.exp(min(best, 50.0)), 2)
            if math.isfinite(best) else None}


def task_gate(value: float, baseline: float) -> bool:
    """A fine-tuning cell passes when its score is above its task's baseline (strictly)."""
    return math.isfinite(float(value)) and float(value) > float(baseline)
