"""GPT-1 models as serving SavedModels.

- `export_gpt_lm_savedmodel`: the pretrained LM. `serving_default(token_ids int32 [B, S])` ->
  `hidden_states` [B, S, n_embd], `lm_logits` [B, S-1, table_rows], `next_token_logits`
  [B, n_vocab] (the prediction after the last position); S ≤ n_ctx, no padding mask (the model
  is causal: pad after the text and read the positions you need).
- `export_gpt_classifier_savedmodel`: a fine-tuned `GptClassifier`, under TF Serving's versioned
  layout, checked servable (`bert_tf.export.serving_compat`) before it is moved into place:

    serving_ids(token_ids int32 [B, S] (classification, entailment) or [B, C, S] (similarity:
      C = 2 orders; multiple choice: C choices)) -> probabilities [B, K] f32, label_ids [B] i32,
      logits [B, K] (+ labels [B] string with a label list); a regression (STS-B):
      predictions [B] f32 (the score) and logits [B, 1]
    serving_default: raw text in, the same outputs, for a model with a WordPiece vocabulary:
      classification (text [B]); entailment and similarity (text_a [B], text_b [B]); multiple
      choice (context [B], choices [B, C]).

  Raw text is encoded in the graph by bert_tf's WordPiece `InGraphTokenizer` (mode "exact":
  classic tensorflow-text ops only; same ids as `FullTokenizer`, see docs/tokenization.md) or, for
  the original BPE vocabulary, by `bert_tf.tokenization.gpt_bpe_in_graph.InGraphBpeEncoder` (exact BPE and
  text_standardize; ftfy and spaCy approximated except on the chunks of its chunk table, built
  from texts like the served ones: see docs/gpt_tokenization.md), and packed by the paper's
  transformations like `bert_tf.gpt.input_transforms`, each text cut to its first
  `max_text_length` tokens (default: the budget that always fits, (S - specials) // texts, as the
  original's transform_roc cut) — where the Python path refuses a too-long row, the export cuts
  it. Without a text encoder the export has `serving_ids` only (also as `serving_default`).

Both are `bert_tf.export.serving_module.ModelServingModule`s, as BERT's task exports
(`bert_tf.export.task_models`): signatures run with training=False, are not XLA-compiled, and
track the model's variables, not the Keras object (Keras 3 would add a float32 signature of its
own); written atomically and checked servable by `save_serving_savedmodel`. The export tool
(`bert_tf.export.exporter`, tools/export_savedmodel.py) builds both as --model_type=gpt_lm /
gpt_classifier.
"""
from __future__ import annotations

import keras
import tensorflow as tf

from bert_tf.export.serving_module import (ModelServingModule, save_serving_savedmodel,
                                           text_specs)


class GptLmServingModule(ModelServingModule):
    """`serving_default(token_ids)` of a `GptModel` (see the module docstring)."""

    def __init__(self, model: keras.Model):
        # model.weights, not .variables: the dropout streams' seed states are not saved.
        super().__init__(model, model.weights, "gpt_config_json", model.config.to_json_string(),
                         name="gpt_lm")
        n_vocab = model.config.n_vocab

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="token_ids")])
        def serve(token_ids):
            out = self._model({"token_ids": token_ids}, training=False)
            hidden = out["hidden_states"]
            table = self._model.embedding.we
            last = tf.matmul(hidden[:, -1], tf.cast(table[:n_vocab], hidden.dtype),
                             transpose_b=True)
            return {"hidden_states": hidden, "lm_logits": out["lm_logits"],
                    "next_token_logits": last}

        self.serving_default = serve

    def serving_signatures(self) -> dict:
        return {"serving_default": self.serving_default}


def export_gpt_lm_savedmodel(model: keras.Model, export_dir: str, overwrite: bool = False,
                             version: int | str | None = None) -> str:
    """Saves a `GptModel` (LM) atomically, checked servable first; returns the path:
    `export_dir` itself (version None, as run_gpt_pretraining.py's --export_dir) or
    `<export_dir>/<version>/` (TF Serving's layout, as the export tool writes it). An existing
    folder is an error unless `overwrite` (replaced only once the new one is complete)."""
    return save_serving_savedmodel(GptLmServingModule(model), export_dir, version,
                                   overwrite=overwrite)


