"""The paper's learning-rate selection: fine-tune once per learning rate, keep the best dev score.

BERT (Devlin et al., 2018, section 4.1) fine-tunes GLUE tasks with each of 5e-5, 4e-5, 3e-5 and
2e-5 and reports the run with the best dev score. `run_sweep` does that for any fine-tuning
script of `tools/` (run_classifier, run_squad, run_ner, run_swag): each run is a separate process
(`python tools/<script>.py <args> --learning_rate=<lr> --output_dir=<root>/lr_<lr>`), so runs do
not share TensorFlow state and a crashed run does not stop the sweep. Its dev results are read
from `eval_results.txt` ("key = value") or `eval_results.json` in the run's directory.

Nothing is deleted: every run keeps its directory. A run whose directory already holds dev
results is not run again (unless `rerun`), so an interrupted sweep resumes. The summary is
written to `<root>/sweep_results.json`.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from typing import Sequence

from absl import logging

from bert_tf.errors import UserInputError
from bert_tf.options import option

PAPER_LEARNING_RATES = (5e-5, 4e-5, 3e-5, 2e-5)

# The dev score the paper reports, by the keys a run's results have (first match wins):
# CoLA Matthews corr.; STS-B Spearman; MRPC/QQP and SQuAD F1; NER (conlleval) F1; else accuracy.
METRIC_PRIORITY = ("mcc", "spearmanr", "f1", "acc", "accuracy", "exact")

SCRIPTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tools")
# An installed wheel carries tools/ as bert_tf/tools/.
PACKAGED_SCRIPTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "tools")


@dataclasses.dataclass
class SweepOptions:
    """One sweep.

    Attributes:
      script: "run_classifier", "run_squad", ... (a script of `tools/`) or a path to a script.
      script_args: the script's other flags (e.g. ["--flagfile=official_configs/tasks/mrpc.flags",
        "--data_dir=..."]); must make it evaluate on dev (--do_eval, or --do_predict on a SQuAD
        dev file). --learning_rate and --output_dir are set per run.
      output_dir: root directory; run i goes to `<output_dir>/lr_<lr>[_seed_<seed>]`.
      learning_rates: the grid (the paper's by default).
      seeds: one run per (learning rate, seed); several seeds = the paper's random restarts.
      metric: the result key to maximise; None picks it from the keys (`METRIC_PRIORITY`).
      rerun: run again even when a run's directory already has dev results.
      python: interpreter for the runs.
      timeout_s: per-run limit (None: none).
    """

    script: str = option("run_classifier", "tools/ script to run (run_classifier, run_squad, "
                         "run_ner, run_swag) or a path to one.")
    script_args: Sequence[str] = option([], positional=True)
    output_dir: str = option(None, "Root directory; one sub-directory per run.", required=True)
    learning_rates: Sequence[float] = PAPER_LEARNING_RATES
    seeds: Sequence[int] | None = None
    metric: str | None = None
    rerun: bool = False
    python: str = sys.executable
    timeout_s: float | None = None


def resolve_script(script: str) -> str:
    """`run_classifier` -> `<project>/tools/run_classifier.py` (or, installed from the wheel,
    `bert_tf/tools/run_classifier.py`); a path is returned as is."""
    if os.path.exists(script):
        return script
    name = script if script.endswith(".py") else script + ".py"
    path = os.path.join(SCRIPTS_DIR, name)
    if not os.path.exists(path):
        path = os.path.join(PACKAGED_SCRIPTS_DIR, name)
    if not os.path.exists(path):
        raise UserInputError(f"--script={script}: no such file, and no {name} in {SCRIPTS_DIR}")
    return path


def _check_script_args(args: Sequence[str]) -> None:
    for arg in args:
        for flag in ("--learning_rate", "--output_dir"):
            if arg == flag or arg.startswith(flag + "="):
                raise UserInputError(f"{arg}: the sweep sets {flag} for every run; leave it out "
                                     "of the script's arguments")


def read_eval_results(run_dir: str) -> dict | None:
    """A run's dev results: `eval_results.json` or `eval_results.txt` ("key = value" lines,
    numbers parsed), or None when neither exists."""
    json_path = os.path.join(run_dir, "eval_results.json")
    txt_path = os.path.join(run_dir, "eval_results.txt")
    if os.path.exists(json_path):
        with open(json_path, encoding="utf-8") as f:
            return json.load(f)
    if os.path.exists(txt_path):
        results = {}
        with open(txt_path, encoding="utf-8") as f:
            for line in f:
                if " = " not in line:
                    continue
                key, value = line.rstrip("\n").split(" = ", 1)
                try:
                    results[key.strip()] = float(value)
                except ValueError:
                    results[key.strip()] = value.strip()
        return results
    return None


def pick_metric(results: dict, metric: str | None = None) -> str:
    """`metric` if given (KeyError listing the keys when absent), else the first key of
    `METRIC_PRIORITY` present in `results`."""
    if metric:
        if metric not in results:
            raise KeyError(f"metric {metric!r} not in the results (keys: {sorted(results)})")
        return metric
    for key in METRIC_PRIORITY:
        if key in results:
            return key
    raise KeyError(f"no known dev metric among {sorted(results)}; pass --metric")


def run_dir_name(learning_rate: float, seed: int | None) -> str:
    name = f"lr_{learning_rate:g}"
    return name if seed is None else f"{name}_seed_{seed}"


def run_sweep(opts: SweepOptions) -> dict:
    """Runs the grid and returns (and writes to `<output_dir>/sweep_results.json`):

      {"script", "metric", "runs": [{"learning_rate", "seed", "output_dir", "score",
        "results", "error", "reused"}], "best": the best run or None}

    A failed run (non-zero exit, no dev results) is recorded with its error and skipped.
    """
    from bert_tf.io_utils import atomic_write_text

    script = resolve_script(opts.script)
    _check_script_args(opts.script_args)
    # `--config=FILE` means absl's `--flagfile=FILE` for every script (not all define the alias).
    script_args = ["--flagfile=" + a[len("--config="):] if a.startswith("--config=") else a
                   for a in opts.script_args]
    if not opts.learning_rates:
        raise UserInputError("no learning rates to sweep")
    os.makedirs(opts.output_dir, exist_ok=True)
    seeds: list[int | None] = list(opts.seeds) if opts.seeds else [None]
    runs = []
    metric = opts.metric
    for learning_rate in opts.learning_rates:
        for seed in seeds:
            run_dir = os.path.join(opts.output_dir, run_dir_name(learning_rate, seed))
            run = {"learning_rate": learning_rate, "seed": seed, "output_dir": run_dir,
                   "score": None, "results": None, "error": None, "reused": False}
            results = None if opts.rerun else read_eval_results(run_dir)
            if results is not None:
                run["reused"] = True
                logging.info("lr=%g seed=%s: reusing the results in %s", learning_rate, seed,
                             run_dir)
            else:
                cmd = [opts.python, script, *script_args,
                       f"--learning_rate={learning_rate!r}", f"--output_dir={run_dir}"]
                if seed is not None:
                    cmd.append(f"--seed={seed}")
                logging.info("Running %s", " ".join(cmd))
                try:
                    proc = subprocess.run(cmd, capture_output=True, text=True,
                                          timeout=opts.timeout_s)
                except subprocess.TimeoutExpired:
                    run["error"] = f"timed out after {opts.timeout_s} s"
                    runs.append(run)
                    continue
                os.makedirs(run_dir, exist_ok=True)
                with open(os.path.join(run_dir, "sweep_run.log"), "w", encoding="utf-8") as f:
                    f.write(proc.stdout + proc.stderr)
                if proc.returncode != 0:
                    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
                    run["error"] = f"exit status {proc.returncode}: {tail[0]}"
                    logging.error("lr=%g seed=%s failed: %s (log: %s)", learning_rate, seed,
                                  run["error"], os.path.join(run_dir, "sweep_run.log"))
                    runs.append(run)
                    continue
                results = read_eval_results(run_dir)
                if results is None:
                    run["error"] = ("the run wrote no eval_results.txt/.json (does it evaluate "
                                    "on dev: --do_eval, or --do_predict on a scored file?)")
                    runs.append(run)
                    continue
            metric = pick_metric(results, metric)
            score = results[metric]
            run["results"] = results
            run["score"] = float(score) if isinstance(score, (int, float)) else None
            logging.info("lr=%g seed=%s: %s = %s", learning_rate, seed, metric, run["score"])
            runs.append(run)
    scored = [r for r in runs if r["score"] is not None and not math.isnan(r["score"])]
    best = max(scored, key=lambda r: r["score"]) if scored else None
    summary = {"script": script, "metric": metric, "runs": runs, "best": best}
    atomic_write_text(os.path.join(opts.output_dir, "sweep_results.json"),
                      json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary
