"""What every raw-text task model shares: Python / numpy / tf.data text in, the preprocessor in
the input pipeline, `compile()` with the original recipe, probabilities out, `.keras` files.

A `TextTask` is a `keras.Model` holding a `preprocessor` (a serializable Keras layer with the
vocab inside, `preprocessors.BertTextPreprocessor`) and a `backbone` (a `bert_tf.modeling`
model on token ids). `fit`, `evaluate` and `predict` accept:

  * Python lists / numpy arrays of strings [N] (single texts), pairs [N, 2], a tuple
    (texts_a, texts_b), a dict {"text_a", "text_b"} (`preprocessors.as_text_array`);
  * a batched `tf.data.Dataset` of texts, or of (texts, labels[, sample_weights]).

They run the preprocessor in the `tf.data` pipeline (string ops never enter the train step,
which may be XLA-compiled) and then Keras' own loops on token ids. Labels may be class ids or
the label names the model keeps (`label_names`, saved in the `.keras` file).

`compile()` defaults to the original fine-tuning recipe (`run_classifier.py`): the original
`AdamWeightDecay` (weight decay 0.01, LayerNorm/bias excluded, epsilon 1e-6), gradients clipped
to global norm 1.0, learning rate 5e-5 with linear warm-up over the first 10% of steps and linear
decay to 0. Since the schedule's length is only known once the data is, the first `fit()` sets
it to epochs x steps per epoch (as the original derives `num_train_steps` from the train set).
"""
from __future__ import annotations

from typing import Any, Sequence

import keras
import numpy as np
import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.tasks.text_models.preprocessors import as_text_array

__all__ = ["TextTask", "DEFAULT_LEARNING_RATE", "DEFAULT_WARMUP_PROPORTION", "load_backbone"]

DEFAULT_LEARNING_RATE = 5e-5  # run_classifier.py's --learning_rate
DEFAULT_WARMUP_PROPORTION = 0.1  # run_classifier.py's --warmup_proportion
DEFAULT_BATCH_SIZE = 32  # run_classifier.py's --train_batch_size


def _is_string_spec(spec) -> bool:
    return isinstance(spec, tf.TensorSpec) and spec.dtype == tf.string


def _text_spec(spec) -> bool:
    """True for a dataset element that is texts: a string tensor, or a pair of them."""
    if _is_string_spec(spec):
        return True
    if isinstance(spec, dict):
        return set(spec) == {"text_a", "text_b"} and all(map(_is_string_spec, spec.values()))
    return (isinstance(spec, tuple) and len(spec) == 2
            and all(map(_is_string_spec, spec)))


def load_backbone(path_or_preset: str, factory, vocab_file=None, do_lower_case=None,
                  heads: str = "if_present"):
    """A backbone built by `factory(config)` (or `factory(config, encoder=...)` for a `.keras`
    file holding an encoder model) from any layout `bert_tf.from_pretrained` reads, and its
    vocab: -> (model, tokens in id order, do_lower_case).

    A `.keras` file of a raw-text task model gives its encoder and its preprocessor's vocab.
    """
    import os

    from bert_tf.modeling import BertEncoder
    from bert_tf.pretrained import from_pretrained
    from bert_tf.tokenization.full_tokenizer import vocab_tokens_by_id

    name = os.fspath(path_or_preset)
    if name.endswith(".keras") and os.path.isfile(name):
        from bert_tf.tasks.text_models import registration

        registration.register_all()
        try:
            saved = keras.models.load_model(name, compile=False)
        except (OSError, ValueError, TypeError) as e:
            raise UserInputError(f"cannot load the Keras model file {name}: {e}") from e
        if isinstance(saved, TextTask):
            encoder = saved.encoder
            tokens, lower = list(saved.preprocessor.vocabulary), saved.preprocessor.do_lower_case
        else:
            model, tokenizer = from_pretrained(name, vocab_file=vocab_file,
                                               do_lower_case=do_lower_case)
            encoder = model if isinstance(model, BertEncoder) else getattr(model, "encoder", None)
            if not isinstance(encoder, BertEncoder):
                raise UserInputError(f"{name}: holds a {type(model).__name__}, which has no "
                                     "BertEncoder to fine-tune")
            tokens = vocab_tokens_by_id(tokenizer.vocab)
            lower = tokenizer.basic_tokenizer.do_lower_case
        model = factory(encoder.config, encoder=encoder)
        model.build_from_config_shapes()
        return model, tokens, lower
    model, tokenizer = from_pretrained(name, factory, vocab_file=vocab_file,
                                       do_lower_case=do_lower_case, heads=heads)
    return model, vocab_tokens_by_id(tokenizer.vocab), tokenizer.basic_tokenizer.do_lower_case


