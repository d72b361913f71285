"""GPT-1 as a language model: generation with a key/value cache, and scoring.

`GptGenerator(model)` wraps a `GptModel` (eval mode: every dropout off, whatever its config says)
and gives

* `generate(prompts, ...)`: continuations of token-id prompts (a batch of different lengths);
  samplers greedy, random (temperature), top-k, top-p and beam search (width, length penalty), a
  `seed` for reproducible sampling, stop tokens. Each new token costs one position: the keys and
  values of the earlier positions are kept in a cache (`GptModel.call_cached`), so a step is one
  [batch, 1] forward pass, not a re-run of the prefix. The whole loop (prefill, then one token per
  iteration of a `tf.while_loop`) is one `tf.function`, optionally XLA-compiled, traced once per
  shape bucket (batch size, prompt length rounded up to 16, total length rounded up to 32, the
  sampler's kind) and reused: sampler parameters, seeds, stop tokens and lengths are tensors.
* `score(sequences)`: per-token log-probabilities `log p(x[i+1] | x[:i+1])` and perplexities under
  three softmaxes (below), and the next-token logits after each sequence.
* `generation_graph(kind)`, `score_graph(ids, lengths)`: the same computations as functions of
  tensors of any shape, for serving signatures (`bert_tf.export.gpt_lm`); under
  `core_ops_cache_writes(model)` the cache is written with TF core ops (no XLA-only op).

**Which columns.** The LM head is tied to the whole table `we`: BPE tokens (ids 0..n_vocab-1),
special tokens (n_vocab..n_vocab+n_special-1), then the n_ctx position rows. Generation proposes
BPE tokens only (specials too with `allow_special=True`); a position row is never a candidate.
Scores are given under

* `full_table`: the softmax over every row of the table, exactly the original's LM loss
  (train.py's `sparse_softmax_cross_entropy_with_logits` over `lm_logits`);
* `tokens_and_specials`: the softmax over the first n_vocab + n_special rows (position rows
  excluded);
* `tokens_only`: the softmax over the n_vocab BPE rows only (a special-token target gets -inf).

**The prediction row.** The original's `lm_logits` is `h[:, :-1] @ we^T`: row i predicts token
i+1, so for a sequence of length L the next-token prediction is row L-1, *not* `lm_logits[:, -1]`
(which is row L-2 of a length-L input and predicts the last token itself). This module computes
the next-token logits from the hidden state at position L-1 directly.

**Batches of different lengths.** Prompts are right-padded (as the original pads: attention is
causal, so padding after the real tokens changes nothing before it). The loop starts at the
shortest prompt's length; a row still inside its prompt takes its next prompt token instead of a
sampled one, so every row is continued from its own last token at its own positions (GPT-1's
positions count from 0 for every sequence).

**Sampling.** Random draws are stateless (`tf.random.stateless_categorical` seeded with
`[seed, step]`): the same seed gives the same tokens on every call and in every process, for the
same batch and shape bucket. Without a seed one is drawn from the OS.

**Beam search** (`num_beams` W): from the prompt (score 0), each step expands every live beam by
every allowed token and keeps the W best candidates of the example, ordered by (-score, parent
beam, token id); the score is the sum of the generated tokens' log-probabilities under the
softmax over the allowed columns. A beam that emits a stop token is finished: it keeps its score
and takes no more tokens. The best final beam maximises score / (generated length **
`length_penalty`) (0: the plain sum, the default).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import secrets
from typing import Any, NamedTuple, Sequence

import numpy as np
import tensorflow as tf

from bert_tf.errors import UserInputError

SAMPLERS = ("greedy", "random", "top_k", "top_p", "beam")
PROMPT_BUCKET = 16  # prompt lengths are rounded up to a multiple of this (traces per bucket)
LENGTH_BUCKET = 32  # total (cache) lengths likewise
SCORE_BUCKET = 32
PAD_ID = 0  # what a finished row is fed (never returned: rows are cut at their length)
AUTO_XLA_MIN_PARAMS = 10_000_000  # jit_compile="auto": XLA for models at least this large


class GenerationInputError(UserInputError):
    """Prompts, ids or generation settings the model cannot take (one line)."""


@dataclasses.dataclass(frozen=True)
class Sampler:
    """How the next token is chosen (keras-hub's sampler objects, as one dataclass).

    Attributes:
      kind: "greedy" (argmax), "random" (sample the softmax at `temperature`), "top_k" (sample
        among the k best), "top_p" (sample the smallest set of best tokens whose probability
        reaches p, nucleus sampling) or "beam" (beam search).
      temperature: logits are divided by it before sampling (random, top_k, top_p); > 0.
      k: top_k's k (1 <= k <= the allowed columns).
      p: top_p's p, in (0, 1].
      num_beams: beam search width.
      length_penalty: beam search: the best final beam maximises score / length**length_penalty.
    """

    kind: str = "greedy"
    temperature: float = 1.0
    k: int = 50
    p: float = 0.9
    num_beams: int = 4
    length_penalty: float = 0.0

    def validate(self, n_columns: int) -> None:
        """GenerationInputError naming the setting when a value cannot be used."""
        if self.kind not in SAMPLERS:
            raise GenerationInputError(f"sampler {self.kind!r} is unknown; expected one of "
                                       f"{', '.join(SAMPLERS)}")
        if not self.temperature > 0:
            raise GenerationInputError(f"temperature must be > 0, got {self.temperature}")
        if self.kind == "top_k" and not 1 <= self.k <= n_columns:
            raise GenerationInputError(f"top_k: k must be in [1, {n_columns}], got {self.k}")
        if self.kind == "top_p" and not 0 < self.p <= 1:
            raise GenerationInputError(f"top_p: p must be in (0, 1], got {self.p}")
        if self.kind == "beam" and not 1 <= self.num_beams <= n_columns:
            raise GenerationInputError(f"beam: num_beams must be in [1, {n_columns}], got "
                                       f"{self.num_beams}")


class Generation(NamedTuple):
    """What `GptGenerator.generate` returns (one entry per prompt).

    Attributes:
      sequences: prompt + generated ids (the stop token, when one ended the row, included).
      generated: the generated ids alone.
      stopped: whether a stop token ended the row (else the length limit did).
      beams: beam search only: per prompt, [(generated ids, score, normalised score)] of every
        final beam, best first; None for the other samplers.
      step_logits: with `return_step_logits`: per prompt, float32 [steps, table_rows], the
        full-table next-token logits of each step from the shortest prompt's length on (row j
        predicts the token at position min_length + j); None otherwise.
    """

    sequences: list[list[int]]
    generated: list[list[int]]
    stopped: list[bool]
    beams: list[list[tuple[list[int], float, float]]] | None = None
    step_logits: list[np.ndarray] | None = None


class Scores(NamedTuple):
    """What `GptGenerator.score` returns (one entry per sequence).

    Attributes:
      full_table, tokens_and_specials, tokens_only: per sequence, float64 [L-1]
        `log p(x[i+1] | x[:i+1])` under the softmax over the whole table (the original LM loss),
        over tokens + specials, over BPE tokens only (see the module docstring).
      perplexity: per sequence, {"full_table", "tokens_and_specials", "tokens_only"} ->
        exp(-mean log-probability) (nan for a one-token sequence: nothing is predicted).
      next_token_logits: float32 [n, table_rows]: the logits of the token after each sequence
        (from the hidden state at its last position), every column of the table.
    """

    full_table: list[np.ndarray]
    tokens_and_specials: list[np.ndarray]
    tokens_only: list[np.ndarray]
    perplexity: list[dict[str, float]]
    next_token_logits: np.ndarray


SCORE_KINDS = ("full_table", "tokens_and_specials", "tokens_only")


def _round_up(n: int, multiple: int, cap: int) -> int:
    return min(cap, max(multiple, -(-n // multiple) * multiple))


def resolve_jit_compile(jit_compile: bool | str, model) -> bool:
    """"auto" -> XLA for models of at least `AUTO_XLA_MIN_PARAMS` parameters (where the compiled
    loop is faster: bench/bench_gpt_generate.py), the plain graph for smaller ones (where the
    compile time would dominate); a bool is taken as is."""
    if isinstance(jit_compile, str):
        if jit_compile.lower() in ("true", "1"):
            return True
        if jit_compile.lower() in ("false", "0"):
            return False
        if jit_compile.lower() != "auto":
            raise GenerationInputError(f"jit_compile={jit_compile!r}: expected True, False or "
                                       "'auto'")
        return model.count_params() >= AUTO_XLA_MIN_PARAMS
    return bool(jit_compile)


class GptGenerator:
    """Generation and scoring for one `GptModel` (see the module docstring).

    Args:
      model: a `GptModel` (its classifier, if any, is not used).
      jit_compile: XLA-compile the generation loop: True, False or "auto" (XLA from
        `AUTO_XLA_MIN_PARAMS` parameters on). The same tokens up to float rounding; on a CPU
        XLA compiles for about as long as the plain graph is traced and optimised (~25 s per
        shape bucket at the released model's size) and runs the loop 1.4-1.7x faster there.
    """

    def __init__(self, model, jit_compile: bool | str = "auto"):
        self.model = model
        self.config = model.config
        self.jit_compile = resolve_jit_compile(jit_compile, model)
        self._functions: dict[tuple, Any] = {}
        self.trace_count = 0  # traces of generation loops (tests: once per bucket)
        self._score_fn = None

    # ---- checks ------------------------------------------------------------------------------
    def check_ids(self, sequences: Sequence[Sequence[int]], what: str = "prompt",
                  max_length: int | None = None) -> list[list[int]]:
        """Lists of ints in [0, n_vocab + n_special) no longer than `max_length` (default n_ctx);
        else GenerationInputError naming the sequence and the id."""
        c = self.config
        limit = c.n_ctx if max_length is None else max_length
        out = []
        if isinstance(sequences, (str, bytes)) or not isinstance(sequences, Sequence):
            raise GenerationInputError(f"{what}s: expected a list of token-id lists, got "
                                       f"{type(sequences).__name__}")
        if not sequences:
            raise GenerationInputError(f"no {what}s given")
        for n, seq in enumerate(sequences):
            try:
                ids = [int(i) for i in np.asarray(seq).reshape(-1)]
                if any(int(i) != i for i in np.asarray(seq, dtype=float).reshape(-1)):
                    raise ValueError
            except (TypeError, ValueError):
                raise GenerationInputError(f"{what} {n}: expected a list of integer token ids, got "
                                           f"{str(seq)[:60]!r}") from None
            if not ids:
                raise GenerationInputError(f"{what} {n} is empty; give at least one token (e.g. "
                                           f"the start token {c.n_vocab})")
            bad = [i for i in ids if not 0 <= i < c.n_vocab + c.n_special]
            if bad:
                raise GenerationInputError(
                    f"{what} {n}: id {bad[0]} is outside [0, {c.n_vocab + c.n_special}) (BPE "
                    f"tokens 0..{c.n_vocab - 1}, special tokens {c.n_vocab}.."
                    f"{c.n_vocab + c.n_special - 1}; position rows are not tokens)")
            if len(ids) > limit:
                raise GenerationInputError(
                    f"{what} {n} has {len(ids)} tokens; at most {limit} fit (n_ctx "
                    f"{c.n_ctx}{', one position left for a new token' if limit < c.n_ctx else ''})")
            out.append(ids)
        return out

    # ---- generation --------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int | None = None,
                 max_length: int | None = None, sampler: Sampler | str = "greedy",
                 seed: int | None = None, stop_token_ids: Sequence[int] = (),
                 allow_special: bool = False, return_step_logits: bool = False) -> Generation:
        """Continues each prompt.

        Args:
          prompts: token-id lists (1 <= length < n_ctx; ids in [0, n_vocab + n_special)).
          max_new_tokens: at most this many new tokens per prompt.
          max_length: at most this many tokens in total per sequence (prompt included); the
            tighter of the two limits (and n_ctx) applies; at least one must be given.
          sampler: a `Sampler` or its kind.
          seed: the random samplers' seed (an int); None draws one.
          stop_token_ids: a row ends after emitting one of these (it is kept in the output).
          allow_special: also propose the special tokens (never the position rows).
          return_step_logits: also return every step's full-table logits (for tests).

        Returns:
          a `Generation`.
        """
        c = self.config
        sampler = Sampler(sampler) if isinstance(sampler, str) else sampler
        n_columns = c.n_vocab + (c.n_special if allow_special else 0)
        sampler.validate(n_columns)
        prompts = self.check_ids(prompts, "prompt", c.n_ctx - 1)
        if max_new_tokens is None and max_length is None:
            raise GenerationInputError("give max_new_tokens or max_length (the number of tokens "
                                       "to generate, or the total length)")
        if max_new_tokens is not None and max_new_tokens < 0:
            raise GenerationInputError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if max_length is not None and max_length < 1:
            raise GenerationInputError(f"max_length must be >= 1, got {max_length}")
        stops = sorted({int(s) for s in stop_token_ids})
        bad = [s for s in stops if not 0 <= s < c.n_vocab + c.n_special]
        if bad:
            raise GenerationInputError(f"stop token {bad[0]} is outside [0, "
                                       f"{c.n_vocab + c.n_special})")
        lengths = np.array([len(p) for p in prompts], np.int32)
        ends = np.full_like(lengths, c.n_ctx)
        if max_new_tokens is not None:
            ends = np.minimum(ends, lengths + max_new_tokens)
        if max_length is not None:
            ends = np.minimum(ends, max_length)
        ends = np.maximum(ends, lengths)
        batch = len(prompts)
        prompt_len = _round_up(int(lengths.max()), PROMPT_BUCKET, c.n_ctx)
        cache_len = _round_up(int(ends.max()), LENGTH_BUCKET, c.n_ctx)
        prompt_len = min(prompt_len, cache_len)
        padded = np.zeros([batch, prompt_len], np.int32)
        for i, p in enumerate(prompts):
            padded[i, :len(p)] = p
        is_stop = np.zeros([n_columns], bool)
        for s in stops:
            if s < n_columns:
                is_stop[s] = True
        if seed is None:
            seed = secrets.randbits(31)
        seed_pair = np.array([int(seed) % (2 ** 31), 0], np.int32)
        beam = sampler.kind == "beam"
        key = (batch, prompt_len, cache_len, n_columns, sampler.kind,
               sampler.k if sampler.kind == "top_k" and self.jit_compile else None,
               sampler.num_beams if beam else None, bool(return_step_logits))
        fn = self._functions.get(key)
        if fn is None:
            fn = self._build(key)
            self._functions[key] = fn
        args = dict(prompt_ids=tf.constant(padded), lengths=tf.constant(lengths),
                    ends=tf.constant(ends.astype(np.int32)), is_stop=tf.constant(is_stop),
                    seed=tf.constant(seed_pair), temperature=tf.constant(sampler.temperature,
                                                                         tf.float32),
                    top_k=tf.constant(sampler.k, tf.int32),
                    top_p=tf.constant(sampler.p, tf.float32))
        out = {k: v.numpy() for k, v in fn(**args).items()}
        if beam:
            return self._beam_result(out, prompts, lengths, sampler)
        sequences, generated, stopped = [], [], []
        for i, p in enumerate(prompts):
            end = int(out["final_lengths"][i])
            seq = [int(t) for t in out["ids"][i, :end]]
            sequences.append(seq)
            generated.append(seq[len(p):])
            stopped.append(bool(out["stopped"][i]))
        step_logits = None
        if return_step_logits:
            steps = int(out["steps"])
            step_logits = [out["step_logits"][:steps, i] for i in range(batch)]
        return Generation(sequences, generated, stopped, None, step_logits)

    def generation_graph(self, sampler_kind: str, n_columns: int | None = None):
        """The generation loop as a function of tensors for any batch size and lengths: the loop
        `generate` runs, without its shape buckets and checks, to trace into a serving
        signature (plain graph or XLA).

        Args:
          sampler_kind: "greedy", "random", "top_k", "top_p", or "sampled": chosen per call by
            the parameters (top_k > 0: top_k; else top_p < 1: top_p; else random), so that one
            traced loop serves every sampler but beam search.
          n_columns: the columns proposed (default n_vocab: BPE tokens only; n_vocab +
            n_special lets specials through; never more).

        Returns run(prompt_ids int32 [B, P] right-padded, lengths int32 [B] (1 <= length <= P),
        ends int32 [B] (each row's final length at most: length <= end <= n_ctx), is_stop bool
        [n_columns], seed int32 [2], temperature float32 [], top_k int32 [] (<= n_columns),
        top_p float32 []) -> {"ids": int32 [B, C], C = max(max(ends), P), row i's sequence
        being ids[i, :final_lengths[i]]; "final_lengths" int32 [B]; "stopped" bool [B];
        "steps" int32 []}. With the same seed and batch, the same tokens as `generate`.
        """
        c = self.config
        n_columns = c.n_vocab if n_columns is None else int(n_columns)
        if not c.n_vocab <= n_columns <= c.n_vocab + c.n_special:
            raise GenerationInputError(f"n_columns must be in [{c.n_vocab}, "
                                       f"{c.n_vocab + c.n_special}], got {n_columns}")
        if sampler_kind not in ("greedy", "random", "top_k", "top_p", "sampled"):
            raise GenerationInputError(f"sampler_kind {sampler_kind!r}: expected greedy, random, "
                                       "top_k, top_p or sampled (beam search has no graph here)")
        return self._sampling_loop(None, None, None, n_columns, sampler_kind, None, False)

    def _beam_result(self, out, prompts, lengths, sampler: Sampler) -> Generation:
        width = sampler.num_beams
        sequences, generated, stopped, beams = [], [], [], []
        for i, p in enumerate(prompts):
            found = []
            for w in range(width):
                row = i * width + w
                n = int(out["gen_lengths"][i, w])
                gen = [int(t) for t in out["ids"][row, len(p):len(p) + n]]
                score = float(out["scores"][i, w])
                norm = score / (max(n, 1) ** sampler.length_penalty) if sampler.length_penalty \
                    else score
                found.append((gen, score, norm, bool(out["finished"][i, w]), w))
            found.sort(key=lambda b: (-b[2], b[4]))
            best = found[0]
            sequences.append(list(p) + best[0])
            generated.append(best[0])
            stopped.append(best[3])
            beams.append([(g, s, n) for g, s, n, _, _ in found])
        return Generation(sequences, generated, stopped, beams, None)

    def _build(self, key: tuple):
        batch, prompt_len, cache_len, n_columns, kind, static_k, width, step_logits = key
        model = self.model
        if kind == "beam":
            body = self._beam_loop(batch, prompt_len, cache_len, n_columns, width)
        else:
            body = self._sampling_loop(batch, prompt_len, cache_len, n_columns, kind, static_k,
                                       step_logits)
        spec = dict(prompt_ids=tf.TensorSpec([batch, prompt_len], tf.int32),
                    lengths=tf.TensorSpec([batch], tf.int32),
                    ends=tf.TensorSpec([batch], tf.int32),
                    is_stop=tf.TensorSpec([n_columns], tf.bool),
                    seed=tf.TensorSpec([2], tf.int32), temperature=tf.TensorSpec([], tf.float32),
                    top_k=tf.TensorSpec([], tf.int32), top_p=tf.TensorSpec([], tf.float32))

        def traced(**kwargs):
            self.trace_count += 1
            return body(**kwargs)

        del model
        return tf.function(traced, input_signature=None, jit_compile=self.jit_compile,
                           reduce_retracing=False).get_concrete_function(**spec)

    def _choose(self, logits, kind, static_k, seed, step, temperature, top_k, top_p):
        """logits float32 [N, V] -> int32 [N] by the sampler `kind`."""
        if kind == "greedy":
            return tf.argmax(logits, -1, output_type=tf.int32)
        if kind == "sampled":  # the sampler chosen per call by its parameters
            branch = tf.where(top_k > 0, 1, tf.where(top_p < 1.0, 2, 0))
            return tf.switch_case(branch, [
                lambda: self._choose(logits, "random", None, seed, step, temperature, top_k,
                                     top_p),
                lambda: self._choose(logits, "top_k", None, seed, step, temperature, top_k,
                                     top_p),
                lambda: self._choose(logits, "top_p", None, seed, step, temperature, top_k,
                                     top_p)])
        step_seed = tf.stack([seed[0], seed[1] + step])
        logits = logits / temperature
        if kind == "random":
            return tf.cast(tf.random.stateless_categorical(logits, 1, step_seed)[:, 0], tf.int32)
        if kind == "top_k":
            values, indices = tf.math.top_k(logits, k=static_k if static_k else top_k)
            pick = tf.random.stateless_categorical(values, 1, step_seed)
            return tf.gather(indices, tf.cast(pick, tf.int32), batch_dims=1)[:, 0]
        # top_p: the best tokens whose probabilities, best first, reach p (the first always kept)
        values, indices = tf.math.top_k(logits, k=tf.shape(logits)[-1])
        probs = tf.nn.softmax(values)
        before = tf.cumsum(probs, axis=-1, exclusive=True)
        values = tf.where(before < top_p, values, tf.constant(-np.inf, values.dtype))
        pick = tf.random.stateless_categorical(values, 1, step_seed)
        return tf.gather(indices, tf.cast(pick, tf.int32), batch_dims=1)[:, 0]

    def _sampling_loop(self, static_batch, static_prompt_len, static_cache_len, n_columns, kind,
                       static_k, with_step_logits):
        """The loop for static shapes (`generate`'s buckets) or, with None, any shapes (the
        cache then has max(ends, prompt width) slots)."""
        model = self.model

        def run(prompt_ids, lengths, ends, is_stop, seed, temperature, top_k, top_p):
            batch = static_batch if static_batch is not None else tf.shape(prompt_ids)[0]
            prompt_len = (static_prompt_len if static_prompt_len is not None
                          else tf.shape(prompt_ids)[1])
            cache_len = (static_cache_len if static_cache_len is not None
                         else tf.maximum(tf.reduce_max(ends), prompt_len))
            cache = model.empty_cache(batch, cache_len)
            hidden, table, cache = model.call_cached(prompt_ids, cache, 0)
            columns = table[:n_columns]
            start = tf.reduce_min(lengths)
            h_prev = tf.gather(hidden, tf.fill([batch], start - 1), batch_dims=1)
            ids = tf.pad(prompt_ids, [[0, 0], [0, cache_len - prompt_len]])
            done = lengths >= ends
            stopped = tf.zeros([batch], tf.bool)
            final_lengths = tf.where(done, lengths, ends)
            end = tf.reduce_max(ends)
            logits_ta = tf.TensorArray(tf.float32, size=cache_len, element_shape=(
                [batch, table.shape[0]] if with_step_logits else [0]))

            def cond(t, h_prev, cache, ids, done, stopped, final_lengths, logits_ta):
                return tf.logical_and(t < end, tf.logical_not(tf.reduce_all(done)))

            def body(t, h_prev, cache, ids, done, stopped, final_lengths, logits_ta):
                logits = tf.matmul(h_prev, columns, transpose_b=True)
                if with_step_logits:
                    logits_ta = logits_ta.write(t - start, tf.matmul(h_prev, table,
                                                                     transpose_b=True))
                chosen = self._choose(logits, kind, static_k, seed, t, temperature, top_k,
                                      top_p)
                in_prompt = t < lengths
                token = tf.where(in_prompt, ids[:, t],
                                 tf.where(done, tf.constant(PAD_ID, tf.int32), chosen))
                ids = tf.tensor_scatter_nd_update(
                    ids, tf.stack([tf.range(batch), tf.fill([batch], t)], axis=1), token)
                generating = tf.logical_and(tf.logical_not(in_prompt), tf.logical_not(done))
                hit_stop = tf.logical_and(generating, tf.gather(is_stop, tf.minimum(
                    token, n_columns - 1)))
                stopped = tf.logical_or(stopped, hit_stop)
                final_lengths = tf.where(hit_stop, t + 1, final_lengths)
                done = tf.logical_or(done, tf.logical_or(hit_stop, tf.logical_and(
                    generating, t + 1 >= ends)))
                h, _, cache = model.call_cached(token[:, tf.newaxis], cache, t)
                return t + 1, h[:, 0], cache, ids, done, stopped, final_lengths, logits_ta

            t, _, _, ids, _, stopped, final_lengths, logits_ta = tf.while_loop(
                cond, body, (start, h_prev, cache, ids, done, stopped, final_lengths, logits_ta),
                maximum_iterations=cache_len)
            out = {"ids": ids, "final_lengths": final_lengths, "stopped": stopped,
                   "steps": t - start}
            if with_step_logits:
                out["step_logits"] = logits_ta.stack()
            return out

        return run

    def _beam_loop(self, batch, prompt_len, cache_len, n_columns, width):
        model = self.model
        rows = batch * width
        n_head = self.config.n_head
        neg_inf = tf.constant(-np.inf, tf.float32)

        def run(prompt_ids, lengths, ends, is_stop, seed, temperature, top_k, top_p):
            del seed, temperature, top_k, top_p
            cache = model.empty_cache(batch, cache_len)
            hidden, table, cache = model.call_cached(prompt_ids, cache, 0)
            columns = table[:n_columns]
            start = tf.reduce_min(lengths)
            h_prev = tf.gather(hidden, tf.fill([batch], start - 1), batch_dims=1)
            # every example's W beams start as copies of its prompt; only beam 0 is live (the
            # others' -inf scores keep them out of the first expansion)
            h_prev = tf.repeat(h_prev, width, axis=0)
            cache = _gather_cache_rows(cache, tf.repeat(tf.range(batch), width), n_head)
            ids = tf.repeat(tf.pad(prompt_ids, [[0, 0], [0, cache_len - prompt_len]]), width,
                            axis=0)
            scores = tf.tile(tf.concat([[0.0], tf.fill([width - 1], neg_inf)], 0)[tf.newaxis],
                             [batch, 1])
            finished = tf.zeros([batch, width], tf.bool)
            gen_lengths = tf.zeros([batch, width], tf.int32)
            end = tf.reduce_max(ends)
            base = tf.range(batch)[:, tf.newaxis] * width  # [B, 1]

            def cond(t, h_prev, cache, ids, scores, finished, gen_lengths):
                return tf.logical_and(t < end, tf.logical_not(tf.reduce_all(
                    tf.logical_or(finished, (t >= ends)[:, tf.newaxis]))))

            def body(t, h_prev, cache, ids, scores, finished, gen_lengths):
                logp = tf.nn.log_softmax(tf.matmul(h_prev, columns, transpose_b=True))
                logp = tf.reshape(logp, [batch, width, n_columns])
                # a finished beam continues with PAD_ID at no cost, and with nothing else
                frozen = tf.one_hot(PAD_ID, n_columns, on_value=0.0, off_value=-np.inf)
                logp = tf.where(finished[..., tf.newaxis], frozen, logp)
                candidates = tf.reshape(scores[..., tf.newaxis] + logp, [batch, -1])
                best, index = tf.math.top_k(candidates, k=width)  # ties: lower index first
                parent, token = index // n_columns, index % n_columns
                expanding = tf.logical_and(t >= lengths, t < ends)  # [B]
                keep = tf.tile(tf.range(width)[tf.newaxis], [batch, 1])
                parent = tf.where(expanding[:, tf.newaxis], parent, keep)
                new_scores = tf.where(expanding[:, tf.newaxis], best, scores)
                gather_rows = tf.reshape(base + parent, [-1])
                ids = tf.gather(ids, gather_rows)
                cache = _gather_cache_rows(cache, gather_rows, n_head)
                was_finished = tf.gather(finished, parent, batch_dims=1)
                prev_lengths = tf.gather(gen_lengths, parent, batch_dims=1)
                prompt_token = tf.reshape(ids[:, t], [batch, width])
                in_prompt = (t < lengths)[:, tf.newaxis]
                token = tf.where(in_prompt, prompt_token, tf.where(
                    tf.logical_or(was_finished, tf.logical_not(expanding[:, tf.newaxis])),
                    tf.constant(PAD_ID, tf.int32), token))
                flat_token = tf.reshape(token, [-1])
                ids = tf.tensor_scatter_nd_update(
                    ids, tf.stack([tf.range(rows), tf.fill([rows], t)], axis=1), flat_token)
                generating = tf.logical_and(expanding[:, tf.newaxis],
                                            tf.logical_not(was_finished))
                gen_lengths = prev_lengths + tf.cast(generating, tf.int32)
                hit_stop = tf.logical_and(generating, tf.gather(is_stop, tf.minimum(
                    token, n_columns - 1)))
                finished = tf.logical_or(was_finished, hit_stop)
                h, _, cache = model.call_cached(flat_token[:, tf.newaxis], cache, t)
                return t + 1, h[:, 0], cache, ids, new_scores, finished, gen_lengths

            _, _, _, ids, scores, finished, gen_lengths = tf.while_loop(
                cond, body, (start, h_prev, cache, ids, scores, finished, gen_lengths),
                maximum_iterations=cache_len)
            return {"ids": ids, "scores": scores, "finished": finished,
                    "gen_lengths": gen_lengths}

        return run

    # ---- scoring -----------------------------------------------------------------------------
    def score(self, sequences: Sequence[Sequence[int]], batch_size: int = 4) -> Scores:
        """Per-token log-probabilities and perplexities of whole sequences (see `Scores`).

        Args:
          sequences: token-id lists (1 <= length <= n_ctx; ids in [0, n_vocab + n_special)).
            Nothing is added: x[0] is not scored (prepend the start token to score it).
          batch_size: sequences per forward pass.
        """
        c = self.config
        sequences = self.check_ids(sequences, "sequence")
        if self._score_fn is None:
            self._score_fn = self._build_score()
        per_kind = {k: [] for k in SCORE_KINDS}
        next_logits = []
        for begin in range(0, len(sequences), max(1, int(batch_size))):
            chunk = sequences[begin:begin + batch_size]
            width = _round_up(max(len(s) for s in chunk), SCORE_BUCKET, c.n_ctx)
            padded = np.zeros([len(chunk), width], np.int32)
            for i, s in enumerate(chunk):
                padded[i, :len(s)] = s
            lengths = np.array([len(s) for s in chunk], np.int32)
            out = self._score_fn(tf.constant(padded), tf.constant(lengths))
            out = {k: v.numpy() for k, v in out.items()}
            for i, s in enumerate(chunk):
                for kind in SCORE_KINDS:
                    per_kind[kind].append(out[kind][i, :len(s) - 1].astype(np.float64))
            next_logits.append(out["next_token_logits"])
        perplexity = []
        for i in range(len(sequences)):
            perplexity.append({kind: (math.exp(-float(np.mean(per_kind[kind][i])))
                                      if len(per_kind[kind][i]) else math.nan)
                               for kind in SCORE_KINDS})
        return Scores(per_kind["full_table"], per_kind["tokens_and_specials"],
                      per_kind["tokens_only"], perplexity, np.concatenate(next_logits, 0))

    def _build_score(self):
        return tf.function(self.score_graph, input_signature=[
            tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32)])

    def score_graph(self, token_ids: tf.Tensor, lengths: tf.Tensor) -> dict[str, tf.Tensor]:
        """`score`'s computation on tensors (to trace into a serving signature).

        Args: token_ids int32 [B, S] right-padded; lengths int32 [B] (1 <= length <= S <= n_ctx).

        Returns {"full_table", "tokens_and_specials", "tokens_only"}: float32 [B, S-1], column
        i = log p(token i+1 | tokens 0..i) under that softmax (columns >= length-1 are padding:
        ignore them); "next_token_logits": float32 [B, table_rows] after each row's last token.
        """
        model, c = self.model, self.config
        hidden = model({"token_ids": token_ids}, training=False,
                       with_lm_logits=False)["hidden_states"]
        table = tf.convert_to_tensor(model.embedding.we)
        h = hidden[:, :-1]  # position i predicts token i+1 (the original's h[:, :-1])
        targets = token_ids[:, 1:]
        # The three column groups' log-sum-exps, each from its own matmul (no [B, S, rows]
        # copies), combined: tokens+specials = logaddexp(tokens, specials), full = that and
        # the position rows.
        groups = (table[:c.n_vocab], table[c.n_vocab:c.first_position_id],
                  table[c.first_position_id:])
        lse = [tf.reduce_logsumexp(tf.matmul(h, g, transpose_b=True), axis=-1)
               if g.shape[0] != 0 else tf.fill(tf.shape(h)[:-1], -np.inf)
               for g in groups]
        target_logits = tf.reduce_sum(h * tf.gather(table, targets), axis=-1)
        lse_tokens_specials = tf.experimental.numpy.logaddexp(lse[0], lse[1])
        lse_full = tf.experimental.numpy.logaddexp(lse_tokens_specials, lse[2])
        neg_inf = tf.constant(-np.inf, hidden.dtype)
        out = {"full_table": target_logits - lse_full,
               "tokens_and_specials": tf.where(targets < c.first_position_id,
                                               target_logits - lse_tokens_specials, neg_inf),
               "tokens_only": tf.where(targets < c.n_vocab, target_logits - lse[0], neg_inf)}
        last = tf.gather(hidden, lengths - 1, batch_dims=1)
        out["next_token_logits"] = tf.matmul(last, table, transpose_b=True)
        return out


def _gather_cache_rows(cache, examples: tf.Tensor, n_head: int) -> list:
    """The KV cache (`GptModel.empty_cache`'s layout: per block (keys, values), each
    [examples·n_head, C, head_size]) of the given examples, int32 [M] -> [M·n_head, C, head_size]
    each (beam search: copies and reorders of beams)."""
    rows = tf.reshape(examples[:, tf.newaxis] * n_head + tf.range(n_head)[tf.newaxis], [-1])
    return [tuple(tf.gather(c, rows) for c in kv) for kv in cache]


@contextlib.contextmanager
def core_ops_cache_writes(model):
    """While active, `model.call_cached` writes its key/value cache with TF core ops only
    (`bert_tf.gpt.attention.select_cache_write`) instead of XLA's dynamic-update-slice: for
    tracing a generation loop into a SavedModel (servers without XLA cannot run
    `XlaDynamicUpdateSlice`). The same numbers; restored on exit."""
    attentions = [block.attn for block in model.blocks]
    before = [a.cache_write for a in attentions]
    for a in attentions:
        a.cache_write = "select"
    try:
        yield model
    finally:
        for a, value in zip(attentions, before):
            a.cache_write = value
