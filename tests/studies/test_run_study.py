"""tools/run_study.py end to end at the tiny scale (real processes, the embedded corpus, real
configs with dropout 0.1): the table has every variant and task with finite scores, the plots
exist, a re-run reuses every finished cell, and a cell whose run was killed (no done-marker,
a partial folder) is run again and never counted as done. The studies added later (BERT
Tables 6 and 7, GPT-1 Figure 2, BERT vs GPT per epoch) each run by default on a reduced grid
(`--variants`, 10 pretraining steps); every study with every variant is the slow test."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest

from bert_tf.studies import STUDIES
from bert_tf.studies.cells import DONE_FILE, CellStore
from bert_tf.studies.declarations import (FEATURE_DESCRIPTIONS, SCALES, StudyError,
                                          describe_features)
from bert_tf.tasks.feature_based import FEATURE_LAYERS
from bert_tf.studies.report import column_of, study_section
from bert_tf.studies.run import StudyRunOptions, run_study

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "run_study.py")
# Short budgets for CI: the real tiny models, far fewer steps than the tiny scale's 150.
FAST = ["--pretraining_steps=10", "--finetuning_epochs=1"]


def _run(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def _counts(proc: subprocess.CompletedProcess) -> tuple[int, int]:
    match = re.search(r"(\d+) cells run, (\d+) reused", proc.stdout)
    assert match, proc.stdout[-2000:] + proc.stderr[-3000:]
    return int(match.group(1)), int(match.group(2))


def _done_markers(out: str) -> dict[str, float]:
    found = {}
    for dirpath, _, files in os.walk(os.path.join(out, "cells")):
        if DONE_FILE in files:
            found[dirpath] = os.path.getmtime(os.path.join(dirpath, DONE_FILE))
    return found


def _check_outputs(out: str, study_names: list[str], variants: tuple[str, ...] = ()
                   ) -> list[dict]:
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        rows = json.load(f)
    with open(os.path.join(out, "results.md"), encoding="utf-8") as f:
        md = f.read()
    tiny = SCALES["tiny"]
    for name in study_names:
        study = STUDIES[name].at_scale(tiny, variants)
        assert study.variants, name
        assert study.title in md
        (task,) = study.tasks(tiny)
        for e in study.evaluations(tiny):  # the task, and the study's NER columns (Table 8)
            got = [r for r in rows if r["study"] == name and r["variant"] == e.variant.name
                   and column_of(r) == e.column and r.get("kind") == "finetuning"]
            assert len(got) == 1, (name, e.variant.name, e.column)
            r = got[0]
            assert r["task"] == e.task
            assert r["metric"] == ("f1" if e.task == "conll2003" else "accuracy")
            assert math.isfinite(r["value"])
            assert 0.0 <= r["value"] <= 100.0
            for key in ("seed", "steps", "wall_s", "command"):
                assert r[key] not in (None, ""), key
            assert r["steps"] > 0 and "run_study" in r["command"]
            assert r["cell"].split("/")[2] == e.run.finetuning_cell(tiny)
            if e.column != task:
                assert f"Ordering on {e.column} (F1) vs the paper's {e.paper_column} " \
                    "column" in md
        for v in study.variants:
            assert v.label in md
            if v.pretrained:
                pre = [p for p in rows if p["study"] == name and p["variant"] == v.name
                       and p["task"] == "pretraining"]
                assert len(pre) == 1 and math.isfinite(pre[0]["value"])
        for column in study.paper_columns:
            assert f"{column} (paper)" in md
        assert f"Ordering on {task}" in md
        for png in (f"{name}_scores.png",):
            with open(os.path.join(out, png), "rb") as f:
                assert f.read(8) == b"\x89PNG\r\n\x1a\n", png
    return rows


@pytest.mark.long
def test_declarations_are_distinct_and_bad_input_is_one_line(tmp_path):
    # Variants sharing a run share its cell, the others never do.
    for study in STUDIES.values():
        for scale in SCALES.values():
            keys = [v.finetuning_cell(scale) for v in study.at_scale(scale).variants]
            assert len(set(keys)) == len(keys), (study.name, scale.name)
    masking = STUDIES["bert_masking"]
    assert len({v.pretraining_key for v in masking.variants}) == 6
    assert STUDIES["bert_pretraining_tasks"].variants[0].pretraining_key == \
        masking.variants[0].pretraining_key  # MLM+NSP is the 80/10/10 run
    # The tool: one line, exit status 1, no traceback.
    proc = _run("--study=table99", f"--output_dir={tmp_path / 'o'}")
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].startswith(
        "error: --study=table99: unknown study")
    assert "Traceback" not in proc.stderr
    # The library checks, before anything runs or is written.
    with pytest.raises(StudyError, match=r"^--scale=huge: unknown scale"):
        run_study(StudyRunOptions(study="all", scale="huge", output_dir=str(tmp_path / "o")))
    data_dir = tmp_path / "data"
    (data_dir / "pretrain").mkdir(parents=True)
    (data_dir / "pretrain" / "imdb_unsup_corpus.txt.gz").write_bytes(b"")
    expected = os.path.join(str(data_dir), "glue", "SST-2", "train.tsv")
    with pytest.raises(StudyError, match=re.escape(f"{expected}: not found")):
        run_study(StudyRunOptions(study="bert_pretraining_tasks", scale="small",
                                  data_dir=str(data_dir), output_dir=str(tmp_path / "o")))
    with pytest.raises(StudyError, match="imdb_unsup_corpus.txt.gz: not found"):
        run_study(StudyRunOptions(study="gpt_ablations", scale="small",
                                  data_dir=str(tmp_path / "none"),
                                  output_dir=str(tmp_path / "o")))
    with pytest.raises(StudyError, match="--seeds='1,x'"):
        run_study(StudyRunOptions(study="all", seeds="1,x", output_dir=str(tmp_path / "o")))
    with pytest.raises(StudyError, match=r"^--variants=nope: nope is not a variant"):
        run_study(StudyRunOptions(study="bert_model_size", variants="nope",
                                  output_dir=str(tmp_path / "o")))
    with pytest.raises(StudyError, match=re.escape(
            os.path.join(str(tmp_path / "none"), "conll2003", "eng.train") + ": not found")):
        run_study(StudyRunOptions(study="bert_feature_based", data_dir=str(tmp_path / "none"),
                                  output_dir=str(tmp_path / "o")))
    assert not (tmp_path / "o").exists()  # nothing written for a bad command
    listed = []
    run_study(StudyRunOptions(list=True), say=listed.append)
    for name in [*STUDIES, *SCALES]:
        assert name in listed[0]


def test_sized_and_layered_variants_share_cells_only_when_the_same_run():
    tiny, small = SCALES["tiny"], SCALES["small"]
    size = STUDIES["bert_model_size"]
    mlm_nsp = STUDIES["bert_pretraining_tasks"].variants[0]
    # Table 6's rows are distinct models at every scale; the one of the scale's own size is
    # Table 5's MLM + NSP run (L6/H768/A12 -> L2 H64 A2 at tiny and L2 H128 A2 at
    # small), and Table 7's BERT-Base is Table 6's BERT-Base row.
    for scale in (tiny, small):
        keys = [v.pretraining_cell(scale) for v in size.variants]
        assert len(set(keys)) == len(keys) == 6
        same = [v for v in size.variants if v.model_size(scale) ==
                (scale.num_layers, scale.hidden_size, scale.num_heads)]
        assert [v.pretraining_cell(scale) for v in same] == [mlm_nsp.pretraining_cell(scale)]
    assert {v.pretraining_cell(tiny) for v in STUDIES["bert_feature_based"].variants} == \
        {size.variants[3].pretraining_cell(tiny)}
    assert size.variants[3].model_size(tiny) == (4, 64, 2)  # enough layers for "last four"
    # GPT-1 Figure 2: depths the model has, and "all layers" is GPT Table 5's full model.
    layers = STUDIES["gpt_transfer_layers"]
    assert [v.name for v in layers.at_scale(tiny).variants] == \
        ["transfer_0", "transfer_1", "transfer_all"]
    assert [v.name for v in layers.at_scale(small).variants] == \
        ["transfer_0", "transfer_1", "transfer_all"]
    assert layers.variants[-1].finetuning_cell(tiny) == \
        STUDIES["gpt_ablations"].variants[0].finetuning_cell(tiny)
    # Per-epoch fine-tunings are their own cells.
    epochs = STUDIES["bert_vs_gpt_epochs"]
    assert epochs.variants[0].finetuning_cell(tiny) != mlm_nsp.finetuning_cell(tiny)
    assert epochs.variants[0].pretraining_cell(tiny) == mlm_nsp.pretraining_cell(tiny)
    assert epochs.tasks(small) == ("IMDb",) and epochs.tasks(tiny) == ("topic",)


def test_masking_study_scores_ner_fine_tuned_and_feature_based():
    """BERT Table 8's three columns: every masking variant on the scale's tasks, then CoNLL-2003
    NER fine-tuned and feature-based. The paper's features (the last four layers concatenated)
    where the model has four layers; the 2-layer tiny and small models concatenate every hidden
    state they have (embeddings + 2 layers), and the cell key and the header say so. The task
    cells keep their keys; at base the 80/10/10 NER runs are Table 7's own cells."""
    masking = STUDIES["bert_masking"]
    table7 = STUDIES["bert_feature_based"]
    assert set(FEATURE_DESCRIPTIONS) == set(FEATURE_LAYERS)  # every choice has its words
    assert describe_features("concat_embeddings_and_all", 2) == \
        "concatenation of the embedding output and all 2 layers"
    for scale in SCALES.values():
        evaluations = masking.evaluations(scale)
        # (the small scale runs Table 8 on its NER columns only: `Scale.study_tasks`)
        assert len(evaluations) == len(masking.variants) * (len(masking.tasks(scale)) + 2)
        assert masking.data_tasks(scale) == (*masking.tasks(scale), "conll2003")
        for e in evaluations:
            if e.column in scale.tasks:  # fine-tuning cells as before (cached runs stay valid)
                assert e.run is e.variant and e.paper_column is None
                assert e.run.finetuning_cell(scale) == e.variant.pretraining_key
                continue
            assert e.task == "conll2003" and e.column == e.paper_column
            pre = e.variant.pretraining_cell(scale)
            if e.column == "NER fine-tune":
                assert e.run.finetuning_cell(scale) == pre
            else:
                layers = "concat_last_four" if scale.num_layers >= 4 else \
                    "concat_embeddings_and_all"
                assert e.run.feature_layers == layers
                assert e.run.finetuning_cell(scale) == f"{pre}-features-{layers}"
    base = SCALES["base"]
    ner = {e.run.finetuning_cell(base) for e in masking.evaluations(base)
           if e.variant.name == "mask80_10_10" and e.task == "conll2003"}
    assert ner == {v.finetuning_cell(base) for v in table7.variants
                   if v.name in ("fine_tuned", "features_concat_last_four")}
    # The table: ours beside the paper's three columns, an ordering check per column, the
    # features named. (Rows as run.py writes them; the scores are made up for the layout.)
    tiny = SCALES["tiny"]
    study = masking.at_scale(tiny, ("mask80_10_10", "mask0_0_100"))
    rows = []
    for i, e in enumerate(study.evaluations(tiny)):
        f1 = e.task == "conll2003"
        row = {"study": study.name, "variant": e.variant.name, "task": e.task,
               "column": e.column, "kind": "finetuning", "model": "L2/H64/A2",
               "metric": "f1" if f1 else "accuracy", "value": 50.0 + i, "seed": 1,
               "cell": e.run.finetuning_cell(tiny)}
        if e.paper_column:
            row["paper_column"] = e.paper_column
        if e.run.feature_layers:
            row["features_described"] = "concatenation of the embedding output and all 2 layers"
        rows.append(row)
    md = "\n".join(study_section(study, rows, [], "."))
    assert "| Variant | topic (ours) | NER fine-tune (ours) | NER feature-based: concatenation " \
        "of the embedding output and all 2 layers (ours) | MNLI fine-tune (paper) | " \
        "NER fine-tune (paper) | NER feature-based (paper) |" in md
    assert "| 80% / 10% / 10% | 50.0 | 51.0 | 52.0 | 84.2 | 95.4 | 94.9 |" in md
    # Paper: 80/10/10 above 0/0/100 in all three columns; ours rises down the rows.
    assert "Ordering on topic (accuracy) vs the paper's MNLI fine-tune column: does not hold " \
        "(0 of 1 pairs" in md
    assert "Ordering on NER fine-tune (F1) vs the paper's NER fine-tune column: does not hold" \
        in md
    assert "Ordering on NER feature-based (F1) vs the paper's NER feature-based column: does " \
        "not hold" in md
    assert "ours: held-out accuracy on topic; F1 on NER fine-tune, NER feature-based (%)" in md


