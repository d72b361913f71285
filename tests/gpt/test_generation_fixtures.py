"""Generation and scoring against the original GPT-1 graph's references
($BERT_TF_GPT_FIXTURES/generation/, defined in its README and in each file's `definition`).

The model is loaded as a user loads it, `GptCausalLM.from_pretrained(<folder>)` on the folder's
config.json + model/, and generation runs with the KV cache. Every size, prompt, limit and
beam width is read from the files (another set of the same layout may be swapped in).
Tolerances, from generation/README.md: ids exactly; log-probabilities 2e-5 each, 1e-4 on sums
(the original graph itself differs by up to ~5e-6 on logits between machines); logits 5e-5
(../README.md §6).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.gpt.conftest import PROJECT_ROOT

pytestmark = pytest.mark.gpt_fixtures

ATOL_LOGPROB = 2e-5
ATOL_LOGPROB_SUM = 1e-4
ATOL_LOGITS = 5e-5


def _load_json(path):
    if not path.is_file():
        pytest.skip(f"needs {path} (the original GPT-1 generation references)")
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def lm(gpt_fixtures):
    from bert_tf.tasks.gpt_causal_lm import GptCausalLM

    return GptCausalLM.from_pretrained(gpt_fixtures)


def _log_softmax(row: np.ndarray) -> np.ndarray:
    row = row.astype(np.float64)
    top = row.max()
    return row - top - np.log(np.sum(np.exp(row - top)))


def test_the_folder_loads_as_the_original_loads_it(lm, gpt_fixtures, gpt_fixture_json):
    config = lm.config
    for field in ("n_vocab", "n_special", "n_ctx", "n_embd", "n_head", "n_layer", "afn"):
        assert getattr(config, field) == gpt_fixture_json[field], field
    assert lm.special_token_ids == gpt_fixture_json["special_token_ids"]
    initial = np.load(gpt_fixtures / "initial_params.npz")
    for name, variable in lm.transformer.original_variables():
        np.testing.assert_array_equal(variable.numpy(), initial[name], err_msg=name)


def test_greedy_continuations_and_log_probabilities(lm, gpt_fixtures):
    greedy = _load_json(gpt_fixtures / "generation" / "greedy.json")
    step_logits = np.load(gpt_fixtures / "generation" / "greedy_step_logits.npz")
    n_vocab, n_special = greedy["model"]["n_vocab"], greedy["model"]["n_special"]
    for prompt in greedy["prompts"]:
        result = lm.generator.generate([prompt["prompt"]], max_new_tokens=prompt["max_new"],
                                       return_step_logits=True)
        index = prompt["prompt_index"]
        assert result.generated[0] == prompt["generated"], f"prompt {index}"
        assert result.sequences[0] == prompt["full_sequence"], f"prompt {index}"
        logits = result.step_logits[0]
        np.testing.assert_allclose(logits, step_logits[f"prompt{index}"], rtol=0,
                                   atol=ATOL_LOGITS, err_msg=f"prompt {index}")
        total = 0.0
        for step, row in zip(prompt["steps"], logits):
            chosen = step["chosen_id"]
            np.testing.assert_allclose(np.sort(row[:n_vocab])[::-1][:len(step["top5_logits"])],
                                       step["top5_logits"], rtol=0, atol=ATOL_LOGITS)
            for key, columns in (("chosen_logprob_full_table", len(row)),
                                 ("chosen_logprob_vocab_plus_special", n_vocab + n_special),
                                 ("chosen_logprob_vocab_only", n_vocab)):
                ours = _log_softmax(row[:columns])[chosen]
                assert ours == pytest.approx(step[key], abs=ATOL_LOGPROB), (index, key)
            total += _log_softmax(row)[chosen]
        assert total == pytest.approx(prompt["sum_chosen_logprob_full_table"],
                                      abs=ATOL_LOGPROB_SUM)


def test_greedy_batched_with_the_cache_equals_the_references(lm, gpt_fixtures):
    greedy = _load_json(gpt_fixtures / "generation" / "greedy.json")
    prompts = greedy["prompts"]
    # one call for every prompt at once: different lengths, one max_new per row via max_length
    # is not expressible, so each row is generated to its own limit by max_new_tokens' largest
    # value and cut to its own max_new (greedy is causal: later tokens do not change earlier).
    result = lm.generator.generate([p["prompt"] for p in prompts],
                                   max_new_tokens=max(p["max_new"] for p in prompts))
    for p, generated in zip(prompts, result.generated):
        assert generated[:p["max_new"]] == p["generated"], f"prompt {p['prompt_index']}"


def test_beam_search(lm, gpt_fixtures):
    from bert_tf.gpt.generation import Sampler

    beam = _load_json(gpt_fixtures / "generation" / "beam.json")
    width, new_tokens = beam["definition"]["width"], beam["definition"]["new_tokens"]
    for prompt in beam["prompts"]:
        result = lm.generator.generate([prompt["prompt"]], max_new_tokens=new_tokens,
                                       sampler=Sampler("beam", num_beams=width))
        index = prompt["prompt_index"]
        assert result.generated[0] == prompt["best_generated"], f"prompt {index}"
        assert result.sequences[0] == prompt["best_full_sequence"], f"prompt {index}"
        ours = result.beams[0]
        assert [b[0] for b in ours] == [b["generated"] for b in prompt["final_beams"]]
        for (_, score, _), expected in zip(ours, prompt["final_beams"]):
            assert score == pytest.approx(expected["score"], abs=ATOL_LOGPROB_SUM), index
        assert ours[0][1] == pytest.approx(prompt["best_score"], abs=ATOL_LOGPROB_SUM)


def test_scores(lm, gpt_fixtures):
    scores = _load_json(gpt_fixtures / "generation" / "scores.json")
    sequences = [s["tokens"] for s in scores["sequences"]]
    ours = lm.score(sequences)
    for n, expected in enumerate(scores["sequences"]):
        for kind, key in (("full_table", "full_table"),
                          ("tokens_and_specials", "vocab_plus_special")):
            values = getattr(ours, kind)[n]
            reference = expected[key]
            assert len(values) == len(expected["tokens"]) - 1
            np.testing.assert_allclose(values, reference["per_token_logprobs"], rtol=0,
                                       atol=ATOL_LOGPROB, err_msg=f"sequence {n} {kind}")
            assert float(np.sum(values)) == pytest.approx(reference["sum"],
                                                          abs=ATOL_LOGPROB_SUM)
            assert float(np.mean(values)) == pytest.approx(reference["mean"],
                                                           abs=ATOL_LOGPROB)
        assert ours.perplexity[n]["full_table"] == pytest.approx(
            np.exp(-expected["full_table"]["mean"]), rel=1e-4)


def _tool(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROJECT_ROOT / "tools" / f"{name}.py"), *args],
                          capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=600,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})


def _greedy_prompt_file(gpt_fixtures, tmp_path):
    prompts = _load_json(gpt_fixtures / "generation" / "greedy.json")["prompts"]
    prompt_file = tmp_path / "prompts.jsonl"
    prompt_file.write_text("".join(json.dumps({"ids": p["prompt"]}) + "\n" for p in prompts))
    return prompts, prompt_file


def _check_greedy_records(out, prompts):
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["prompt_ids"] for r in records] == [p["prompt"] for p in prompts]
    for record, p in zip(records, prompts):
        assert record["generated_ids"][:p["max_new"]] == p["generated"]


def test_run_generate_writes_the_greedy_references(gpt_fixtures, tmp_path):
    """tools/generate.py's library call, in this process."""
    from bert_tf.tasks.gpt_causal_lm import GenerateOptions, run_generate

    prompts, prompt_file = _greedy_prompt_file(gpt_fixtures, tmp_path)
    out = tmp_path / "out.jsonl"
    options = GenerateOptions(model=str(gpt_fixtures), prompt_file=str(prompt_file),
                              output_file=str(out),
                              max_new_tokens=max(p["max_new"] for p in prompts))
    assert run_generate(options) == len(prompts)
    _check_greedy_records(out, prompts)
    from bert_tf.errors import UserInputError

    with pytest.raises(UserInputError, match="refusing to overwrite"):
        run_generate(options)


