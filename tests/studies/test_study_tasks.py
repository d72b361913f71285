"""The small scale's fine-tuning tasks beyond accuracy: CoLA (Matthews correlation), STS-B (a
regression scored by Pearson correlation) and the SQuAD v1.1 dev-article split (official F1),
for BERT and the left-to-right model (with and without the BiLSTM of BERT Table 5), on real
GLUE and SQuAD files with real configs (dropout 0.1)."""
from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from bert_tf.studies import data as study_data
from bert_tf.studies import cell_runs
from bert_tf.studies.declarations import SCALES, BERT_TABLE5, GPT_TABLE5, StudyError
from bert_tf.studies.run import StudyRunOptions, run_study
from bert_tf.studies.statistics import PerExample

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(os.path.dirname(ROOT), "shared", "data")
SQUAD = os.path.join(DATA, study_data.SQUAD_FILE)
needs_data = pytest.mark.skipif(
    not (os.path.exists(SQUAD) and os.path.isdir(os.path.join(DATA, "glue", "STS-B"))
         and os.path.isdir(os.path.join(DATA, "glue", "CoLA"))),
    reason=f"{DATA} (SQuAD v1.1 dev, GLUE STS-B and CoLA) not found: ../shared/data is "
           "absent")


@pytest.mark.long
@needs_data
def test_squad_split_holds_out_whole_articles():
    task = study_data.load_squad_split(SQUAD, max_train_examples=1000, seed=3)
    with open(SQUAD, encoding="utf-8") as f:
        articles = json.load(f)["data"]
    held_titles = {a["title"] for a in task.held_out_articles}
    assert held_titles == {a["title"] for i, a in enumerate(articles) if i % 3 == 2}
    assert len(held_titles) == 16
    assert len(task.held_out) == 2817  # every question of the held-out articles
    held_ids = {qa["id"] for a in task.held_out_articles for p in a["paragraphs"]
                for qa in p["qas"]}
    assert {e.qas_id for e in task.held_out} == held_ids
    train_ids = {qa["id"] for i, a in enumerate(articles) if i % 3 != 2
                 for p in a["paragraphs"] for qa in p["qas"]}
    assert len(task.train) == 1000 and {e.qas_id for e in task.train} <= train_ids
    # Training targets are the first gold answer, located in the context (word positions: the
    # words that hold the answer, e.g. "Robert Koch's" for "Robert Koch").
    by_id = {qa["id"]: qa for a in articles for p in a["paragraphs"] for qa in p["qas"]}
    for e in task.train[:50]:
        first = by_id[e.qas_id]["answers"][0]["text"]
        assert e.orig_answer_text == first
        assert first.replace(" ", "") in \
            "".join(e.doc_tokens[e.start_position:e.end_position + 1])
    # Another seed draws other training questions; the held-out split does not move.
    other = study_data.load_squad_split(SQUAD, max_train_examples=1000, seed=4)
    assert {e.qas_id for e in other.train} != {e.qas_id for e in task.train}
    assert [e.qas_id for e in other.held_out] == [e.qas_id for e in task.held_out]


