"""The learning-rate sweep: one run per rate (separate processes), best dev score kept, resume
without re-running, failed runs recorded, flags the sweep owns refused."""
from __future__ import annotations

import json
import sys
import textwrap

import pytest

from bert_tf.tasks import sweep

# A stand-in fine-tuning script: dev F1 peaks at lr 3e-5, lr 4e-5 crashes.
FAKE_SCRIPT = textwrap.dedent("""
    import os, sys
    args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
    if "flagfile" in args:
        args.update(l[2:].strip().split("=", 1) for l in open(args["flagfile"]) if l.strip())
    lr = float(args["learning_rate"])
    if lr == 4e-5:
        sys.exit("diverged")
    os.makedirs(args["output_dir"], exist_ok=True)
    with open(os.path.join(args["output_dir"], "eval_results.txt"), "w") as f:
        f.write(f"acc = 0.5\\nf1 = {1.0 - abs(lr - 3e-5) * 1e4}\\nglobal_step = 10\\n")
    with open(os.path.join(args["output_dir"], "calls"), "a") as f:
        f.write(args["task"] + "\\n")
""")


def test_sweep_keeps_the_best_and_resumes(tmp_path):
    script = tmp_path / "fake_run.py"
    script.write_text(FAKE_SCRIPT)
    flagfile = tmp_path / "task.flags"
    flagfile.write_text("--task=mrpc\n")
    opts = sweep.SweepOptions(script=str(script), script_args=[f"--config={flagfile}"],
                              output_dir=str(tmp_path / "sweep"))
    summary = sweep.run_sweep(opts)
    assert summary["metric"] == "f1"  # MRPC's reported metric, picked from the keys
    assert [r["learning_rate"] for r in summary["runs"]] == [5e-5, 4e-5, 3e-5, 2e-5]
    assert summary["best"]["learning_rate"] == 3e-5
    assert summary["best"]["output_dir"] == str(tmp_path / "sweep" / "lr_3e-05")
    failed = summary["runs"][1]
    assert failed["score"] is None and "exit status 1: diverged" in failed["error"]
    assert "diverged" in (tmp_path / "sweep" / "lr_4e-05" / "sweep_run.log").read_text()
    written = json.loads((tmp_path / "sweep" / "sweep_results.json").read_text())
    assert written["best"]["score"] == pytest.approx(1.0)
    # Run again: finished runs are reused, only the failed one runs again.
    again = sweep.run_sweep(opts)
    assert [r["reused"] for r in again["runs"]] == [True, False, True, True]
    assert (tmp_path / "sweep" / "lr_3e-05" / "calls").read_text() == "mrpc\n"
    # Seeds: one run per (lr, seed).
    seeded = sweep.run_sweep(sweep.SweepOptions(
        script=str(script), script_args=["--task=x"], output_dir=str(tmp_path / "s2"),
        learning_rates=[2e-5], seeds=[1, 2], metric="acc"))
    assert [r["output_dir"].rsplit("/", 1)[1] for r in seeded["runs"]] == [
        "lr_2e-05_seed_1", "lr_2e-05_seed_2"]
    assert seeded["metric"] == "acc"


def test_sweep_errors(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        sweep.run_sweep(sweep.SweepOptions("run_nothing", [], str(tmp_path)))
    with pytest.raises(ValueError, match="--learning_rate=1e-5: the sweep sets"):
        sweep.run_sweep(sweep.SweepOptions(__file__, ["--learning_rate=1e-5"], str(tmp_path)))
    assert sweep.resolve_script("run_classifier").endswith("tools/run_classifier.py")
    assert sweep.pick_metric({"pearson": 1, "spearmanr": 0.5, "corr": 0.7}) == "spearmanr"
    assert sweep.pick_metric({"mcc": 0.1, "eval_loss": 2}) == "mcc"
    assert sweep.pick_metric({"exact_match": 80, "f1": 88}) == "f1"
    with pytest.raises(KeyError, match="no known dev metric"):
        sweep.pick_metric({"eval_loss": 1.0})
