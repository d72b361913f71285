"""`tools/run_study.py --report_only`: the interim report of a grid from its finished cells.

Fast tests: synthetic cell folders (DONE.json files written here at the paths the real key
functions give, `run.build_grid`) of BERT Table 5 at `small` restricted to SST-2 (its NER and
cloze columns come with it), 2 pretraining x 2 fine-tuning seeds: 52 cells. Nothing is
trained; the per-example scores are made up so that MLM + NSP beats no pretraining by far
(a primary claim that must hold) and MLM + NSP equals MLM only (an expected null).
The long test runs part of a real tiny grid (--variants) and reports the whole study."""
from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from bert_tf.studies.cells import DONE_FILE, CellStore
from bert_tf.studies.declarations import SCALES, STUDIES, StudyError
from bert_tf.studies.run import StudyRunOptions, build_grid, retry_cell, run_study
from bert_tf.studies.statistics import PerExample

STUDY = "bert_pretraining_tasks"
N_DEV = 200  # synthetic dev examples per cell


def _options(out: str, **kw) -> StudyRunOptions:
    return StudyRunOptions(study=STUDY, scale="small", output_dir=out, tasks="SST-2",
                           seeds="1,2", pretraining_seeds=2, report_only=True, **kw)


def _grid(options: StudyRunOptions) -> dict:
    """The grid `run_study` declares for these options (the same scale trim as its own)."""
    scale = dataclasses.replace(SCALES["small"], tasks=options.task_names())
    study = STUDIES[STUDY].at_scale(scale, ())
    return build_grid([study], scale, options.seed_list(), options)


def _correct(rate: float, seed: int) -> dict:
    values = (np.random.default_rng(seed).random(N_DEV) < rate).astype(np.int8)
    return PerExample("correct", values=values).to_json()


# Accuracy of each variant's cells (SST-2, cloze); NER F1 counts likewise.
RATE = {"mlm_nsp": 0.9, "no_nsp": 0.9, "ltr_no_nsp": 0.8, "ltr_bilstm": 0.8,
        "no_pretraining": 0.55}


def _write_cells(out: str, g: dict) -> dict[str, str]:
    """Every cell of the grid, finished: {"kind/key": its DONE.json path}."""
    store = CellStore(out)
    written = {}

    def done(kind: str, key: str, result: dict) -> None:
        path = os.path.join(store.path(kind, f"{g['budget']}/{key}"), DONE_FILE)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({**result, "wall_s": 1.0, "cpu_s": 1.5}, f)
        written[f"{kind}/{key}"] = path

    done("data", "corpus", {"data_dir": "unused"})
    for key, (v, pseed) in g["pre_cells"].items():
        # Under the gate's perplexity (200 BERT, 250 LTR when written) at step 100 of 15,000.
        done("pretraining", key, {"steps": 15000, "curve": [[100, math.log(100.0)]],
                                  "held_out_masked_lm_accuracy": 0.4, "tokens_seen": 10**6})
    for key, task in g["base_cells"].items():
        done("baseline", key, {"task": task, "metric": "f1" if task == "conll2003"
                               else "accuracy", "value": 50.0, "gate": "majority class"})
    for i, (key, (run, task, pseed, seed)) in enumerate(g["ft_cells"].items()):
        rate = RATE[run.name]
        if task == "conll2003":
            counts = np.zeros((N_DEV, 3), np.int64)
            hit = np.random.default_rng(i).random(N_DEV) < rate
            counts[:, 1:] = 1
            counts[:, 0] = hit
            per = PerExample("f1_counts", counts=counts).to_json()
            value = 100.0 * hit.mean()
            metric = "f1"
        else:
            per = _correct(rate, i)
            value = 100.0 * float(np.mean(per["values"]))
            metric = "accuracy"
        done("finetuning", key, {"metric": metric, "value": value, "steps": 10,
                                 "per_example": per})
    for i, (key, (v, pseed)) in enumerate(g["cloze_cells"].items()):
        per = _correct(0.5, 1000 + i)
        done("cloze", key, {"metric": "accuracy", "value": 100.0 * float(np.mean(
            per["values"])), "per_example": per})
    return written


def _claims(rows: list[dict]) -> dict[str, dict]:
    return {r["name"]: r for r in rows if r.get("kind") == "claim"}