def test_scores_use_each_tasks_official_metric():
    from bert_tf.evaluation.glue_metrics import matthews_corrcoef, pearson, spearman

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 200)
    logits = rng.normal(size=(200, 2)) + 1.5 * np.eye(2)[labels]
    cola = study_data.TaskData("CoLA", ["0", "1"], [], [], pair=False)
    value, metrics = cell_runs.score_task(cola, logits, labels, "cell")
    mcc = matthews_corrcoef(logits.argmax(-1), labels)
    assert value == round(100 * mcc, 2) and metrics == {"mcc": round(100 * mcc, 2)}
    assert 0 < value < 100  # the noisy logits are neither right nor wrong everywhere
    sst = study_data.TaskData("SST-2", ["0", "1"], [], [], pair=False)
    value, metrics = cell_runs.score_task(sst, logits, labels, "cell")
    assert value == round(100 * float(np.mean(logits.argmax(-1) == labels)), 2)
    assert metrics == {"acc": value}
    scores = rng.uniform(0, 5, 300).astype(np.float32)
    predicted = (scores + rng.normal(scale=1.0, size=300))[:, None]
    stsb = study_data.TaskData("STS-B", [], [], [], pair=True, regression=True)
    value, metrics = cell_runs.score_task(stsb, predicted, scores, "cell")
    assert value == round(100 * pearson(predicted[:, 0], scores), 2)
    assert metrics["spearmanr"] == round(100 * spearman(predicted[:, 0], scores), 2)
    topic = study_data.TaskData("topic", ["a", "b"], [], [], pair=False)
    assert cell_runs.score_task(topic, logits, labels, "cell")[1] == {}  # not a GLUE task
    assert [study_data.task_metric(t) for t in ("CoLA", "STS-B", "SQuAD", "RTE", "IMDb")] == \
        ["mcc", "pearson", "f1", "accuracy", "accuracy"]
    # A collapsed regression (one score for every pair): Pearson undefined, scored 0, said so.
    value, metrics = cell_runs.score_task(stsb, np.full((300, 1), 2.5), scores, "cell")
    assert value == 0.0 and metrics["pearson"] is None and metrics["corr"] is None
    assert metrics["note"] == "every held-out prediction is 2.5: pearson undefined, scored 0"
    with pytest.raises(FloatingPointError, match="cell: held-out pearson is not finite"):
        cell_runs.score_task(stsb, np.full((300, 1), np.nan), scores, "cell")


def test_a_reused_gpt_cell_of_another_transformation_is_named():
    from bert_tf.studies.run import _check_gpt_transformation

    gpt, bert = GPT_TABLE5.variants[0], BERT_TABLE5.variants[0]
    assert (gpt.model, gpt.head, bert.model) == ("gpt", "default", "bert")
    mrpc = study_data.TaskData("MRPC", ["0", "1"], [], [], pair=True)
    _check_gpt_transformation({"transformation": "similarity"}, gpt, mrpc, "c")
    _check_gpt_transformation({}, gpt, mrpc, "c")  # a cell of an earlier version: no record
    _check_gpt_transformation({"transformation": "x"}, bert, mrpc, "c")  # BERT: not GPT's
    with pytest.raises(StudyError, match=r"^cells/f/DONE: this finished cell fine-tuned with "
                       r"GPT-1's entailment input transformation, MRPC now uses similarity"):
        _check_gpt_transformation({"transformation": "entailment"}, gpt, mrpc, "cells/f/DONE")


def test_gpt_transformations_are_the_papers():
    def task(name, pair, regression=False):
        return study_data.TaskData(name, [], [], [], pair=pair, regression=regression)

    # GPT-1 section 3.3 / run_classifier --model_family=gpt: similarity for MRPC and STS-B.
    assert cell_runs.gpt_transformation(task("MRPC", True)) == "similarity"
    assert cell_runs.gpt_transformation(task("STS-B", True, True)) == "similarity"
    assert cell_runs.gpt_transformation(task("RTE", True)) == "entailment"
    assert cell_runs.gpt_transformation(task("CoLA", False)) == "classification"
    assert cell_runs.gpt_transformation(task("topic", False)) == "classification"
    # The BiLSTM row pools one sequence.
    assert cell_runs.gpt_transformation(task("MRPC", True), bilstm=True) == "entailment"


def test_gpt_span_inputs_swap_bert_specials():
    from bert_tf.gpt.input_transforms import SpecialTokens
    from bert_tf.studies.ltr_span_labeler import gpt_span_token_ids

    special = SpecialTokens(100, 101, 102)
    ids = np.array([[2, 7, 8, 3, 9, 10, 3, 0], [2, 7, 3, 9, 3, 0, 0, 0]])
    mask = (ids > 0).astype(np.int32)
    got = gpt_span_token_ids(ids, mask, cls_id=2, sep_id=3, special=special)
    np.testing.assert_array_equal(got, [[100, 7, 8, 101, 9, 10, 102, 0],
                                        [100, 7, 101, 9, 102, 0, 0, 0]])
    assert ids[0, 0] == 2  # the BERT arrays are not modified
    with pytest.raises(ValueError, match="holds 1 \\[SEP\\], expected 2"):
        gpt_span_token_ids(ids[:, :4], mask[:, :4], 2, 3, special)


