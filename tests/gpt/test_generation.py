"""GPT-1 generation and scoring on a tiny random model (3 layers, dropout configured, run in eval
mode): the KV cache against full forward passes, the samplers' guarantees, input checks, loading
and saving. The original's references: test_generation_fixtures.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.generation import GenerationInputError, Sampler
from bert_tf.tasks.gpt_causal_lm import GptCausalLM, preset_gpt_config
from tests.gpt.conftest import PROJECT_ROOT

# Every step's logits against a full forward pass of the prefix: the cache only changes the
# order of float32 sums (|logits| < 10 here).
ATOL_STEP_LOGITS = 1e-5
CONFIG = GptConfig(n_vocab=50, n_special=3, n_ctx=24, n_embd=32, n_head=4, n_layer=3,
                   embd_pdrop=0.1, attn_pdrop=0.1, resid_pdrop=0.1, clf_pdrop=0.1)
PROMPTS = [[5, 9, 17], [3, 1, 4, 1, 5, 9, 2], [42], [7, 7, 8, 8, 9, 10, 11, 12, 13, 14, 15]]


def _spread_weights(model: GptCausalLM, seed: int) -> None:
    """Weights far from the N(0, 0.02²) init, so that logits are spread (distinct argmaxes)."""
    rng = np.random.RandomState(seed)
    for name, variable in model.transformer.original_variables():
        shape = tuple(variable.shape)
        if name.endswith("/g"):
            value = 1 + 0.2 * rng.randn(*shape)
        elif name == "model/we":
            value = 0.3 * rng.randn(*shape)
        elif name.endswith("/w"):
            value = rng.randn(*shape) / np.sqrt(shape[1])
        else:
            value = 0.1 * rng.randn(*shape)
        variable.assign(value.astype(np.float32))


@pytest.fixture(scope="module")
def lm() -> GptCausalLM:
    keras.utils.set_random_seed(1)
    model = GptCausalLM(CONFIG)
    _spread_weights(model, 7)
    return model


def _prefix_logits(lm: GptCausalLM, prefixes: list[list[int]]) -> np.ndarray:
    """The next-token logits after each prefix from full forward passes (one batch, each prefix
    padded after its end, which the causal attention ignores): row len-1 of lm_logits, fed with
    one extra token since the original's lm_logits covers h[:, :-1]. -> [n, table_rows]."""
    width = max(len(p) for p in prefixes) + 1
    ids = np.zeros([len(prefixes), width], np.int32)
    for n, p in enumerate(prefixes):
        ids[n, :len(p)] = p
    out = lm.transformer({"token_ids": tf.constant(ids)}, training=False)["lm_logits"].numpy()
    return out[np.arange(len(prefixes)), [len(p) - 1 for p in prefixes]]


def test_kv_cache_step_logits_equal_a_full_forward_of_the_prefix(lm):
    result = lm.generator.generate(PROMPTS, max_new_tokens=8, return_step_logits=True)
    start = min(len(p) for p in PROMPTS)
    prefixes, steps = [], []
    for seq, logits in zip(result.sequences, result.step_logits):
        assert logits.shape[1] == CONFIG.table_rows
        for step in range(len(seq) - start):
            prefixes.append(seq[:start + step])
            steps.append(logits[step])
    expected = _prefix_logits(lm, prefixes)
    print("max |step logits - full forward|", float(np.max(np.abs(np.stack(steps) - expected))))
    np.testing.assert_allclose(np.stack(steps), expected, rtol=0, atol=ATOL_STEP_LOGITS)


def test_greedy_and_beam_are_deterministic(lm):
    first = lm.generate(PROMPTS, max_new_tokens=6)
    assert lm.generate(PROMPTS, max_new_tokens=6) == first
    beam = lm.generate(PROMPTS, max_new_tokens=6, sampler="beam", num_beams=3)
    assert lm.generate(PROMPTS, max_new_tokens=6, sampler="beam", num_beams=3) == beam
    for seq, prompt in zip(first, PROMPTS):
        assert seq[:len(prompt)] == prompt and len(seq) == len(prompt) + 6


def test_batched_greedy_equals_one_prompt_at_a_time(lm):
    batched = lm.generate(PROMPTS, max_new_tokens=7)
    alone = [lm.generate(prompt, max_new_tokens=7) for prompt in PROMPTS]
    assert batched == alone


@pytest.mark.slow
def test_beam_of_width_one_is_greedy(lm):
    greedy = lm.generate(PROMPTS, max_new_tokens=5)
    assert lm.generate(PROMPTS, max_new_tokens=5, sampler="beam", num_beams=1) == greedy


def test_beam_scores_are_sums_of_the_generated_log_probabilities(lm):
    result = lm.generate(PROMPTS, max_new_tokens=6, sampler="beam", num_beams=3,
                         return_details=True)
    beams = result.beams[1]
    assert [b[1] for b in beams] == sorted([b[1] for b in beams], reverse=True)
    for generated, score, _ in beams:
        seq = PROMPTS[1] + generated
        steps = range(len(PROMPTS[1]), len(seq))
        logits = _prefix_logits(lm, [seq[:t] for t in steps])[:, :CONFIG.n_vocab]
        logits = logits.astype(np.float64)
        top = logits.max(1, keepdims=True)
        logp = logits - top - np.log(np.exp(logits - top).sum(1, keepdims=True))
        total = sum(logp[j, seq[t]] for j, t in enumerate(steps))
        assert score == pytest.approx(total, abs=1e-4)
    # with a stop token some beams end early; length_penalty ranks by score / length**penalty
    stop = beams[0][0][1]
    result = lm.generate(PROMPTS, max_new_tokens=6, sampler="beam", num_beams=3,
                         stop_token_ids=[stop], length_penalty=1.0, return_details=True)
    for beams in result.beams:
        for generated, score, normalised in beams:
            assert stop not in generated[:-1]
            assert normalised == pytest.approx(score / len(generated))
        assert [b[2] for b in beams] == sorted([b[2] for b in beams], reverse=True)


@pytest.mark.parametrize("sampler", ["random", "top_k", "top_p"])
def test_seeded_sampling_is_reproducible_across_calls(lm, sampler):
    kwargs = dict(max_new_tokens=10, sampler=sampler, temperature=1.5, top_k=5, top_p=0.8)
    first = lm.generate(PROMPTS, seed=11, **kwargs)
    assert lm.generate(PROMPTS, seed=11, **kwargs) == first
    others = [lm.generate(PROMPTS, seed=s, **kwargs) for s in (12, 13)]
    assert any(o != first for o in others), "different seeds gave the same samples"


def test_top_k_never_leaves_the_k_best(lm):
    k = 3
    for seed in range(3):
        result = lm.generator.generate(PROMPTS, max_new_tokens=10, seed=seed,
                                       sampler=Sampler("top_k", k=k, temperature=10.0),
                                       return_step_logits=True)
        start = min(len(p) for p in PROMPTS)
        for prompt, seq, logits in zip(PROMPTS, result.sequences, result.step_logits):
            for t in range(len(prompt), len(seq)):
                allowed = logits[t - start][:CONFIG.n_vocab]
                assert seq[t] in np.argsort(-allowed)[:k]


def test_no_position_row_is_ever_emitted():
    keras.utils.set_random_seed(2)
    model = GptCausalLM(CONFIG)
    _spread_weights(model, 8)
    we = model.transformer.embedding.we
    table = we.numpy()
    table[CONFIG.n_vocab:] *= 30.0  # special and position rows dominate the full-table softmax
    we.assign(table)
    result = model.generator.generate(PROMPTS, max_new_tokens=12, seed=0,
                                      sampler=Sampler("random", temperature=3.0),
                                      return_step_logits=True)
    full_argmax = np.concatenate([np.argmax(l, axis=-1) for l in result.step_logits])
    assert np.any(full_argmax >= CONFIG.first_position_id), "the test needs attractive rows"
    assert all(t < CONFIG.n_vocab for g in result.generated for t in g)
    with_specials = model.generator.generate(PROMPTS, max_new_tokens=12, seed=0,
                                             sampler=Sampler("random", temperature=3.0),
                                             allow_special=True)
    emitted = [t for g in with_specials.generated for t in g]
    assert all(t < CONFIG.first_position_id for t in emitted)
    assert any(t >= CONFIG.n_vocab for t in emitted), "specials allowed but never drawn"


def test_stop_tokens_end_a_row(lm):
    free = lm.generate(PROMPTS, max_new_tokens=8, strip_prompt=True)
    stop = free[1][2]
    result = lm.generate(PROMPTS, max_new_tokens=8, stop_token_ids=[stop], return_details=True)
    for row, generated, stopped in zip(free, result.generated, result.stopped):
        if stop in row:
            cut = row.index(stop) + 1
            assert generated == row[:cut] and stopped
        else:
            assert generated == row and not stopped


