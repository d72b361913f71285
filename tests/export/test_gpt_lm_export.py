"""GPT-1's generate / score SavedModel (`bert_tf.export.gpt_lm`, --model_type=gpt_causal_lm,
`GptCausalLM.export`).

Default set: the pieces (core-op cache writes = XLA's dynamic-update-slice; the shape-free
generation loop gives `generate`'s tokens; the serving check refuses XLA-only ops; the export
tool's flags). Long: one export of the original GPT-1 fixture model ($BERT_TF_GPT_FIXTURES,
weights from its config.json + model/) with text signatures (the fixture's BPE files cut to its
n_vocab entries), checked servable, run through TF's loader and through the TF C-API loader TF
Serving uses: greedy ids equal generation/greedy.json's and `GptCausalLM.generate`'s, sampled
ids equal Python's with the same seed, texts equal Python's, scores equal `GptCausalLM.score`
within 1e-5 and generation/scores.json's within its README's 2e-5 (sums 1e-4). Prompts and
sizes are read from the fixture files.
"""
from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from tests.gpt.conftest import GPT_FIXTURES

ATOL = 1e-5  # export vs Python in this process: the same graph up to reduction order
ATOL_LOGPROB, ATOL_LOGPROB_SUM = 2e-5, 1e-4  # vs the original's references (their README)
TEXTS = ["The man went to the store and", "She said that it was not", "a",
         "We don't know why, but the results were good."]


def _tiny_model(seed=0):
    import keras

    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.model import GptModel
    keras.utils.set_random_seed(seed)
    return GptModel(GptConfig(n_vocab=30, n_special=3, n_ctx=16, n_embd=16, n_head=2,
                              n_layer=2), classifier=False)


# ---- default set -----------------------------------------------------------------------------
@pytest.mark.parametrize("index, width", [(0, 5), (3, 1), (6, 2)])
def test_core_op_cache_write_equals_dynamic_update_slice(index, width):
    import keras

    from bert_tf.gpt.attention import select_cache_write
    rng = np.random.default_rng(index)
    cache = rng.normal(size=[2, 3, 8, 4]).astype(np.float32)
    new = rng.normal(size=[2, 3, width, 4]).astype(np.float32)
    expected = keras.ops.slice_update(cache, [0, 0, index, 0], new)
    np.testing.assert_array_equal(select_cache_write(cache, new, index), expected)


def test_generation_graph_takes_any_shapes_and_gives_generate_tokens():
    from bert_tf.gpt.generation import GptGenerator, Sampler, core_ops_cache_writes
    model = _tiny_model()
    generator = GptGenerator(model, jit_compile=False)
    prompts = [[1, 2, 3, 4, 5], [6], [7, 8]]
    expected = generator.generate(prompts, max_new_tokens=6)
    sampled = generator.generate(prompts, max_new_tokens=6, sampler=Sampler("top_k", k=7),
                                 seed=11)
    with core_ops_cache_writes(model):
        assert {b.attn.cache_write for b in model.blocks} == {"select"}
        loop = tf.function(generator.generation_graph("sampled"))
        padded = np.zeros([3, 5], np.int32)
        for i, p in enumerate(prompts):
            padded[i, :len(p)] = p
        lengths = np.array([len(p) for p in prompts], np.int32)
        args = dict(prompt_ids=padded, lengths=lengths, ends=lengths + 6,
                    is_stop=np.zeros([30], bool), seed=np.array([11, 0], np.int32),
                    temperature=np.float32(1.0), top_p=np.float32(1.0))
        greedy_out = tf.function(generator.generation_graph("greedy"))(
            **args, top_k=np.int32(0))
        top_k_out = loop(**args, top_k=np.int32(7))
    assert {b.attn.cache_write for b in model.blocks} == {"dynamic_update_slice"}
    for out, want in ((greedy_out, expected), (top_k_out, sampled)):
        got = [list(out["ids"][i, :n]) for i, n in enumerate(out["final_lengths"].numpy())]
        assert got == want.sequences


def test_serving_check_refuses_xla_only_ops(tmp_path):
    import keras

    from bert_tf.export.serving_compat import check_serving_compatibility

    class Probe(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([2, 4], tf.float32),
                                      tf.TensorSpec([], tf.int32)])
        def f(self, x, i):
            return {"y": keras.ops.slice_update(x, [0, i], tf.ones([2, 1]))}

    probe = Probe()
    tf.saved_model.save(probe, str(tmp_path / "m"), signatures={"serving_default": probe.f})
    report = check_serving_compatibility(tmp_path / "m")
    assert any(p.startswith("op XlaDynamicUpdateSlice runs only through XLA")
               for p in report.problems), report.problems