@pytest.mark.long
@pytest.mark.parametrize("head", ["span", "tagger"])
def test_ltr_heads_see_only_the_left_unless_bilstm(head):
    """BERT Table 5's left-to-right models on SQuAD (`LtrSpanLabeler`) and NER
    (`LtrTokenTagger`): a position's logits move with a change to its left or itself only,
    unless the BiLSTM adds the right context."""
    from bert_tf.gpt.config import GptConfig
    from bert_tf.studies.ltr_span_labeler import LtrSpanLabeler
    from bert_tf.studies.ltr_tagger import LtrTokenTagger

    config = GptConfig(n_vocab=50, n_special=3, n_ctx=12, n_embd=16, n_head=2, n_layer=2)
    ids = np.random.default_rng(1).integers(1, 50, (2, 12)).astype(np.int32)
    changed = ids.copy()
    changed[:, 7] = (changed[:, 7] % 49) + 1
    inputs = {"token_ids": ids, "mask": np.ones((2, 12), np.float32)}
    for bilstm, left_moves in ((False, False), (True, True)):
        if head == "span":
            model = LtrSpanLabeler(config, bilstm=bilstm, lm_coef=0.5)
            key, shape = "start_logits", (2, 12)
        else:
            model = LtrTokenTagger(config, 9, bilstm=bilstm)
            key, shape = "logits", (2, 12, 9)
        a = model(inputs, training=False)
        b = model({**inputs, "token_ids": changed}, training=False)
        assert a[key].shape == shape
        diff = np.abs(a[key].numpy() - b[key].numpy())
        moved = diff.max(axis=tuple(i for i in range(diff.ndim) if i != 1)) > 1e-6
        assert moved[7:].all()
        assert moved[:7].any() == left_moves, (bilstm, moved)
        if head == "span":
            assert a["lm_logits"].shape[:2] == (2, 11)
            batch = {**inputs, "start_positions": np.array([3, 4]),
                     "end_positions": np.array([5, 4])}
            with_lm = float(model.compute_loss_value(a, batch))
            model.lm_coef = 0.0
            span_only = float(model.compute_loss_value(a, batch))
            assert math.isfinite(span_only) and with_lm > span_only


def test_tasks_flag_and_missing_squad_file_are_one_line(tmp_path):
    with pytest.raises(StudyError, match=r"--tasks=MNLI: MNLI is not a task of --scale=small; "
                                         r"expected some of SST-2, SQuAD"):
        run_study(StudyRunOptions(study="bert_pretraining_tasks", scale="small", tasks="MNLI",
                                  output_dir=str(tmp_path / "out")), say=lambda s: None)
    data_dir = tmp_path / "data"
    corpus = data_dir / SCALES["small"].corpus
    corpus.parent.mkdir(parents=True)
    corpus.write_text("text\n")
    with pytest.raises(StudyError, match=r"squad/dev-v1\.1\.json: not found \(needed by "
                                         r"--scale=small"):
        run_study(StudyRunOptions(study="bert_pretraining_tasks", scale="small",
                                  tasks="SQuAD", data_dir=str(data_dir),
                                  output_dir=str(tmp_path / "out")), say=lambda s: None)
    assert not (tmp_path / "out").exists()  # nothing was written


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    """A tiny scale (L2 H64, length 64, real dropout) and a 3,000-piece WordPiece vocab made
    from the tasks' own texts."""
    from bert_tf.tokenization import build_wordpiece_vocab

    folder = tmp_path_factory.mktemp("study_tasks")
    tasks = {name: study_data.load_task(name, str(folder), DATA, 160, 7)
             for name in ("CoLA", "STS-B", "SQuAD")}
    for name in ("CoLA", "STS-B"):
        tasks[name].held_out = tasks[name].held_out[:200]
    squad = tasks["SQuAD"]
    squad.held_out_articles = squad.held_out_articles[:1]
    keep = {qa["id"] for p in squad.held_out_articles[0]["paragraphs"] for qa in p["qas"]}
    squad.held_out = [e for e in squad.held_out if e.qas_id in keep]
    text = folder / "texts.txt"
    with open(text, "w", encoding="utf-8") as f:
        for name in ("CoLA", "STS-B"):
            for e in tasks[name].train + tasks[name].held_out:
                f.write(e.text_a + "\n" + (e.text_b or "") + "\n")
        for e in squad.train + squad.held_out:
            f.write(e.question_text + "\n" + " ".join(e.doc_tokens) + "\n")
    vocab = str(folder / "vocab.txt")
    size = len(build_wordpiece_vocab([str(text)], vocab, vocab_size=3000, do_lower_case=True))
    scale = dataclasses.replace(SCALES["tiny"], finetuning_epochs=1.0)
    return {"scale": scale, "tasks": tasks, "folder": folder,
            "data": {"vocab_file": vocab, "vocab_size": size}}


