"""`GptTextClassifier`: GPT-1 fine-tuned on raw text as in the paper (Radford et al., 2018): the
input transformations of §3.3 inside the model's preprocessor, the auxiliary LM loss (λ = 0.5) in
training, the original `OpenAIAdam` and warm-up schedule as `compile()`'s defaults.

    import bert_tf
    clf = bert_tf.GptTextClassifier.from_pretrained(
        "finetune-transformer-lm/model",          # OpenAI's params folder (+ its BPE files)
        num_classes=2, sequence_length=64, input_transform="entailment",
        label_names=["entailment", "not_entailment"])
    clf.fit([("A man sleeps.", "Someone rests.")], ["entailment"], epochs=3)
    clf.predict([("A man sleeps.", "Nobody rests.")])   # float32 [N, 2] probabilities
    clf.save("rte.keras"); clf.export("serving/rte")

    mc = bert_tf.GptTextClassifier.from_pretrained(folder, input_transform="multiple_choice")
    mc.fit([("Karen went to the store.", ["She bought milk.", "She flew away."])], [0])
    mc.predict([(context, [choice_1, choice_2])])        # [N, C] over the choices

Inputs (Python lists, numpy arrays or batched `tf.data` of strings):

| input_transform | x | predict |
|---|---|---|
| "single" (classification) | texts [N] | [N, num_classes] |
| "entailment" (ordered pairs) | pairs [N, 2], (texts_a, texts_b), {"text_a", "text_b"} | [N, num_classes] |
| "similarity" (both orders, summed) | pairs, as entailment | [N, num_classes] |
| "multiple_choice" | [(context, [choices])], {"context", "choices"}, an array [N, 1 + C] | [N, C] |

`task_type="regression"` (single, entailment, similarity; STS-B) has one output trained with
the squared error; `predict` returns float32 [N].

The model is `bert_tf.gpt.task_model.GptClassifier` (the decoder, the extract token's state,
dropout `clf_pdrop`, one linear layer). Training adds `lm_coef` x the mean per-sequence LM loss
(train.py's L3 = L2 + λ·L1, the original's averaging) to the compiled loss. `compile()`
defaults: `OpenAIAdam` (lr 6.25e-5, `warmup_linear` over the first 0.2% of the updates, L2
0.01 inside the step, global-norm clip 1.0; the schedule's length set by the first `fit()` to
epochs x steps per epoch), as tools/run_gpt_classifier.py and the paper. The text encoder is
`GptTextPreprocessor`'s (the in-graph BPE; its documented differences from the Python encoder
are in that module).
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import keras
import numpy as np
import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.tasks.text_models.gpt_preprocessor import (GPT_TASKS, INPUT_TRANSFORMS,
                                                        GptTextPreprocessor, as_choice_array)
from bert_tf.tasks.text_models.preprocessors import as_text_array
from bert_tf.tasks.text_models.text_classifier import BertTextClassifier
from bert_tf.tasks.text_models.text_task import DEFAULT_BATCH_SIZE, TextTask

__all__ = ["GptTextClassifier", "DEFAULT_GPT_LEARNING_RATE", "DEFAULT_GPT_WARMUP"]

DEFAULT_GPT_LEARNING_RATE = 6.25e-5  # train.py's --lr (the paper)
DEFAULT_GPT_WARMUP = 0.002  # train.py's --lr_warmup (the paper: 0.2% of training)
DEFAULT_LM_COEF = 0.5  # train.py's --lm_coef (the paper's λ)
TASK_TYPES = ("classification", "regression")


@keras.saving.register_keras_serializable(package="bert_tf")
class GptTextClassifier(TextTask):
    """GPT-1 classification on raw text (module docstring).

    Args:
      backbone: a `bert_tf.gpt.task_model.GptClassifier` whose task matches the
        preprocessor's input transformation.
      preprocessor: a `GptTextPreprocessor`.
      label_names: class names in label-id order (kept in the `.keras` file and the export);
        None: labels are ids (always for multiple choice: the label is the right choice's
        index).

    Call: {"token_ids" int32 [B, S] / [B, 2, S] / [B, C, S], "mask" float32 alike} -> logits
    float32 [B, num_classes] (multiple choice [B, C]); in training, adds
    `lm_coef * mean(per-sequence LM losses)` with `add_loss`.
    """

    def __init__(self, backbone, preprocessor: GptTextPreprocessor,
                 label_names: Sequence[str] | None = None, **kwargs):
        kwargs.setdefault("name", "gpt_text_classifier")
        super().__init__(preprocessor, label_names, **kwargs)
        task = GPT_TASKS[preprocessor.input_transform]
        if backbone.task != task:
            raise UserInputError(f"the preprocessor's input_transform "
                                 f"{preprocessor.input_transform!r} feeds a {task!r} model, but "
                                 f"the GptClassifier's task is {backbone.task!r}")
        c = backbone.config
        if preprocessor.vocab_size != c.n_vocab:
            raise UserInputError(f"the preprocessor's BPE vocabulary has "
                                 f"{preprocessor.vocab_size} symbols but the model's n_vocab is "
                                 f"{c.n_vocab}; they must be the same model's")
        if preprocessor.sequence_length > c.n_ctx:
            raise UserInputError(f"sequence_length={preprocessor.sequence_length} exceeds the "
                                 f"model's n_ctx {c.n_ctx}")
        if task == "multiple_choice" and label_names is not None:
            raise UserInputError("multiple_choice has no label_names (the label is the index of "
                                 "the right choice)")
        if self.label_names is not None and len(self.label_names) != backbone.num_classes:
            raise UserInputError(f"label_names has {len(self.label_names)} names "
                                 f"{self.label_names} but num_classes is {backbone.num_classes}")
        self.backbone = backbone
        self.built = bool(backbone.built)

    @property
    def task_type(self) -> str:
        return "regression" if self.backbone.regression else "classification"

    @property
    def input_transform(self) -> str:
        return self.preprocessor.input_transform

    @property
    def num_classes(self) -> int | None:
        """Classes (1 for a regression); None for multiple choice (any number of choices)."""
        return self.backbone.num_classes

    @property
    def encoder(self):
        """The `GptModel` under the task head."""
        return self.backbone.transformer

    @classmethod
    def from_pretrained(cls, path_or_preset: str | os.PathLike, num_classes: int | None = None,
                        sequence_length: int | None = None,
                        input_transform: str = "single",
                        label_names: Sequence[str] | None = None,
                        task_type: str = "classification", lm_coef: float = DEFAULT_LM_COEF,
                        clf_pdrop: float | None = None, max_text_length: int = 0, *,
                        encoder_path: str | os.PathLike | None = None,
                        bpe_path: str | os.PathLike | None = None,
                        bpe_corpus: Sequence[str] = (),
                        special_rows_seed: int | None = None) -> "GptTextClassifier":
        """A classifier on a pretrained GPT-1 from any layout `GptCausalLM.from_pretrained`
        reads (OpenAI's params folder with its BPE files, a `save_pretrained` folder, a GPT
        pretraining checkpoint with its config, a `.keras` file of a GPT-1 model, the preset
        "openai-gpt" with `encoder_path`/`bpe_path`). A `.keras` file of a `GptTextClassifier`
        is returned as saved (`num_classes` and `input_transform` must agree).

        Args:
          num_classes: classes (default: len(label_names), else 2; regression: 1; multiple
            choice: none).
          sequence_length: S of every sequence (default: n_ctx, at most 128).
          input_transform: "single", "entailment", "similarity" or "multiple_choice".
          label_names: class names in id order.
          task_type: "classification" or "regression".
          lm_coef: weight of the auxiliary LM loss in training (0: none).
          clf_pdrop: dropout on the classifier input (default: the config's).
          max_text_length: cut of every text (0: the budget that always fits).
          encoder_path, bpe_path: the BPE files (default: found beside the weights).
          bpe_corpus: texts like the ones the model will see: the chunks on which the in-graph
            spaCy rules differ from spaCy go into the preprocessor's chunk table.
          special_rows_seed: as `GptCausalLM.from_pretrained`.
        """
        import dataclasses

        from bert_tf.gpt.task_model import GptClassifier
        from bert_tf.tasks.gpt_causal_lm import GptCausalLM

        name = os.fspath(path_or_preset)
        if input_transform not in GPT_TASKS:
            raise UserInputError(f"input_transform={input_transform!r}; expected one of "
                                 f"{', '.join(INPUT_TRANSFORMS)}")
        if task_type not in TASK_TYPES:
            raise UserInputError(f"task_type={task_type!r}; expected one of {TASK_TYPES}")
        saved = cls.saved_instance(name)
        if saved is not None:
            if saved.input_transform != input_transform:
                raise UserInputError(f"{name}: the classifier's input_transform is "
                                     f"{saved.input_transform!r}, not {input_transform!r}")
            if num_classes is not None and saved.num_classes != num_classes:
                raise UserInputError(f"{name}: the classifier has {saved.num_classes} classes, "
                                     f"not num_classes={num_classes}")
            return saved
        task = GPT_TASKS[input_transform]
        regression = task_type == "regression"
        if task == "multiple_choice":
            if regression or num_classes is not None or label_names is not None:
                raise UserInputError("input_transform='multiple_choice' scores each choice: no "
                                     "num_classes, label_names or regression")
        elif regression:
            num_classes = 1
        elif num_classes is None:
            num_classes = len(label_names) if label_names is not None else 2
        lm = GptCausalLM.from_pretrained(name, encoder_path=encoder_path, bpe_path=bpe_path,
                                         special_rows_seed=special_rows_seed, jit_compile=False)
        if lm.tokenizer is None or not hasattr(lm.tokenizer, "bpe_ranks"):
            raise UserInputError(f"{name}: no BPE files found beside the weights; pass "
                                 "encoder_path= (encoder_bpe_40000.json) and bpe_path= "
                                 "(vocab_40000.bpe)")
        config = lm.config
        if clf_pdrop is not None:
            config = dataclasses.replace(config, clf_pdrop=float(clf_pdrop))
        length = min(config.n_ctx, 128) if sequence_length is None else int(sequence_length)
        if not 3 <= length <= config.n_ctx:
            raise UserInputError(f"sequence_length={length}; expected 3..n_ctx ({config.n_ctx})")
        start = lm.special_token_ids
        special_ids = [start["_start_"], start["_delimiter_"], start["_classify_"]]
        backbone = GptClassifier(config, task=task, num_classes=num_classes,
                                 clf_token=special_ids[2], lm_coef=lm_coef,
                                 regression=regression, name="gpt_classifier")
        source = dict(lm.transformer.original_variables())
        for var_name, variable in backbone.transformer.original_variables():
            variable.assign(source[var_name])
        preprocessor = _preprocessor_of(lm.tokenizer, length, input_transform, max_text_length,
                                        special_ids, bpe_corpus)
        return cls(backbone, preprocessor, label_names)

    def get_config(self) -> dict:
        return {**super().get_config(), "label_names": self.label_names}

    def call(self, inputs, training=None):
        """{"token_ids", "mask"} -> logits float32 [B, num_classes] (multiple choice [B, C])."""
        from bert_tf.gpt import losses as gpt_losses

        token_ids = inputs["token_ids"]
        with_lm = bool(training) and self.backbone.lm_coef > 0 and "mask" in inputs
        out = self.backbone({"token_ids": token_ids}, training=training, with_lm_logits=False)
        if with_lm:  # the LM head at the mask's positions only (not on the padding)
            lm = gpt_losses.masked_lm_losses(out["hidden_states"], out["lm_table"], token_ids,
                                             inputs["mask"])
            self.add_loss(self.backbone.lm_coef * tf.reduce_mean(lm))
        return out["logits"]

    # -- compile -----------------------------------------------------------------------------

    def compile(self, optimizer="auto", loss="auto", metrics="auto",
                learning_rate: float = DEFAULT_GPT_LEARNING_RATE,
                warmup_proportion: float = DEFAULT_GPT_WARMUP, **kwargs) -> None:
        """Keras' `compile`; "auto" = the paper's recipe (module docstring): `OpenAIAdam`
        with `learning_rate` and `warmup_linear` warm-up over `warmup_proportion` of training
        (its length set by the first `fit`), the task's loss and metrics."""
        auto = isinstance(optimizer, str) and optimizer == "auto"
        if auto:
            from bert_tf.training.openai_adam import OpenAIAdam

            optimizer = OpenAIAdam(learning_rate, t_total=1, schedule="warmup_linear",
                                   warmup=warmup_proportion, max_grad_norm=1.0, fused=True)
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)
        if auto:  # the first fit sets the run's length (TextTask._set_schedule)
            self._auto_schedule = (_UpdatesTotal(optimizer), float(warmup_proportion))

    # The same task heads as BertTextClassifier's: its loss, metrics and outputs by task_type.
    _default_loss = BertTextClassifier._default_loss
    _default_metrics = BertTextClassifier._default_metrics

    # -- data --------------------------------------------------------------------------------

    def _label_ids(self, y, what="y"):
        if self.task_type == "regression":
            return np.asarray(y, np.float32).reshape(-1, 1)
        if self.input_transform == "multiple_choice":
            array = np.asarray(y)
            if array.dtype.kind not in "iu":
                raise UserInputError(f"{what}: multiple-choice labels are the index of the right "
                                     f"choice (int); got {array.dtype}")
            return array.astype(np.int32)
        self._infer_label_names(y, self.num_classes, what)
        return super()._label_ids(y, what)

    def _texts_for_one_function(self, x):
        """Single texts and pairs go through `TextTask.predict_raw`'s one function; multiple
        choice rows (a (contexts, choices) structure) through Keras' loop."""
        if self.input_transform == "multiple_choice":
            return None
        return as_text_array(x, "x")

    def text_dataset(self, x, y=None, sample_weight=None, batch_size: int | None = None,
                     shuffle: bool = False, what: str = "x", labelled: bool = False
                     ) -> tf.data.Dataset:
        """`TextTask.text_dataset`; multiple-choice rows from Python / numpy as
        `as_choice_array` reads them."""
        if self.input_transform != "multiple_choice" or isinstance(x, tf.data.Dataset):
            return super().text_dataset(x, y, sample_weight, batch_size, shuffle, what, labelled)
        rows = as_choice_array(x, what)
        utf8 = np.vectorize(lambda v: v if isinstance(v, bytes) else str(v).encode("utf-8"),
                            otypes=[object])
        rows = utf8(rows) if rows.size else np.zeros([0, 2], np.bytes_)
        texts = (tf.constant(rows[:, 0].tolist(), tf.string),
                 tf.constant(rows[:, 1:].tolist(), tf.string) if len(rows) else
                 tf.zeros([0, 1], tf.string))
        parts: list[Any] = [texts]
        if y is not None:
            labels = self._label_ids(y, "y")
            if len(labels) != len(rows):
                raise UserInputError(f"x has {len(rows)} rows but y has {len(labels)} labels")
            choices = rows.shape[1] - 1
            if len(labels) and (labels.min() < 0 or labels.max() >= choices):
                raise UserInputError(f"y: a label is outside 0..{choices - 1} (the index of the "
                                     "right choice)")
            parts.append(labels)
            if sample_weight is not None:
                parts.append(np.asarray(sample_weight, np.float32))
        ds = tf.data.Dataset.from_tensor_slices(tuple(parts) if len(parts) > 1 else texts)
        if shuffle:
            ds = ds.shuffle(len(rows), reshuffle_each_iteration=True)
        # batches of ((contexts, choices)[, labels[, weights]]): TextTask's dataset path
        ds = super().text_dataset(ds.batch(batch_size or DEFAULT_BATCH_SIZE), what=what,
                                  labelled=y is not None)
        return ds.prefetch(tf.data.AUTOTUNE)

    # -- outputs -----------------------------------------------------------------------------

    _outputs_from_predictions = BertTextClassifier._outputs_from_predictions
    # Texts -> the predicted label names (ids without label_names; multiple choice: the index
    # of the chosen choice).
    predict_labels = BertTextClassifier.predict_labels

    def predict(self, x, batch_size: int | None = None, **kwargs):
        """Texts -> probabilities float32 [N, num_classes] (multiple choice: [N, C] over the
        choices; regression: values [N])."""
        return super().predict(x, batch_size, **kwargs)

    def export(self, export_dir: str | os.PathLike, version: int | None = 1,
               overwrite: bool = False, check: bool = True) -> str:
        """A raw-text serving SavedModel at `<export_dir>/<version>/`
        (`bert_tf.export.gpt.GptClassifierServingModule`: `serving_default` on text, text_a +
        text_b, or context + choices; `serving_ids` on token ids; outputs `probabilities`,
        `label_ids`, `logits` (+ `labels`), regression `predictions`), with this model's
        in-graph BPE encoder and cut. Loading it needs `import tensorflow_text` first.
        Returns the written folder."""
        from bert_tf.export.gpt import GptClassifierServingModule
        from bert_tf.export.serving_module import save_serving_savedmodel

        pre = self.preprocessor
        labels = self.label_names if self.task_type != "regression" else None
        module = GptClassifierServingModule(self.backbone, pre.sequence_length, labels,
                                            max_text_length=pre.cut, bpe_encoder=pre.encoder)
        return save_serving_savedmodel(module, os.fspath(export_dir), version, overwrite,
                                       check=check)


