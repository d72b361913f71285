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
import math
import os
import shlex
import time
from typing import Callable

from bert_tf.options import integer_list, option
from bert_tf.studies.cells import CellBusy, CellStore
from bert_tf.studies.declarations import (SCALES, STUDIES, Study, StudyError,
                                          describe_features, get_scale, get_study)


@dataclasses.dataclass(kw_only=True)
class StudyRunOptions:
    """Flags of tools/run_study.py."""

    study: str = option("", "Study to run (see --list), or 'all'.")
    scale: str = option("tiny", "Budget: tiny (embedded corpus, minutes), small "
                        "(../shared/data, hours on a CPU) or base (the papers' sizes).")
    output_dir: str = option("", "Folder of the cells, results.json, results.md and plots. "
                             "Finished cells there are reused; unfinished ones are run again.")
    seeds: str = option("", "Fine-tuning seeds, comma-separated (each cell runs once per "
                        "seed; the table gives mean ± spread). Empty: the scale's (1 at tiny; "
                        "1,2,3 at small and base).")
    pretraining_seeds: int = option(0, "Pretraining seeds per variant: --seed, --seed + 1, "
                                    "... (0: the scale's; 1 at tiny, 2 at small and base).")
    cased: bool = option(False, "A cased vocabulary and cased tokenization everywhere "
                         "(pretraining, tasks, baselines; NER needs case). Its cells are "
                         "keyed apart (\"-cased\").")
    estimate: bool = option(False, "Print the grid's cells and their estimated CPU hours on "
                            "this machine kind (`bert_tf.studies.estimate`), run nothing.")
    data_dir: str = option("../shared/data", "Folder holding pretrain/, glue/, imdb/, squad/ "
                           "and conll2003/ (small and base scales).")
    pretraining_steps: int = option(0, "Override the scale's pretraining steps (0: the "
                                    "scale's).")
    finetuning_epochs: float = option(0.0, "Override the scale's fine-tuning epochs (0: the "
                                      "scale's).")
    seed: int = option(12345, "Seed of the data, the pretraining data and the pretraining.")
    variants: str = option("", "Run only these variants of the studies (comma-separated "
                           "names from --list; empty: all). For quick checks: the table then "
                           "has those rows only.")
    tasks: str = option("", "Run only these of the scale's fine-tuning tasks (comma-separated, "
                        "e.g. CoLA,STS-B; empty: all). The NER and comparison tasks of the "
                        "studies that use them are not affected.")
    threads: int = option(0, "TensorFlow's intra-op and inter-op threads in this process (0: "
                          "TensorFlow's defaults, every core). Two processes on one grid on "
                          "a 2-core machine: --threads=1 each (a small cell's models cannot "
                          "use two cores, and two processes of two threads each thrash; "
                          "docs/studies.md). Only the speed changes, not what a cell runs.")
    list: bool = option(False, "List the studies and scales, run nothing.")
    export_cells: str = option("", "Run nothing: copy the finished cells of --output_dir "
                               "into this folder's cells/, with only the files the "
                               "unfinished cells will read (docs/studies.md: a run that "
                               "spans machines); continue with cp -rn FOLDER/cells "
                               "OUTPUT_DIR/ and the run's own command.")
    publish_doc: str = option("", "Also rewrite the block between the lines <!-- study "
                              "publication: begin --> and <!-- study publication: end --> of "
                              "this markdown file (docs/studies.md) with the run's verdicts, "
                              "times and links into results.md, when the results are "
                              "written (a full run or --report_only); the rest of the file "
                              "is kept.")
    report_only: bool = option(False, "Run nothing: write results.json, results.md and the "
                               "plots from the finished cells (DONE.json) of the grid these "
                               "flags declare in --output_dir, the others marked pending "
                               "(an interim report; safe beside the process running the "
                               "grid: it only reads the cells).")

    def command_line(self) -> str:
        """The `tools/run_study.py` command that runs these options (flags that differ from
        their defaults), kept with every cell's result."""
        flags = [f"--{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)
                 if getattr(self, f.name) != f.default]
        return " ".join(shlex.quote(a) for a in ["python", "tools/run_study.py"] + flags)

    def run_command_line(self) -> str:
        """The command that runs the cells these options declare: `command_line` without the
        flags that only report, publish or export (what an unfinished cell's row carries)."""
        return dataclasses.replace(self, report_only=False, publish_doc="",
                                   export_cells="").command_line()

    def task_names(self) -> tuple[str, ...]:
        return tuple(t.strip() for t in self.tasks.split(",") if t.strip())

    def variant_names(self) -> tuple[str, ...]:
        return tuple(v.strip() for v in self.variants.split(",") if v.strip())

    def seed_list(self) -> list[int]:
        return integer_list(self.seeds, "seeds", StudyError)


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
    if options.cased:
        overrides["do_lower_case"] = False
    only_tasks = options.task_names()
    if only_tasks:
        unknown = [t for t in only_tasks if t not in scale.tasks]
        if unknown:
            raise StudyError(f"--tasks={options.tasks}: {', '.join(unknown)} is not a task of "
                             f"--scale={scale.name}; expected some of {', '.join(scale.tasks)}")
        overrides["tasks"] = tuple(t for t in scale.tasks if t in only_tasks)
    scale = dataclasses.replace(scale, **overrides)
    if not options.output_dir and not options.estimate:
        raise StudyError("--output_dir is required")
    if options.output_dir and os.path.isfile(options.output_dir):
        raise StudyError(f"--output_dir={options.output_dir} is a file; expected a folder")
    seeds = options.seed_list() if options.seeds.strip() else list(scale.finetuning_seeds)
    if options.pretraining_seeds < 0:
        raise StudyError(f"--pretraining_seeds={options.pretraining_seeds}: expected >= 0")
    if options.threads < 0:
        raise StudyError(f"--threads={options.threads}: expected 0 (TensorFlow's defaults) "
                         f"or a number of threads")
    only = options.variant_names()
    known = {v.name for s in studies for v in s.variants}
    unknown = [n for n in only if n not in known]
    if unknown:
        raise StudyError(f"--variants={options.variants}: {', '.join(unknown)} is not a variant "
                         f"of --study={options.study}; expected some of {', '.join(sorted(known))}")
    studies = [s.at_scale(scale, only) for s in studies]
    studies = [s for s in studies if s.variants]
    if not studies:
        raise StudyError(f"--variants={options.variants}: no variant of --study={options.study} "
                         f"applies at --scale={scale.name}")
    if options.publish_doc:
        if options.estimate or options.export_cells:
            raise StudyError("--publish_doc with --estimate or --export_cells: those write "
                             "no results to publish")
        from bert_tf.studies import report

        try:
            report.check_publication_doc(options.publish_doc)
        except ValueError as e:
            raise StudyError(str(e)) from None
    if options.export_cells:
        if options.estimate or options.report_only:
            raise StudyError("--export_cells with --estimate or --report_only: expected one "
                             "of them")
        return export_cells(studies, scale, seeds, options, say)
    if options.report_only:
        if options.estimate:
            raise StudyError("--report_only and --estimate: expected one of them")
        return report_only(studies, scale, seeds, options, say)
    if options.estimate:
        from bert_tf.studies.estimate import estimate_grid, format_estimate

        found = estimate_grid(studies, scale, seeds, pretraining_seeds(scale, options))
        say(format_estimate(found, scale))
        order = grid_run_order(studies, scale, seeds, options)
        first = [o for o in order if o[2]]
        say(f"  run order: by pretraining, each with the cells that read it; the "
            f"{len(first)} cells of the primary claims' pretrainings first (of {len(order)} "
            f"after the data and baselines), the first pretraining seed's before the next's")
        return {"rows": [], "ran": [], "skipped": [], "estimate": found, "order": order}
    if options.threads:
        set_threads(options.threads)
    from bert_tf.studies import data as study_data

    study_data.check_data(scale, options.data_dir,
                          tuple(dict.fromkeys(t for s in studies for t in s.data_tasks(scale))))
    return _run(studies, scale, seeds, options, say)