@pytest.mark.long
@needs_data
@pytest.mark.parametrize("task_name", ["CoLA", "STS-B"])
def test_glue_tasks_fine_tune_both_models(tiny_setup, task_name):
    task = tiny_setup["tasks"][task_name]
    assert task.regression == (task_name == "STS-B") and task.labels == (
        [] if task.regression else ["0", "1"])
    variants = {v.name: v for v in BERT_TABLE5.variants}
    for name in ("no_pretraining", "ltr_no_nsp", "ltr_bilstm"):
        cell = tiny_setup["folder"] / f"{task_name}-{name}"
        r = cell_runs.finetune(str(cell), variants[name], tiny_setup["scale"],
                              tiny_setup["data"], task, 1, None)
        assert r["metric"] == study_data.task_metric(task_name)
        assert math.isfinite(r["value"]) and -100.0 <= r["value"] <= 100.0
        assert r["steps"] == 5 and r["held_out_examples"] == 200
        assert r["metrics"][r["metric"]] == r["value"]
        # The per-example scores the paired bootstrap resamples give the cell's own score.
        assert PerExample.from_json(r["per_example"]).metric() == pytest.approx(r["value"],
                                                                                abs=0.01)
        if task.regression:
            assert set(r["metrics"]) == {"pearson", "spearmanr", "corr"}
        if name.startswith("ltr"):
            assert r["transformation"] == cell_runs.gpt_transformation(
                task, name == "ltr_bilstm")


@pytest.mark.long
@needs_data
def test_squad_split_fine_tunes_bert_and_the_left_to_right_model(tiny_setup):
    import keras

    from bert_tf.gpt.model import GptModel
    from bert_tf.checkpoints.openai import save_original_params

    scale, data, task = tiny_setup["scale"], tiny_setup["data"], tiny_setup["tasks"]["SQuAD"]
    # A "pretrained" left-to-right model in the original params format (what the study's
    # GPT pretraining cell writes), loaded by the LTR variants.
    gpt = GptModel(cell_runs.gpt_config(scale, data["vocab_size"]), classifier=False,
                   name="gpt")
    gpt({"token_ids": np.zeros((1, scale.max_seq_length), np.int32)})
    params = str(tiny_setup["folder"] / "gpt_params")
    save_original_params(gpt, params)
    variants = {v.name: v for v in BERT_TABLE5.variants + GPT_TABLE5.variants}
    for name in ("no_pretraining", "ltr_bilstm", "aux_lm"):
        keras.backend.clear_session()
        v = variants[name]
        r = cell_runs.finetune_squad(str(tiny_setup["folder"] / f"squad-{name}"), v, scale, data,
                                    task, 1, {"params": params} if v.pretrained else None)
        assert r["metric"] == "f1" and math.isfinite(r["value"]) and 0 <= r["value"] <= 100
        assert r["steps"] == 5  # the original's rule: 160 questions / 32 x 1 epoch
        assert r["held_out_examples"] == len(task.held_out) > 0
        assert r["train_windows"] > r["train_examples"] == 160
        assert (r["doc_stride"], r["max_query_length"]) == (32, 24)
        assert 0 <= r["metrics"]["exact_match"] <= r["value"]
        per_question = PerExample.from_json(r["per_example"])
        assert per_question.size == len(task.held_out)
        assert per_question.metric() == pytest.approx(r["value"], abs=0.01)


