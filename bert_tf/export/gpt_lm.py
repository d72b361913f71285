"""GPT-1 as a served language model: `generate` and `score` signatures (raw text or token ids).

`GptCausalLmServingModule(model, bpe_encoder=...)` wraps a `GptModel` (its LM head; eval mode)
and `export_gpt_causal_lm_savedmodel` writes it under TF Serving's layout, checked servable
(`serving_compat`: op allowlist, dense outputs, no XLA) before it is moved into place. The
export tool builds it as --model_type=gpt_causal_lm; `GptCausalLM.export(dir)` from Python.

Signatures (B = batch; every output starts with B; `-1` pads id outputs):

    generate(text string [B], max_new_tokens int32 [])                         greedy
    generate_sampled(text [B], max_new_tokens [], seed int32 [], temperature float32 [],
                     top_k int32 [], top_p float32 [])                          sampled
      -> text string [B] (prompt + continuation, decoded as `GptCausalLM.generate` returns it;
         a stop token that ended the row left out), generated_text string [B] (the continuation
         alone), token_ids int32 [B, L] and lengths int32 [B] (prompt + generated ids),
         generated_ids int32 [B, G], num_generated int32 [B], prompt_lengths int32 [B],
         stopped bool [B]
    generate_ids(token_ids int32 [B, P], lengths int32 [B], max_new_tokens [])  greedy
    generate_ids_sampled(token_ids, lengths, max_new_tokens, seed, temperature, top_k, top_p)
      -> the same without the two text outputs (prompts right-padded; `lengths` real tokens)
    score(text string [B]) / score_ids(token_ids int32 [B, S], lengths int32 [B])
      -> token_ids [B, S], lengths [B], and per softmax k in full_table (the original's LM
         loss), tokens_and_specials, tokens_only (`bert_tf.gpt.generation`):
         log_probs_<k> float32 [B, S-1] (column i = log p(token i+1 | tokens 0..i); 0 past
         the row's length), total_<k> float64 [B] (their sum), perplexity_<k> float64 [B]
         (exp(-total / (length-1)); nan for a one-token row)
    serving_default: `generate` (with a text encoder), else `generate_ids`.

The sampler of `generate_sampled` follows its inputs: top_k > 0 -> top-k sampling, else top_p <
1 -> nucleus sampling, else plain sampling at `temperature`; draws are stateless, seeded with
`[seed, step]` exactly as `GptGenerator.generate(seed=seed)`: the same batch gives the same
tokens as Python. Greedy, samplers and scores equal `GptCausalLM.generate` / `.score` (same ids;
up to float rounding, 1e-5). Beam search is not exported. `max_new_tokens` counts per row, capped
by n_ctx; special tokens and position rows are never proposed. The scalar inputs make REST's
row format ("instances") unusable: use the columnar format ("inputs": {...}) or gRPC.

Bad input fails the request with one line (an `InvalidArgumentError` from an assertion): a
prompt with no token or more than n_ctx - 1 tokens (a scored text: more than n_ctx), an id
outside [0, n_vocab + n_special), max_new_tokens < 0, top_k above the vocabulary.

Raw text is encoded by `bert_tf.tokenization.gpt_bpe_in_graph.InGraphBpeEncoder` (exact BPE;
ftfy and spaCy approximated except on its chunk table: docs/gpt_tokenization.md says where it
differs from the Python encoder), optionally after the `_start_` token (`add_start_token`, fixed
at export), and decoded in the graph as `GptCausalLM.decode` does (pieces joined, `</w>` read as
a word end, special tokens by name). The KV-cache loop writes its cache with core TF ops
(`generation.core_ops_cache_writes`): stock TF Serving runs no XLA kernels.
"""
from __future__ import annotations

import json
from typing import Mapping, Sequence

import keras
import tensorflow as tf

from bert_tf.export.serving_module import (ModelServingModule, save_serving_savedmodel,
                                           text_specs)
from bert_tf.gpt.generation import SCORE_KINDS, GptGenerator, core_ops_cache_writes

__all__ = ["GptCausalLmServingModule", "export_gpt_causal_lm_savedmodel",
           "gpt_causal_lm_serving_module"]