@pytest.mark.parametrize("changes, message", [
    ({"gpt_task": "classification"}, "--gpt_task does not apply to --model_type=gpt_causal_lm"),
    ({"vocab_file": "VOCAB"}, "--vocab_file does not apply to --model_type=gpt_causal_lm"),
    ({"encoder_path": "ENCODER"}, "--encoder_path and --bpe_path go together"),
    ({"bpe_corpus_file": "ENCODER"}, "--bpe_corpus_file goes with --encoder_path"),
    ({"init_checkpoint": None}, "--init_checkpoint is required for --model_type=gpt_causal_lm"),
    ({"init_checkpoint": "TMP"}, "neither an OpenAI-layout GPT-1 params folder"),
])
def test_export_flags_name_the_flag(tmp_path, changes, message):
    from bert_tf.errors import UserInputError
    from bert_tf.export.exporter import ExportOptions, validate_options
    config = tmp_path / "gpt_config.json"
    _tiny_model().config.to_json_file(config)
    (tmp_path / "encoder.json").write_text("{}")
    places = {"VOCAB": str(config), "ENCODER": str(tmp_path / "encoder.json"),
              "TMP": str(tmp_path)}
    flags = {"model_type": "gpt_causal_lm", "export_dir": str(tmp_path / "out"),
             "gpt_config_file": str(config), "init_checkpoint": str(tmp_path)}
    flags.update({k: places.get(v, v) for k, v in changes.items()})
    with pytest.raises(UserInputError) as raised:
        validate_options(ExportOptions(**{k: v for k, v in flags.items() if v is not None}))
    assert message in str(raised.value) and "\n" not in str(raised.value)