class TextTask(keras.Model):
    """Base of the raw-text task models (see the module docstring).

    Subclasses set `backbone`, `preprocessor`, and implement `call` on token-id dicts,
    `_default_loss`, `_default_metrics`, `_outputs_from_predictions` (raw `predict` outputs ->
    what users get) and `export`.

    Attributes:
      label_names: class names in label-id order, or None.
    """

    def __init__(self, preprocessor, label_names: Sequence[str] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.preprocessor = preprocessor
        self.label_names = label_names
        self._auto_schedule = None

    @property
    def label_names(self) -> list[str] | None:
        return self._label_names

    @label_names.setter
    def label_names(self, names: Sequence[str] | None) -> None:
        # Untracked plain list (Keras would wrap a list attribute).
        object.__setattr__(self, "_label_names",
                           None if names is None else [str(n) for n in names])

    # -- serialization ---------------------------------------------------------------------

    def get_config(self) -> dict:
        return {**super().get_config(),
                "backbone": keras.saving.serialize_keras_object(self.backbone),
                "preprocessor": keras.saving.serialize_keras_object(self.preprocessor)}

    @classmethod
    def from_config(cls, config: dict):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        config["preprocessor"] = keras.saving.deserialize_keras_object(config["preprocessor"])
        return cls(**config)

    @classmethod
    def saved_instance(cls, path: str):
        """The model of a `.keras` file at `path` when it is a `cls`, else None."""
        import os

        if not (path.endswith(".keras") and os.path.isfile(path)):
            return None
        from bert_tf.tasks.text_models import registration

        registration.register_all()
        saved = keras.models.load_model(path, compile=False)
        return saved if isinstance(saved, cls) else None

    def write_export(self, make_module, export_dir, version, overwrite: bool, check: bool) -> str:
        """Saves `make_module(serving preprocessor)` (a `ModelServingModule` over this model's
        `bert_tf.export.preprocessor.BertPreprocessor`: same vocab, length and casing) as a
        versioned serving SavedModel; returns the written folder."""
        import tempfile

        from bert_tf.export.preprocessor import BertPreprocessor
        from bert_tf.export.serving_module import save_serving_savedmodel
        from bert_tf.tasks.text_models.preprocessors import write_vocab_file

        pre = self.preprocessor
        with tempfile.TemporaryDirectory(prefix="bert_tf_export_vocab_") as tmp:
            serving_pre = BertPreprocessor(write_vocab_file(pre.vocabulary, tmp),
                                           pre.sequence_length, pre.do_lower_case)
            return save_serving_savedmodel(make_module(serving_pre), export_dir, version,
                                           overwrite, check=check)

    def get_build_config(self) -> dict:
        return {"dummy_batch": True}

    def build_from_config(self, build_config: dict | None) -> None:
        if not self.backbone.built:
            self.backbone.build_from_config_shapes()
        self.built = True

    def get_compile_config(self):
        return None  # `compile()` again after loading (the optimizer is not saved)

    @property
    def encoder(self):
        """The `BertEncoder` under the task head."""
        return self.backbone.encoder

    # -- compile -----------------------------------------------------------------------------

    def compile(self, optimizer="auto", loss="auto", metrics="auto",
                learning_rate: float = DEFAULT_LEARNING_RATE,
                warmup_proportion: float = DEFAULT_WARMUP_PROPORTION, **kwargs) -> None:
        """Keras' `compile`, with the original fine-tuning recipe for "auto" (module docstring).

        Args:
          optimizer: "auto" (the original's) or any Keras optimizer.
          loss, metrics: "auto" (the task's) or Keras losses / metrics.
          learning_rate, warmup_proportion: of the "auto" optimizer.
          **kwargs: passed to `keras.Model.compile` (e.g. `jit_compile`).
        """
        self._auto_schedule = None
        if isinstance(optimizer, str) and optimizer == "auto":
            from bert_tf.training.optimization import AdamWeightDecay, WarmupPolynomialDecay

            schedule = WarmupPolynomialDecay(learning_rate, num_train_steps=1)
            optimizer = AdamWeightDecay(learning_rate=schedule, global_clipnorm=1.0)
            self._auto_schedule = (schedule, float(warmup_proportion))
        if isinstance(loss, str) and loss == "auto":
            loss = self._default_loss()
        if isinstance(metrics, str) and metrics == "auto":
            metrics = self._default_metrics()
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def _default_loss(self):
        raise NotImplementedError

    def _default_metrics(self):
        return None

    # -- data --------------------------------------------------------------------------------

    def _infer_label_names(self, y: Any, num_classes: int, what: str = "y") -> None:
        """A classifier fitted on string labels without `label_names`: its names are the
        sorted distinct labels of `y`, which must number `num_classes`."""
        if self.label_names is None and np.asarray(y).dtype.kind in "OUS":
            names = sorted({str(v) for v in np.asarray(y).reshape(-1)})
            if len(names) != num_classes:
                raise UserInputError(f"{what}: {len(names)} distinct labels {names[:10]} for a "
                                     f"{num_classes}-class model; pass label_names=")
            self.label_names = names

    def _label_ids(self, y: Any, what: str = "y") -> np.ndarray:
        """Labels as the model's targets (class ids, or names of `label_names`)."""
        array = np.asarray(y)
        if array.dtype.kind in "OUS":
            if self.label_names is None:
                raise UserInputError(f"{what}: string labels need the model's label_names "
                                     "(pass label_names= to from_pretrained)")
            index = {n: i for i, n in enumerate(self.label_names)}
            flat = [v.decode("utf-8") if isinstance(v, bytes) else str(v)
                    for v in array.reshape(-1)]
            unknown = sorted({v for v in flat if v not in index})
            if unknown:
                raise UserInputError(f"{what}: label(s) {unknown[:5]} are not among the model's "
                                     f"label_names {self.label_names}")
            return np.asarray([index[v] for v in flat], np.int32).reshape(array.shape)
        return array

    def _label_table(self):
        keys = tf.constant(self.label_names, tf.string)
        return tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(keys, tf.range(len(self.label_names))), -1)

    def _preprocess(self, x):
        return self.preprocessor.pack(x)

    def text_dataset(self, x, y=None, sample_weight=None, batch_size: int | None = None,
                     shuffle: bool = False, what: str = "x", labelled: bool = False
                     ) -> tf.data.Dataset:
        """The preprocessed batched dataset fit/evaluate/predict run on: elements
        (inputs dict[, labels[, weights]]). `x` as the module docstring; a dataset's tuple
        elements are (texts, labels[, weights]) when `labelled` (fit, evaluate), else a pair
        of string tensors is (texts_a, texts_b)."""
        batch_size = batch_size or DEFAULT_BATCH_SIZE
        if isinstance(x, tf.data.Dataset):
            if y is not None:
                raise UserInputError(f"{what} is a tf.data.Dataset: give its labels inside it "
                                     "((texts, labels) elements), not as y")
            spec = x.element_spec
            if not labelled and _text_spec(spec):
                return x.map(lambda *texts: self._preprocess(texts if len(texts) > 1
                                                             else texts[0]),
                             num_parallel_calls=tf.data.AUTOTUNE)
            if not isinstance(spec, tuple) or len(spec) not in (2, 3) or not _text_spec(spec[0]):
                raise UserInputError(f"{what}: expected a batched dataset of texts or of "
                                     f"(texts, labels[, weights]); its elements are {spec}")
            table = None
            if len(spec) > 1 and _is_string_spec(spec[1]):
                if self.label_names is None:
                    raise UserInputError(f"{what}: string labels need the model's label_names")
                table = self._label_table()

            def prepare(texts, *rest):
                rest = list(rest)
                if table is not None:
                    ids = table.lookup(rest[0])
                    check = tf.debugging.assert_non_negative(
                        ids, message=f"{what}: a label is not among the model's label_names "
                        f"{self.label_names}")
                    with tf.control_dependencies([check]):
                        rest[0] = tf.identity(ids)
                return (self._preprocess(texts), *rest)

            return x.map(prepare, num_parallel_calls=tf.data.AUTOTUNE)
        texts = as_text_array(x, what)
        encoded = np.vectorize(_utf8, otypes=[object])(texts) if texts.size else texts
        parts: list[Any] = [tf.constant(encoded.tolist() if texts.size else
                                        np.zeros(texts.shape, np.bytes_), tf.string)]
        if y is not None:
            labels = self._label_ids(y, "y")
            if len(labels) != len(texts):
                raise UserInputError(f"x has {len(texts)} texts but y has {len(labels)} labels")
            parts.append(labels)
            if sample_weight is not None:
                parts.append(np.asarray(sample_weight, np.float32))
        ds = tf.data.Dataset.from_tensor_slices(tuple(parts))
        if shuffle:
            ds = ds.shuffle(len(texts), reshuffle_each_iteration=True)
        ds = ds.batch(batch_size)
        return ds.map(lambda t, *rest: (self._preprocess(t), *rest),
                      num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    def _set_schedule(self, ds: tf.data.Dataset, epochs: int, steps_per_epoch) -> None:
        if self._auto_schedule is None or int(self.optimizer.iterations.numpy()) != 0:
            return
        steps = steps_per_epoch
        if steps is None:
            steps = int(ds.cardinality().numpy())
            if steps < 0:
                raise UserInputError("fit: the dataset's length is unknown; pass steps_per_epoch= "
                                     "(the default optimizer's schedule needs the number of steps)")
        schedule, warmup = self._auto_schedule
        schedule.num_train_steps = max(1, int(epochs) * int(steps))
        schedule.num_warmup_steps = int(schedule.num_train_steps * warmup)

    # -- Keras loops on text -------------------------------------------------------------------

    def fit(self, x=None, y=None, batch_size: int | None = None, epochs: int = 1,
            validation_data=None, shuffle: bool = True, sample_weight=None,
            steps_per_epoch=None, **kwargs):
        """`keras.Model.fit` on texts (module docstring); `validation_data` as (x, y) or a
        dataset. Without `compile()` first, compiles with the defaults."""
        if not self.compiled:
            self.compile()
        ds = self.text_dataset(x, y, sample_weight, batch_size, shuffle=shuffle, labelled=True)
        if validation_data is not None:
            if isinstance(validation_data, tf.data.Dataset):
                validation_data = self.text_dataset(validation_data, what="validation_data",
                                                    labelled=True)
            else:
                validation_data = self.text_dataset(*validation_data, batch_size=batch_size,
                                                    what="validation_data", labelled=True)
        self._set_schedule(ds, epochs, steps_per_epoch)
        return super().fit(ds, epochs=epochs, validation_data=validation_data, shuffle=False,
                           steps_per_epoch=steps_per_epoch, **kwargs)

    def evaluate(self, x=None, y=None, batch_size: int | None = None, sample_weight=None,
                 **kwargs):
        """`keras.Model.evaluate` on texts and labels (or a dataset of both)."""
        if not self.compiled:
            self.compile()
        return super().evaluate(self.text_dataset(x, y, sample_weight, batch_size,
                                                  labelled=True), **kwargs)

    def predict_raw(self, x, batch_size: int | None = None, **kwargs):
        """Keras' `predict` on texts: the model's raw outputs (logits).

        In-memory texts (not a `tf.data.Dataset`) with no Keras `predict` option but
        `verbose`, on a model outside any multi-device strategy, skip Keras' loop and its
        `tf.data` pipeline: the same batches go through one `tf.function` (the preprocessor,
        then the model, `training=False`) kept with the model and traced once per input shape,
        so that repeated calls do not pay the pipeline's start-up (about 2 s per call for a
        tokenizing `tf.data` map, whatever the number of texts). Where the outputs are one row
        per text (`trims_prediction_padding`: classifiers, embedders), each batch is cut to its
        longest text rounded up to 8 tokens (`training.length_batching.trim_padding`, as the
        task exports do). The outputs are Keras' loop's up to float rounding
        (tests/tasks/test_text_models.py)."""
        kwargs.setdefault("verbose", 0)
        texts = None
        if (not isinstance(x, tf.data.Dataset) and not set(kwargs) - {"verbose"}
                and self._single_device()):
            texts = self._texts_for_one_function(x)
        if texts is None or not texts.size:  # Keras' loop (it says what an empty input gives)
            return super().predict(self.text_dataset(x, batch_size=batch_size), **kwargs)
        return self._predict_texts(texts, batch_size or DEFAULT_BATCH_SIZE)

    # True where the model's outputs hold one row per text and no sequence axis, so that the
    # padding past a batch's longest text can be cut before the model (`predict_raw`).
    trims_prediction_padding = False

    def _texts_for_one_function(self, x) -> np.ndarray | None:
        """`x` as the array `_predict_texts` batches ([N] or [N, k] strings, each batch what
        `text_dataset`'s pipeline hands `_preprocess`), or None where `predict_raw` keeps
        Keras' loop (a subclass reading `x` in a `text_dataset` of its own)."""
        if type(self).text_dataset is not TextTask.text_dataset:
            return None
        return as_text_array(x, "x")

    def _single_device(self) -> bool:
        """The model's variables live on one device, outside any `tf.distribute` scope."""
        from bert_tf.training.finetuning import model_strategy

        default = tf.distribute.get_strategy()
        return not tf.distribute.has_strategy() and model_strategy(self) is default

    def _predict_texts(self, texts: np.ndarray, batch_size: int):
        """`predict_raw`'s one-function path: texts [N] or pairs [N, 2] (object array) ->
        the model's outputs, NumPy, batches of `batch_size` in order."""
        from bert_tf.training.length_batching import trim_padding

        trim = self.trims_prediction_padding

        def body(model, t):
            inputs = model._preprocess(t)
            if trim and "input_mask" in inputs:
                inputs = trim_padding(inputs)  # the batch's longest text, rounded up to 8
            return model(inputs, training=False)

        encoded = np.vectorize(_utf8, otypes=[object])(texts)
        # One trace per input shape past the batch: texts [N], pairs [N, 2].
        return self._in_one_function(
            ("predict_texts", texts.shape[1:]), tf.TensorSpec([None, *texts.shape[1:]],
                                                             tf.string), body,
            (tf.constant(encoded[start:start + batch_size].tolist(), tf.string)
             for start in range(0, len(texts), batch_size)))

    def _in_one_function(self, key, spec, body, batches):
        """`body(model, batch)` in a `tf.function` of input signature `spec`, kept with the
        model under `key` (`cached_model_function`: traced once), on each of `batches`; its
        outputs (any structure) as NumPy, concatenated along the batch axis in order."""
        from bert_tf.training.length_batching import cached_model_function

        run = cached_model_function(
            self, key, lambda model_ref: tf.function(lambda b: body(model_ref(), b),
                                                     input_signature=[spec]))
        parts = [tf.nest.map_structure(lambda t: t.numpy(), run(b)) for b in batches]
        return tf.nest.map_structure(lambda *a: np.concatenate(a, axis=0), *parts)

    def predict(self, x, batch_size: int | None = None, **kwargs):
        """Texts -> the task's predictions (see the subclass)."""
        return self._outputs_from_predictions(self.predict_raw(x, batch_size, **kwargs))

    def _outputs_from_predictions(self, raw):
        return raw

    def call_text(self, texts, training: bool = False):
        """The model on tf.string texts (or pairs) directly, in a graph or eagerly."""
        return self(self._preprocess(texts), training=training)


def _utf8(value) -> bytes:
    return bytes(value) if isinstance(value, (bytes, np.bytes_)) else str(value).encode("utf-8")


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float32 (probabilities from `predict`'s logits)."""
    logits = np.asarray(logits, np.float32)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)

