"""`tools/run_study.py`: runs studies (declared grids of pretraining variants x fine-tuning
tasks) cell by cell, cached on disk, with a progress bar over the cells, then writes
results.json, results.md and the plots.

    python tools/run_study.py --list
    python tools/run_study.py --study=bert_pretraining_tasks --scale=tiny --output_dir=out
    python tools/run_study.py --study=all --scale=small --data_dir=../shared/data \
        --output_dir=studies_small --seeds=1,2,3
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import time
from typing import Callable

from bert_tf.options import option
from bert_tf.studies.cells import CellStore
from bert_tf.studies.declarations import (SCALES, STUDIES, Study, StudyError, get_scale,
                                          get_study)


@dataclasses.dataclass(kw_only=True)
class StudyRunOptions:
    """Flags of tools/run_study.py."""

    study: str = option("", "Study to run (see --list), or 'all'.")
    scale: str = option("tiny", "Budget: tiny (embedded corpus, minutes), small "
                        "(../shared/data, hours on a CPU) or base (the papers' sizes).")
    output_dir: str = option("", "Folder of the cells, results.json, results.md and plots. "
                             "Finished cells there are reused; unfinished ones are run again.")
    seeds: str = option("1", "Fine-tuning seeds, comma-separated (each cell runs once per "
                        "seed; the table gives mean ± spread).")
    data_dir: str = option("../shared/data", "Folder holding pretrain/ and glue/ (small and "
                           "base scales).")
    pretraining_steps: int = option(0, "Override the scale's pretraining steps (0: the "
                                    "scale's).")
    finetuning_epochs: float = option(0.0, "Override the scale's fine-tuning epochs (0: the "
                                      "scale's).")
    seed: int = option(12345, "Seed of the data, the pretraining data and the pretraining.")
    list: bool = option(False, "List the studies and scales, run nothing.")

    def seed_list(self) -> list[int]:
        try:
            seeds = [int(s) for s in self.seeds.split(",") if s.strip()]
        except ValueError:
            seeds = []
        if not seeds:
            raise StudyError(f"--seeds={self.seeds!r}: expected comma-separated integers")
        return seeds


def describe_studies() -> str:
    """The --list text."""
    lines = ["Studies (--study):"]
    for s in STUDIES.values():
        lines.append(f"  {s.name}: {s.title}")
        lines += [f"      {v.name}: {v.label}" for v in s.variants]
    lines.append("Scales (--scale): " + "; ".join(
        f"{k}: L={v.num_layers} H={v.hidden_size}, {v.pretraining_steps} pretraining steps x "
        f"{v.pretraining_batch}, tasks {', '.join(v.tasks)}" for k, v in SCALES.items()))
    return "\n".join(lines)


def run_study(options: StudyRunOptions, say: Callable[[str], None] = print) -> dict:
    """Runs the studies (see the module docstring). Returns {"rows", "ran", "skipped",
    "results_json", "results_md", "plots"}; "ran"/"skipped" list the cells as "kind/key"."""
    if options.list:
        say(describe_studies())
        return {"rows": [], "ran": [], "skipped": []}
    if not options.study:
        raise StudyError("--study is required (a name from --list, or all)")
    studies = list(STUDIES.values()) if options.study == "all" else \
        [get_study(s.strip()) for s in options.study.split(",")]
    scale = get_scale(options.scale)
    if options.pretraining_steps < 0 or options.finetuning_epochs < 0:
        raise StudyError("--pretraining_steps and --finetuning_epochs must be >= 0")
    overrides = {}
    if options.pretraining_steps:
        overrides["pretraining_steps"] = options.pretraining_steps
    if options.finetuning_epochs:
        overrides["finetuning_epochs"] = options.finetuning_epochs
    scale = dataclasses.replace(scale, **overrides)
    if not options.output_dir:
        raise StudyError("--output_dir is required")
    if os.path.isfile(options.output_dir):
        raise StudyError(f"--output_dir={options.output_dir} is a file; expected a folder")
    seeds = options.seed_list()
    from bert_tf.studies import data as study_data

    study_data.check_data(scale, options.data_dir)
    return _run(studies, scale, seeds, options, say)


def _budget_key(scale, seed: int) -> str:
    """Cells of different budgets never share a folder: the key holds the scale's name and the
    settings the command line can change (pretraining steps, seed). A scale's other settings
    are fixed by its declaration; after editing one, use a new --output_dir."""
    return (f"{scale.name}-L{scale.num_layers}H{scale.hidden_size}-s{scale.max_seq_length}-"
            f"p{scale.pretraining_steps}x{scale.pretraining_batch}-seed{seed}")


def _run(studies: list[Study], scale, seeds: list[int], options: StudyRunOptions,
         say: Callable[[str], None]) -> dict:
    from tqdm.auto import tqdm

    from bert_tf.studies import data as study_data
    from bert_tf.studies import report, training

    store = CellStore(options.output_dir)
    budget = _budget_key(scale, options.seed)
    command = " ".join(shlex.quote(a) for a in [os.path.basename(sys.argv[0] or "run_study")]
                       + sys.argv[1:])
    # Fine-tuning cells of another fine-tuning budget are other cells.
    ft_budget = (f"e{scale.finetuning_epochs:g}-b{scale.finetuning_batch}-"
                 f"lr{scale.finetuning_lr:g}-n{scale.max_train_examples}")
    # The grid: one data cell, the distinct pretraining cells, the distinct fine-tuning cells.
    pre_cells: dict[str, object] = {}
    ft_cells: dict[str, tuple] = {}
    for study in studies:
        for v in study.variants:
            if v.pretraining_key:
                pre_cells.setdefault(v.pretraining_key, v)
            for task in scale.tasks:
                for seed in seeds:
                    ft_cells.setdefault(f"{v.finetuning_key}/{task}/{ft_budget}/seed{seed}",
                                        (v, task, seed))
    total = 1 + len(pre_cells) + len(ft_cells)
    ran, skipped = [], []
    bar = tqdm(total=total, desc=f"study cells ({scale.name})", unit="cell")
    from absl import logging as absl_logging

    verbosity = absl_logging.get_verbosity()
    # The loops' per-step lines and the retracing warnings of one new model per cell: the bar
    # over the cells reports progress instead.
    absl_logging.set_verbosity(absl_logging.ERROR)

    def cell(kind: str, key: str, fn) -> tuple[dict, bool]:
        bar.set_postfix_str(f"{kind}/{key}")
        # The command that ran the cell is kept with its result (a resumed study reuses it).
        result, did_run = store.run(kind, f"{budget}/{key}",
                                    lambda d: {**fn(d), "command": command})
        (ran if did_run else skipped).append(f"{kind}/{key}")
        bar.update(1)
        return result, did_run

    try:
        data, _ = cell("data", "corpus", lambda d: {
            **study_data.prepare_corpus(d, scale, options.data_dir, options.seed), "data_dir": d})
        pre_results = {}
        for key, v in pre_cells.items():
            if v.model == "gpt":
                fn = (lambda d: training.pretrain_gpt(d, scale, data, options.seed))
            else:
                fn = (lambda d, v=v: training.pretrain_bert(d, v, scale, data, options.seed))
            pre_results[key], _ = cell("pretraining", key, fn)
        tasks: dict[str, study_data.TaskData] = {}
        ft_results = {}
        for key, (v, task_name, seed) in ft_cells.items():
            if task_name not in tasks:
                tasks[task_name] = study_data.load_task(task_name, data["data_dir"],
                                                        options.data_dir,
                                                        scale.max_train_examples, options.seed)
            pre = pre_results.get(v.pretraining_key) if v.pretraining_key else None
            ft_results[key], _ = cell("finetuning", key, lambda d, v=v, t=tasks[task_name],
                                      s=seed, p=pre: training.finetune(d, v, scale, data, t, s, p))
    finally:
        bar.close()
        absl_logging.set_verbosity(verbosity)

    rows = []
    for study in studies:
        for v in study.variants:
            if v.pretraining_key:
                p = pre_results[v.pretraining_key]
                metric = ("held_out_masked_lm_accuracy" if "held_out_masked_lm_accuracy" in p
                          else "final_lm_loss" if "final_lm_loss" in p else "steps")
                rows.append({"study": study.name, "variant": v.name, "task": "pretraining",
                             "metric": metric, "value": p.get(metric), "seed": options.seed,
                             "steps": p["steps"], "wall_s": p["wall_s"],
                             "command": p.get("command", command),
                             "cell": f"pretraining/{budget}/{v.pretraining_key}"})
            for task in scale.tasks:
                for seed in seeds:
                    key = f"{v.finetuning_key}/{task}/{ft_budget}/seed{seed}"
                    r = ft_results[key]
                    rows.append({"study": study.name, "variant": v.name, "task": task,
                                 "metric": r["metric"], "value": r["value"], "seed": seed,
                                 "steps": r["steps"], "wall_s": r["wall_s"],
                                 "command": r.get("command", command),
                                 "cell": f"finetuning/{budget}/{key}"})
    plots = {}
    for study in studies:
        curves = {v.pretraining_key: pre_results[v.pretraining_key].get("curve", [])
                  for v in study.variants if v.pretraining_key}
        plots[study.name] = report.plot_study(options.output_dir, study, rows, curves)
    paths = report.write_results(options.output_dir, studies, rows, scale.name, seeds, plots)
    say(f"{len(ran)} cells run, {len(skipped)} reused; {paths['md']}")
    return {"rows": rows, "ran": ran, "skipped": skipped, "results_json": paths["json"],
            "results_md": paths["md"], "plots": plots}