def test_one_trace_per_shape_bucket(lm):
    lm.generate(PROMPTS, max_new_tokens=10, sampler="top_p", seed=1)
    traces = lm.generator.trace_count
    other = [[9, 9, 9, 9], [8], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], [4, 4]]
    lm.generate(other, max_new_tokens=9, sampler="top_p", seed=2, top_p=0.5, temperature=0.7,
                stop_token_ids=[3])
    assert lm.generator.trace_count == traces


@pytest.mark.parametrize("prompts, message", [
    ([[1, 2, CONFIG.n_vocab + CONFIG.n_special]], "id 53 is outside [0, 53)"),
    ([[1, -1]], "id -1 is outside"),
    ([list(range(CONFIG.n_ctx))], f"at most {CONFIG.n_ctx - 1} fit"),
    ([[]], "is empty"),
])
def test_bad_prompts_give_one_clear_line(lm, prompts, message):
    with pytest.raises(GenerationInputError) as raised:
        lm.generate(prompts, max_new_tokens=2)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_score_too_long_or_bad_ids_give_one_clear_line(lm):
    with pytest.raises(GenerationInputError, match="at most 24 fit"):
        lm.score([list(range(CONFIG.n_ctx + 1))])
    with pytest.raises(GenerationInputError, match="outside"):
        lm.score([[1, 2, CONFIG.first_position_id]])


def test_score_is_the_original_lm_loss(lm):
    from bert_tf.gpt.losses import lm_token_losses

    sequences = [PROMPTS[1], PROMPTS[3], [CONFIG.n_vocab] + PROMPTS[0] + [CONFIG.n_vocab + 2]]
    scores = lm.score(sequences)
    for n, seq in enumerate(sequences):
        out = lm.transformer({"token_ids": tf.constant([seq])}, training=False)
        losses = lm_token_losses(out["lm_logits"], tf.constant([seq]))[0].numpy()
        np.testing.assert_allclose(scores.full_table[n], -losses, rtol=0, atol=1e-5)
        logits = out["lm_logits"][0].numpy().astype(np.float64)
        for kind, columns in (("tokens_and_specials", CONFIG.first_position_id),
                              ("tokens_only", CONFIG.n_vocab)):
            part = logits[:, :columns]
            lse = np.log(np.exp(part - part.max(1, keepdims=True)).sum(1)) + part.max(1)
            targets = np.array(seq[1:])
            expected = np.where(targets < columns,
                                part[np.arange(len(targets)), np.minimum(targets, columns - 1)]
                                - lse, -np.inf)
            np.testing.assert_allclose(getattr(scores, kind)[n], expected, rtol=0, atol=1e-5)
        hidden = out["hidden_states"][0, -1].numpy()
        np.testing.assert_allclose(scores.next_token_logits[n],
                                   hidden @ lm.transformer.embedding.we.numpy().T, atol=1e-5)
        assert scores.perplexity[n]["full_table"] == pytest.approx(
            float(np.exp(np.mean(losses))), rel=1e-5)
    assert scores.tokens_only[2][-1] == -np.inf  # the special-token target


def test_save_pretrained_round_trip_keeps_the_special_rows(lm, tmp_path):
    lm.save_pretrained(tmp_path / "lm")
    assert (tmp_path / "lm" / "special_rows.npy").is_file()
    loaded = GptCausalLM.from_pretrained(tmp_path / "lm")
    for (name, a), (_, b) in zip(lm.transformer.original_variables(),
                                 loaded.transformer.original_variables()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    with pytest.raises(UserInputError, match="refusing to overwrite"):
        lm.save_pretrained(tmp_path / "lm")
    os.remove(tmp_path / "lm" / "special_rows.npy")
    drawn = GptCausalLM.from_pretrained(tmp_path / "lm", special_rows_seed=5)
    rows = drawn.transformer.embedding.we.numpy()[CONFIG.n_vocab:CONFIG.first_position_id]
    expected = (np.random.RandomState(5).randn(CONFIG.n_special, CONFIG.n_embd) * 0.02)
    np.testing.assert_array_equal(rows, expected.astype(np.float32))


def test_keras_file_round_trip(lm, tmp_path):
    lm.save(tmp_path / "lm.keras")
    loaded = GptCausalLM.from_pretrained(tmp_path / "lm.keras")
    assert isinstance(loaded, GptCausalLM) and loaded.config == lm.config
    for (name, a), (_, b) in zip(lm.transformer.original_variables(),
                                 loaded.transformer.original_variables()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


def test_preset_is_the_released_model():
    config = preset_gpt_config("openai-gpt")
    assert (config.n_layer, config.n_embd, config.n_head, config.n_ctx, config.n_vocab,
            config.n_special, config.afn) == (12, 768, 12, 512, 40478, 3, "gelu")


def test_unknown_model_is_one_line(tmp_path):
    with pytest.raises(UserInputError) as raised:
        GptCausalLM.from_pretrained(tmp_path / "nothing")
    assert "not a GPT-1 model" in str(raised.value) and "\n" not in str(raised.value)


_SUBPROCESS = """
import json, sys
from bert_tf.tasks.gpt_causal_lm import GptCausalLM
lm = GptCausalLM.from_pretrained(sys.argv[1])
print(json.dumps([lm.generate(json.loads(sys.argv[2]), max_new_tokens=10, sampler=s, seed=5,
                              top_k=4, temperature=1.3) for s in ("random", "top_k", "top_p")]))
"""


@pytest.mark.slow
def test_seeded_sampling_is_reproducible_across_processes(lm, tmp_path):
    lm.save_pretrained(tmp_path / "lm")
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", _SUBPROCESS, str(tmp_path / "lm"),
                               json.dumps(PROMPTS)], capture_output=True, text=True,
                              cwd=PROJECT_ROOT, timeout=600,
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert runs[0] == runs[1]
    here = [lm.generate(PROMPTS, max_new_tokens=10, sampler=s, seed=5, top_k=4, temperature=1.3)
            for s in ("random", "top_k", "top_p")]
    assert runs[0] == here


@pytest.mark.slow  # ~20-40 s of XLA compiling on 2 shared cores
def test_xla_compiled_loop_gives_the_graph_loops_tokens(lm):
    """jit_compile=True (the default, "auto", for models of 10M parameters or more): the same
    greedy tokens and step logits as the plain graph loop, up to float rounding."""
    from bert_tf.gpt.generation import GptGenerator

    xla = GptGenerator(lm.transformer, jit_compile=True)
    assert xla.jit_compile and not lm.generator.jit_compile
    ours = xla.generate(PROMPTS, max_new_tokens=8, return_step_logits=True)
    graph = lm.generator.generate(PROMPTS, max_new_tokens=8, return_step_logits=True)
    assert ours.sequences == graph.sequences
    for a, b in zip(ours.step_logits, graph.step_logits):
        np.testing.assert_allclose(a, b, rtol=0, atol=ATOL_STEP_LOGITS)


@pytest.mark.long  # XLA's HLO passes over a small decode loop: ~10-20 s on 2 shared cores
def test_xla_decode_loop_does_not_copy_the_kv_cache(lm):
    """A decode loop of `GptModel.call_cached` (one token per iteration, the cache carried in the
    loop) compiles to an XLA while body without copies of the key/value cache: each step writes
    its slot in place (with the former [N, n_head, C, head_size] layout XLA copied every cache
    tensor twice per step)."""
    import re

    model, slots = lm.transformer, 16
    cache_shape = model.empty_cache(1, slots)[0][0].shape

    @tf.function(jit_compile=True)
    def decode(prompt):
        cache = model.empty_cache(1, slots)
        hidden, _, cache = model.call_cached(prompt, cache, 0)

        def body(t, token, cache):
            h, table, cache = model.call_cached(token, cache, t)
            logits = tf.matmul(h[:, 0], table[:CONFIG.n_vocab], transpose_b=True)
            return t + 1, tf.argmax(logits, -1, output_type=tf.int32)[:, tf.newaxis], cache

        return tf.while_loop(lambda t, *_: t < slots, body,
                             (tf.shape(prompt)[1], prompt[:, -1:], cache))[1]

    hlo = decode.experimental_get_compiler_ir(tf.constant([[5, 9, 17]], tf.int32))(
        stage="optimized_hlo")
    copied = re.findall(r"= f32\[([0-9,]*)\]\{[0-9,]*\} copy\(", hlo)
    cache_dims = ",".join(str(d) for d in cache_shape)
    assert cache_dims not in copied, f"the cache [{cache_dims}] is copied: {copied}"