@pytest.mark.slow  # ~20-30 s: keeps the default suite under 15 min
def test_new_studies_on_a_reduced_grid(tmp_path):
    """Table 6, GPT-1 Figure 2 and BERT vs GPT, one or two variants each, in one run: the
    perplexity column, the zero-shot curve over the LM checkpoints, the per-epoch scores, their
    plots; a re-run reuses every cell."""
    out = str(tmp_path / "new")
    variants = "L3_H768_A12,transfer_0,gpt"
    options = StudyRunOptions(study="bert_model_size,gpt_transfer_layers,bert_vs_gpt_epochs",
                              scale="tiny", output_dir=out, variants=variants,
                              pretraining_steps=10, finetuning_epochs=2)
    said = []
    result = run_study(options, say=said.append)
    # 1 data + 2 pretraining (BERT L1/H64/A2, GPT) + 1 baseline (topic) + 3 fine-tuning + 1
    # zero-shot + 1 held-out (Table 6's per-sequence masked-LM scores).
    assert (len(result["ran"]), len(result["skipped"])) == (9, 0), result["ran"]
    names = ["bert_model_size", "gpt_transfer_layers", "bert_vs_gpt_epochs"]
    rows = _check_outputs(out, names, tuple(variants.split(",")))
    with open(os.path.join(out, "results.md"), encoding="utf-8") as f:
        md = f.read()
    ppl = [r for r in rows if r["study"] == "bert_model_size" and r["kind"] == "pretraining"]
    assert len(ppl) == 1 and ppl[0]["metric"] == "held_out_masked_lm_perplexity"
    assert 1.0 < ppl[0]["value"] < 2000 and ppl[0]["model"] == "L1/H64/A2"
    # The shared held-out file's perplexity: the same model on the same kind of data (its own
    # masking draw), so close to the pretraining cell's own held-out figure.
    shared = ppl[0]["shared_held_out_perplexity"]
    assert 0.5 * ppl[0]["value"] < shared < 2.0 * ppl[0]["value"], (shared, ppl[0]["value"])
    # (10 pretraining steps: the row may be marked as under its gate, the topic task's baseline)
    assert re.search(r"\| #L=3 #H=768 #A=12( \(not learned: topic\))? \| L1/H64/A2 \| "
                     + re.escape(f"{shared:.2f}") + r" \|", md)
    assert "perplexity (every model scored on the study's shared held-out file)" in md
    zero = sorted((r["steps"], r["value"]) for r in rows if r["kind"] == "zero_shot")
    assert [s for s, _ in zero] == [0, 10] and all(0 <= v <= 100 for _, v in zero)
    assert "Zero-shot heuristic on topic" in md
    epochs = [r for r in rows if r["kind"] == "epoch"]
    assert [r["epoch"] for r in epochs] == [1, 2] and epochs[0]["steps"] < epochs[1]["steps"]
    final = [r for r in rows if r["study"] == "bert_vs_gpt_epochs" and r["kind"] == "finetuning"]
    assert final[0]["value"] == epochs[1]["value"]  # the last epoch is the run's result
    assert "topic epoch 2 (ours)" in md
    for png in ("gpt_transfer_layers_layers.png", "gpt_transfer_layers_zero_shot.png",
                "bert_vs_gpt_epochs_epochs.png", "bert_model_size_scores.png"):
        with open(os.path.join(out, png), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", png
    for r in rows:
        for key in ("study", "variant", "task", "metric", "value", "seed", "steps", "wall_s",
                    "command"):
            assert key in r, (key, r)
    again = run_study(options, say=said.append)
    assert (len(again["ran"]), len(again["skipped"])) == (0, 9)
    # A finished GPT cell made with another input transformation is stale: named, not reused.
    (gpt_row,) = [r for r in final if r["variant"] == "gpt"]
    done = os.path.join(out, "cells", gpt_row["cell"], "DONE.json")
    with open(done, encoding="utf-8") as f:
        cached = json.load(f)
    assert cached["transformation"] == "classification"  # topic: single texts
    with open(done, "w", encoding="utf-8") as f:
        json.dump({**cached, "transformation": "entailment"}, f)
    with pytest.raises(StudyError, match=r"entailment input transformation, topic now "
                       r"uses classification; move the cell's folder aside"):
        run_study(options, say=said.append)
    with open(done, encoding="utf-8") as f:
        assert json.load(f)["transformation"] == "entailment"  # left as it was


CONLL = os.path.join(os.path.dirname(ROOT), "shared", "data", "conll2003", "eng.train")


@pytest.mark.slow  # ~20-30 s: keeps the default suite under 15 min
@pytest.mark.skipif(not os.path.exists(CONLL), reason=f"{CONLL} not found (../shared/data is "
                    "not part of the repository)")
def test_feature_based_ner_study_on_a_reduced_grid(tmp_path):
    """BERT Table 7 with one learned combination of the frozen layers (ScalarMix over the last
    four of the 4-layer tiny BERT-Base stand-in; 400 drawn CoNLL-2003 sentences). The
    fine-tuned row runs in the slow test."""
    out = str(tmp_path / "ner")
    variants = "features_weighted_sum_last_four"
    result = run_study(StudyRunOptions(
        study="bert_feature_based", scale="tiny", output_dir=out, variants=variants,
        data_dir=os.path.dirname(os.path.dirname(CONLL)), pretraining_steps=10,
        finetuning_epochs=1), say=lambda _: None)
    assert len(result["ran"]) == 4  # data, 1 pretraining (L4/H64/A2), 1 baseline, 1 tagger
    rows = _check_outputs(out, ["bert_feature_based"], tuple(variants.split(",")))
    ner = [r for r in rows if r["kind"] == "finetuning"]
    assert {r["model"] for r in ner} == {"L4/H64/A2"} and {r["task"] for r in ner} == \
        {"conll2003"}
    assert "features-weighted_sum_last_four" in ner[0]["cell"]


@pytest.mark.slow  # ~2-3 min on the loaded 2 cores
@pytest.mark.skipif(not os.path.exists(CONLL), reason=f"{CONLL} not found (../shared/data is "
                    "not part of the repository)")
def test_masking_study_on_a_reduced_grid(tmp_path):
    """BERT Table 8 end to end for two masking mixtures: each pretraining scored on the topic
    task and on CoNLL-2003 NER fine-tuned and feature-based (the tiny model's 2 layers: the
    embeddings and both layers concatenated); a re-run reuses every cell."""
    out = str(tmp_path / "masking")
    variants = "mask80_10_10,mask0_0_100"
    options = StudyRunOptions(study="bert_masking", scale="tiny", output_dir=out,
                              variants=variants,
                              data_dir=os.path.dirname(os.path.dirname(CONLL)),
                              pretraining_steps=10, finetuning_epochs=1)
    result = run_study(options, say=lambda _: None)
    # 1 data + 2 pretraining + 2 baselines (topic, conll2003) + 2 x (topic, NER fine-tuned,
    # NER feature-based).
    assert (len(result["ran"]), len(result["skipped"])) == (11, 0), result["ran"]
    rows = _check_outputs(out, ["bert_masking"], tuple(variants.split(",")))
    with open(os.path.join(out, "results.md"), encoding="utf-8") as f:
        md = f.read()
    assert "NER feature-based: concatenation of the embedding output and all 2 layers (ours)" in md
    feature = [r for r in rows if r["kind"] == "finetuning"
               and r.get("column") == "NER feature-based"]
    assert {r["features"] for r in feature} == {"concat_embeddings_and_all"}
    assert all(r["cell"].endswith("/seed1") and "-features-concat_embeddings_and_all/conll2003/"
               in r["cell"] for r in feature)
    again = run_study(options, say=lambda _: None)
    assert (len(again["ran"]), len(again["skipped"])) == (0, 11)


@pytest.mark.long
def test_tiny_study_runs_resumes_and_reruns_killed_cells(tmp_path):
    out = str(tmp_path / "study")
    proc = _run("--study=bert_pretraining_tasks", "--scale=tiny", f"--output_dir={out}", *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # 1 data + 3 pretraining (MLM+NSP, MLM only, LTR) + 1 baseline (topic) + 5 fine-tuning.
    assert _counts(proc) == (10, 0)
    assert "cell/s" in proc.stderr or "s/cell" in proc.stderr  # the progress bar with ETA
    # After each cell: the hours left at the pace the finished cells kept on this machine.
    last = [line for line in proc.stdout.splitlines() if "left at this machine's pace" in line]
    assert len(last) == 10 and last[-1].endswith("(10 of 10 cells done)"), proc.stdout[-2000:]
    rows = _check_outputs(out, ["bert_pretraining_tasks"])
    assert os.path.exists(os.path.join(out, "bert_pretraining_tasks_pretraining.png"))
    markers = _done_markers(out)
    assert len(markers) == 10

    # A re-run reuses every finished cell: nothing is run, no marker is rewritten.
    proc = _run("--study=bert_pretraining_tasks", "--scale=tiny", f"--output_dir={out}", *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _counts(proc) == (0, 10)
    assert _done_markers(out) == markers

    # A killed fine-tuning cell (marker gone, its files left) and a partial folder of a cell
    # that never finished: neither counts as done; both are run again, nothing else is.
    finetune = [d for d in markers if f"{os.sep}finetuning{os.sep}" in d
                and "bert-scratch" in d][0]
    os.remove(os.path.join(finetune, DONE_FILE))
    store = CellStore(out)
    key = os.path.relpath(finetune, store.path("finetuning", ""))
    assert store.result("finetuning", key) is None
    pretraining = [d for d in markers if f"{os.sep}pretraining{os.sep}" in d
                   and "bert-mlm-" in d][0]
    os.remove(os.path.join(pretraining, DONE_FILE))
    with open(os.path.join(pretraining, "train.tfrecord.partial"), "w") as f:
        f.write("half")
    proc = _run("--study=bert_pretraining_tasks", "--scale=tiny", f"--output_dir={out}", *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _counts(proc) == (2, 8)
    after = _done_markers(out)
    assert set(after) == set(markers)
    assert {d for d in after if after[d] != markers[d]} == {finetune, pretraining}
    rows2 = _check_outputs(out, ["bert_pretraining_tasks"])
    assert len(rows2) == len(rows)


@pytest.mark.slow
def test_every_study_at_tiny_scale(tmp_path):
    out = str(tmp_path / "all")
    proc = _run("--study=all", "--scale=tiny", f"--output_dir={out}", *FAST, timeout=3000)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran, reused = _counts(proc)
    # 1 data + 14 pretraining (BERT: MLM+NSP, MLM only, 5 other masks, 4 more sizes of
    # Table 6 (its L6/H768/A12 row is the MLM+NSP run at tiny), Table 7's 4-layer stand-in
    # (= Table 6's BERT-Base row); GPT: the default and the smaller size) + 42 fine-tuning
    # (30 on the tasks, and Table 8's 6 variants on NER fine-tuned and feature-based) + 1
    # zero-shot + 2 baselines (topic, conll2003) + 6 held-out (Table 6's per-sequence
    # masked-LM scores on the shared held-out file, one per size's pretraining).
    assert (ran, reused) == (66, 0)
    _check_outputs(out, list(STUDIES))


def test_report_names_every_variant_of_a_shared_pretraining_cell():
    """BERT Table 5's "LTR & No NSP" and "+ BiLSTM" fine-tune one GPT pretraining: its line in
    results.md names both rows, and the cell once."""
    study = STUDIES["bert_pretraining_tasks"]
    base = {"study": study.name, "task": "pretraining", "kind": "pretraining",
            "metric": "held_out_lm_perplexity", "value": 123.0, "steps": 8000, "wall_s": 775.4,
            "seed": 12345}
    rows = [{**base, "variant": "ltr_no_nsp", "cell": "pretraining/b/gpt-ltr"},
            {**base, "variant": "ltr_bilstm", "cell": "pretraining/b/gpt-ltr"},
            {**base, "variant": "mlm_nsp", "metric": "held_out_masked_lm_accuracy",
             "value": 0.28, "cell": "pretraining/b/bert-mlm_nsp-mask80_10_10"}]
    md = "\n".join(study_section(study, rows, [], "out"))
    assert "Pretraining cells: ltr_no_nsp, ltr_bilstm: held_out_lm_perplexity 123.0 (8000 " \
        "steps, 775.4 s); mlm_nsp: held_out_masked_lm_accuracy 0.28 (8000 steps" in md


def test_report_names_the_pretraining_seed_of_each_cell():
    """With two pretraining seeds a variant has two cells: the line tells them apart."""
    study = STUDIES["bert_pretraining_tasks"]
    base = {"study": study.name, "task": "pretraining", "kind": "pretraining",
            "variant": "mlm_nsp", "metric": "held_out_masked_lm_accuracy", "steps": 8000,
            "wall_s": 10.0}
    rows = [{**base, "value": 0.28, "seed": 12345, "pretraining_seed": 12345,
             "cell": "pretraining/b/bert-mlm_nsp-mask80_10_10"},
            {**base, "value": 0.27, "seed": 12346, "pretraining_seed": 12346,
             "cell": "pretraining/b/bert-mlm_nsp-mask80_10_10-pseed12346"}]
    md = "\n".join(study_section(study, rows, [], "out"))
    assert "Pretraining cells: mlm_nsp (pretraining seed 12345): held_out_masked_lm_accuracy " \
        "0.28 (8000 steps, 10.0 s); mlm_nsp (pretraining seed 12346): " \
        "held_out_masked_lm_accuracy 0.27 (8000" in md


@pytest.mark.long
def test_a_run_continues_from_its_exported_cells_elsewhere(tmp_path):
    """`--export_cells`: the finished cells go with only the weights their unfinished readers
    need; copied into a new folder (another machine, a later session), the run goes on from
    them: the data cell is made again (and checked), the unfinished cells run, the finished
    ones are reused with their results unchanged. A pretraining exported without weights
    that a new reader needs stops the run with one line."""
    out, dest, again = (str(tmp_path / n) for n in ("run", "export", "again"))
    variants = "L3_H768_A12,transfer_0"
    options = StudyRunOptions(study="bert_model_size,gpt_transfer_layers", scale="tiny",
                              output_dir=out, variants=variants, pretraining_steps=10,
                              finetuning_epochs=1)
    first = run_study(options, say=lambda s: None)
    store = CellStore(out)

    def folder(root: str, cell: str) -> str:  # "kind/key" -> its folder (under its budget)
        kind, key = cell.split("/", 1)
        (found,) = [k for c, k in store.finished() + [(kind, b + "/" + key) for b in
                    os.listdir(store.path(kind, ""))] if c == kind and k.endswith("/" + key)][:1]
        return os.path.join(root, "cells", kind, found)

    # As if the session ended before the GPT group's zero-shot and one of its fine-tunings.
    unfinished = [c for c in first["ran"] if c.startswith("zero_shot/")] + \
        [c for c in first["ran"] if c.startswith("finetuning/gpt")][:1]
    assert len(unfinished) == 2
    for c in unfinished:
        os.remove(os.path.join(folder(out, c), DONE_FILE))
    said = []
    counts = run_study(dataclasses.replace(options, export_cells=dest), say=said.append)
    assert counts["cells"] == len(first["ran"]) - 2
    exported = CellStore(dest)
    (gpt,) = [c for c in first["ran"] if c.startswith("pretraining/gpt")]
    (bert,) = [c for c in first["ran"] if c.startswith("pretraining/bert")]
    gpt_files = os.listdir(folder(dest, gpt))
    assert "gpt_params" in gpt_files and "pretraining" in gpt_files  # readers left: weights
    assert os.listdir(folder(dest, bert)) == [DONE_FILE]  # none left: no weights
    assert exported.finished()
    assert "the weights of 1 pretrainings with readers left" in said[-1], said
    shutil.copytree(os.path.join(dest, "cells"), os.path.join(again, "cells"))
    second = run_study(dataclasses.replace(options, output_dir=again), say=lambda s: None)
    assert sorted(second["ran"]) == sorted(["data/" + first["ran"][0].split("/", 1)[1]]
                                           + unfinished)
    assert first["ran"][0].startswith("data/")

    def table(rows):
        return sorted((r["kind"], r["variant"], r["task"], str(r.get("seed")), r["value"])
                      for r in rows if r["kind"] not in ("zero_shot",))
    assert table(second["rows"]) == table(
        [r for r in first["rows"] if r["kind"] != "zero_shot"])
    # A new reader of the BERT pretraining exported without weights: one line, not a result.
    (ft,) = [c for c in first["ran"] if c.startswith("finetuning/bert")]
    os.remove(os.path.join(folder(again, ft), DONE_FILE))
    with pytest.raises(StudyError, match=r"finished, but its weights .* are missing"):
        run_study(dataclasses.replace(options, output_dir=again), say=lambda s: None)


@pytest.mark.long
def test_two_processes_share_one_grid_and_run_each_cell_once(tmp_path):
    """The same command started twice on one --output_dir with --threads=1 (one process per
    core: a small cell keeps about one core busy): each cell is run by one process (its
    lock), a process puts off the cells the other runs, both finish with the whole table."""
    out = str(tmp_path / "two")
    args = ["--study=bert_pretraining_tasks", "--scale=tiny", f"--output_dir={out}",
            "--variants=mlm_nsp,no_nsp,no_pretraining", "--threads=1", *FAST]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    procs = [subprocess.Popen([sys.executable, TOOL, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
             for _ in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr[-3000:]
    counts = [_counts(subprocess.CompletedProcess([], 0, stdout, "")) for stdout, _ in outs]
    # 1 data + 2 pretraining + 1 baseline + 3 fine-tuning cells, each run once in all.
    assert sum(ran for ran, _ in counts) == 7, counts
    assert all(ran + reused == 7 for ran, reused in counts), counts
    assert all(ran > 0 for ran, _ in counts), counts  # both did some of the work
    for folder in _done_markers(out):
        with open(os.path.join(folder, "ATTEMPTS.json"), encoding="utf-8") as f:
            assert len(json.load(f)) == 1, folder  # one process ran it, once
    _check_outputs(out, ["bert_pretraining_tasks"], ("mlm_nsp", "no_nsp", "no_pretraining"))


def test_threads_set_both_pools_before_tensorflow_runs_and_refuse_after():
    """--threads: TensorFlow's two thread pools in a fresh process; once TensorFlow has run
    an op they are fixed, and the flag says so in one line instead of being ignored."""
    code = ("import tensorflow as tf\n"
            "from bert_tf.studies.run import set_threads\n"
            "from bert_tf.studies.declarations import StudyError\n"
            "set_threads(1)\n"
            "print(tf.config.threading.get_intra_op_parallelism_threads(),"
            " tf.config.threading.get_inter_op_parallelism_threads())\n"
            "tf.constant(1.0) + 1.0\n"
            "try:\n"
            "    set_threads(2)\n"
            "except StudyError as e:\n"
            "    print('refused:', e)\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "1 1"
    assert lines[1].startswith("refused: --threads=2: TensorFlow has already started")
    with pytest.raises(StudyError, match=r"--threads=-2: expected 0"):
        run_study(StudyRunOptions(study="bert_pretraining_tasks", scale="tiny",
                                  output_dir="unused", threads=-2), say=lambda _: None)