class _UpdatesTotal:
    """Stands for the warm-up schedule `TextTask._set_schedule` sizes: the run's number of
    updates goes to `OpenAIAdam.t_total` (train.py's n_updates_total; the warm-up is a fraction
    of it inside the optimizer)."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.num_warmup_steps = 0

    @property
    def num_train_steps(self) -> int:
        return self.optimizer.t_total

    @num_train_steps.setter
    def num_train_steps(self, value: int) -> None:
        self.optimizer.t_total = int(value)


def _preprocessor_of(text_encoder, sequence_length: int, input_transform: str,
                     max_text_length: int, special_ids: Sequence[int],
                     bpe_corpus: Sequence[str]) -> GptTextPreprocessor:
    """A `GptTextPreprocessor` with the vocabulary and merges of a Python `TextEncoder`."""
    by_id = sorted(text_encoder.encoder.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise UserInputError("the BPE encoder's ids are not 0..n-1; expected the original "
                             "encoder_bpe_40000.json")
    merges = [f"{a} {b}" for (a, b), _ in sorted(text_encoder.bpe_ranks.items(),
                                                 key=lambda kv: kv[1])]
    chunk_table = None
    if bpe_corpus:
        from bert_tf.tokenization.gpt_bpe_in_graph import build_chunk_table
        from bert_tf.tokenization.gpt_spacy_in_graph import SpacyEnglishRules

        chunk_table = build_chunk_table(list(bpe_corpus), text_encoder,
                                        spacy_rules=SpacyEnglishRules.from_spacy(
                                            text_encoder.nlp)) or None
    return GptTextPreprocessor([t for t, _ in by_id], merges, sequence_length, input_transform,
                               max_text_length, special_ids, chunk_table=chunk_table)