@pytest.mark.slow
def test_generate_tool_process(gpt_fixtures, tmp_path):
    """tools/generate.py as a user runs it: the references, then one error line for an existing
    output file."""
    prompts, prompt_file = _greedy_prompt_file(gpt_fixtures, tmp_path)
    out = tmp_path / "out.jsonl"
    done = _tool("generate", f"--model={gpt_fixtures}", f"--prompt_file={prompt_file}",
                 f"--output_file={out}", f"--max_new_tokens={max(p['max_new'] for p in prompts)}")
    assert done.returncode == 0, done.stderr[-2000:]
    _check_greedy_records(out, prompts)
    again = _tool("generate", f"--model={gpt_fixtures}", f"--prompt_file={prompt_file}",
                  f"--output_file={out}", "--max_new_tokens=2")
    assert again.returncode == 1
    assert again.stderr.strip().splitlines()[-1].startswith("error: --output_file=")
    bad = _tool("generate", f"--model={gpt_fixtures}", "--prompt_ids=1,2,99999",
                "--max_new_tokens=2")
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines()[-1].startswith("error: prompt 0: id 99999 is outside")


def test_config_json_fields_are_understood(gpt_fixtures, gpt_fixture_json, tmp_path):
    from bert_tf.gpt.config import GptConfigError
    from bert_tf.tasks.gpt_causal_lm import read_gpt_config_json

    config, extras = read_gpt_config_json(gpt_fixtures / "config.json")
    assert config.table_rows == gpt_fixture_json["table_rows_model_we"]
    assert extras["seed"] == gpt_fixture_json["seed"]
    wrong = dict(gpt_fixture_json, table_rows_model_we=gpt_fixture_json["table_rows_model_we"] + 1)
    (tmp_path / "config.json").write_text(json.dumps(wrong))
    with pytest.raises(GptConfigError, match="table_rows_model_we"):
        read_gpt_config_json(tmp_path / "config.json")
    typo = dict(gpt_fixture_json, n_layers=2)
    (tmp_path / "config.json").write_text(json.dumps(typo))
    with pytest.raises(GptConfigError, match="did you mean 'n_layer'"):
        read_gpt_config_json(tmp_path / "config.json")


def test_text_in_and_out_with_the_released_bpe(gpt_fixtures, tmp_path):
    """The real BPE files (fixtures' bpe/) on a tiny random model with the released vocabulary:
    text prompts, text out, scores of texts, tools/score.py's library call on a text file."""
    pytest.importorskip("ftfy")
    pytest.importorskip("spacy")
    import keras

    from bert_tf.gpt.config import GptConfig
    from bert_tf.tasks.gpt_causal_lm import GptCausalLM

    bpe = gpt_fixtures / "bpe"
    encoder, merges = bpe / "encoder_bpe_40000.json", bpe / "vocab_40000.bpe"
    if not encoder.is_file() or not merges.is_file():
        pytest.skip(f"needs the BPE files in {bpe}")
    n_vocab = len(json.loads(encoder.read_text(encoding="utf-8")))
    keras.utils.set_random_seed(3)
    lm = GptCausalLM(GptConfig(n_vocab=n_vocab, n_ctx=16, n_embd=16, n_head=2, n_layer=1))
    lm.set_tokenizer(encoder, merges)
    text = lm.generate("Hello, world!", max_new_tokens=4)
    assert isinstance(text, str) and text.startswith("hello , world !")
    ids = lm.encode(["Hello, world!"])[0]
    continued = lm.generate(ids, max_new_tokens=4)
    assert continued[:len(ids)] == ids and len(continued) == len(ids) + 4
    assert lm.decode(continued) == text
    scores = lm.score(["Hello, world!"], add_start_token=True)
    assert len(scores.full_table[0]) == len(ids)
    lm.save_pretrained(tmp_path / "lm")
    story = tmp_path / "story.txt"
    story.write_text("The cat sat on the mat.\nIt was happy.\n" * 3)
    from bert_tf.tasks.gpt_causal_lm import ScoreOptions, run_score

    summary = run_score(ScoreOptions(model=str(tmp_path / "lm"), input_file=str(story)))
    reloaded = GptCausalLM.from_pretrained(tmp_path / "lm")
    ids = reloaded.encode([story.read_text()])[0]
    windows = [ids[i:i + 16] for i in range(0, len(ids), 16)]
    windows = [w for w in windows if len(w) > 1]
    expected = reloaded.score(windows)
    logprobs = np.concatenate(expected.full_table)
    assert summary["predicted_tokens"] == len(logprobs)
    assert summary["perplexity_full_table"] == pytest.approx(np.exp(-np.mean(logprobs)),
                                                             rel=1e-5)


@pytest.mark.slow
def test_xla_compiled_loop_gives_the_same_ids(gpt_fixtures):
    """jit_compile=True: the same greedy and beam ids as the references (XLA changes only the
    float rounding)."""
    from bert_tf.gpt.generation import Sampler
    from bert_tf.tasks.gpt_causal_lm import GptCausalLM

    lm = GptCausalLM.from_pretrained(gpt_fixtures, jit_compile=True)
    greedy = _load_json(gpt_fixtures / "generation" / "greedy.json")["prompts"]
    result = lm.generator.generate([p["prompt"] for p in greedy],
                                   max_new_tokens=max(p["max_new"] for p in greedy))
    for p, generated in zip(greedy, result.generated):
        assert generated[:p["max_new"]] == p["generated"], f"prompt {p['prompt_index']}"
    beam = _load_json(gpt_fixtures / "generation" / "beam.json")
    width, new_tokens = beam["definition"]["width"], beam["definition"]["new_tokens"]
    prompts = beam["prompts"]
    result = lm.generator.generate([p["prompt"] for p in prompts], max_new_tokens=new_tokens,
                                   sampler=Sampler("beam", num_beams=width))
    for p, generated in zip(prompts, result.generated):
        assert generated == p["best_generated"], f"prompt {p['prompt_index']}"