def _snapshot(out: str) -> dict[str, tuple[float, int]]:
    found = {}
    for dirpath, _, files in os.walk(os.path.join(out, "cells")):
        for name in files:
            path = os.path.join(dirpath, name)
            found[path] = (os.path.getmtime(path), os.path.getsize(path))
    return found


def test_report_only_marks_pending_cells_and_claims(tmp_path):
    out = str(tmp_path / "grid")
    options = _options(out)
    g = _grid(options)
    written = _write_cells(out, g)
    assert len(written) == 52  # 1 data + 6 pretraining + 3 baselines + 36 fine-tuning + 6 cloze

    # Every cell finished: what the full run's rows give (the same `assemble_rows`).
    full = run_study(options, say=lambda _: None)
    assert (full["finished"], full["total"], full["pending"]) == (52, 52, [])
    full_claims = _claims(full["rows"])
    assert full_claims["t5_pretrained_sst2"]["verdict"] == "holds"
    assert all(c["verdict"] != "pending" for c in full_claims.values())
    with open(full["results_md"], encoding="utf-8") as f:
        complete_md = f.read()
    assert "Interim report" not in complete_md and "pending" not in complete_md
    # An exported folder carries the data cell as EXPECTED.json only: still the complete
    # report (the data cell gives no row), though the count says it is not finished here.
    os.rename(written["data/corpus"], written["data/corpus"] + ".away")
    exported = run_study(options, say=lambda _: None)
    assert (exported["finished"], exported["pending"]) == (51, ["data/corpus"])
    with open(exported["results_md"], encoding="utf-8") as f:
        assert f.read() == complete_md
    os.rename(written["data/corpus"] + ".away", written["data/corpus"])

    # Interim: one no-pretraining SST-2 cell and the second LTR pretraining (and what reads
    # it) not finished yet.
    second = g["pseeds"][1]
    gone = [f"pretraining/{k}" for k, (v, p) in g["pre_cells"].items()
            if v.model == "gpt" and p == second]
    gone += [f"finetuning/{k}" for k, (run, _, p, _) in g["ft_cells"].items()
             if run.model == "gpt" and p == second]
    gone += [f"cloze/{k}" for k, (v, p) in g["cloze_cells"].items()
             if v.model == "gpt" and p == second]
    gone.append(sorted(k for k in written if k.startswith("finetuning/bert-scratch/SST-2/"))[0])
    # The LTR pretraining, 2 variants x 2 tasks x 2 seeds, its cloze cell, 1 scratch cell.
    assert len(gone) == 1 + 2 * 2 * 2 + 1 + 1
    for k in gone:
        os.remove(written[k])
    before = _snapshot(out)
    interim = run_study(options, say=lambda _: None)
    assert _snapshot(out) == before  # read-only on the cells
    assert interim["finished"] == 52 - len(gone) and interim["total"] == 52
    assert sorted(interim["pending"]) == sorted(gone)
    assert interim["hours_left"] > 0
    # Every synthetic cell took 1 s, far under its estimate: the paced hours say so.
    assert 0 < interim["paced_hours_left"] < interim["hours_left"] / 10
    assert set(interim["pace"]) >= {"pretraining", "finetuning", "all"}
    # Every claim is open but the cells no claim reads are moot (LTR + BiLSTM's SST-2 cells,
    # the scratch cell is read by MLM + NSP > no pretraining).
    moot = [k for k in gone if k.startswith("finetuning/gpt-ltr-bilstm-") and "/SST-2/" in k]
    assert moot and interim["open_cells"] == len(gone) - len(moot)
    assert 0 < interim["open_paced_hours_left"] < interim["paced_hours_left"]

    rows = interim["rows"]
    pending = [r for r in rows if r.get("pending")]
    assert {r["cell"].split("/", 2)[0] + "/" + r["cell"].split("/", 2)[2] for r in pending} \
        == set(gone)
    assert all(r["value"] is None for r in pending)  # never a zero
    # An unfinished cell's row names the command that runs it, not the report's.
    assert all("run_study.py" in r["command"] and "--report_only" not in r["command"]
               for r in pending)
    done_rows = [r for r in rows if not r.get("pending")]
    assert done_rows and all(r["cpu_s"] == 1.5 for r in done_rows
                             if r.get("kind") in ("pretraining", "finetuning"))
    claims = _claims(rows)
    for name, c in claims.items():
        sides = {c["better"], c["worse"]}
        waiting = (c["column"] == "SST-2" and "no_pretraining" in sides) or (
            sides & {"ltr_no_nsp", "ltr_bilstm"})
        if waiting:
            assert c["verdict"] == "pending", c
            assert 0 < c["cells_finished"] < c["cells_needed"]
            assert "diff" not in c
        else:  # every cell finished: the full run's verdict and interval
            assert c["verdict"] == full_claims[name]["verdict"], (name, c)
            for field in ("diff", "ci_low", "ci_high"):
                assert c.get(field) == full_claims[name].get(field)
    assert claims["t5_pretrained_sst2"]["reason"] == "5 of 6 cells finished"

    with open(os.path.join(out, "results.md"), encoding="utf-8") as f:
        md = f.read()
    assert f"Interim report: {52 - len(gone)} of 52 cells finished" in md
    assert f"; {interim['paced_hours_left']:.1f} at the pace of the finished cells here " \
        f"(their CPU time, else wall time, / estimated: " in md
    assert f"Of the cells left, {interim['open_cells']} are read by a claim not yet decided " \
        f"({interim['open_paced_hours_left']:.1f} CPU hours at that pace)" in md
    assert "pending (1 of 2 finished)" not in md  # the mean of the finished cells comes first
    assert "(pending: 1 of 2 finished)" in md  # no pretraining's SST-2: one seed of two
    assert "pending (5 of 6 cells finished)" in md  # its claim
    (sst2,) = [line for line in md.splitlines() if line.startswith("- Ordering on SST-2")]
    assert sst2.endswith("pending (left out until all their cells finish): ltr_bilstm, "
                         "ltr_no_nsp, no_pretraining")
    assert "nan" not in md
    assert "15000 steps, 1.0 s (1.5 CPU-s)" in md  # a pretraining cell's time and CPU time
    gate = SCALES["small"].pretraining_gate
    assert f"gate passed (perplexity ≤ {gate.bert_perplexity:g} by step " \
        f"{int(gate.fraction * 15000)}: reached at step 100)" in md
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        assert json.load(f) == json.loads(json.dumps(rows))


