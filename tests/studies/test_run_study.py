"""tools/run_study.py end to end at the tiny scale (real processes, the embedded corpus, real
configs with dropout 0.1): the table has every variant and task with finite scores, the plots
exist, a re-run reuses every finished cell, and a cell whose run was killed (no done-marker,
a partial folder) is run again and never counted as done."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import pytest

from bert_tf.studies import STUDIES
from bert_tf.studies.cells import DONE_FILE, CellStore
from bert_tf.studies.declarations import SCALES, StudyError
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


def _check_outputs(out: str, study_names: list[str]) -> list[dict]:
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        rows = json.load(f)
    with open(os.path.join(out, "results.md"), encoding="utf-8") as f:
        md = f.read()
    for name in study_names:
        study = STUDIES[name]
        assert study.title in md
        for v in study.variants:
            assert v.label in md
            got = [r for r in rows if r["study"] == name and r["variant"] == v.name
                   and r["task"] == "topic"]
            assert len(got) == 1, (name, v.name)
            r = got[0]
            assert r["metric"] == "accuracy" and math.isfinite(r["value"])
            assert 0.0 <= r["value"] <= 100.0
            for key in ("seed", "steps", "wall_s", "command"):
                assert r[key] not in (None, ""), key
            assert r["steps"] > 0 and "run_study" in r["command"]
            if v.pretrained:
                pre = [p for p in rows if p["study"] == name and p["variant"] == v.name
                       and p["task"] == "pretraining"]
                assert len(pre) == 1 and math.isfinite(pre[0]["value"])
        for column in study.paper_columns:
            assert f"{column} (paper)" in md
        assert f"Ordering on topic" in md
        for png in (f"{name}_scores.png",):
            with open(os.path.join(out, png), "rb") as f:
                assert f.read(8) == b"\x89PNG\r\n\x1a\n", png
    return rows


def test_declarations_are_distinct_and_bad_input_is_one_line(tmp_path):
    # Variants sharing a run share its cell, the others never do.
    for study in STUDIES.values():
        keys = [(v.finetuning_key) for v in study.variants]
        assert len(set(keys)) == len(keys), study.name
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
        run_study(StudyRunOptions(study="bert_masking", scale="small", data_dir=str(data_dir),
                                  output_dir=str(tmp_path / "o")))
    with pytest.raises(StudyError, match="imdb_unsup_corpus.txt.gz: not found"):
        run_study(StudyRunOptions(study="gpt_ablations", scale="small",
                                  data_dir=str(tmp_path / "none"),
                                  output_dir=str(tmp_path / "o")))
    with pytest.raises(StudyError, match="--seeds='1,x'"):
        run_study(StudyRunOptions(study="all", seeds="1,x", output_dir=str(tmp_path / "o")))
    assert not (tmp_path / "o").exists()  # nothing written for a bad command
    listed = []
    run_study(StudyRunOptions(list=True), say=listed.append)
    for name in [*STUDIES, *SCALES]:
        assert name in listed[0]


def test_tiny_study_runs_resumes_and_reruns_killed_cells(tmp_path):
    out = str(tmp_path / "study")
    proc = _run("--study=bert_pretraining_tasks", "--scale=tiny", f"--output_dir={out}", *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # 1 data + 3 pretraining (MLM+NSP, MLM only, LTR) + 5 fine-tuning cells.
    assert _counts(proc) == (9, 0)
    assert "cell/s" in proc.stderr or "s/cell" in proc.stderr  # the progress bar with ETA
    rows = _check_outputs(out, ["bert_pretraining_tasks"])
    assert os.path.exists(os.path.join(out, "bert_pretraining_tasks_pretraining.png"))
    markers = _done_markers(out)
    assert len(markers) == 9

    # A re-run reuses every finished cell: nothing is run, no marker is rewritten.
    proc = _run("--study=bert_pretraining_tasks", "--scale=tiny", f"--output_dir={out}", *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _counts(proc) == (0, 9)
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
    assert _counts(proc) == (2, 7)
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
    # 1 data + 8 pretraining (BERT MLM+NSP, MLM only, 5 other masks; GPT) + 12 fine-tuning.
    assert (ran, reused) == (21, 0)
    _check_outputs(out, list(STUDIES))
