"""The studies' two-phase pretraining (BERT's 90% of the steps at a short length, the last 10%
at the full length; `Scale.short_seq_length`): the phases' steps and tokens, the cell keys,
one learning-rate schedule across the phase boundary, and a cell killed in either phase
resuming to the unkilled run's weights (tiny models on the embedded corpus)."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from bert_tf.studies.declarations import SCALES
from bert_tf.studies.run import StudyRunOptions, _budget_key, run_study


def test_small_phases_hold_the_one_phase_token_budget():
    small = SCALES["small"]
    assert small.pretraining_phases() == ((13500, 64), (1500, 192))
    # The one-phase budget it replaces: 6,000 steps x 32 x 192.
    assert small.pretraining_tokens == 6000 * 32 * 192 == 13500 * 32 * 64 + 1500 * 32 * 192
    one = dataclasses.replace(small, short_seq_length=0, pretraining_steps=6000)
    assert one.pretraining_phases() == ((6000, 192),)
    assert one.pretraining_tokens == small.pretraining_tokens
    # The gate reads 30% of the TOTAL steps at small (step 4,500; docs/studies.md).
    assert int(small.pretraining_gate.fraction * small.pretraining_steps) == 4500
    # Other scales keep one phase.
    for name in ("tiny", "small_v1", "base"):
        assert len(SCALES[name].pretraining_phases()) == 1, name


def test_two_phase_cells_are_keyed_apart_from_one_phase_cells():
    small = SCALES["small"]
    key = _budget_key(small, 12345)
    assert key == "small-L2H128-s192-short64x13500-p15000x32-seed12345"
    one = dataclasses.replace(small, short_seq_length=0)
    assert "short" not in _budget_key(one, 12345)
    assert _budget_key(dataclasses.replace(small, pretraining_steps=6000), 12345) != key


def test_one_learning_rate_schedule_across_the_phase_boundary():
    """The BERT cell's optimizer schedule is built once over the total steps; the GPT cell's
    OpenAIAdam gets t_total = the total steps: both continue through the boundary."""
    from bert_tf.training.optimization import WarmupPolynomialDecay
    from bert_tf.training.openai_adam import OpenAIAdam

    small = SCALES["small"]
    total, (first, _) = small.pretraining_steps, small.pretraining_phases()
    short = first[0]
    bert = WarmupPolynomialDecay(small.pretraining_lr, total, total // 10)
    lrs = [float(bert(s)) for s in (short - 1, short, short + 1)]
    step = lrs[1] - lrs[0]
    assert lrs[2] - lrs[1] == pytest.approx(step, rel=1e-3)  # no jump, no restart
    assert lrs[1] == pytest.approx(small.pretraining_lr * (1 - short / total), rel=1e-4)
    gpt = OpenAIAdam(small.pretraining_lr, t_total=total, schedule="warmup_linear",
                     warmup=0.1)
    assert gpt is not None  # its schedule reads t_total (the tiny run below records both)


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    from bert_tf.studies import data as study_data

    folder = str(tmp_path_factory.mktemp("data"))
    scale = SCALES["tiny"]
    return {**study_data.prepare_corpus(folder, scale, "", 12345), "data_dir": folder}


def _tiny_two_phase():
    return dataclasses.replace(SCALES["tiny"], pretraining_steps=20, short_seq_length=32,
                               short_fraction=0.9, dupe_factor=1)


def _weights(path: str) -> dict:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


@pytest.mark.long
@pytest.mark.parametrize("model", ["bert", "gpt"])
def test_a_cell_killed_in_either_phase_resumes_to_the_same_weights(tmp_path, tiny_data, model):
    from bert_tf.studies import cell_runs
    from bert_tf.studies.declarations import Variant
    from bert_tf.studies.gates import pretraining_gate

    scale = _tiny_two_phase()
    (p1, s1), (p2, s2) = scale.pretraining_phases()
    assert (p1, s1, p2, s2) == (18, 32, 2, 64)
    variant = Variant("m", "m", model=model)

    def run(folder: str, stop=None):
        os.makedirs(folder, exist_ok=True)
        if model == "gpt":
            return cell_runs.pretrain_gpt(folder, scale, tiny_data, 12345, stop_after_step=stop)
        return cell_runs.pretrain_bert(folder, variant, scale, tiny_data, 12345,
                                       stop_after_step=stop)

    whole = run(str(tmp_path / "whole"))
    assert whole["steps"] == 20
    assert whole["tokens_seen"] == 18 * 32 * 32 + 2 * 32 * 64
    assert [p["max_seq_length"] for p in whole["phases"]] == [32, 64]
    assert [p["steps"] for p in whole["phases"]] == [18, 2]
    # Both phases' curves, in global steps.
    first, second = whole["phase_curves"]
    assert first and second and first[-1][0] <= 18 < second[0][0] and second[-1][0] == 20
    # One schedule: the recorded learning rate warms up once (2 steps) and decays linearly to
    # 0 at step 20 through the boundary (no restart).
    lr = sorted(whole["learning_rate_curve"])
    peak = scale.pretraining_lr
    assert max(v for _, v in lr) <= peak * 1.0001
    # After the warm-up (2 steps, 10% of the total), every point lies on the one line
    # peak x (1 - (step - c) / 20) with one offset c for both phases (c: where the loop
    # reads the schedule within a step): a schedule restarted at step 18 would not.
    after = [(st, v) for st, v in lr if st >= 5]
    assert after[0][0] < 18 < after[-1][0]
    offsets = {round(st - 20 * (1 - v / peak), 2) for st, v in after}
    assert len(offsets) == 1 and offsets <= {0.0, 1.0, 2.0}, after
    gate = pretraining_gate(scale.pretraining_gate, model, whole["curve"], whole["steps"])
    assert gate["gate_passed"]  # tiny has no gate

    for stop in (7, 19):  # killed in phase 1, and in phase 2
        folder = str(tmp_path / f"killed{stop}")
        assert run(folder, stop) is None
        resumed = run(folder)
        assert resumed["steps"] == 20
        if model == "gpt":
            a = _weights(os.path.join(str(tmp_path / "whole"), "pretraining", "model.ckpt-20"))
            b = _weights(os.path.join(folder, "pretraining", "model.ckpt-20"))
        else:
            a, b = _weights(whole["checkpoint"]), _weights(resumed["checkpoint"])
        assert a.keys() == b.keys()
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"{stop}: {name}")


def test_estimate_counts_both_phases():
    out = run_study(StudyRunOptions(study="bert_pretraining_tasks", scale="small",
                                    estimate=True), say=lambda s: None)
    pre = [c for c in out["estimate"] if c.kind == "pretraining"]
    assert pre
    one = dataclasses.replace(SCALES["small"], short_seq_length=0, pretraining_steps=6000)
    from bert_tf.studies.estimate import pretraining_seconds

    # The short phase is cheaper per token (attention's S^2 share): the two-phase estimate is
    # under the one-phase one at equal tokens.
    two = pretraining_seconds(SCALES["small"], 2, 128, "bert")
    assert two < pretraining_seconds(one, 2, 128, "bert")


def test_the_primary_claims_groups_run_first_each_pretraining_with_its_readers():
    """`--estimate` gives the run's order: each pretraining with the cells that read it (a
    group, contiguous, the pretraining first), the groups a primary claim reads before any
    other, the first pretraining seed's groups before the second's."""
    from bert_tf.studies.declarations import CLAIMS
    from bert_tf.studies.run import build_grid, pretraining_readers

    options = StudyRunOptions(study="all", scale="small", estimate=True)
    out = run_study(options, say=lambda s: None)
    order = out["order"]
    flags = [primary for _, _, primary in order]
    first_other = flags.index(False)
    assert any(flags) and not any(flags[first_other:])
    assert len(set(key for _, key, _ in order)) == len(order)
    position = {(k, key): i for i, (k, key, _) in enumerate(order)}
    primary_keys = [key for _, key, p in order if p]
    # The primary claims' variants are all there: e.g. Table 5's pretrained vs none on SQuAD,
    # MLM vs LTR on NER, Table 7's fine-tuned vs embeddings-only.
    assert any("/SQuAD/" in k and k.startswith("bert-scratch") for k in primary_keys)
    assert any(k.startswith("gpt-ltr") and "/conll2003/" in k for k in primary_keys)
    assert any("features-embeddings" in k for k in primary_keys)
    # Table 8's 100/0/0 and 0/0/100 pretrainings no primary claim reads come later.
    assert all("mask100_0_0" not in k and "mask0_0_100" not in k for k in primary_keys)
    assert sum(1 for c in CLAIMS if c.primary) >= 10
    # Each pretraining's readers right after it, together: no other group's cell between.
    scale = dataclasses.replace(SCALES["small"])
    g = build_grid(*_studies_at(scale), scale, list(scale.finetuning_seeds), options)
    readers = pretraining_readers(g, options)
    assert sum(len(r) for r in readers.values()) > 100
    for pre, cells in readers.items():
        at = [position[c] for c in cells]
        start = position[("pretraining", pre)]
        assert cells and min(at) > start, pre
        assert max(at) - start == len(cells), f"{pre}: its readers are not contiguous"
    # Within a group, the forward-only readers (held-out, cloze, zero-shot) before any
    # fine-tuning: the zero-shot cell ends the need for a GPT run's kept checkpoints early.
    for pre, cells in readers.items():
        kinds = [k for k, _ in sorted(cells, key=lambda c: position[c])]
        forward = [i for i, k in enumerate(kinds) if k in ("held_out", "cloze", "zero_shot")]
        tuned = [i for i, k in enumerate(kinds) if k == "finetuning"]
        assert not forward or not tuned or max(forward) < min(tuned), (pre, kinds)
    assert any(k == "zero_shot" for cells in readers.values() for k, _ in cells)
    # The first pretraining seed's groups before the second's, within the primary ones.
    seeds = ["-pseed" in key for _, key, p in order if p]
    assert seeds.index(True) > 0 and not any(
        not s for s in seeds[seeds.index(True):]), "second pretraining seed's cells last"
    assert order[0][0] == "pretraining"


def _studies_at(scale):
    from bert_tf.studies.declarations import STUDIES

    studies = [s.at_scale(scale, ()) for s in STUDIES.values()]
    return ([s for s in studies if s.variants],)


@pytest.mark.long
@pytest.mark.parametrize("model", ["bert", "gpt"])
def test_a_first_attempt_stops_at_its_gate_only_when_under_it(tmp_path, tiny_data, model):
    """`stop_at_gate`: a run under its gate stops at the gate's step (its curve so far, no
    checkpoint); a run over it goes on, to the weights of a run without the stop."""
    from bert_tf.studies import cell_runs
    from bert_tf.studies.declarations import Variant
    from bert_tf.studies.gates import PretrainingGate, pretraining_gate

    base = _tiny_two_phase()  # 20 steps: 18 at length 32, 2 at 64; the gate at 50% = step 10
    never = dataclasses.replace(base, pretraining_gate=PretrainingGate(1.0, 1.0, fraction=0.5))
    always = dataclasses.replace(base, pretraining_gate=PretrainingGate(1e12, 1e12,
                                                                        fraction=0.5))
    assert cell_runs.gate_step(never) == 10 and cell_runs.gate_step(base) is None
    variant = Variant("m", "m", model=model)

    def run(name: str, scale, stop_at_gate: bool):
        folder = str(tmp_path / name)
        os.makedirs(folder, exist_ok=True)
        if model == "gpt":
            return folder, cell_runs.pretrain_gpt(folder, scale, tiny_data, 12345,
                                                  stop_at_gate=stop_at_gate)
        return folder, cell_runs.pretrain_bert(folder, variant, scale, tiny_data, 12345,
                                               stop_at_gate=stop_at_gate)

    folder, stopped = run("under", never, True)
    assert stopped["stopped_at_gate"] == 10 and stopped["steps"] == 20
    assert stopped["curve"] and max(s for s, _ in stopped["curve"]) <= 10
    assert not stopped["gate"]["gate_passed"] and stopped["gate"]["by_step"] == 10
    # The study's own reading of the cell (run.py) agrees: under its gate, so re-run.
    assert not pretraining_gate(never.pretraining_gate, model, stopped["curve"],
                                stopped["steps"])["gate_passed"]
    assert "checkpoint" not in stopped and "params" not in stopped
    assert not os.path.exists(os.path.join(folder, "bert_model.ckpt.index"))
    assert not os.path.exists(os.path.join(folder, "gpt_params"))

    _, passed = run("over", always, True)
    _, plain = run("plain", always, False)
    assert "stopped_at_gate" not in passed and passed["steps"] == 20
    assert passed["curve"] == plain["curve"]
    if model == "gpt":
        a = _weights(os.path.join(str(tmp_path / "over"), "pretraining", "model.ckpt-20"))
        b = _weights(os.path.join(str(tmp_path / "plain"), "pretraining", "model.ckpt-20"))
    else:
        a, b = _weights(passed["checkpoint"]), _weights(plain["checkpoint"])
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