def test_pretraining_under_its_gate_waits_for_its_rerun(tmp_path):
    out = str(tmp_path / "grid")
    options = _options(out)
    g = _grid(options)
    written = _write_cells(out, g)
    key = g["pre_key"](next(v for v, _ in g["pre_cells"].values() if v.name == "mlm_nsp"),
                       g["pseeds"][0])
    with open(written[f"pretraining/{key}"], "w", encoding="utf-8") as f:  # never under 200
        json.dump({"steps": 15000, "curve": [[100, math.log(900.0)]], "wall_s": 1.0}, f)
    result = run_study(options, say=lambda _: None)
    lr, retry = retry_cell(key, g["pre_cells"][key][0], SCALES["small"])
    assert retry == f"{key}-lr{lr:g}" and lr < SCALES["small"].pretraining_lr
    assert result["total"] == 53 and result["pending"] == [f"pretraining/{retry}"]
    (row,) = [r for r in result["rows"] if r.get("kind") == "pretraining"
              and r["cell"].endswith(f"/{retry}")]
    assert row["pending"] and row["gate"]["gate_passed"] is False
    # Its fine-tuning cells' pretraining gate is not known: the claims reading them wait.
    assert _claims(result["rows"])["t5_pretrained_sst2"]["verdict"] == "pending"


def test_bad_output_dir_is_one_line(tmp_path):
    missing = str(tmp_path / "nowhere")
    with pytest.raises(StudyError, match=r"^--output_dir=.*nowhere: no such folder") as e:
        run_study(_options(missing))
    assert "\n" not in str(e.value)
    out = str(tmp_path / "other")
    _write_cells(out, _grid(_options(out, seed=7)))  # another grid (seed) in that folder
    with pytest.raises(StudyError, match="holds no finished cell of this grid") as e:
        run_study(_options(out))
    assert "\n" not in str(e.value)
    assert not os.path.exists(os.path.join(out, "results.md"))
    with pytest.raises(StudyError, match="--report_only and --estimate"):
        run_study(_options(out, estimate=True))