# ---- long: the fixture model's export ------------------------------------------------------
def _fixture_json(name):
    path = GPT_FIXTURES / "generation" / name
    if not path.is_file():
        pytest.skip(f"needs {path} (the original GPT-1 generation references)")
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(GptCausalLM with a tokenizer, the export's version folder, the loaded SavedModel)."""
    if not (GPT_FIXTURES / "config.json").is_file() or not (GPT_FIXTURES / "bpe").is_dir():
        pytest.skip(f"needs {GPT_FIXTURES} with config.json, model/ and bpe/ (the original "
                    "GPT-1 fixtures: ../shared/fixtures/original_gpt or $BERT_TF_GPT_FIXTURES)")
    from bert_tf.tasks.gpt_causal_lm import GptCausalLM
    root = tmp_path_factory.mktemp("gpt_causal_lm")
    lm = GptCausalLM.from_pretrained(GPT_FIXTURES, with_tokenizer=False, jit_compile=False)
    # The fixture model's vocabulary: the released encoder's first n_vocab entries (pieces
    # past it map to id 0, in Python as in the graph), the released merges.
    encoder = json.loads((GPT_FIXTURES / "bpe" / "encoder_bpe_40000.json").read_text("utf-8"))
    small = {k: v for k, v in encoder.items() if v < lm.config.n_vocab}
    (root / "encoder.json").write_text(json.dumps(small), encoding="utf-8")
    lm.set_tokenizer(root / "encoder.json", GPT_FIXTURES / "bpe" / "vocab_40000.bpe")
    path = lm.export(root / "export", bpe_corpus=TEXTS)
    assert {b.attn.cache_write for b in lm.transformer.blocks} == {"dynamic_update_slice"}
    return lm, path, tf.saved_model.load(path)


def _padded(rows):
    width = max(len(r) for r in rows)
    ids = np.zeros([len(rows), width], np.int32)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
    return ids, np.array([len(r) for r in rows], np.int32)


def _rows(ids, lengths):
    return [list(map(int, row[:n])) for row, n in zip(np.asarray(ids), np.asarray(lengths))]


@pytest.mark.long
@pytest.mark.gpt_fixtures
def test_export_is_servable_with_every_signature(exported):
    from bert_tf.export.serving_compat import check_serving_compatibility
    _, path, _ = exported
    report = check_serving_compatibility(path)
    assert report.ok, report.problems
    assert not [op for op in report.core_ops if op.startswith("Xla")]
    assert set(report.signatures) - {"__saved_model_init_op"} == {
        "serving_default", "generate", "generate_sampled", "score", "generate_ids",
        "generate_ids_sampled", "score_ids"}
    assert report.signatures["generate_sampled"]["inputs"] == [
        "max_new_tokens", "seed", "temperature", "text", "top_k", "top_p"]


@pytest.mark.long
@pytest.mark.gpt_fixtures
def test_greedy_ids_are_the_originals_and_texts_are_pythons(exported):
    lm, _, saved = exported
    greedy = _fixture_json("greedy.json")
    by_budget = {}
    for prompt in greedy["prompts"]:
        by_budget.setdefault(prompt["max_new"], []).append(prompt)
    for max_new, prompts in by_budget.items():  # batched prompts of different lengths
        ids, lengths = _padded([p["prompt"] for p in prompts])
        out = saved.signatures["generate_ids"](token_ids=ids, lengths=lengths,
                                               max_new_tokens=np.int32(max_new))
        assert _rows(out["token_ids"], out["lengths"]) == [p["full_sequence"] for p in prompts]
        assert _rows(out["generated_ids"], out["num_generated"]) == [
            p["generated"] for p in prompts]
    out = saved.signatures["generate"](text=tf.constant(TEXTS), max_new_tokens=np.int32(7))
    assert [t.decode() for t in out["text"].numpy()] == lm.generate(TEXTS, max_new_tokens=7)
    assert [t.decode() for t in out["generated_text"].numpy()] == lm.generate(
        TEXTS, max_new_tokens=7, strip_prompt=True)
    assert _rows(out["token_ids"], out["lengths"]) == lm.generate(lm.encode(TEXTS),
                                                                  max_new_tokens=7)


@pytest.mark.long
@pytest.mark.gpt_fixtures
@pytest.mark.parametrize("top_k, top_p, sampler", [(0, 1.0, "random"), (5, 1.0, "top_k"),
                                                   (0, 0.8, "top_p")])
def test_sampled_ids_are_pythons_with_the_same_seed(exported, top_k, top_p, sampler):
    lm, _, saved = exported
    prompts = lm.encode(TEXTS)
    ids, lengths = _padded(prompts)
    inputs = dict(max_new_tokens=np.int32(6), seed=np.int32(1234), temperature=np.float32(0.9),
                  top_k=np.int32(top_k), top_p=np.float32(top_p))
    out = saved.signatures["generate_ids_sampled"](token_ids=ids, lengths=lengths, **inputs)
    expected = lm.generate(prompts, max_new_tokens=6, sampler=sampler, temperature=0.9,
                           top_k=top_k or 50, top_p=top_p, seed=1234)
    assert _rows(out["token_ids"], out["lengths"]) == expected
    text = saved.signatures["generate_sampled"](text=tf.constant(TEXTS), **inputs)
    assert _rows(text["token_ids"], text["lengths"]) == expected


@pytest.mark.long
@pytest.mark.gpt_fixtures
def test_scores_are_pythons_and_the_originals(exported):
    lm, _, saved = exported
    out = saved.signatures["score"](text=tf.constant(TEXTS))
    ours = lm.score(TEXTS)
    kinds = ("full_table", "tokens_and_specials", "tokens_only")
    for n, length in enumerate(out["lengths"].numpy()):
        for kind in kinds:
            expected = getattr(ours, kind)[n]
            np.testing.assert_allclose(out[f"log_probs_{kind}"][n, :length - 1], expected,
                                       rtol=0, atol=ATOL)
            assert float(out[f"total_{kind}"][n]) == pytest.approx(np.sum(expected), abs=ATOL)
            if length > 1:
                assert float(out[f"perplexity_{kind}"][n]) == pytest.approx(
                    ours.perplexity[n][kind], rel=1e-5)
    scores = _fixture_json("scores.json")
    ids, lengths = _padded([s["tokens"] for s in scores["sequences"]])
    out = saved.signatures["score_ids"](token_ids=ids, lengths=lengths)
    for n, expected in enumerate(scores["sequences"]):
        for kind, key in (("full_table", "full_table"),
                          ("tokens_and_specials", "vocab_plus_special")):
            np.testing.assert_allclose(out[f"log_probs_{kind}"][n, :lengths[n] - 1],
                                       expected[key]["per_token_logprobs"], rtol=0,
                                       atol=ATOL_LOGPROB)
            assert float(out[f"total_{kind}"][n]) == pytest.approx(expected[key]["sum"],
                                                                   abs=ATOL_LOGPROB_SUM)


@pytest.mark.long
@pytest.mark.gpt_fixtures
def test_bad_requests_fail_with_one_line(exported):
    lm, _, saved = exported
    c = lm.config
    cases = [
        (lambda: saved.signatures["generate_ids"](
            token_ids=np.array([[1, 2, c.n_vocab + c.n_special]], np.int32),
            lengths=np.array([3], np.int32), max_new_tokens=np.int32(2)),
         f"prompt 0: id {c.n_vocab + c.n_special} is outside [0, {c.n_vocab + c.n_special})"),
        (lambda: saved.signatures["generate_ids"](
            token_ids=np.ones([2, c.n_ctx], np.int32), lengths=np.array([2, c.n_ctx], np.int32),
            max_new_tokens=np.int32(2)),
         f"prompt 1 has {c.n_ctx} tokens; expected 1 to {c.n_ctx - 1} (n_ctx {c.n_ctx}, one "
         "position left for a new token)"),
        (lambda: saved.signatures["generate"](text=tf.constant(["fine", " ".join(["word"] *
                                                                                 c.n_ctx)]),
                                              max_new_tokens=np.int32(1)),
         f"expected 1 to {c.n_ctx - 1}"),
        (lambda: saved.signatures["score"](text=tf.constant(["a", ""])),
         f"sequence 1 has 0 tokens; expected 1 to {c.n_ctx} (n_ctx {c.n_ctx})"),
        (lambda: saved.signatures["generate"](text=tf.constant([""]),
                                              max_new_tokens=np.int32(1)),
         "prompt 0 has 0 tokens"),
        (lambda: saved.signatures["generate_ids"](
            token_ids=np.ones([1, 2], np.int32), lengths=np.array([2], np.int32),
            max_new_tokens=np.int32(-1)), "max_new_tokens must be >= 0, got -1"),
    ]
    for call, message in cases:
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            call()
        assert message in str(raised.value), str(raised.value)[:500]


@pytest.mark.long
@pytest.mark.gpt_fixtures
def test_the_c_api_loader_serves_generate_and_score(exported, harness):
    from bert_tf.export import loader_harness as lh
    lm, path, saved = exported
    texts = np.array(TEXTS, dtype=object)
    requests = {"generate": {"text": texts, "max_new_tokens": np.int32(5)},
                "score": {"text": texts}}
    for signature, request in requests.items():
        responses, proc = lh.run_signature(harness, path, [request], signature=signature)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (got,) = responses
        assert isinstance(got, dict), got
        expected = saved.signatures[signature](**{k: tf.constant(v) for k, v in
                                                  request.items()})
        for key, value in expected.items():
            if value.dtype == tf.string:
                assert list(got[key]) == list(value.numpy()), key
            elif value.dtype.is_floating:
                np.testing.assert_allclose(got[key], value.numpy(), rtol=0, atol=ATOL,
                                           err_msg=key)
            else:
                np.testing.assert_array_equal(got[key], value.numpy(), err_msg=key)
    del lm


@pytest.mark.long
@pytest.mark.gpt_fixtures
def test_the_export_tool_builds_it_from_the_params_folder(tmp_path):
    """--model_type=gpt_causal_lm on the fixture's params folder (ids only, no BPE files): the
    greedy references again; the folder's special_rows.npy is read when present."""
    from bert_tf.export.exporter import ExportOptions, export_savedmodel
    from tests.gpt.conftest import fixture_config
    greedy = _fixture_json("greedy.json")
    config = tmp_path / "gpt_config.json"
    fixture_json = json.loads((GPT_FIXTURES / "config.json").read_text(encoding="utf-8"))
    fixture_config(fixture_json).to_json_file(config)
    # as load_original_params draws them (the fixture's seed), written as a run would
    from bert_tf.tasks.gpt_causal_lm import GptCausalLM
    lm = GptCausalLM.from_pretrained(GPT_FIXTURES, with_tokenizer=False, jit_compile=False)
    params = tmp_path / "params"
    lm.save_pretrained(params)
    path = export_savedmodel(ExportOptions(model_type="gpt_causal_lm",
                                           export_dir=str(tmp_path / "out"),
                                           gpt_config_file=str(config),
                                           init_checkpoint=str(params)))
    assert pathlib.Path(path).name == "1" and os.path.isdir(path)
    saved = tf.saved_model.load(path)
    assert set(saved.signatures) == {"serving_default", "generate_ids", "generate_ids_sampled",
                                     "score_ids"}
    prompts = greedy["prompts"][:3]
    max_new = min(p["max_new"] for p in prompts)
    ids, lengths = _padded([p["prompt"] for p in prompts])
    out = saved.signatures["serving_default"](token_ids=ids, lengths=lengths,
                                              max_new_tokens=np.int32(max_new))
    assert _rows(out["generated_ids"], out["num_generated"]) == [p["generated"][:max_new]
                                                                 for p in prompts]