_TEXT_PARTS = {"classification": 1, "entailment": 2, "similarity": 2, "multiple_choice": 2}


class GptClassifierServingModule(ModelServingModule):
    """The signatures of a `GptClassifier` export (see the module docstring).

    Args:
      model: the fine-tuned `GptClassifier`.
      seq_length: S of the raw-text signature (<= n_ctx).
      label_list: class names in label-id order (adds a `labels` output); None for multiple
        choice or when unknown.
      vocab_file: WordPiece vocab of the model (adds the raw-text `serving_default`).
      bpe_encoder: an `InGraphBpeEncoder` for a BPE model (adds the raw-text signature);
        None with no vocab_file: token ids only.
      do_lower_case: as the WordPiece tokenizer's.
      max_text_length: cut of every text in the raw-text signature (None: the budget).
    """

    def __init__(self, model: keras.Model, seq_length: int, label_list=None,
                 vocab_file: str | None = None, do_lower_case: bool = True,
                 max_text_length: int | None = None, bpe_encoder=None):
        import json

        from bert_tf.export.preprocessor import ensure_input_shape
        from bert_tf.gpt.input_transforms import SpecialTokens
        from bert_tf.training.length_batching import trim_padding
        c = model.config
        config_json = json.dumps({"gpt_config": c.to_dict(), "task": model.task,
                                  "num_classes": model.num_classes,
                                  "regression": bool(getattr(model, "regression", False))})
        super().__init__(model, model.weights, "gpt_config_json", config_json, label_list,
                         name="gpt_classifier")
        if not 3 <= seq_length <= c.n_ctx:
            raise ValueError(f"seq_length={seq_length} must be in [3, n_ctx={c.n_ctx}]")
        self.task = model.task
        self.seq_length = int(seq_length)
        specials = SpecialTokens.for_config(c)
        parts = _TEXT_PARTS[model.task]
        budget = (self.seq_length - 1 - parts) // parts  # start, delimiters, extract
        self.max_text_length = min(int(max_text_length or budget), budget)
        rank = 2 if model.task in ("classification", "entailment") else 3
        regression = bool(getattr(model, "regression", False))

        def outputs(token_ids):
            logits = tf.cast(self._model({"token_ids": token_ids}, training=False,
                                         with_lm_logits=False)["logits"], tf.float32)
            if regression:  # the single output is the predicted score
                return {"predictions": logits[:, 0], "logits": logits}
            out = {"probabilities": tf.nn.softmax(logits, axis=-1),
                   "label_ids": tf.argmax(logits, axis=-1, output_type=tf.int32),
                   "logits": logits}
            out.update(self.label_outputs(out["label_ids"]))
            return out

        @tf.function(input_signature=[tf.TensorSpec([None] * rank, tf.int32, name="token_ids")])
        def serving_ids(token_ids):
            return outputs(ensure_input_shape(token_ids, [None] * rank))

        self.serving_ids = serving_ids
        self.serving_default = None
        if vocab_file is not None:
            from bert_tf.tokenization.in_graph import InGraphTokenizer
            self.tokenizer = InGraphTokenizer(vocab_file, do_lower_case=do_lower_case,
                                              mode="exact")
            encode = self.tokenizer.tokenize
        elif bpe_encoder is not None:
            self.tokenizer = bpe_encoder
            encode = bpe_encoder.encode
        else:
            return
        start, delim, extract = specials.start, specials.delimiter, specials.classify
        cut, width = self.max_text_length, self.seq_length

        def sequences(first, second=None):
            """int32 ragged [N, (pieces)] parts -> [N, L] `[start; a; (delim; b;) extract]`,
            L = the longest row rounded up as `trim_padding` does, at most S: the causal model's
            outputs at each row's extract token do not depend on later columns."""
            n = first.nrows(out_type=tf.int32)

            def const(value):
                return tf.RaggedTensor.from_tensor(tf.fill([n, 1], tf.constant(value, tf.int32)))

            pieces = [const(start), first[:, :cut]]
            if second is not None:
                pieces += [const(delim), second[:, :cut]]
            pieces.append(const(extract))
            rows = tf.concat(pieces, axis=1)
            padded = {"token_ids": rows.to_tensor(0, shape=[None, width]),
                      "mask": tf.ones_like(rows).to_tensor(0, shape=[None, width])}
            return trim_padding(padded, mask_key="mask")["token_ids"]

        def tokens(texts):
            return tf.cast(encode(texts), tf.int32)

        if model.task == "classification":
            @tf.function(input_signature=text_specs("text"))
            def serve(text):
                return outputs(sequences(tokens(ensure_input_shape(text, [None]))))
        elif model.task in ("entailment", "similarity"):
            @tf.function(input_signature=text_specs("text_a", "text_b"))
            def serve(text_a, text_b):
                a = tokens(ensure_input_shape(text_a, [None]))
                b = tokens(ensure_input_shape(text_b, [None]))
                if model.task == "entailment":
                    return outputs(sequences(a, b))
                return outputs(tf.stack([sequences(a, b), sequences(b, a)], axis=1))
        else:
            @tf.function(input_signature=[*text_specs("context"),
                                          tf.TensorSpec([None, None], tf.string, name="choices")])
            def serve(context, choices):
                context = ensure_input_shape(context, [None])
                choices = ensure_input_shape(choices, [None, None])
                batch, num = tf.shape(choices)[0], tf.shape(choices)[1]
                repeated = tf.reshape(tf.tile(context[:, None], [1, num]), [-1])
                flat = sequences(tokens(repeated), tokens(tf.reshape(choices, [-1])))
                return outputs(tf.reshape(flat, [batch, num, tf.shape(flat)[1]]))
        self.serving_default = serve

    def serving_signatures(self) -> dict:
        """`serving_ids`, and `serving_default`: the raw-text signature, or `serving_ids` again
        without a text encoder."""
        return {"serving_ids": self.serving_ids,
                "serving_default": (self.serving_default if self.serving_default is not None
                                    else self.serving_ids)}


def gpt_classifier_serving_module(model: keras.Model, seq_length: int | None = None,
                                  label_list=None, vocab_file: str | None = None,
                                  do_lower_case: bool = True, max_text_length: int | None = None,
                                  encoder_path: str | None = None, bpe_path: str | None = None,
                                  bpe_corpus=()) -> GptClassifierServingModule:
    """The export module of a fine-tuned `GptClassifier`; arguments as
    `export_gpt_classifier_savedmodel`'s."""
    bpe_encoder = None
    if vocab_file is None and encoder_path and bpe_path:
        from bert_tf.tokenization.gpt_bpe_in_graph import InGraphBpeEncoder
        bpe_encoder = InGraphBpeEncoder.from_text_encoder(encoder_path, bpe_path,
                                                          corpus=bpe_corpus)
    return GptClassifierServingModule(model, seq_length or model.config.n_ctx, label_list,
                                      vocab_file, do_lower_case, max_text_length, bpe_encoder)


def export_gpt_classifier_savedmodel(model: keras.Model, export_dir: str, version: int = 1,
                                     seq_length: int | None = None, label_list=None,
                                     vocab_file: str | None = None, do_lower_case: bool = True,
                                     max_text_length: int | None = None,
                                     overwrite: bool = False, encoder_path: str | None = None,
                                     bpe_path: str | None = None, bpe_corpus=()) -> str:
    """Exports a fine-tuned `GptClassifier` as `<export_dir>/<version>/` (TF Serving layout),
    written atomically and checked servable first (op allowlist, dense outputs, no XLA).

    Args: see `GptClassifierServingModule` (seq_length default: n_ctx); `encoder_path` +
    `bpe_path` (the original BPE files) give a raw-text signature through `InGraphBpeEncoder`,
    whose chunk table is built (with ftfy and spaCy, the [gpt] extra) from `bpe_corpus`, texts
    like the served ones. Returns the version folder. Raises ExportError for an existing version
    without `overwrite`.
    """
    module = gpt_classifier_serving_module(model, seq_length, label_list, vocab_file,
                                           do_lower_case, max_text_length, encoder_path,
                                           bpe_path, bpe_corpus)
    return save_serving_savedmodel(module, export_dir, version, overwrite=overwrite)