@pytest.mark.long
def test_tiny_grid_partly_run_then_reported(tmp_path):
    """A real tiny grid: two variants of BERT Table 5 run (10 pretraining steps), then
    --report_only over the whole study: those rows as the run wrote them, the others
    pending."""
    out = str(tmp_path / "tiny")
    fast = dict(study=STUDY, scale="tiny", output_dir=out, pretraining_steps=10,
                finetuning_epochs=1)
    ran = run_study(StudyRunOptions(**fast, variants="mlm_nsp,no_pretraining"),
                    say=lambda _: None)
    before = _snapshot(out)
    interim = run_study(StudyRunOptions(**fast, report_only=True), say=lambda _: None)
    assert _snapshot(out) == before
    scale = SCALES["tiny"]
    study = STUDIES[STUDY].at_scale(scale, ())
    assert interim["total"] == 1 + 3 + 1 + len(list(study.evaluations(scale)))
    assert interim["finished"] == len(ran["ran"])

    def finished(rows):
        return {(r["variant"], r["task"], r["cell"]): r["value"] for r in rows
                if r.get("kind") in ("finetuning", "pretraining") and not r.get("pending")}

    assert finished(interim["rows"]) == finished(ran["rows"])
    waiting = {r["variant"] for r in interim["rows"] if r.get("pending")}
    assert waiting == {"no_nsp", "ltr_no_nsp", "ltr_bilstm"}
    with open(interim["results_md"], encoding="utf-8") as f:
        md = f.read()
    assert f"{interim['finished']} of {interim['total']} cells finished" in md
    assert "pending (0 of 1)" in md


def test_pace_scales_each_kind_by_its_finished_cells_and_others_by_the_overall():
    from bert_tf.studies.estimate import pace, paced_seconds

    # No CPU time recorded: each kind by its cells' wall time.
    ratios = pace([("pretraining", 100.0, 300.0, None), ("pretraining", 100.0, 500.0, None),
                   ("finetuning", 10.0, 20.0, None), ("baseline", 20.0, 0.0, None)])
    assert ratios == {"pretraining": 4.0, "finetuning": 2.0, "baseline": 0.0,
                      "all": 820.0 / 230.0}
    # A pending kind with no finished cell (cloze) goes at the overall pace.
    assert paced_seconds([("pretraining", 50.0), ("finetuning", 5.0), ("cloze", 23.0)],
                         ratios) == pytest.approx(200.0 + 10.0 + 23.0 * 820.0 / 230.0)
    assert paced_seconds([("finetuning", 5.0)], {}) is None  # nothing finished to pace on


def test_pace_is_cpu_time_where_cells_recorded_it():
    """A cell's wall time counts whatever else ran on the machine (a thrashing neighbour, a
    test suite): where a kind's cells recorded their CPU time, the pace is that, over those
    cells only; a kind none of whose cells recorded it keeps its wall-time pace."""
    from bert_tf.studies.estimate import pace

    ratios = pace([
        # An early cell without CPU time, stretched 10x by other work: left out of its kind.
        ("finetuning", 10.0, 1000.0, None),
        ("finetuning", 10.0, 90.0, 40.0), ("finetuning", 10.0, 300.0, 60.0),
        ("pretraining", 100.0, 700.0, None)])  # no CPU time in this kind: its wall time
    assert ratios["finetuning"] == pytest.approx(100.0 / 20.0)
    assert ratios["pretraining"] == pytest.approx(7.0)
    # Overall: the cells with CPU time (some kind recorded it).
    assert ratios["all"] == pytest.approx(100.0 / 20.0)


def _finished_grid(tmp_path):
    """Every cell of the synthetic grid written: (out, options, g, written, scale, studies)
    as `run_study` declares them."""
    out = str(tmp_path / "grid")
    options = _options(out)
    g = _grid(options)
    written = _write_cells(out, g)
    scale = dataclasses.replace(SCALES["small"], tasks=options.task_names())
    return out, options, g, written, scale, [STUDIES[STUDY].at_scale(scale, ())]