def set_threads(threads: int) -> None:
    """TensorFlow's intra-op and inter-op thread pools of this process, `threads` each; only
    before TensorFlow has run anything (StudyError otherwise)."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError as e:  # the runtime is up: the pools are fixed
        raise StudyError(f"--threads={threads}: TensorFlow has already started in this "
                         f"process ({e}); set it before the first study runs") from None


def _check_gpt_transformation(result: dict, variant, task, cell_dir: str) -> None:
    """A finished GPT cell records its input transformation (cells of earlier versions may
    not); one that differs from what `task` is fine-tuned with now is stale: StudyError naming
    the cell, which is left as it is."""
    from bert_tf.studies import cell_runs
    if variant.model != "gpt" or "transformation" not in result:
        return
    wanted = cell_runs.gpt_transformation(task, variant.head == "bilstm")
    if result["transformation"] != wanted:
        raise StudyError(f"{cell_dir}: this finished cell fine-tuned with GPT-1's "
                         f"{result['transformation']} input transformation, {task.name} now "
                         f"uses {wanted}; move the cell's folder aside (or pick another "
                         f"--output_dir) to run it again")


def _budget_key(scale, seed: int) -> str:
    """Cells of different budgets never share a folder: the key holds the scale's name and the
    settings the command line can change (pretraining steps, seed), and a cased vocabulary. A
    scale's other settings are fixed by its declaration; after editing one, use a new
    --output_dir. A two-phase pretraining (`Scale.short_seq_length`) adds its first phase,
    "-short<length>x<steps>", so one-phase cells are never reused for it."""
    phases = scale.pretraining_phases()
    short = f"-short{phases[0][1]}x{phases[0][0]}" if len(phases) > 1 else ""
    return (f"{scale.name}-L{scale.num_layers}H{scale.hidden_size}-s{scale.max_seq_length}"
            f"{short}-p{scale.pretraining_steps}x{scale.pretraining_batch}-seed{seed}"
            + ("" if scale.do_lower_case else "-cased"))


def finetuning_budget(scale, task: str) -> str:
    """The fine-tuning budget part of a cell key: epochs, batch, learning rate, training cap,
    and (when not the scale's defaults) the task's length and head + tail cut."""
    key = (f"e{scale.finetuning_epochs:g}-b{scale.finetuning_batch}-"
           f"lr{scale.finetuning_lr:g}-n{scale.max_train_for(task)}")
    if scale.seq_for(task) != scale.max_seq_length:
        key += f"-s{scale.seq_for(task)}"
    if task in scale.head_tail_tasks:
        key += "-headtail"
    return key


def pretraining_seeds(scale, options: StudyRunOptions) -> list[int]:
    """The pretraining seeds: --seed, --seed + 1, ... (--pretraining_seeds of them, default the
    scale's). The first one's cells are keyed as before pretraining seeds existed."""
    n = options.pretraining_seeds or scale.pretraining_seeds
    return [options.seed + k for k in range(n)]


def _pseed_suffix(pseed: int, options: StudyRunOptions) -> str:
    return "" if pseed == options.seed else f"-pseed{pseed}"


def build_grid(studies: list[Study], scale, seeds: list[int], options: StudyRunOptions
               ) -> dict:
    """The cells of a run, by kind ({"pre_cells", "ft_cells", "zs_cells", "base_cells",
    "cloze_cells", "held_cells": cell key -> what it runs}), with "pre_key" and "ft_key" (the
    key functions), "pseeds" (the pretraining seeds) and "budget" (the cells' budget folder:
    cells/<kind>/<budget>/<key>)."""
    from bert_tf.studies import data as study_data

    pseeds = pretraining_seeds(scale, options)
    # The grid: one data cell, the distinct pretraining cells (per pretraining seed), the
    # baseline cells (per task), the distinct fine-tuning cells (each study's evaluations: its
    # tasks and NER columns, per pretraining seed and fine-tuning seed), the zero-shot cells
    # (GPT-1 Figure 2, first pretraining seed).
    pre_cells: dict[str, tuple] = {}
    ft_cells: dict[str, tuple] = {}
    zs_cells: dict[str, tuple] = {}
    base_cells: dict[str, str] = {}
    cloze_cells: dict[str, tuple] = {}
    held_cells: dict[str, tuple] = {}

    def pre_key(v, pseed: int) -> str:
        return v.pretraining_cell(scale) + _pseed_suffix(pseed, options)

    def ft_key(v, task: str, pseed: int | None, seed: int) -> str:
        suffix = _pseed_suffix(pseed, options) if v.pretraining_key else ""
        return f"{v.finetuning_cell(scale)}{suffix}/{task}/{finetuning_budget(scale, task)}/" \
               f"seed{seed}"

    def variant_pseeds(v) -> list:
        return pseeds if v.pretraining_key else [None]

    for study in studies:
        for v in study.variants:
            if v.pretraining_key:
                for p in pseeds:
                    pre_cells.setdefault(pre_key(v, p), (v, p))
        for e in study.evaluations(scale):
            base_cells.setdefault(f"{e.task}/{finetuning_budget(scale, e.task)}", e.task)
            for p in variant_pseeds(e.run):
                for seed in seeds:
                    ft_cells.setdefault(ft_key(e.run, e.task, p, seed), (e.run, e.task, p, seed))
        if study.pretraining_paper_column and (scale.held_out_every
                                               or scale.corpus == "embedded"):
            # Per-sequence held-out masked-LM losses of every BERT pretraining of the study on
            # one shared held-out file: the paired bootstrap of its perplexity claims.
            for v in study.variants:
                if v.pretraining_key and v.model == "bert":
                    for p in pseeds:
                        held_cells.setdefault(held_out_key(pre_key(v, p), options.seed),
                                              (v, p))
        if study.cloze and scale.cloze_items:
            base_cells.setdefault(f"cloze/items{scale.cloze_items}", "cloze")
            for v in study.variants:
                if v.pretraining_key:
                    for p in pseeds:
                        cloze_cells.setdefault(f"{pre_key(v, p)}/cloze{scale.cloze_items}",
                                               (v, p))
        if study.zero_shot:
            gpt = [v for v in study.variants if v.model == "gpt" and v.pretraining_key]
            for v in gpt[:1]:
                for task in study.tasks(scale):
                    if task in study_data.ZERO_SHOT:
                        zs_cells.setdefault(f"{v.pretraining_cell(scale)}/{task}", (v, task))
    return {"pre_cells": pre_cells, "ft_cells": ft_cells, "zs_cells": zs_cells,
            "base_cells": base_cells, "cloze_cells": cloze_cells, "held_cells": held_cells,
            "pre_key": pre_key, "ft_key": ft_key, "pseeds": pseeds,
            "variant_pseeds": variant_pseeds, "budget": _budget_key(scale, options.seed)}


def held_out_key(pretraining_key: str, seed: int) -> str:
    """The key of a pretraining's held-out cell (Table 6's per-sequence masked-LM scores on
    the shared held-out file drawn by `seed`)."""
    return f"{pretraining_key}/held_out_mlm/seed{seed}"


def grid_run_order(studies: list[Study], scale, seeds: list[int], options: StudyRunOptions
                   ) -> list[tuple[str, str, bool]]:
    """[(kind, cell key, primary), ...] in the order `run_study` runs them after the data and
    baseline cells (`grid_order`); primary: the cell is in a primary group (its pretraining,
    or the cell itself, is read by a primary claim)."""
    g = build_grid(studies, scale, seeds, options)
    return [(kind, key, order[0] == 0) for order, kind, key in grid_order(
        studies, scale, g["pseeds"], seeds, g["pre_cells"], g["ft_cells"], g["cloze_cells"],
        g["held_cells"], g["zs_cells"], g["pre_key"], g["ft_key"])]


def _run(studies: list[Study], scale, seeds: list[int], options: StudyRunOptions,
         say: Callable[[str], None]) -> dict:
    from tqdm.auto import tqdm

    from bert_tf.studies import data as study_data
    from bert_tf.studies import cell_runs, gates, report

    store = CellStore(options.output_dir)
    budget = _budget_key(scale, options.seed)
    command = options.command_line()
    g = build_grid(studies, scale, seeds, options)
    pseeds, pre_key, ft_key = g["pseeds"], g["pre_key"], g["ft_key"]
    variant_pseeds = g["variant_pseeds"]
    pre_cells, ft_cells, zs_cells = g["pre_cells"], g["ft_cells"], g["zs_cells"]
    base_cells, cloze_cells, held_cells = g["base_cells"], g["cloze_cells"], g["held_cells"]
    total = 1 + len(pre_cells) + len(base_cells) + len(ft_cells) + len(zs_cells) + \
        len(cloze_cells) + len(held_cells)
    ran, skipped = [], []
    retries_said: set[str] = set()
    bar = tqdm(total=total, desc=f"study cells ({scale.name})", unit="cell")
    from absl import logging as absl_logging

    verbosity = absl_logging.get_verbosity()
    # The loops' per-step lines and the retracing warnings of one new model per cell: the bar
    # over the cells reports progress instead.
    absl_logging.set_verbosity(absl_logging.ERROR)

    eta = [""]  # the paced hours left (`grid_progress`), updated after each cell run here
    eta_failed = [False]

    def update_eta() -> None:
        try:
            progress = grid_progress(studies, scale, seeds, g, store)[2]
        except (KeyError, ValueError, OSError) as e:  # a display: it never stops the grid
            if not eta_failed[0]:
                eta_failed[0] = True
                say(f"(no estimate of the hours left: {e!r}; the grid goes on)")
            eta[0] = ""
            return
        hours = progress["paced_hours_left"]
        if hours is not None:
            left = f"{hours:.1f} CPU-h" if hours >= 1 else f"{hours * 60:.0f} CPU-min"
            eta[0] = (f"; ~{left} left at this machine's pace ({progress['finished']} of "
                      f"{progress['total']} cells done)")

    def cell(kind: str, key: str, fn) -> tuple[dict, bool]:
        bar.set_postfix_str(f"{kind}/{key}{eta[0]}")
        # The command that ran the cell is kept with its result (a resumed study reuses it).
        # A cell another process of the same grid is running: the data and baseline cells
        # (everything reads them) are waited for; any other raises CellBusy, and the job that
        # needed it is put off to the next pass over the grid (`BUSY_POLL_S`).
        result, did_run = store.run(kind, f"{budget}/{key}",
                                    lambda d: {**fn(d), "command": command},
                                    wait=kind in ("data", "baseline"))
        (ran if did_run else skipped).append(f"{kind}/{key}")
        bar.update(1)
        if did_run:
            update_eta()
            if eta[0]:
                say(f"{kind}/{key}: done in {result.get('wall_s', '?')} s{eta[0]}")
        return result, did_run

    def pretrain(key: str, v, sized, pseed: int) -> tuple[dict, dict, str]:
        """The pretraining cell and its gate; under the gate, one re-run at the gate's lower
        learning rate (its own cell). Returns (result, gate, the cell key used)."""
        def fn(s, first: bool):
            # The first attempt stops at the gate's step when under it (no need to train
            # the 70-80% after it: the re-run replaces it); the re-run trains to the end.
            if v.model == "gpt":
                return lambda d: cell_runs.pretrain_gpt(d, s, data, pseed, stop_at_gate=first)
            return lambda d: cell_runs.pretrain_bert(d, v, s, data, pseed,
                                                     stop_at_gate=first)

        result, _ = cell("pretraining", key, fn(sized, True))
        gate = gates.pretraining_gate(scale.pretraining_gate, v.model, result.get("curve", []),
                                      result["steps"])
        if gate["gate_passed"]:
            return result, gate, key
        lr, retry_key = retry_cell(key, v, scale)
        if retry_key not in retries_said:
            retries_said.add(retry_key)
            bar.total += 1
            say(f"pretraining/{key}: under its gate ({gate}); running it again at lr {lr:g} "
                f"({retry_key})")
        retried, _ = cell("pretraining", retry_key,
                          fn(dataclasses.replace(sized, pretraining_lr=lr), False))
        gate2 = gates.pretraining_gate(scale.pretraining_gate, v.model,
                                       retried.get("curve", []), retried["steps"])
        gate2.update(retry_of=key, first_attempt=gate)
        return retried, gate2, retry_key

    update_eta()
    try:
        data, _ = cell("data", "corpus", lambda d: {
            **study_data.prepare_corpus(d, scale, options.data_dir, options.seed), "data_dir": d})
        pre_results, pre_gates, pre_used = {}, {}, {}

        def pretrained(key: str) -> dict:
            """The pretraining cell `key` (run on first need: the grid's order below)."""
            if key not in pre_results:
                v, pseed = pre_cells[key]
                pre_results[key], pre_gates[key], pre_used[key] = pretrain(
                    key, v, v.sized_scale(scale), pseed)
            return pre_results[key]

        def weights_of(key: str) -> dict:
            """`pretrained(key)` for a reader about to run: its weights must be there (a cell
            exported when it had no readers left is copied without them, `export_cells`)."""
            result = pretrained(key)
            weights = result.get("params") or result["checkpoint"] + ".index"
            if not os.path.exists(weights):
                raise StudyError(
                    f"pretraining/{pre_used[key]}: finished, but its weights {weights} are "
                    f"missing (exported without them?); its readers need them: delete "
                    f"{store.path('pretraining', f'{budget}/{pre_used[key]}')} to train it "
                    f"again")
            return result

        tasks: dict[str, object] = {}

        def task_data(name: str):
            if name not in tasks:
                if name == scale.ner_task:
                    tasks[name] = study_data.load_ner_task(options.data_dir,
                                                           scale.max_train_for(name),
                                                           options.seed)
                else:
                    tasks[name] = study_data.load_task(name, data["data_dir"],
                                                       options.data_dir,
                                                       scale.max_train_for(name), options.seed)
            return tasks[name]

        base_results = {}
        for key, task_name in base_cells.items():
            base_results[task_name], _ = cell("baseline", key, lambda d, t=task_name: (
                _baselines(t, None if t == "cloze" else task_data(t), scale, data,
                           options.seed)))
        ft_results, cloze_results, held_results, zs_results = {}, {}, {}, {}

        def finetune_job(key: str) -> None:
            v, task_name, pseed, seed = ft_cells[key]
            pre = pre_key(v, pseed) if v.pretraining_key else None
            if pre:
                pretrained(pre)
            run_fn = cell_runs.finetune_ner if task_name == scale.ner_task else \
                cell_runs.finetune_squad if task_name == "SQuAD" else cell_runs.finetune
            ft_results[key], _ = cell("finetuning", key, lambda d, t=task_data(task_name): (
                run_fn(d, v, v.sized_scale(scale), data, t, seed,
                       weights_of(pre) if pre else None)))
            _check_gpt_transformation(ft_results[key], v, task_data(task_name),
                                      store.path("finetuning", f"{budget}/{key}"))

        def cloze_job(key: str) -> None:
            v, pseed = cloze_cells[key]
            pretrained(pre_key(v, pseed))
            cloze_results[key], _ = cell("cloze", key, lambda d: cell_runs.cloze_probe(
                d, v, v.sized_scale(scale), data, weights_of(pre_key(v, pseed)), options.seed))

        def held_job(key: str) -> None:
            v, pseed = held_cells[key]
            pretrained(pre_key(v, pseed))
            held_results[key], _ = cell("held_out", key, lambda d: (
                cell_runs.held_out_masked_lm(d, v, v.sized_scale(scale), data,
                                             weights_of(pre_key(v, pseed)), options.seed)))

        def zero_shot_job(key: str) -> None:
            v, task_name = zs_cells[key]
            prompt, words = study_data.ZERO_SHOT[task_name]
            pretrained(pre_key(v, options.seed))
            zs_results[key], _ = cell("zero_shot", key, lambda d, t=task_data(task_name): (
                cell_runs.zero_shot(d, v.sized_scale(scale), data, t,
                                    weights_of(pre_key(v, options.seed)), prompt, words,
                                    options.seed)))

        jobs = {"pretraining": pretrained, "finetuning": finetune_job, "cloze": cloze_job,
                "held_out": held_job, "zero_shot": zero_shot_job}
        queue = [(kind, key) for _, kind, key in grid_order(
            studies, scale, pseeds, seeds, pre_cells, ft_cells, cloze_cells, held_cells,
            zs_cells, pre_key, ft_key)]
        # Cells whose claims their gates already decided run after everything else: they
        # cannot change a verdict (`moot_jobs`). A finished one is only read back, in place.
        moot = moot_jobs(studies, scale, seeds, options, g, store)

        def put_off(kind: str, key: str) -> str | None:
            if kind != "pretraining" and store.result(kind, f"{budget}/{key}") is not None:
                return None
            return moot(kind, key)

        run_jobs(queue, jobs, put_off, say,
                 lambda n: bar.set_postfix_str(f"waiting for {n} cells another process runs"))
    finally:
        bar.close()
        absl_logging.set_verbosity(verbosity)

    found = {"pre_results": pre_results, "pre_gates": pre_gates, "pre_used": pre_used,
             "base_results": base_results, "ft_results": ft_results,
             "cloze_results": cloze_results, "held_results": held_results,
             "zs_results": zs_results}
    rows, per_example = assemble_rows(studies, scale, seeds, options, g, found)
    plots = write_plots(studies, rows, options, g, found)
    paths = report.write_results(options.output_dir, studies, rows, scale.name, seeds, plots)
    publish(studies, rows, scale, seeds, options, plots)
    say(f"{len(ran)} cells run, {len(skipped)} reused; {paths['md']}")
    return {"rows": rows, "ran": ran, "skipped": skipped, "results_json": paths["json"],
            "results_md": paths["md"], "plots": plots}


def retry_cell(key: str, v, scale) -> tuple[float, str]:
    """(learning rate, cell key) of the one re-run of pretraining cell `key` (variant `v`)
    that did not pass its gate: at `PretrainingGate.retry_lr_factor` x the variant's rate."""
    lr = v.sized_scale(scale).pretraining_lr * scale.pretraining_gate.retry_lr_factor
    return lr, f"{key}-lr{lr:g}"


def assemble_rows(studies: list[Study], scale, seeds: list[int], options: StudyRunOptions,
                  g: dict, found: dict, bootstrap: bool = True) -> tuple[list[dict], dict]:
    """The rows of results.json from the grid `g` (`build_grid`) and the cells' results
    `found`: {"pre_results", "pre_gates", "pre_used", "base_results", "ft_results",
    "cloze_results", "held_results", "zs_results"}, each cell key (task name for
    "base_results") -> its DONE.json result (`pre_gates`: its gate, `pre_used`: the cell key
    used, a re-run's when the first was under its gate). `run_study` passes every cell; the
    interim report (`--report_only`) only the finished ones: a cell missing from `found` gives
    a row with "pending": true and "value": null (a pretraining row whose shared held-out
    cell is not finished: "held_out_pending": true), and a claim reading one gets the verdict
    "pending" (`claim_rows`). bootstrap=False leaves out each cell's bootstrap interval and
    the claim rows (what the grid's own ordering reads, `moot_jobs`, needs only the gates).
    Returns (rows, per_example: id(row) -> `PerExample`)."""
    from bert_tf.studies import gates, statistics
    from bert_tf.studies.data import task_metric

    # A row's command: what its cell recorded (None if it recorded none); an unfinished
    # cell's, the command that runs it.
    budget, command = g["budget"], options.run_command_line()
    pre_key, ft_key, variant_pseeds = g["pre_key"], g["ft_key"], g["variant_pseeds"]
    pre_results, pre_gates, pre_used = found["pre_results"], found["pre_gates"], \
        found["pre_used"]
    base_results, ft_results = found["base_results"], found["ft_results"]
    cloze_results, held_results = found["cloze_results"], found["held_results"]
    zs_results = found["zs_results"]

    def pre_gate_of(v, pseed) -> bool | None:
        """The pretraining gate of a fine-tuning / cloze row (None: not finished)."""
        if not v.pretraining_key:
            return True
        key = pre_key(v, pseed)
        return pre_gates[key]["gate_passed"] if key in pre_results else None

    def task_gate(value, baseline, pre_gate) -> bool | None:
        if pre_gate is False:
            return False
        if baseline is None or pre_gate is None:
            return None  # the baseline or pretraining cell is not finished
        return gates.task_gate(value, baseline["value"])

    def with_baseline(row: dict, baseline: dict | None) -> dict:
        if baseline is not None:
            row.update(baseline=baseline["value"], baseline_name=baseline["gate"])
        else:
            row["baseline_pending"] = True
        return row

    rows = []
    per_example: dict = {}  # id(row) -> PerExample json of a fine-tuning row
    for study in studies:
        for v in study.variants:
            size = "L{}/H{}/A{}".format(*v.model_size(scale))
            if v.pretraining_key:
                for pseed in g["pseeds"]:
                    key = pre_key(v, pseed)
                    held_key = held_out_key(key, options.seed)
                    if key not in pre_results:
                        row = {"study": study.name, "variant": v.name, "task": "pretraining",
                               "kind": "pretraining", "model": size,
                               "metric": study.pretraining_metric or "steps", "value": None,
                               "seed": pseed, "pretraining_seed": pseed, "pending": True,
                               "command": command,
                               "cell": f"pretraining/{budget}/{pre_used.get(key, key)}"}
                        if key in pre_gates:  # the first run, under its gate; its re-run
                            row["gate"] = pre_gates[key]
                        if held_key in g["held_cells"]:
                            row["held_out_pending"] = True
                        rows.append(row)
                        continue
                    p, gate = pre_results[key], pre_gates[key]
                    metric = next((m for m in (study.pretraining_metric,
                                               "held_out_masked_lm_accuracy",
                                               "held_out_lm_perplexity", "final_lm_loss")
                                   if m and m in p), "steps")
                    rows.append({"study": study.name, "variant": v.name, "task": "pretraining",
                                 "kind": "pretraining", "model": size,
                                 "metric": metric, "value": p.get(metric), "seed": pseed,
                                 "pretraining_seed": pseed, "steps": p["steps"],
                                 "wall_s": p["wall_s"], "tokens_seen": p.get("tokens_seen"),
                                 "cpu_s": p.get("cpu_s"),
                                 "targets_per_step": p.get("targets_per_step"),
                                 "pretraining_lr": p.get("pretraining_lr"),
                                 "gate_passed": gate["gate_passed"], "gate": gate,
                                 "command": p.get("command"),
                                 "cell": f"pretraining/{budget}/{pre_used[key]}"})
                    held = held_results.get(held_key)
                    if held and "per_example" in held:
                        # The claims' measure: the shared held-out file's perplexity.
                        rows[-1]["shared_held_out_perplexity"] = held["value"]
                        per_example[id(rows[-1])] = statistics.PerExample.from_json(
                            held["per_example"])
                    elif held is None and held_key in g["held_cells"]:
                        rows[-1]["held_out_pending"] = True
            for e in study.evaluations(scale):
                if e.variant is not v:
                    continue
                baseline = base_results.get(e.task)
                for pseed in variant_pseeds(e.run):
                    pre_gate = pre_gate_of(e.run, pseed)
                    for seed in seeds:
                        key = ft_key(e.run, e.task, pseed, seed)
                        r = ft_results.get(key)
                        base = {"study": study.name, "variant": v.name, "task": e.task,
                                "column": e.column, "model": size, "seed": seed,
                                "pretraining_seed": pseed,
                                "wall_s": r["wall_s"] if r else None,
                                "cpu_s": r.get("cpu_s") if r else None,
                                "command": r.get("command") if r else command,
                                "cell": f"finetuning/{budget}/{key}"}
                        if e.paper_column:
                            base["paper_column"] = e.paper_column
                        if e.run.feature_layers:
                            base["features"] = e.run.feature_layers
                        if e.run.feature_layers and e.paper_column:  # a NER column's header
                            base["features_described"] = describe_features(
                                e.run.feature_layers, e.run.model_size(scale)[0])
                        if r is None:
                            rows.append(with_baseline(
                                {**base, "kind": "finetuning", "metric": task_metric(e.task),
                                 "value": None, "pending": True,
                                 "pretraining_gate_passed": pre_gate}, baseline))
                            continue
                        row = with_baseline(
                            {**base, "kind": "finetuning", "metric": r["metric"],
                             "value": r["value"], "steps": r["steps"]}, baseline)
                        row.update(pretraining_gate_passed=pre_gate,
                                   gate_passed=task_gate(r["value"], baseline, pre_gate))
                        if "per_example" in r:
                            cell_pe = statistics.PerExample.from_json(r["per_example"])
                            if bootstrap:
                                row.update(statistics.cell_interval(cell_pe))
                            per_example[id(row)] = cell_pe
                        rows.append(row)
                        for p in r.get("per_epoch", []):
                            rows.append({**base, "kind": "epoch", "metric": r["metric"],
                                         "value": p["value"], "steps": p["step"],
                                         "epoch": p["epoch"]})
        for key, (v, pseed) in g["cloze_cells"].items():
            if not study.cloze or not any(x is v for x in study.variants):
                continue
            r, baseline = cloze_results.get(key), base_results.get("cloze")
            pre_gate = pre_gate_of(v, pseed)
            row = {"study": study.name, "variant": v.name, "task": "cloze", "column": "cloze",
                   "kind": "finetuning", "model": "L{}/H{}/A{}".format(*v.model_size(scale)),
                   "metric": r["metric"] if r else "accuracy",
                   "value": r["value"] if r else None, "seed": 0,
                   "pretraining_seed": pseed, "steps": 0,
                   "wall_s": r["wall_s"] if r else None,
                   "cpu_s": r.get("cpu_s") if r else None,
                   "command": r.get("command") if r else command,
                   "cell": f"cloze/{budget}/{key}", "pretraining_gate_passed": pre_gate}
            with_baseline(row, baseline)
            if r is None:
                row["pending"] = True
                rows.append(row)
                continue
            row["gate_passed"] = task_gate(r["value"], baseline, pre_gate)
            cell_pe = statistics.PerExample.from_json(r["per_example"])
            if bootstrap:
                row.update(statistics.cell_interval(cell_pe))
            per_example[id(row)] = cell_pe
            rows.append(row)
        for key, (v, task) in g["zs_cells"].items():
            if not any(x is v for x in study.variants):
                continue
            r = zs_results.get(key)
            zs = {"study": study.name, "task": task, "kind": "zero_shot",
                  "model": "L{}/H{}/A{}".format(*v.model_size(scale)),
                  "seed": options.seed, "pretraining_seed": options.seed,
                  "cell": f"zero_shot/{budget}/{key}"}
            if r is None:
                rows.append({**zs, "variant": v.name, "metric": "zero_shot_accuracy",
                             "value": None, "pending": True, "command": command})
                continue
            for step, value in r["curve"]:
                rows.append({**zs, "variant": f"lm_step{step}", "metric": r["metric"],
                             "value": value, "steps": step, "wall_s": r["wall_s"],
                             "cpu_s": r.get("cpu_s"),
                             "command": r.get("command"),
                             "majority_class": r["majority_class"]})
        if bootstrap:
            rows += claim_rows(study, [r for r in rows if r["study"] == study.name],
                               per_example)
    return rows, per_example


def write_plots(studies: list[Study], rows: list[dict], options: StudyRunOptions, g: dict,
                found: dict) -> dict:
    """The PNG plots of every study (`report.plot_study`): {study: [paths]}; the pretraining
    curves are the first pretraining seed's (of the finished cells)."""
    from bert_tf.studies import report

    plots = {}
    for study in studies:
        curves = {}
        for v in study.variants:
            if v.pretraining_key:
                key = g["pre_key"](v, options.seed)
                if key in found["pre_results"]:
                    curves[found["pre_used"][key]] = found["pre_results"][key].get("curve", [])
        plots[study.name] = report.plot_study(options.output_dir, study, rows, curves)
    every = report.plot_claims(os.path.join(options.output_dir, "claims.png"),
                               [r for r in rows if r.get("kind") == "claim"],
                               "Every claim of the grid")
    plots[report.ALL_CLAIMS] = [every] if every else []
    return plots


def publish(studies: list[Study], rows: list[dict], scale, seeds: list[int],
            options: StudyRunOptions, plots: dict, progress: dict | None = None) -> None:
    """`--publish_doc`: the run's block of that markdown file (`report.publish`), its links
    relative to the file."""
    from bert_tf.studies import report

    if not options.publish_doc:
        return
    where = os.path.dirname(os.path.abspath(options.publish_doc))

    def link(path: str) -> str:
        return os.path.relpath(os.path.abspath(path), where)

    claims_plot = plots.get(report.ALL_CLAIMS) or [None]
    report.publish(options.publish_doc, report.publication_lines(
        studies, rows, scale.name, seeds, link(os.path.join(options.output_dir,
                                                            "results.md")),
        claims_plot[0] and link(claims_plot[0]), progress))


def report_only(studies: list[Study], scale, seeds: list[int], options: StudyRunOptions,
                say: Callable[[str], None] = print) -> dict:
    """`--report_only`: results.json, results.md and the plots from the finished cells of the
    grid (`build_grid`) in `options.output_dir`, running nothing. Safe beside the process
    that runs the grid there: the cells are only read (a DONE.json is written last and
    atomically, so a cell is finished or absent), nothing is created or deleted under cells/,
    and each results file is written to a temporary name and renamed onto its own.

    Cells not finished give rows marked "pending" (`assemble_rows`) and claims with the
    verdict "pending" (`claim_rows`); a pretraining cell under its gate whose re-run
    (`retry_cell`) is not finished is pending too, its row holding the first run's gate.
    results.md starts with "N of M cells finished" and the estimated CPU hours of the rest
    (`bert_tf.studies.estimate`; a cell in progress counts in full), also at the pace the
    finished cells kept here (their CPU time, else wall time, over their estimate per kind,
    `estimate.pace`). When every cell but the data cell (which gives no row; an export
    carries it as EXPECTED.json) is finished, they are the complete run's report instead,
    without that line.
    Not checked here: a GPT cell's recorded input transformation (`_check_gpt_transformation`
    loads the task's data); the grid's own run stops on a stale one.

    Also the pending cells that some claim not yet decided reads ("open_cells", and
    "open_paced_hours_left" at the finished cells' pace; the others are moot, `moot_jobs`).

    Returns {"rows", "finished", "total", "hours_left", "paced_hours_left", "pace",
    "open_cells", "open_paced_hours_left",
    "pending": ["kind/key", ...],
    "results_json", "results_md", "plots"}. A missing --output_dir, or one holding no
    finished cell of this grid: StudyError (one line)."""
    from bert_tf.studies import estimate, report

    out = options.output_dir
    if not os.path.isdir(out):
        raise StudyError(f"--output_dir={out}: no such folder; --report_only expects the "
                         f"folder of a study run (its cells/)")
    store = CellStore(out)
    g = build_grid(studies, scale, seeds, options)
    found, cells, progress = grid_progress(studies, scale, seeds, g, store)
    finished, hours_left, paced = (progress["finished"], progress["hours_left"],
                                   progress["paced_hours_left"])
    if not finished:
        where = os.path.join(store.root, "<kind>", g["budget"])
        raise StudyError(f"--output_dir={out} holds no finished cell of this grid (expected "
                         f"DONE.json files under {where}); check --study, --scale, --seed, "
                         f"--pretraining_steps, --cased against the run's command")
    pending = [c for c in cells if c[3] is None]
    # The pending cells some open claim still needs, and their hours at the finished cells'
    # pace; the rest are moot (`moot_jobs`: they run last, to fill the tables).
    moot = moot_jobs(studies, scale, seeds, options, g, store, refresh_s=math.inf,
                     found=found)
    needed = [c for c in pending if c[0] in ("pretraining", "finetuning", "cloze", "held_out")
              and not moot(c[0], c[1])]
    if needed:  # and the data and baseline cells they read (an export remakes the data cell)
        needed += [c for c in pending if c[0] in ("data", "baseline")]
    paced_needed = estimate.paced_seconds([(c[0], c[2]) for c in needed], progress["pace"])
    progress.update(open_cells=len(needed), open_paced_hours_left=None
                    if paced_needed is None else paced_needed / 3600)
    rows, _ = assemble_rows(studies, scale, seeds, options, g, found)
    plots = write_plots(studies, rows, options, g, found)
    # Every cell finished: the complete run's report (the same rows, verdicts and Holm
    # correction), not an interim one. The data cell gives no row, and an exported folder
    # (`export_cells`) holds only its EXPECTED.json: it does not make a report interim.
    said = progress if any(c[0] != "data" for c in pending) else None
    paths = report.write_results(out, studies, rows, scale.name, seeds, plots, progress=said)
    publish(studies, rows, scale, seeds, options, plots, said)
    at_pace = "" if paced is None else f", {paced:.2f} at the finished cells' pace"
    say(f"{finished} of {len(cells)} cells finished (about {hours_left:.2f} CPU hours left by "
        f"the estimate{at_pace}); nothing run; {paths['md']}")
    return {"rows": rows, **progress, "pending": [f"{c[0]}/{c[1]}" for c in pending],
            "results_json": paths["json"], "results_md": paths["md"], "plots": plots}


def grid_progress(studies, scale, seeds: list[int], g: dict, store: CellStore
                  ) -> tuple[dict, list, dict]:
    """What `store` holds of the grid `g`: (the finished cells' results by kind as
    `assemble_rows` reads them, [(kind, key, estimated s, result or None)] for every cell
    (a pretraining under its gate followed by its re-run), {"finished", "total",
    "hours_left" (the cost model's, `bert_tf.studies.estimate`), "paced_hours_left" (the same
    cells at the pace the finished ones kept: their CPU time, else wall time, over their
    estimate, `estimate.pace`; None before any finished),
    "pace"}). Reads only."""
    from bert_tf.studies import estimate
    from bert_tf.studies.gates import pretraining_gate

    budget = g["budget"]

    def done(kind: str, key: str) -> dict | None:
        return store.result(kind, f"{budget}/{key}")

    found: dict = {name: {} for name in ("pre_results", "pre_gates", "pre_used",
                                         "base_results", "ft_results", "cloze_results",
                                         "held_results", "zs_results")}
    # (kind, key, seconds estimated, its result or None) of every cell of the grid.
    est = {f"{c.kind}/{c.key}": c.seconds for c in estimate.estimate_grid(
        studies, scale, seeds, g["pseeds"])}
    cells: list[tuple[str, str, float, dict | None]] = [
        ("data", "corpus", est["data/corpus"], done("data", "corpus"))]
    for key, (v, pseed) in g["pre_cells"].items():
        seconds = est[f"pretraining/{v.pretraining_cell(scale)}/p{pseed}"]
        result = done("pretraining", key)
        cells.append(("pretraining", key, seconds, result))
        if result is None:
            continue
        gate = pretraining_gate(scale.pretraining_gate, v.model, result.get("curve", []),
                                result["steps"])
        found["pre_gates"][key], found["pre_used"][key] = gate, key
        if not gate["gate_passed"]:  # its one re-run, as `run_study` makes it
            lr, retry = retry_cell(key, v, scale)
            result = done("pretraining", retry)
            cells.append(("pretraining", retry, seconds, result))
            found["pre_used"][key] = retry
            if result is None:
                continue
            gate = pretraining_gate(scale.pretraining_gate, v.model, result.get("curve", []),
                                    result["steps"])
            found["pre_gates"][key] = {**gate, "retry_of": key,
                                       "first_attempt": found["pre_gates"][key]}
        found["pre_results"][key] = result
    for key, task in g["base_cells"].items():
        result = done("baseline", key)
        cells.append(("baseline", key, est[f"baseline/{task}"], result))
        if result is not None:
            found["base_results"][task] = result
    for key, (run, task, pseed, seed) in g["ft_cells"].items():
        result = done("finetuning", key)
        cells.append(("finetuning", key, est[f"finetuning/{run.finetuning_cell(scale)}/p{pseed}/"
                                             f"{task}/s{seed}"], result))
        if result is not None:
            found["ft_results"][key] = result
    for kind, name in (("cloze", "cloze_results"), ("held_out", "held_results")):
        for key, (v, pseed) in g["cloze_cells" if kind == "cloze" else "held_cells"].items():
            result = done(kind, key)
            cells.append((kind, key, est[f"{kind}/{v.pretraining_cell(scale)}/p{pseed}"],
                          result))
            if result is not None:
                found[name][key] = result
    zero_shot_s = estimate.OVERHEAD_S["zero_shot"]  # the estimate's per study; here per cell
    for key in g["zs_cells"]:
        result = done("zero_shot", key)
        cells.append(("zero_shot", key, zero_shot_s, result))
        if result is not None:
            found["zs_results"][key] = result
    finished = sum(1 for c in cells if c[3] is not None)
    pending = [c for c in cells if c[3] is None]
    hours_left = sum(c[2] for c in pending) / 3600
    # The same cells at the pace the finished ones kept on this machine (their CPU time where
    # recorded, else their wall time).
    ratios = estimate.pace([(c[0], c[2], c[3]["wall_s"], c[3].get("cpu_s")) for c in cells
                            if c[3] is not None and c[3].get("wall_s") is not None])
    paced = estimate.paced_seconds([(c[0], c[2]) for c in pending], ratios)
    progress = {"finished": finished, "total": len(cells), "hours_left": hours_left,
                "paced_hours_left": None if paced is None else paced / 3600,
                "pace": {k: round(v, 2) for k, v in ratios.items()}}
    return found, cells, progress


MOOT_REFRESH_S = 120.0
"""Seconds between two readings of the finished cells by `moot_jobs` (each one reads every
DONE.json of the grid and its gates: a few seconds)."""


def moot_jobs(studies, scale, seeds: list[int], options: StudyRunOptions, g: dict,
              store: CellStore, refresh_s: float = MOOT_REFRESH_S, found: dict | None = None
              ) -> Callable[[str, str], str | None]:
    """Which jobs of the grid cannot change a verdict any more, to run after all the others
    (`run_jobs`; nothing is skipped: they still fill the tables).

    A claim is decided before its cells finish when its gates already make it inconclusive
    (`statistics.not_learned_reason`): its better side, or a side of an expected null, has a
    finished cell under its task's gate, or a finished pretraining under its gate, its re-run
    included (`gates_so_far`); that is final, as a (variant, column) passes only when all its
    cells do. A cell is moot when no claim reads it or every claim reading it is decided; a
    pretraining when every cell reading its weights (`pretraining_readers`) is, a zero-shot
    curve never. At a scale without a pretraining gate (tiny, a smoke test) nothing is moot.
    Returns job -> why it is moot, or None. The gates are read
    from the finished cells in `store` (`grid_progress`, then `assemble_rows` without the
    bootstrap) at most every `refresh_s` seconds: a cell that finished since may be run in
    its place meanwhile, never skipped. `found`: the cells `grid_progress` already read, for
    the first reading."""
    from bert_tf.studies import statistics
    from bert_tf.studies.declarations import CLAIMS

    if scale.pretraining_gate is None:
        return lambda kind, key: None
    pre_key = g["pre_key"]
    sides: dict[tuple[str, str], set] = {}  # job -> the claim sides (study, variant, column)
    for study in studies:
        for e in study.evaluations(scale):
            for p in g["variant_pseeds"](e.run):
                for seed in seeds:
                    sides.setdefault(("finetuning", g["ft_key"](e.run, e.task, p, seed)),
                                     set()).add((study.name, e.variant.name, e.column))
        if study.cloze:
            for key, (v, _) in g["cloze_cells"].items():
                if any(x is v for x in study.variants):
                    sides.setdefault(("cloze", key), set()).add((study.name, v.name, "cloze"))
        if study.pretraining_paper_column:
            for v in study.variants:
                for p in g["pseeds"] if v.pretraining_key else []:
                    key = held_out_key(pre_key(v, p), options.seed)
                    if key in g["held_cells"]:
                        sides.setdefault(("held_out", key), set()).add(
                            (study.name, v.name, study.pretraining_paper_column))
    reading: dict[tuple[str, str, str], list] = {}  # claim side -> the claims reading it
    for study in studies:
        for c in CLAIMS:
            if c.study == study.name:
                for name in (c.better, c.worse):
                    reading.setdefault((study.name, name, c.column), []).append(c)
    readers = pretraining_readers(g, options)
    state: dict = {"at": None, "decided": set(), "found": found}

    def decided() -> set:
        """The claims (by name) decided by their gates, read again every `refresh_s`."""
        now = time.monotonic()
        if state["at"] is None or now - state["at"] >= refresh_s:
            read = state.pop("found", None) or grid_progress(studies, scale, seeds, g,
                                                             store)[0]
            rows, per_example = assemble_rows(studies, scale, seeds, options, g, read,
                                              bootstrap=False)
            names = set()
            for study in studies:
                passed = gates_so_far(scored_rows(
                    study, [r for r in rows if r["study"] == study.name], per_example))
                names |= {c.name for c in CLAIMS if c.study == study.name
                          and statistics.not_learned_reason(c, passed)}
            state.update(at=now, decided=names)
        return state["decided"]

    def moot_cell(job: tuple[str, str]) -> str | None:
        claims = {c.name for side in sides.get(job, ()) for c in reading.get(side, ())}
        if not claims:
            return "no claim reads it"
        if claims <= decided():
            return (f"every claim reading it is decided by its gates "
                    f"({', '.join(sorted(claims))})")
        return None

    def moot(kind: str, key: str) -> str | None:
        if kind == "pretraining":
            jobs = readers.get(key, [])
            if jobs and all(moot_cell(job) for job in jobs):
                return "every cell reading its weights is moot"
            return None
        return moot_cell((kind, key)) if kind in ("finetuning", "cloze", "held_out") else None

    return moot


def run_jobs(queue: list[tuple[str, str]], jobs: dict, moot: Callable[[str, str], str | None],
             say: Callable[[str], None], waiting: Callable[[int], None]) -> None:
    """Runs `jobs[kind](key)` for each (kind, key) of `queue`, in order, over passes: a job
    raising CellBusy (another process runs the cell) is put off to the next pass, with a
    `BUSY_POLL_S` sleep when a whole pass was put off (`waiting(n)` first); a job for which
    `moot` gives a reason (`moot_jobs`) is put off until every other job is done, then run
    in a last series of passes in its order (each reason said once)."""
    later: list[tuple[str, str]] = []
    last_pass, said = False, set()
    while queue:  # passes over the grid; a pass puts off the cells another process runs
        deferred = []
        for kind, key in queue:
            reason = None if last_pass else moot(kind, key)
            if reason:
                if reason not in said:
                    said.add(reason)
                    say(f"{kind}/{key} runs last, and every cell moot for the same reason "
                        f"(it cannot change a verdict): {reason}")
                later.append((kind, key))
                continue
            try:
                jobs[kind](key)
            except CellBusy:
                deferred.append((kind, key))
        if deferred and len(deferred) == len(queue):
            waiting(len(deferred))
            time.sleep(BUSY_POLL_S)
        queue = deferred
        if not queue and later and not last_pass:
            queue, later, last_pass = later, [], True


# Seconds between passes over the grid when every cell left is being run by another process.
BUSY_POLL_S = 30.0
# Within a group: the forward-only readers (held-out, cloze, zero-shot) before the fine-tunings;
# the zero-shot cell early also ends the need for a GPT pretraining's kept training checkpoints
# (~17 MB each with the optimizer's slots), which `export_cells` would carry until it finishes.
KIND_ORDER = {"pretraining": 0, "held_out": 1, "cloze": 1, "zero_shot": 1, "finetuning": 2}


def grid_order(studies, scale, pseeds: list[int], seeds: list[int], pre_cells: dict,
               ft_cells: dict,
               cloze_cells: dict, held_cells: dict, zs_cells: dict, pre_key, ft_key
               ) -> list[tuple[tuple, str, str]]:
    """The order the grid's cells run in (after the data and baseline cells), as
    [(sort key, kind, cell key)], by GROUP: a pretraining and every cell that reads its
    weights (held-out, cloze, fine-tunings, zero-shot) run together, so that when a session
    ends (its processes die; the cell cache keeps what finished) at most the group in progress
    has readers left, and only its weights need to outlive the session (`export_cells`). A
    fine-tuning from scratch is a group of its own.

    The groups of the PRIMARY claims (`declarations.CLAIMS`, `Claim.primary`: a group is
    primary when one of its cells is read by a primary claim) run first, so that a run spread
    over sessions has the headline claims' cells earliest; within the primary and the other
    groups, the first pretraining seed's before the next seed's, then in declaration order.
    Within a group: the pretraining, its held-out, cloze and zero-shot cells (forward passes
    only), its fine-tunings (the primary claims' first).

    Sort key: (group: 0 primary / 1 other, pretraining seed's index, group's declaration
    position; kind: pretraining, held-out / cloze / zero-shot, fine-tuning; cell: 0 primary /
    1 other, declaration order)."""
    from bert_tf.studies.declarations import CLAIMS

    names = {s.name for s in studies}
    primary = set()  # (study, variant, column)
    for c in CLAIMS:
        if c.primary and c.study in names:
            primary |= {(c.study, c.better, c.column), (c.study, c.worse, c.column)}
    tier: dict[tuple[str, str], int] = {}

    def mark(kind: str, key: str, t: int) -> None:
        tier[(kind, key)] = min(t, tier.get((kind, key), 1))

    for study in studies:
        for e in study.evaluations(scale):
            t = 0 if (study.name, e.variant.name, e.column) in primary else 1
            for p in (pseeds if e.run.pretraining_key else [None]):
                for seed in seeds:
                    mark("finetuning", ft_key(e.run, e.task, p, seed), t)
        if study.pretraining_paper_column:
            for v in study.variants:
                if not v.pretraining_key:
                    continue
                t = 0 if (study.name, v.name, study.pretraining_paper_column) in primary else 1
                for p in pseeds:
                    prefix = pre_key(v, p) + "/held_out_mlm/"
                    for key in held_cells:
                        if key.startswith(prefix):
                            mark("held_out", key, t)
                            mark("pretraining", pre_key(v, p), t)
    index = {p: i for i, p in enumerate(pseeds)}
    cells = []  # (kind, key, group, pretraining seed, declaration position)
    for n, (kind, found) in enumerate((("pretraining", pre_cells), ("held_out", held_cells),
                                       ("cloze", cloze_cells), ("finetuning", ft_cells),
                                       ("zero_shot", zs_cells))):
        for i, (key, value) in enumerate(found.items()):
            if kind == "pretraining":
                group, pseed = key, value[1]
            elif kind in ("held_out", "cloze"):
                group, pseed = pre_key(value[0], value[1]), value[1]
            elif kind == "finetuning":
                pseed = value[2]
                group = pre_key(value[0], pseed) if value[0].pretraining_key else \
                    f"scratch:{key}"
            else:
                group, pseed = pre_key(value[0], pseeds[0]), pseeds[0]
            cells.append((kind, key, group, pseed, (n, i)))
    group_tier: dict[str, int] = {}
    group_first: dict[str, tuple] = {}
    for kind, key, group, _, position in cells:
        group_tier[group] = min(tier.get((kind, key), 1), group_tier.get(group, 1))
        group_first[group] = min(position, group_first.get(group, position))
    jobs = [((group_tier[group], index.get(pseed, 0), group_first[group], KIND_ORDER[kind],
              tier.get((kind, key), 1), position), kind, key)
            for kind, key, group, pseed, position in cells]
    return sorted(jobs)


def pretraining_readers(g: dict, options: StudyRunOptions) -> dict[str, list[tuple[str, str]]]:
    """Each pretraining cell's key -> the cells of the grid `g` (`build_grid`) that read its
    weights, as [(kind, key)]."""
    pre_key = g["pre_key"]
    out: dict[str, list[tuple[str, str]]] = {key: [] for key in g["pre_cells"]}
    for key, (run, _, pseed, _) in g["ft_cells"].items():
        if run.pretraining_key:
            out[pre_key(run, pseed)].append(("finetuning", key))
    for kind, cells in (("held_out", g["held_cells"]), ("cloze", g["cloze_cells"])):
        for key, (v, pseed) in cells.items():
            out[pre_key(v, pseed)].append((kind, key))
    for key, (v, _) in g["zs_cells"].items():
        out[pre_key(v, options.seed)].append(("zero_shot", key))
    return out


def export_cells(studies: list[Study], scale, seeds: list[int], options: StudyRunOptions,
                 say: Callable[[str], None] = print) -> dict:
    """`--export_cells=DEST`: copies the finished cells of --output_dir into DEST/cells, for a
    run that continues on another machine or in a later session whose machine keeps only
    the project's commits (docs/studies.md): every finished cell's DONE.json; the weights of
    each pretraining (its first run or its gate re-run) some reader of which is not finished
    (a BERT pretraining's bert_model.ckpt, a GPT one's params/ and, while its zero-shot cell
    is not finished, its kept training checkpoints); the data cell as EXPECTED.json (its
    files are made again there and must come out the same). Continue with
    `cp -rn DEST/cells OUTPUT_DIR/` and the run's own command. Returns the counts."""
    out = options.output_dir
    if not os.path.isdir(os.path.join(out, "cells")):
        raise StudyError(f"--output_dir={out}: no cells/ folder; --export_cells expects the "
                         f"folder of a study run")
    store = CellStore(out)
    g = build_grid(studies, scale, seeds, options)
    budget = g["budget"]
    readers = pretraining_readers(g, options)
    pending: dict[str, list[str]] = {}  # pretraining cell key (a re-run's too) -> kinds
    for key, cells in readers.items():
        kinds = [kind for kind, k in cells if store.result(kind, f"{budget}/{k}") is None]
        if kinds:
            v = g["pre_cells"][key][0]
            pending[key] = kinds
            if scale.pretraining_gate is not None:
                pending[retry_cell(key, v, scale)[1]] = kinds

    with_weights: list[str] = []

    def keep(kind: str, key: str, result: dict) -> list[str]:
        names = _kept(kind, key, result)
        if names:
            with_weights.append(key)
        return names

    def _kept(kind: str, key: str, result: dict) -> list[str]:
        if kind != "pretraining" or not key.startswith(budget + "/"):
            return []
        kinds = pending.get(key[len(budget) + 1:])
        if not kinds:
            return []
        cell_dir = store.path(kind, key)
        if "params" not in result and "checkpoint" not in result:
            return []  # a first run stopped under its gate: no weights (its re-run has them)
        if "params" in result:  # GPT: its params_*.npy, and the zero-shot's checkpoints
            names = [os.path.relpath(result["params"], cell_dir)]
            if "zero_shot" in kinds and os.path.isdir(os.path.join(cell_dir, "pretraining")):
                names.append("pretraining")
            return names
        prefix = os.path.basename(result["checkpoint"])
        return sorted(f for f in os.listdir(os.path.dirname(result["checkpoint"]))
                      if f.startswith(prefix + "."))

    if os.path.abspath(options.export_cells) == os.path.abspath(out):
        raise StudyError(f"--export_cells={options.export_cells}: the run's own --output_dir; "
                         f"expected another folder")
    counts = store.export_finished(options.export_cells, keep)
    say(f"{counts['cells']} finished cells copied to "
        f"{os.path.join(options.export_cells, 'cells')} "
        f"({counts['files']} kept files, {counts['bytes'] / 1e6:.1f} MB: the weights of "
        f"{len(with_weights)} pretrainings with readers left)")
    return counts


def _baselines(task_name: str, task, scale, data: dict, seed: int = 12345) -> dict:
    """The baseline cell of a task: `baselines.task_baselines` on the split the cells use
    (the models' tokenizer and length, the head + tail cut where the scale makes it)."""
    from bert_tf.studies import baselines
    from bert_tf.studies.data import head_tail_task, task_metric
    from bert_tf.tokenization import FullTokenizer

    if task_name == "cloze":
        from bert_tf.studies import cloze
        from bert_tf.studies.cell_runs import cloze_items

        return {"task": "cloze", "metric": "accuracy",
                **cloze.baselines(cloze_items(scale, data, seed)[0])}
    tokenizer = FullTokenizer(data["vocab_file"], do_lower_case=scale.do_lower_case)
    seq = scale.seq_for(task_name)
    if task_name in scale.head_tail_tasks:
        task = head_tail_task(task, tokenizer, seq)
    return {"task": task_name, "metric": task_metric(task_name), "max_seq_length": seq,
            **baselines.task_baselines(task, task_metric(task_name), tokenizer.tokenize, seq)}


def scored_rows(study: Study, study_rows: list[dict], per_example: dict
                ) -> list[tuple[tuple[str, str], dict]]:
    """The rows of `study` its claims read, each with its side (variant, column): the
    fine-tuning rows (the cloze probe's included) and the pretraining rows with per-sequence
    scores on the shared held-out file (in `per_example`, `assemble_rows`), or waiting for
    them (the study's perplexity column)."""
    from bert_tf.studies.report import column_of

    out = []
    for r in study_rows:
        if r.get("kind") == "finetuning":
            out.append(((r["variant"], column_of(r)), r))
        elif r.get("kind") == "pretraining" and (id(r) in per_example
                                                 or r.get("held_out_pending")):
            out.append(((r["variant"], study.pretraining_paper_column), r))
    return out


def gates_so_far(scored: list[tuple[tuple[str, str], dict]]) -> dict[tuple[str, str], bool]:
    """(variant, column) -> whether its rows (`scored_rows`) passed their gates so far: False
    once one is known to be under its gate (a finished row with "gate_passed": false, or a
    pending one whose pretraining finished under its gate, "pretraining_gate_passed": false),
    which is final; True while every finished row whose gate is known passed."""
    passed: dict = {}
    for key, r in scored:
        if r.get("pretraining_gate_passed") is False:
            passed[key] = False
        elif not (r.get("pending") or r.get("held_out_pending")
                  or ("gate_passed" in r and r["gate_passed"] is None)):
            passed[key] = passed.get(key, True) and bool(r.get("gate_passed", True))
    return passed


def claim_rows(study: Study, study_rows: list[dict], per_example: dict) -> list[dict]:
    """The verdict of every declared claim of `study` (`declarations.CLAIMS`) on its rows, as
    rows of kind "claim" (`statistics.judge_claims`: paired bootstrap, Holm within the study,
    the fixed rule). Claims on columns or variants this run has no cells of (a scale's trim,
    --variants, --tasks) are left out; cells without
    per-example scores (written before they were stored) leave their claim inconclusive.

    Interim reports (`--report_only`): a claim with a side whose cells are not all finished
    (rows "pending" or "held_out_pending", or a finished row whose gate is not known yet,
    "gate_passed": null) gets the verdict "pending" with "cells_finished" / "cells_needed"
    (both sides' cells), unless its gates already decide it (`statistics.not_learned_reason`:
    a finished cell of its better side, or of a side of an expected null, under its gate;
    `gates_so_far`): then it is "inconclusive" (not learned) at once, which no later cell can
    change. The finished claims keep their place in the claims list (the
    bootstrap's seed is the claim's index) and Holm's correction counts each pending
    ordering claim with p = 1: an upper bound of the adjusted p the complete grid gives them,
    so an interim "holds" or "reversed" stands when the rest finishes (an interim
    "inconclusive" may still become either)."""
    from bert_tf.studies import statistics
    from bert_tf.studies.declarations import CLAIMS

    scored = scored_rows(study, study_rows, per_example)
    columns = {column for (_, column), _ in scored}
    names = {v.name for v in study.variants}  # the variants run at this scale
    claims = [c for c in CLAIMS if c.study == study.name and c.column in columns
              and c.better in names and c.worse in names]
    cells: dict = {}
    missing: set = set()
    counts: dict = {}  # (variant, column) -> [cells finished, cells]
    for key, r in scored:
        count = counts.setdefault(key, [0, 0])
        count[1] += 1
        if r.get("pending") or r.get("held_out_pending") or \
                ("gate_passed" in r and r["gate_passed"] is None):
            continue
        count[0] += 1
        if id(r) not in per_example:
            missing.add(key)
            continue
        cells.setdefault(key, {}).setdefault(r.get("pretraining_seed"), []).append(
            per_example[id(r)])
    passed = gates_so_far(scored)
    pending = {k for k, (done, n) in counts.items() if done < n}
    for key in missing | pending:
        cells.pop(key, None)
    out = []
    results = statistics.judge_claims(claims, cells, passed)
    for claim, result in zip(claims, results):
        sides = ((result["better"], result["column"]), (result["worse"], result["column"]))
        if any(k in pending for k in sides) and not statistics.not_learned_reason(claim,
                                                                                  passed):
            done = sum(counts.get(k, [0, 0])[0] for k in sides)
            need = sum(counts.get(k, [0, 0])[1] for k in sides)
            result.update(verdict="pending", cells_finished=done, cells_needed=need,
                          reason=f"{done} of {need} cells finished")
        elif result["verdict"] == "inconclusive" and result.get("reason", "").startswith(
                "not run") and any(k in missing for k in sides):
            result["reason"] = "no per-example scores in a side's cells (older cells)"
    if pending:
        # Holm over the whole family: each pending ordering claim counts with p = 1.
        family = [(c, r) for c, r in zip(claims, results) if not c.expected_null
                  and ("p" in r or r["verdict"] == "pending")]
        adjusted = statistics.holm([r["p"] if "p" in r else 1.0 for _, r in family])
        for (claim, r), p in zip(family, adjusted):
            if "p" in r:
                r["p_holm"] = p
                r["verdict"] = statistics.verdict(claim, r, p)
    for result in results:
        out.append({"study": study.name, "kind": "claim", "variant": result["name"],
                    "task": result["column"], **result})
    return out
