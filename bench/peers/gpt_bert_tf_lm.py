"""LM train-step adapter: bert_tf's GPT-1, trained as tools/run_gpt_pretraining.py trains it.

Used by bench/bench_gpt_lm.py (its `--worker` mode loads this file by path, under bert_tf's
Python). The LM adapter interface (shared with `gpt2_kerashub_lm.py`):

  FRAMEWORK = "keras3"; VERSIONS = {...}
  class LmTrainStep:
      __init__(cfg, tokens, learning_rate, jit, precision="float32")
                                                  # cfg: n_layer, n_embd, n_head, n_ctx, n_vocab,
                                                  #      n_special, dropout; tokens int32 [B, n_ctx + 1]
                                                  # precision: "float32" or "mixed_bfloat16"
      n_params: int                               # trainable parameters
      description: str                            # what one step is
      __call__() -> float                         # one optimizer update on the fixed batch; the loss

What one step is: the train loop of `bert_tf.runs.gpt_pretraining.GptPretrainingTrainer` (the trainer
behind run_gpt_pretraining, built the same way: one_device strategy, then the Keras policy as
run_gpt_pretraining's --mixed_precision sets it (`set_mixed_precision(precision)`: float32, or
mixed_bfloat16 = float32 variables, bfloat16 matmuls, LayerNorm statistics and the loss in
float32), seeded),
called for one step: the distributed iterator's next batch, GptModel(classifier=False) forward
with dropout (embd/attn/resid pdrop), the LM loss over every predicted token, the gradient,
its global-norm clip (max_grad_norm 1), OpenAIAdam (fused=True as the trainer makes it; L2 inside
the step, warmup_cosine schedule over 10,000 steps with 10 warm-up steps),
the global-step increment and the step's history record. The model reads the first n_ctx tokens
of each row (a window, as lm_data writes them) and predicts n_ctx - 1 of them over the whole
table (n_vocab + n_special + n_ctx rows), as the original does.
"""
from __future__ import annotations

import os
import shutil
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import bert_tf  # noqa: E402
from bert_tf.gpt.config import GptConfig  # noqa: E402
from bert_tf.runs.gpt_pretraining import GptPretrainingTrainer, GptTrainerOptions  # noqa: E402
from bert_tf.training.distribution import create_strategy  # noqa: E402
from bert_tf.training.precision import set_mixed_precision  # noqa: E402

FRAMEWORK = "keras3"


def _versions() -> dict:
    import importlib.metadata as md
    out = {"keras": keras.__version__}
    try:
        out["bert_tf"] = md.version("bert_tf")
    except md.PackageNotFoundError:
        out["bert_tf"] = getattr(bert_tf, "__version__", "?")
    return out


VERSIONS = _versions()


class LmTrainStep:
    """One GPT-1 LM pretraining step of bert_tf's trainer on a fixed batch (see module doc)."""

    description = ("bert_tf GptPretrainingTrainer train loop, 1 step per call (GptModel LM, "
                   "OpenAIAdam fused, warmup_cosine, L2 0.01, global-norm clip 1.0)")

    def __init__(self, cfg: dict, tokens: np.ndarray, learning_rate: float, jit: bool,
                 precision: str = "float32"):
        config = GptConfig(n_vocab=cfg["n_vocab"], n_special=cfg["n_special"], n_ctx=cfg["n_ctx"],
                           n_embd=cfg["n_embd"], n_head=cfg["n_head"], n_layer=cfg["n_layer"],
                           embd_pdrop=cfg["dropout"], attn_pdrop=cfg["dropout"],
                           resid_pdrop=cfg["dropout"], clf_pdrop=cfg["dropout"], afn="gelu")
        # As run_gpt_pretraining: strategy first, the dtype policy, seeded, then the trainer.
        strategy = create_strategy("one_device")
        set_mixed_precision(precision)
        keras.utils.set_random_seed(12345)
        self._output_dir = tempfile.mkdtemp(prefix="bench_gpt_lm_")
        options = GptTrainerOptions(output_dir=self._output_dir,
                                    train_batch_size=int(tokens.shape[0]),
                                    learning_rate=learning_rate, num_train_steps=10000,
                                    num_warmup_steps=10, jit_compile=bool(jit))
        self.trainer = GptPretrainingTrainer(config, options, strategy)
        windows = tf.constant(tokens[:, :config.n_ctx], tf.int32)
        dist = strategy.distribute_datasets_from_function(
            lambda ctx: tf.data.Dataset.from_tensors({"token_ids": windows}).repeat())
        self._iterator = iter(dist)
        self._train_loop = self.trainer._make_train_loop()  # the loop train() runs
        self._one = tf.constant(1)
        self.n_params = int(sum(int(np.prod(v.shape))
                                for v in self.trainer.model.trainable_variables))
        self.description = f"{self.description}, {precision}"

    def __call__(self) -> float:
        out = self._train_loop(self._iterator, self._one)
        return float(out["loss"].numpy()[0])

    def close(self) -> None:
        shutil.rmtree(self._output_dir, ignore_errors=True)