def _moot_of(moot, g: dict) -> dict[str, set]:
    """{variant name: the kinds of its moot jobs} over the fine-tuning and cloze cells."""
    out: dict[str, set] = {}
    for kind, cells in (("finetuning", g["ft_cells"]), ("cloze", g["cloze_cells"])):
        for key, value in cells.items():
            if moot(kind, key):
                out.setdefault(value[0].name, set()).add((kind, _column_of(kind, value)))
    return out


def _column_of(kind: str, value) -> str:
    return "cloze" if kind == "cloze" else value[1]


def test_readers_of_a_variant_not_learned_run_last(tmp_path):
    """A variant whose pretraining and its re-run both finished under the gate cannot win a
    claim any more: every cell whose claims are all decided by that goes to the end of the
    run (`run.moot_jobs`), and so does every cell no claim reads; the others keep their
    place."""
    from bert_tf.studies.run import moot_jobs

    out, options, g, written, scale, studies = _finished_grid(tmp_path)
    seeds = options.seed_list()
    first, second = g["pseeds"]
    by_name = {v.name: v for v, _ in g["pre_cells"].values()}

    def moot_now():
        return moot_jobs(studies, scale, seeds, options, g, CellStore(out), refresh_s=0.0)

    # Every cell passed its gates: only the cells no claim reads (LTR + BiLSTM on SST-2, MLM
    # + NSP on NER and its cloze probe, no pretraining on NER) run last.
    unread = {"ltr_bilstm": {("finetuning", "SST-2")},
              "mlm_nsp": {("finetuning", "conll2003"), ("cloze", "cloze")},
              "no_pretraining": {("finetuning", "conll2003")}}
    moot = moot_now()
    assert _moot_of(moot, g) == unread
    ltr_sst2 = next(k for k, (run, task, _, _) in g["ft_cells"].items()
                    if run.name == "ltr_bilstm" and task == "SST-2")
    assert moot("finetuning", ltr_sst2) == "no claim reads it"
    assert moot("pretraining", g["pre_key"](by_name["mlm_nsp"], second)) is None
    assert moot("baseline", next(iter(g["base_cells"]))) is None

    def fail(variant: str) -> str:
        """Its first pretraining seed's cell under the gate; returns its re-run's DONE.json."""
        v = by_name[variant]
        key = g["pre_key"](v, first)
        with open(written[f"pretraining/{key}"], "w", encoding="utf-8") as f:
            json.dump({"steps": 15000, "curve": [[100, math.log(900.0)]], "wall_s": 1.0}, f)
        path = os.path.join(CellStore(out).path("pretraining", f"{g['budget']}/"
                                                f"{retry_cell(key, v, scale)[1]}"), DONE_FILE)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path

    retry = fail("no_nsp")
    gpt = next(n for n, v in by_name.items() if v.model == "gpt")
    gpt_retry = fail(gpt)
    # The re-runs have not finished: nothing more is moot yet.
    assert _moot_of(moot_now(), g) == unread
    stale = moot_jobs(studies, scale, seeds, options, g, CellStore(out), refresh_s=3600.0)
    assert _moot_of(stale, g) == unread
    for path in (retry, gpt_retry):  # both re-runs finish under the gate as well
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"steps": 15000, "curve": [[100, math.log(800.0)]], "wall_s": 1.0}, f)
    # A reading is kept for `refresh_s`: a grid process sees the failure at its next reading.
    assert _moot_of(stale, g) == unread
    moot = moot_now()
    # MLM only and LTR + BiLSTM (which reads the failed LTR pretraining) are the better side
    # of every claim on LTR, so LTR's cells are moot too although LTR is only a worse side;
    # MLM + NSP > no pretraining on SST-2 is still open.
    moot_of = _moot_of(moot, g)
    assert moot_of.pop("mlm_nsp") == unread["mlm_nsp"]
    assert moot_of.pop("no_pretraining") == unread["no_pretraining"]
    assert moot_of == {"no_nsp": {("finetuning", "SST-2"), ("finetuning", "conll2003"),
                                  ("cloze", "cloze")},
                       "ltr_no_nsp": {("finetuning", "SST-2"), ("finetuning", "conll2003"),
                                      ("cloze", "cloze")},
                       "ltr_bilstm": {("finetuning", "SST-2"), ("finetuning", "conll2003")}}
    reason = moot("finetuning", next(k for k, (run, task, _, _) in g["ft_cells"].items()
                                     if run.name == "ltr_no_nsp" and task == "conll2003"))
    assert reason == ("every claim reading it is decided by its gates "
                      "(t5_bilstm_over_ltr_ner, t5_mlm_over_ltr_ner)")
    assert moot("pretraining", g["pre_key"](by_name["no_nsp"], second))
    assert moot("pretraining", g["pre_key"](by_name[gpt], second))
    assert moot("pretraining", g["pre_key"](by_name["mlm_nsp"], second)) is None