def test_gpt_tagger_inputs_swap_bert_specials():
    from bert_tf.gpt.input_transforms import SpecialTokens
    from bert_tf.studies.ltr_tagger import gpt_tagger_token_ids

    special = SpecialTokens(100, 101, 102)
    ids = np.array([[2, 7, 8, 9, 3, 0], [2, 7, 3, 0, 0, 0]])
    mask = (ids > 0).astype(np.int32)
    got = gpt_tagger_token_ids(ids, mask, cls_id=2, sep_id=3, special=special)
    np.testing.assert_array_equal(got, [[100, 7, 8, 9, 102, 0], [100, 7, 102, 0, 0, 0]])
    assert ids[0, 0] == 2  # the BERT arrays are not modified
    with pytest.raises(ValueError, match="holds 0 \\[SEP\\], expected 1"):
        gpt_tagger_token_ids(ids[:, :3], mask[:, :3], 2, 3, special)


def test_table5_scores_ner_at_small_only():
    """BERT Table 5's NER column (issue 33's MLM > LTR on NER) is in the small and base grids,
    not in the self-contained tiny one; its claims name it."""
    from bert_tf.studies.declarations import CLAIMS

    small, tiny = SCALES["small"], SCALES["tiny"]
    study = BERT_TABLE5.at_scale(small)
    ner = [e for e in study.evaluations(small) if e.task == small.ner_task]
    assert {e.variant.name for e in ner} == {v.name for v in study.variants}
    assert all(e.column == "NER fine-tune" for e in ner)
    assert not [e for e in BERT_TABLE5.at_scale(tiny).evaluations(tiny)
                if e.task == tiny.ner_task]
    assert tiny.ner_task not in BERT_TABLE5.data_tasks(tiny)
    names = {c.name: c for c in CLAIMS}
    assert names["t5_mlm_over_ltr_ner"].column == "NER fine-tune"
    assert names["t5_mlm_over_ltr_ner"].primary


CONLL_DIR = os.path.join(DATA, "conll2003")


@pytest.mark.long
@pytest.mark.skipif(not os.path.exists(os.path.join(CONLL_DIR, "eng.train")),
                    reason=f"{CONLL_DIR} not found: ../shared/data is absent")
def test_ner_fine_tunes_the_left_to_right_model(tmp_path):
    """A real CoNLL-2003 NER cell of BERT Table 5's LTR rows (with and without the BiLSTM),
    from a "pretrained" left-to-right model in the original params format: entity F1 with its
    per-sentence counts."""
    import keras

    from bert_tf.checkpoints.openai import save_original_params
    from bert_tf.gpt.model import GptModel
    from bert_tf.tokenization import build_wordpiece_vocab

    task = study_data.load_ner_task(DATA, 160, 7)
    task.held_out = task.held_out[:100]
    text = tmp_path / "texts.txt"
    with open(text, "w", encoding="utf-8") as f:
        for sentence in task.train + task.held_out:
            f.write(" ".join(sentence.words) + "\n")
    vocab = str(tmp_path / "vocab.txt")
    size = len(build_wordpiece_vocab([str(text)], vocab, vocab_size=2000, do_lower_case=True))
    scale = dataclasses.replace(SCALES["tiny"], finetuning_epochs=1.0)
    data = {"vocab_file": vocab, "vocab_size": size}
    gpt = GptModel(cell_runs.gpt_config(scale, size), classifier=False, name="gpt")
    gpt({"token_ids": np.zeros((1, scale.max_seq_length), np.int32)})
    params = str(tmp_path / "gpt_params")
    save_original_params(gpt, params)
    variants = {v.name: v for v in BERT_TABLE5.variants}
    for name in ("ltr_no_nsp", "ltr_bilstm"):
        keras.backend.clear_session()
        r = cell_runs.finetune_ner(str(tmp_path / name), variants[name], scale, data, task, 1,
                                   {"params": params})
        assert r["metric"] == "f1" and math.isfinite(r["value"]) and 0 <= r["value"] <= 100
        assert r["steps"] == 5 and r["held_out_examples"] == 100
        per_sentence = PerExample.from_json(r["per_example"])
        assert per_sentence.size == 100
        assert per_sentence.metric() == pytest.approx(r["value"], abs=0.01)