_MARK = "\ufdd0"  # fences special-token names while decoding (a Unicode noncharacter)
_IDS = tf.TensorSpec([None, None], tf.int32, name="token_ids")
_LENGTHS = tf.TensorSpec([None], tf.int32, name="lengths")
_MAX_NEW = tf.TensorSpec([], tf.int32, name="max_new_tokens")
_SAMPLING = [tf.TensorSpec([], tf.int32, name="seed"),
             tf.TensorSpec([], tf.float32, name="temperature"),
             tf.TensorSpec([], tf.int32, name="top_k"), tf.TensorSpec([], tf.float32, name="top_p")]


class GptCausalLmServingModule(ModelServingModule):
    """The generate / score signatures of a `GptModel` (see the module docstring).

    Args:
      model: the `GptModel` (a classifier head, if any, is not used).
      bpe_encoder: an `InGraphBpeEncoder` of the model's BPE files (adds the text signatures);
        None: token ids only.
      encoder_path: with `bpe_encoder`: its `encoder_bpe_40000.json` (the decoding table).
      special_token_ids: special-token names -> ids, for decoding (default train.py's
        `_start_`, `_delimiter_`, `_classify_` for 3 specials).
      stop_token_ids: ids that end a continuation (fixed at export).
      add_start_token: put `_start_` (n_vocab) before every text (fixed at export).

    The module switches `model`'s KV-cache writes to core TF ops (`cache_write = "select"` of
    every block's attention: the same numbers, no `XlaDynamicUpdateSlice`, which stock TF
    Serving cannot run); `export_gpt_causal_lm_savedmodel` switches them back once saved.
    """

    def __init__(self, model: keras.Model, bpe_encoder=None, encoder_path: str | None = None,
                 special_token_ids: Mapping[str, int] | None = None,
                 stop_token_ids: Sequence[int] = (), add_start_token: bool = False):
        c = model.config
        if special_token_ids is None:
            names = (("_start_", "_delimiter_", "_classify_") if c.n_special == 3
                     else [f"_special_{i}_" for i in range(c.n_special)])
            special_token_ids = {name: c.n_vocab + i for i, name in enumerate(names)}
        specials = {str(k): int(v) for k, v in special_token_ids.items()}
        stops = sorted({int(s) for s in stop_token_ids})
        bad = [s for s in stops if not 0 <= s < c.n_vocab + c.n_special]
        if bad:
            raise ValueError(f"stop token {bad[0]} is outside [0, {c.n_vocab + c.n_special})")
        if bpe_encoder is not None and bpe_encoder.vocab_size != c.n_vocab:
            raise ValueError(f"the BPE encoder has {bpe_encoder.vocab_size} tokens but the model's "
                             f"n_vocab is {c.n_vocab}; they must be the same model's files")
        config_json = json.dumps({"gpt_config": c.to_dict(), "task": "causal_lm",
                                  "special_token_ids": specials, "stop_token_ids": stops,
                                  "add_start_token": bool(add_start_token),
                                  "text_signatures": bpe_encoder is not None})
        # model.weights, not .variables: the dropout streams' seed states are not saved.
        super().__init__(model, model.weights, "gpt_config_json", config_json,
                         name="gpt_causal_lm")
        # plain tuples (a tf.Module would wrap a dict or list attribute for tracking)
        self.__dict__["special_token_ids"] = specials
        self.__dict__["stop_token_ids"] = tuple(stops)
        self.add_start_token = bool(add_start_token)
        self.tokenizer = bpe_encoder
        self.__dict__["_generator"] = GptGenerator(model, jit_compile=False)
        n_columns = c.n_vocab
        is_stop = [False] * n_columns
        for s in self.stop_token_ids:
            if s < n_columns:
                is_stop[s] = True
        self._is_stop = tf.constant(is_stop, tf.bool)
        if bpe_encoder is not None:
            if not encoder_path:
                raise ValueError("a text encoder needs its encoder_path (the decoding table)")
            from bert_tf.tokenization.gpt_bpe import load_encoder

            decoder = {i: piece for piece, i in load_encoder(encoder_path).items()}
            for name, i in self.special_token_ids.items():
                decoder[i] = f"{_MARK}{name}{_MARK}"
            keys = sorted(decoder)
            self._pieces = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
                tf.constant(keys, tf.int64), tf.constant([decoder[k] for k in keys], tf.string)),
                default_value="<unk>")
        # The KV cache written with core ops only (servers run no XLA kernels), for this
        # module's traces, which saving repeats: `export_gpt_causal_lm_savedmodel` switches the
        # model back afterwards.
        for block in model.blocks:
            block.attn.cache_write = "select"
        self._build_signatures()

    # ---- checks (one line each, as a failed request's message) --------------------------------
    def _check_ids(self, token_ids, lengths, limit: int, what: str):
        """-> ids int32 [B, max(lengths)], zeros past each length; run after assertions whose
        message is one line ("prompt 1 has 40 tokens; expected 1 to 31 ...")."""
        c = self.config
        high = c.n_vocab + c.n_special
        width = tf.shape(token_ids)[1]
        index = tf.argmax(tf.cast(tf.logical_or(lengths < 1, lengths > limit), tf.int32),
                          output_type=tf.int32)
        room = ", one position left for a new token" if limit < c.n_ctx else ""
        checks = [
            tf.debugging.Assert(
                tf.reduce_all(tf.logical_and(lengths >= 1, lengths <= limit)),
                [tf.strings.format(f"{what} {{}} has {{}} tokens; expected 1 to {limit} (n_ctx "
                                   f"{c.n_ctx}{room})", (index, tf.gather(lengths, index)))]),
            tf.debugging.Assert(tf.reduce_all(lengths <= width), [tf.strings.format(
                f"{what} lengths exceed the width {{}} of token_ids", (width,))]),
        ]
        with tf.control_dependencies(checks):
            real = tf.range(width)[tf.newaxis, :] < lengths[:, tf.newaxis]
            ids = tf.where(real, token_ids, 0)
        outside = tf.logical_or(ids < 0, ids >= high)
        first = tf.argmax(tf.cast(tf.reshape(outside, [-1]), tf.int32), output_type=tf.int32)
        checks.append(tf.debugging.Assert(tf.logical_not(tf.reduce_any(outside)), [
            tf.strings.format(
                f"{what} {{}}: id {{}} is outside [0, {high}) (BPE tokens 0..{c.n_vocab - 1}, "
                f"special tokens {c.n_vocab}..{high - 1})",
                (first // tf.maximum(width, 1), tf.gather(tf.reshape(ids, [-1]), first)))]))
        with tf.control_dependencies(checks):
            return tf.identity(ids[:, :tf.reduce_max(lengths)])

    @property
    def config(self):
        return self._model.config

    # ---- the computations ---------------------------------------------------------------------
    def _generate(self, loop, token_ids, lengths, max_new_tokens, seed, temperature, top_k, top_p):
        c = self.config
        ids = self._check_ids(token_ids, lengths, c.n_ctx - 1, "prompt")
        def check(ok, message, value):
            return tf.debugging.Assert(ok, [tf.strings.format(message, (value,))])

        checks = [check(max_new_tokens >= 0, "max_new_tokens must be >= 0, got {}",
                        max_new_tokens),
                  check(top_k <= c.n_vocab, f"top_k must be <= {c.n_vocab} (the BPE tokens), "
                                            "got {}", top_k),
                  check(temperature > 0, "temperature must be > 0, got {}", temperature),
                  check(tf.logical_and(top_p > 0, top_p <= 1), "top_p must be in (0, 1], got {}",
                        top_p)]
        with tf.control_dependencies(checks):
            ends = tf.minimum(c.n_ctx, lengths + max_new_tokens)
        seed_pair = tf.stack([tf.bitwise.bitwise_and(seed, 0x7FFFFFFF), 0])
        out = loop(prompt_ids=ids, lengths=lengths, ends=ends, is_stop=self._is_stop,
                   seed=seed_pair, temperature=temperature, top_k=top_k, top_p=top_p)
        sequences, final = out["ids"], out["final_lengths"]
        width = tf.shape(sequences)[1]
        num_generated = final - lengths
        steps = tf.range(tf.reduce_max(num_generated))[tf.newaxis, :]
        gathered = tf.gather(sequences, tf.minimum(lengths[:, tf.newaxis] + steps, width - 1),
                             batch_dims=1)
        generated = tf.where(steps < num_generated[:, tf.newaxis], gathered, -1)
        real = tf.range(width)[tf.newaxis, :] < final[:, tf.newaxis]
        sequences = tf.where(real, sequences, -1)[:, :tf.reduce_max(final)]
        return {"token_ids": sequences, "lengths": final, "generated_ids": generated,
                "num_generated": num_generated, "prompt_lengths": lengths,
                "stopped": out["stopped"]}

    def _score(self, token_ids, lengths):
        c = self.config
        ids = self._check_ids(token_ids, lengths, c.n_ctx, "sequence")
        out = self._generator.score_graph(ids, lengths)
        width = tf.shape(ids)[1]
        predicted = lengths - 1
        valid = tf.range(width - 1)[tf.newaxis, :] < predicted[:, tf.newaxis]
        result = {"token_ids": tf.where(tf.range(width)[tf.newaxis, :] < lengths[:, tf.newaxis],
                                        ids, -1), "lengths": lengths}
        for kind in SCORE_KINDS:
            log_probs = tf.where(valid, out[kind], 0.0)
            total = tf.reduce_sum(tf.cast(log_probs, tf.float64), axis=-1)
            result[f"log_probs_{kind}"] = log_probs
            result[f"total_{kind}"] = total
            result[f"perplexity_{kind}"] = tf.exp(-total / tf.cast(predicted, tf.float64))
        return result

    # ---- text in and out ----------------------------------------------------------------------
    def _encode(self, text):
        from bert_tf.export.preprocessor import ensure_input_shape

        # A sentinel text, dropped after: the in-graph BPE fails on a batch with no token at all
        # (all texts empty), before the length check could name the empty text.
        texts = tf.concat([ensure_input_shape(text, [None]), ["."]], axis=0)
        ids = tf.cast(self.tokenizer.encode(texts)[:-1], tf.int32)
        if self.add_start_token:
            start = tf.fill([ids.nrows(out_type=tf.int32), 1],
                            tf.constant(self.special_token_ids.get("_start_",
                                                                   self.config.n_vocab),
                                        tf.int32))
            ids = tf.concat([tf.RaggedTensor.from_tensor(start), ids], axis=1)
        return ids.to_tensor(0), tf.cast(ids.row_lengths(), tf.int32)

    def _decode(self, ids, lengths):
        """ids int32 [B, W] (-1 padded), lengths [B] -> [B] strings as `GptCausalLM.decode`."""
        real = tf.range(tf.shape(ids)[1])[tf.newaxis, :] < lengths[:, tf.newaxis]
        pieces = tf.where(real, self._pieces.lookup(tf.cast(tf.maximum(ids, 0), tf.int64)), "")
        text = tf.strings.reduce_join(pieces, axis=-1)
        text = tf.strings.regex_replace(text, "</w>", " ")
        text = tf.strings.regex_replace(text, f" +({_MARK}|$)", "\\1")  # each run's rstrip(" ")
        text = tf.strings.regex_replace(text, f"^{_MARK}+|{_MARK}+$", "")
        return tf.strings.regex_replace(text, f"{_MARK}+", " ")  # " ".join of the pieces

    def _with_text(self, out):
        """Adds text / generated_text (a stop token that ended a row left out)."""
        ends = out["lengths"]
        generated = out["num_generated"]
        if self.stop_token_ids:
            last = tf.gather(out["token_ids"], tf.maximum(ends - 1, 0), batch_dims=1)
            is_stop = tf.reduce_any(last[:, tf.newaxis] == tf.constant(self.stop_token_ids,
                                                                       tf.int32), axis=-1)
            cut = tf.cast(tf.logical_and(out["stopped"], is_stop), tf.int32)
            ends, generated = ends - cut, generated - cut
        out = dict(out)
        out["text"] = self._decode(out["token_ids"], ends)
        out["generated_text"] = self._decode(out["generated_ids"], generated)
        return out

    # ---- signatures ---------------------------------------------------------------------------
    def _build_signatures(self) -> None:
        greedy = self._generator.generation_graph("greedy")
        sampled = self._generator.generation_graph("sampled")
        zero_i, one_f = tf.constant(0, tf.int32), tf.constant(1.0, tf.float32)

        @tf.function(input_signature=[_IDS, _LENGTHS, _MAX_NEW])
        def generate_ids(token_ids, lengths, max_new_tokens):
            return self._generate(greedy, token_ids, lengths, max_new_tokens, zero_i, one_f,
                                  zero_i, one_f)

        @tf.function(input_signature=[_IDS, _LENGTHS, _MAX_NEW, *_SAMPLING])
        def generate_ids_sampled(token_ids, lengths, max_new_tokens, seed, temperature, top_k,
                                 top_p):
            return self._generate(sampled, token_ids, lengths, max_new_tokens, seed,
                                  temperature, top_k, top_p)

        @tf.function(input_signature=[_IDS, _LENGTHS])
        def score_ids(token_ids, lengths):
            return self._score(token_ids, lengths)

        self.generate_ids, self.generate_ids_sampled, self.score_ids = (
            generate_ids, generate_ids_sampled, score_ids)
        self.generate = self.generate_sampled = self.score = None
        if self.tokenizer is None:
            return

        @tf.function(input_signature=[*text_specs("text"), _MAX_NEW])
        def generate(text, max_new_tokens):
            ids, lengths = self._encode(text)
            return self._with_text(generate_ids(ids, lengths, max_new_tokens))

        @tf.function(input_signature=[*text_specs("text"), _MAX_NEW, *_SAMPLING])
        def generate_sampled(text, max_new_tokens, seed, temperature, top_k, top_p):
            ids, lengths = self._encode(text)
            return self._with_text(generate_ids_sampled(ids, lengths, max_new_tokens, seed,
                                                        temperature, top_k, top_p))

        @tf.function(input_signature=text_specs("text"))
        def score(text):
            ids, lengths = self._encode(text)
            return score_ids(ids, lengths)

        self.generate, self.generate_sampled, self.score = generate, generate_sampled, score

    def serving_signatures(self) -> dict:
        """generate_ids, generate_ids_sampled, score_ids; with a text encoder also generate,
        generate_sampled, score; serving_default = generate (or generate_ids)."""
        out = {"generate_ids": self.generate_ids,
               "generate_ids_sampled": self.generate_ids_sampled, "score_ids": self.score_ids}
        if self.generate is not None:
            out.update(generate=self.generate, generate_sampled=self.generate_sampled,
                       score=self.score)
        out["serving_default"] = out.get("generate", self.generate_ids)
        return out


def gpt_causal_lm_serving_module(model: keras.Model, encoder_path: str | None = None,
                                 bpe_path: str | None = None, bpe_corpus=(),
                                 text_encoder=None, **kwargs) -> GptCausalLmServingModule:
    """The module of a `GptModel`; `encoder_path` + `bpe_path` (the original BPE files) add the
    text signatures through `InGraphBpeEncoder.from_text_encoder` (chunk table from
    `bpe_corpus`, texts like the served ones; needs ftfy and spaCy at export time). kwargs:
    `GptCausalLmServingModule`'s."""
    encoder = None
    if encoder_path and bpe_path:
        from bert_tf.tokenization.gpt_bpe_in_graph import InGraphBpeEncoder

        encoder = InGraphBpeEncoder.from_text_encoder(encoder_path, bpe_path, corpus=bpe_corpus,
                                                      text_encoder=text_encoder)
    elif encoder_path or bpe_path:
        raise ValueError("encoder_path and bpe_path go together")
    return GptCausalLmServingModule(model, encoder, encoder_path, **kwargs)


def export_gpt_causal_lm_savedmodel(model: keras.Model, export_dir: str, version: int = 1,
                                    overwrite: bool = False, **kwargs) -> str:
    """Writes the generate / score export of a `GptModel` as `<export_dir>/<version>/`
    atomically, checked servable first; returns the version folder. kwargs:
    `gpt_causal_lm_serving_module`'s (encoder_path, bpe_path, bpe_corpus, special_token_ids,
    stop_token_ids, add_start_token). Raises ExportError for an existing version without
    `overwrite`."""
    with core_ops_cache_writes(model):  # restores the model's cache writes afterwards
        module = gpt_causal_lm_serving_module(model, **kwargs)
        return save_serving_savedmodel(module, export_dir, version, overwrite=overwrite)