def test_a_cell_under_its_task_gate_decides_its_claims_at_once(tmp_path):
    """One finished cell under its task's baseline decides every claim whose better side (or
    a side of an expected null) it is on: the interim report gives those claims their final
    verdict while other cells are pending, and the cells only they read run last."""
    from bert_tf.studies.run import moot_jobs

    out, options, g, written, scale, studies = _finished_grid(tmp_path)
    cell = {(run.name, task, p, s): k for k, (run, task, p, s) in g["ft_cells"].items()}
    first = g["pseeds"][0]
    under = written[f"finetuning/{cell[('mlm_nsp', 'SST-2', first, 1)]}"]
    with open(under, encoding="utf-8") as f:
        result = json.load(f)
    per = _correct(0.4, 7)  # 40%: under the 50% baseline
    result.update(value=100.0 * float(np.mean(per["values"])), per_example=per)
    with open(under, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.remove(written[f"finetuning/{cell[('no_pretraining', 'SST-2', None, 2)]}"])

    claims = _claims(run_study(options, say=lambda _: None)["rows"])
    assert claims["t5_pretrained_sst2"]["verdict"] == "inconclusive"
    assert claims["t5_pretrained_sst2"]["reason"] == "not learned: mlm_nsp is under its gate"
    assert claims["t5_nsp_sst2"]["reason"] == "not learned: a side is under its gate"
    assert claims["t5_mlm_vs_ltr_sst2"]["verdict"] != "pending"  # its cells are all there

    moot = moot_jobs(studies, scale, options.seed_list(), options, g, CellStore(out),
                     refresh_s=0.0)
    assert moot("finetuning", cell[("no_pretraining", "SST-2", None, 2)]) == (
        "every claim reading it is decided by its gates (t5_pretrained_sst2)")
    assert moot("finetuning", cell[("mlm_nsp", "SST-2", first, 2)])
    # MLM only's SST-2 cells still feed MLM vs LTR on SST-2 (an open expected null).
    assert moot("finetuning", cell[("no_nsp", "SST-2", first, 1)]) is None

    # The same grid with that cell above its gate: the claim waits for the missing cell.
    result.update(value=90.0, per_example=_correct(0.9, 7))
    with open(under, "w", encoding="utf-8") as f:
        json.dump(result, f)
    claims = _claims(run_study(options, say=lambda _: None)["rows"])
    assert claims["t5_pretrained_sst2"]["verdict"] == "pending"
    assert moot("finetuning", cell[("no_pretraining", "SST-2", None, 2)]) is None


def test_run_jobs_puts_moot_jobs_last_and_busy_ones_off(monkeypatch):
    """The grid's loop (`run.run_jobs`): moot jobs after every other one, in their order; a
    busy cell (another process runs it) is retried on the next pass, never skipped."""
    from bert_tf.studies import run as study_run
    from bert_tf.studies.cells import CellBusy

    monkeypatch.setattr(study_run, "BUSY_POLL_S", 0.0)
    ran, busy = [], {("finetuning", "b"): 2}  # busy on its first two tries

    def job(kind):
        def fn(key):
            if busy.get((kind, key), 0) > 0:
                busy[(kind, key)] -= 1
                raise CellBusy(key)
            ran.append(f"{kind}/{key}")
        return fn

    jobs = {k: job(k) for k in ("pretraining", "finetuning", "cloze")}
    queue = [("pretraining", "p"), ("finetuning", "a"), ("pretraining", "p2"),
             ("finetuning", "b"), ("cloze", "c2"), ("finetuning", "d")]
    moot = {("pretraining", "p2"): "p-first", ("cloze", "c2"): "p-first"}
    said, waits = [], []
    study_run.run_jobs(list(queue), jobs, lambda kind, key: moot.get((kind, key)),
                       said.append, waits.append)
    assert ran == ["pretraining/p", "finetuning/a", "finetuning/d", "finetuning/b",
                   "pretraining/p2", "cloze/c2"]
    assert said == ["pretraining/p2 runs last, and every cell moot for the same reason (it "
                    "cannot change a verdict): p-first"]
    assert waits == [1]  # the pass where "b" was the only job left, and busy


def test_nothing_is_moot_at_a_scale_without_a_pretraining_gate(tmp_path):
    """The tiny scale has no pretraining gate: no job is put off, whatever is finished."""
    from bert_tf.studies.run import moot_jobs

    options = StudyRunOptions(study=STUDY, scale="tiny", output_dir=str(tmp_path / "t"))
    tiny = SCALES["tiny"]
    assert tiny.pretraining_gate is None
    studies = [STUDIES[STUDY].at_scale(tiny, ())]
    seeds = options.seed_list() if options.seeds.strip() else list(tiny.finetuning_seeds)
    g = build_grid(studies, tiny, seeds, options)
    store = CellStore(options.output_dir)
    for key in g["pre_cells"]:  # finished, with a curve far above any threshold
        path = os.path.join(store.path("pretraining", f"{g['budget']}/{key}"), DONE_FILE)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"steps": 150, "curve": [[10, math.log(5000.0)]], "wall_s": 1.0}, f)
    moot = moot_jobs(studies, tiny, seeds, options, g, store)
    jobs = [("pretraining", k) for k in g["pre_cells"]] + \
        [("finetuning", k) for k in g["ft_cells"]] + [("cloze", k) for k in g["cloze_cells"]]
    assert jobs and all(moot(kind, key) is None for kind, key in jobs)


def test_publication_block_and_the_cells_of_each_study(tmp_path):
    """`--publish_doc`: the block between the markers of a markdown file is the run's (every
    claim with its verdict and interval, the totals, links into results.md), the rest of the
    file byte for byte as it was, again the same when published twice; results.md gives
    every cell of a study once, with its gate, baseline and times, and the study's command;
    the claims are plotted with their intervals."""
    from bert_tf.studies import report

    out, options, g, written, scale, studies = _finished_grid(tmp_path)
    doc = tmp_path / "docs" / "studies.md"
    doc.parent.mkdir()
    head, tail = "# Studies\n\nmy own words\n\n", "\n## After\n\nkept\n"
    doc.write_text(head + report.PUBLICATION_BEGIN + "\nold text\n" + report.PUBLICATION_END
                   + tail, encoding="utf-8")
    result = run_study(dataclasses.replace(options, publish_doc=str(doc)), say=lambda _: None)
    text = doc.read_text(encoding="utf-8")
    assert text.startswith(head + report.PUBLICATION_BEGIN + "\n")
    assert text.endswith(report.PUBLICATION_END + tail)
    assert "old text" not in text
    assert "interim report" not in text.lower()  # every cell finished: the complete report
    link = os.path.relpath(os.path.join(out, "results.md"), str(doc.parent))
    study = STUDIES[STUDY]
    assert f"[{study.title.split(':')[0]}]({link}#{report.github_anchor(study.title)})" in text
    claims = _claims(result["rows"])
    held = claims["t5_pretrained_sst2"]
    assert held["verdict"] == "holds"
    (line,) = [x for x in text.splitlines() if held["text"] in x]
    assert f"| {held['diff']:+.2f} [{held['ci_low']:+.1f}, {held['ci_high']:+.1f}] |" in line
    assert line.endswith("| **holds** |")
    counts = {}
    for c in claims.values():
        counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    assert f"**{len(claims)} claims: " in text
    assert all(f"{v}: {n}" in text for v, n in counts.items())
    assert f"]({os.path.relpath(os.path.join(out, 'claims.png'), str(doc.parent))})" in text
    assert os.path.isfile(os.path.join(out, "claims.png"))
    assert os.path.isfile(os.path.join(out, f"{STUDY}_claims.png"))
    run_study(dataclasses.replace(options, publish_doc=str(doc)), say=lambda _: None)
    assert doc.read_text(encoding="utf-8") == text

    md = open(os.path.join(out, "results.md"), encoding="utf-8").read()
    assert "## Every claim" in md and line.split("|", 2)[2] in md  # the same row, unlinked
    rows = md.split("<details>", 1)[1].split("</details>", 1)[0].splitlines()
    table = [r for r in rows if r.startswith("| ") and not r.startswith("| Variants")]
    cells = {r["cell"] for r in result["rows"] if r.get("kind") not in ("claim", "epoch")}
    assert len(table) == len(cells)  # each cell once: a shared pretraining too
    shared = [r for r in table if "| pretraining |" in r and "ltr_no_nsp, ltr_bilstm" in r]
    assert len(shared) == 2  # the LTR pretraining of each pretraining seed
    sst2 = [r for r in table if "| SST-2 |" in r]
    assert sst2 and all("| 50.00 (majority class) | passed | 1.0 s" in r or
                        "(majority class) | passed |" in r for r in sst2)
    assert f"`python tools/run_study.py --study={STUDY} --scale=small --output_dir=OUT`" in md
    # The synthetic cells recorded no command: the report does not lend them its own.
    (command,) = {x for x in md.splitlines() if x.startswith("Commands: ")}
    assert "--report_only" not in command and "run by" not in command


def test_publish_doc_without_its_markers_is_one_line_before_anything_is_written(tmp_path):
    out, options, *_ = _finished_grid(tmp_path)
    doc = tmp_path / "plain.md"
    doc.write_text("# no markers\n", encoding="utf-8")
    for path in (str(doc), str(tmp_path / "missing.md")):
        with pytest.raises(StudyError, match=r"^--publish_doc=.*: ") as e:
            run_study(dataclasses.replace(options, publish_doc=path), say=lambda _: None)
        assert "\n" not in str(e.value)
    assert not os.path.exists(os.path.join(out, "results.md"))
    assert doc.read_text(encoding="utf-8") == "# no markers\n"


def test_cell_gate_words_time_totals_and_anchors():
    from bert_tf.studies import report

    assert report._cell_gate({"kind": "finetuning", "gate_passed": False,
                              "pretraining_gate_passed": True}) == \
        "NOT passed (under the baseline)"
    assert report._cell_gate({"kind": "finetuning", "gate_passed": False,
                              "pretraining_gate_passed": False}) == \
        "NOT passed (its pretraining is under its gate)"
    assert report._cell_gate({"kind": "finetuning", "pending": True}) == "pending"
    rows = [{"cell": "p", "kind": "pretraining", "wall_s": 100.0, "cpu_s": None},
            {"cell": "p", "kind": "pretraining", "wall_s": 100.0, "cpu_s": None},  # shared
            {"cell": "f1", "kind": "finetuning", "wall_s": 10.0, "cpu_s": 8.0},
            {"cell": "f2", "kind": "finetuning", "pending": True},
            {"cell": "f1", "kind": "epoch", "wall_s": 10.0},
            {"kind": "claim"}]
    totals = report.time_totals(rows)
    assert totals["pretraining"] == {"cells": 1, "finished": 1, "wall_s": 100.0, "cpu_s": 0.0,
                                     "cpu_cells": 0}
    assert totals["finetuning"] == {"cells": 2, "finished": 1, "wall_s": 10.0, "cpu_s": 8.0,
                                    "cpu_cells": 1}
    assert report.github_anchor("BERT Table 8: masking strategies (MASK / SAME / RND)") == \
        "bert-table-8-masking-strategies-mask--same--rnd"


def test_claims_plot_of_an_earlier_report_goes_when_no_claim_keeps_an_interval(tmp_path):
    """A claims plot shows intervals; when a later report has none (every claim pending or not
    learned), the plot an earlier report wrote is removed instead of left stale, and files
    beside it are untouched."""
    from bert_tf.studies import report

    path = str(tmp_path / "s_claims.png")
    beside = tmp_path / "notes.txt"
    beside.write_text("mine", encoding="utf-8")
    with_ci = [{"text": "a > b", "verdict": "holds", "diff": 2.0, "ci_low": 1.0, "ci_high": 3.0,
                "paper_effect": 2.5}]
    assert report.plot_claims(path, with_ci, "s") == path
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    without = [{"text": "a > b", "verdict": "pending"}]
    assert report.plot_claims(path, without, "s") is None
    assert not os.path.exists(path)
    assert beside.read_text(encoding="utf-8") == "mine"
    assert report.plot_claims(path, without, "s") is None  # nothing to remove: no error
