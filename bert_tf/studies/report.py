"""A study's outputs: `results.json` (one row per cell), `results.md` (the paper's table layout,
the paper's numbers beside ours, whether the paper's ordering holds) and PNG plots (matplotlib)."""
from __future__ import annotations

import itertools
import json
import math
import os
import statistics

from bert_tf import io_utils
from bert_tf.studies.declarations import Study
from bert_tf.studies.statistics import NULL_MARGIN


METRIC_NAMES = {"accuracy": "accuracy", "f1": "F1", "mcc": "Matthews correlation",
                "pearson": "Pearson correlation"}
"""The words for a fine-tuning row's "metric" in the tables and plots."""


def metric_name(metric: str) -> str:
    return METRIC_NAMES.get(metric, metric)


def column_of(row: dict) -> str:
    """The table column of a result row: its "column" (a study's NER column, e.g. "NER
    feature-based"), else its task."""
    return row.get("column") or row["task"]


def mean_spread(values: list[float]) -> tuple[float, float, int]:
    """(mean, sample standard deviation (0 for one value), n) of a non-empty list."""
    return (statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0,
            len(values))


def summarise(rows: list[dict]) -> dict:
    """{(variant, column): (mean, spread, n)} over seeds of the fine-tuning rows (column: the
    task, or a NER column's name, `column_of`); spread is the sample standard deviation (0 for
    one seed)."""
    groups: dict = {}
    for r in rows:
        if r.get("kind", "finetuning") == "finetuning" and r["task"] != "pretraining" \
                and not r.get("pending"):
            groups.setdefault((r["variant"], column_of(r)), []).append(float(r["value"]))
    return {k: mean_spread(v) for k, v in groups.items()}


def pending_cells(rows: list[dict]) -> dict:
    """{(variant, column): (cells finished, cells)} of the fine-tuning rows of an interim
    report (`tools/run_study.py --report_only`) where some cells are not finished ("pending":
    true); empty for a finished grid."""
    counts: dict = {}
    for r in rows:
        if r.get("kind", "finetuning") == "finetuning" and r["task"] != "pretraining":
            count = counts.setdefault((r["variant"], column_of(r)), [0, 0])
            count[1] += 1
            count[0] += 0 if r.get("pending") else 1
    return {k: tuple(v) for k, v in counts.items() if v[0] < v[1]}


def table_columns(summary: dict, rows: list[dict]) -> list[str]:
    """The columns of ours in table order: the tasks (sorted), then the NER columns in the order
    the study declares them (rows with a "paper_column"); a column whose cells are all pending
    (an interim report) is kept."""
    keys = set(summary) | set(pending_cells(rows))
    declared = list(dict.fromkeys(column_of(r) for r in rows if r.get("paper_column")))
    return sorted({c for _, c in keys} - set(declared)) + \
        [c for c in declared if any(k[1] == c for k in keys)]


def _paper_reference(study: Study, task: str) -> str:
    if task in study.paper_columns:
        return task
    return study.ordering_column


def _paper_value(study: Study, variant, column: str) -> float | None:
    if column == "average":
        values = [variant.paper.get(c) for c in study.paper_columns]
        return statistics.fmean(values) if values and None not in values else None
    return variant.paper.get(column)


def ordering(study: Study, summary: dict, task: str, column: str | None = None,
             lower_is_better: bool = False, sizes: dict | None = None,
             excluded: set | frozenset = frozenset()) -> dict:
    """Pairwise check of the paper's ranking on our task: for every pair of variants with paper
    numbers that differ, does our mean order them the same way? (`column`: the paper column,
    default the one matching `task`; `lower_is_better`: for perplexities; `sizes`: variant ->
    model size, for `Study.same_size_pairs`; `excluded`: variants "not learned" on this task
    (under their gate), which take no part.)"""
    column = column or _paper_reference(study, task)
    pairs, agree, ties, disagreements = 0, 0, 0, []
    for a, b in itertools.combinations(study.variants, 2):
        if a.name in excluded or b.name in excluded:
            continue
        pa, pb = _paper_value(study, a, column), _paper_value(study, b, column)
        if pa is None or pb is None or pa == pb or (a.name, task) not in summary \
                or (b.name, task) not in summary:
            continue
        if study.same_size_pairs and sizes and sizes.get(a.name) != sizes.get(b.name):
            continue
        if lower_is_better:
            pa, pb = -pa, -pb
        pairs += 1
        ours = summary[(a.name, task)][0] - summary[(b.name, task)][0]
        if lower_is_better:
            ours = -ours
        if ours * (pa - pb) > 0:
            agree += 1
        elif ours == 0:
            ties += 1
        else:
            hi, lo = (a, b) if pa > pb else (b, a)
            disagreements.append(f"paper: {hi.label} > {lo.label}")
    return {"paper_column": column, "pairs": pairs, "agree": agree, "ties": ties,
            "holds": pairs > 0 and agree == pairs, "disagreements": disagreements,
            "excluded": sorted(excluded)}


def not_learned(study_rows: list[dict]) -> dict:
    """{column: {variant, ...}} of the variants with a fine-tuning cell under its gate
    ("gate_passed": false: under its task's baseline, or its pretraining under its gate)."""
    out: dict = {}
    for r in study_rows:
        if r.get("kind") == "finetuning" and r.get("gate_passed") is False:
            out.setdefault(column_of(r), set()).add(r["variant"])
    return out


def baselines_of(study_rows: list[dict]) -> dict:
    """{column: (baseline name, value)} of the fine-tuning rows."""
    return {column_of(r): (r["baseline_name"], r["baseline"]) for r in study_rows
            if r.get("kind") == "finetuning" and "baseline" in r}


def _ci(r: dict) -> str:
    return f"[{r['ci_low']:+.1f}, {r['ci_high']:+.1f}]" if "ci_low" in r else "—"


def claim_lines(study_rows: list[dict]) -> list[str]:
    """The claims table of a study: each declared claim's verdict by the fixed rule
    (`statistics`), our difference with its 95% bootstrap interval, Holm's p, the paper's
    effect."""
    claims = [r for r in study_rows if r.get("kind") == "claim"]
    if not claims:
        return []
    lines = ["", "Claims (declared before the run; paired bootstrap over dev examples and "
             "seeds, Holm within the table; docs/studies.md, \"Method\"):", "",
             "| Claim | Column | Ours: better − worse [95% CI] | p (Holm) | Paper's effect | "
             "Verdict |", "|---|---|---|---|---|---|"]
    for r in claims:
        diff = f"{r['diff']:+.2f} {_ci(r)}" if "diff" in r else "—"
        p = f"{r['p_holm']:.3g}" if "p_holm" in r else \
            ("null: CI vs the paper's ±1" if r.get("expected_null") else "—")
        paper = "—" if r.get("paper_effect") is None else f"{r['paper_effect']:+.1f}"
        verdict = r["verdict"] + (f" ({r['reason']})" if r.get("reason") else "")
        lines.append(f"| {r.get('text') or r['variant']}{' (primary)' if r.get('primary') else ''}"
                     f" | {r['task']} | {diff} | {p} | {paper} | {verdict} |")
    return lines


def _duration(seconds: float) -> str:
    """Seconds as minutes (under an hour) or hours."""
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.2f} h"


def _cell_gate(r: dict) -> str:
    """A cell's gate status in the cells table."""
    if r.get("pending"):
        return "pending"
    if r.get("kind") == "pretraining":
        return _gate_text(r.get("gate")) if r.get("gate") else "no gate"
    if r.get("gate_passed") is None:
        return "no gate"
    if r["gate_passed"]:
        return "passed"
    if r.get("pretraining_gate_passed") is False:
        return "NOT passed (its pretraining is under its gate)"
    return "NOT passed (under the baseline)"


def _cells_of(study_rows: list[dict]) -> list[tuple[dict, list[str]]]:
    """The study's cells, each once (a pretraining cell shared by several variants, the
    zero-shot checkpoints of one cell, the epochs of one fine-tuning): [(its first row, the
    variants reading it)], without the per-epoch rows (their cell's final row is there)."""
    cells: dict = {}
    for r in study_rows:
        if r.get("kind") in ("claim", "epoch") or not r.get("cell"):
            continue
        cells.setdefault(r["cell"], (r, []))[1].append(r.get("variant", ""))
    return list(cells.values())


def time_totals(rows: list[dict]) -> dict:
    """{kind: {"cells", "finished", "wall_s", "cpu_s", "cpu_cells"}} over the distinct cells of
    `rows` (a cell read by several studies counts once); cpu_s sums the finished cells that
    recorded their CPU time (cpu_cells of them, the cells finished since 2026-11-29)."""
    out: dict = {}
    for r, _ in _cells_of(rows):
        t = out.setdefault(r.get("kind", "finetuning"), {"cells": 0, "finished": 0,
                                                         "wall_s": 0.0, "cpu_s": 0.0,
                                                         "cpu_cells": 0})
        t["cells"] += 1
        if r.get("pending"):
            continue
        t["finished"] += 1
        t["wall_s"] += float(r.get("wall_s") or 0.0)
        if r.get("cpu_s") is not None:
            t["cpu_s"] += float(r["cpu_s"])
            t["cpu_cells"] += 1
    return out


def _totals_text(totals: dict) -> str:
    """The cells, wall time and CPU time of `time_totals`, in words."""
    finished = sum(t["finished"] for t in totals.values())
    cells = sum(t["cells"] for t in totals.values())
    wall = sum(t["wall_s"] for t in totals.values())
    cpu = sum(t["cpu_s"] for t in totals.values())
    cpu_cells = sum(t["cpu_cells"] for t in totals.values())
    per_kind = "; ".join(f"{kind} {t['finished']} of {t['cells']}, {_duration(t['wall_s'])}"
                         for kind, t in sorted(totals.items()))
    return (f"{finished} of the {cells} cells that give table rows finished (the data, "
            f"baseline and held-out cells aside), {_duration(wall)} of wall time summed over "
            f"them ({per_kind}); {_duration(cpu)} of CPU time over the {cpu_cells} that "
            f"recorded it (cells finished since 2026-11-29)")


def cell_lines(study_rows: list[dict]) -> list[str]:
    """Every cell of a study, one table row each, in a collapsed block: the variants reading
    it, its column, pretraining and fine-tuning seeds, score with the cell's own 95%
    interval (bootstrap over the dev examples), the task's trivial baseline, its gate status,
    wall and CPU time; and the study's totals (`time_totals`)."""
    cells = _cells_of(study_rows)
    if not cells:
        return []
    lines = ["", "<details><summary>Every cell of this study: gate status, baseline, wall "
             f"time ({_totals_text(time_totals(study_rows))}; cells shared with other "
             "studies count here too)</summary>", "",
             "| Variants | Column | Pretraining seed | Seed | Score [95% CI] | Baseline | Gate "
             "| Wall | CPU |", "|---|---|---|---|---|---|---|---|---|"]
    for r, names in cells:
        kind = r.get("kind", "finetuning")
        column = "pretraining" if kind == "pretraining" else \
            f"{column_of(r)} (zero-shot)" if kind == "zero_shot" else column_of(r)
        if r.get("pending"):
            score = "pending"
        elif kind == "zero_shot":
            values = [x["value"] for x in study_rows if x.get("cell") == r["cell"]]
            score = f"{len(values)} checkpoints, {min(values):.1f} to {max(values):.1f}"
        elif kind == "pretraining":
            score = f"{r['metric']} {r['value']}"
        else:
            score = f"{float(r['value']):.2f}" + (
                f" [{r['ci_low']:.1f}, {r['ci_high']:.1f}]" if "ci_low" in r else "")
        baseline = f"{r['baseline']:.2f} ({r['baseline_name']})" if "baseline" in r else \
            f"{r['majority_class']:.1f} (majority class)" if "majority_class" in r else "—"
        pseed = r.get("pretraining_seed", "—")
        seed = "—" if kind in ("pretraining", "zero_shot") else r.get("seed", "—")
        wall = "—" if r.get("pending") or r.get("wall_s") is None else \
            _duration(float(r["wall_s"]))
        cpu = "—" if r.get("cpu_s") is None else _duration(float(r["cpu_s"]))
        readers = "its pretraining's checkpoints" if kind == "zero_shot" else \
            ", ".join(dict.fromkeys(names))
        lines.append(f"| {readers} | {column} | {pseed} | {seed} | "
                     f"{score} | {baseline} | {_cell_gate(r)} | {wall} | {cpu} |")
    return lines + ["", "</details>"]


def command_lines(study: Study, study_rows: list[dict], scale: str) -> list[str]:
    """How to run the study again: its own command, and the commands its cells recorded."""
    # The commands the finished cells recorded (a pending row carries the one that would run
    # it).
    recorded = sorted({r["command"] for r in study_rows
                       if r.get("command") and not r.get("pending")})
    lines = ["", f"Commands: this study alone, reusing every finished cell of the output "
             f"folder: `python tools/run_study.py --study={study.name} --scale={scale} "
             f"--output_dir=OUT`"]
    if recorded:
        lines[-1] += "; its cells were run by " + ", ".join(f"`{c}`" for c in recorded)
    lines[-1] += "."
    return lines


def github_anchor(title: str) -> str:
    """The anchor GitHub gives a markdown heading ("## A: b (c)" -> "a-b-c")."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


VERDICT_ORDER = ("holds", "reversed", "differs", "inconclusive", "pending")


def verdict_label(claim: dict) -> str:
    """A claim row's verdict, with "(not learned)" when its gates decided it."""
    return claim["verdict"] + (" (not learned)" if str(claim.get("reason", "")).startswith(
        "not learned") else "")


def claims_glance_lines(studies: list[Study], rows: list[dict], link: str = "") -> list[str]:
    """Every claim of every study in one table (study, claim, our difference with its 95%
    interval, the paper's effect, verdict), with the count per verdict. `link`: the
    results.md the study names link into (its sections' anchors), or "" for no links."""
    claims = [r for r in rows if r.get("kind") == "claim"]
    if not claims:
        return []
    counts: dict = {}
    for r in claims:
        counts[verdict_label(r)] = counts.get(verdict_label(r), 0) + 1
    order = sorted(counts, key=lambda k: (VERDICT_ORDER.index(k.split(" ")[0])
                                          if k.split(" ")[0] in VERDICT_ORDER else 99, k))
    lines = [f"**{len(claims)} claims: " + ", ".join(f"{k}: {counts[k]}" for k in order)
             + ".** Declared before the run; the verdict rule is docs/studies.md's \"Method\" "
             "(paired bootstrap over dev examples and both kinds of seed, Holm within a table; "
             f"an expected null is judged against the paper's effect ± {NULL_MARGIN:g}).", "",
             "| Study | Claim | Ours: better − worse [95% CI] | Paper's effect | Verdict |",
             "|---|---|---|---|---|"]
    titles = {s.name: s.title for s in studies}
    for r in claims:
        title = titles.get(r["study"], r["study"])
        name = title.split(":")[0]
        study = f"[{name}]({link}#{github_anchor(title)})" if link else name
        diff = f"{r['diff']:+.2f} {_ci(r)}" if "diff" in r else "—"
        paper = "—" if r.get("paper_effect") is None else f"{r['paper_effect']:+.1f}"
        verdict = f"**{r['verdict']}**" if r["verdict"] in ("holds", "reversed", "differs") \
            else r["verdict"]
        verdict += f" ({r['reason']})" if r.get("reason") else ""
        lines.append(f"| {study} | {r.get('text') or r['variant']}"
                     f"{' (primary)' if r.get('primary') else ''} | {diff} | {paper} | "
                     f"{verdict} |")
    return lines


def budget_lines(study_rows: list[dict]) -> list[str]:
    """Budget parity of the pretraining cells: tokens, wall time and prediction targets per
    step side by side (the left-to-right model predicts every token, BERT's masked LM 15%)."""
    seen: dict = {}
    for r in study_rows:
        if r.get("kind") == "pretraining" and r.get("tokens_seen"):
            seen.setdefault(r["cell"], r)
    if len(seen) < 2:
        return []
    lines = ["", "Budget parity of the pretraining cells (equal tokens; wall time as measured; "
             "prediction targets per step: the left-to-right model predicts every next token, "
             "BERT's masked LM at most 15% of them):", ""]
    for cell, r in seen.items():
        lines.append(f"- {cell.split('/')[-1]} (pretraining seed {r.get('pretraining_seed')}): "
                     f"{r['tokens_seen']:,} tokens, {r['wall_s']} s"
                     f"{_cpu_text(r)}, "
                     f"{r.get('targets_per_step') or '—'} targets per step, lr "
                     f"{r.get('pretraining_lr')}, gate "
                     f"{'passed' if r.get('gate_passed', True) else 'NOT passed'}")
    return lines


ALL_CLAIMS = "all_claims"
"""The key of the plots dict (`write_results`) holding the plot of every study's claims."""


def write_results(output_dir: str, studies: list[Study], rows: list[dict], scale: str,
                  seeds: list[int], plots: dict[str, list[str]],
                  progress: dict | None = None) -> dict:
    """Writes results.json and results.md (each atomically: a temporary name, then renamed);
    returns {"json": path, "md": path}. `progress` ({"finished", "total", "hours_left",
    "paced_hours_left", "pace", optionally "open_cells", "open_paced_hours_left"}): an interim
    report (`--report_only`), said in results.md's header."""
    json_path = os.path.join(output_dir, "results.json")
    io_utils.atomic_write_text(json_path, json.dumps(rows, indent=1) + "\n")
    lines = [f"# Study results (scale `{scale}`, fine-tuning seeds {', '.join(map(str, seeds))})",
             ""]
    if progress is not None:
        paced = progress.get("paced_hours_left")
        pace = progress.get("pace") or {}
        at_pace = "" if paced is None else (
            f"; {paced:.1f} at the pace of the finished cells here (their CPU time, else "
            f"wall time, / estimated: "
            + ", ".join(f"{k} {v:.2f}x" for k, v in sorted(pace.items()) if k != "all")
            + f"; overall {pace['all']:.2f}x)")
        needed = progress.get("open_paced_hours_left")
        open_claims = "" if "open_cells" not in progress else (
            " Every claim is decided: the cells left are moot and run last, to fill the "
            "tables (`run.moot_jobs`)." if not progress["open_cells"] else
            f" Of the cells left, {progress['open_cells']} are read by a claim not yet decided"
            + ("" if needed is None else f" ({needed:.1f} CPU hours at that pace)")
            + "; the others are moot and run last, to fill the tables (`run.moot_jobs`).")
        lines += [f"**Interim report: {progress['finished']} of {progress['total']} cells "
                  f"finished; estimated CPU hours left: {progress['hours_left']:.1f}** "
                  f"(`bert_tf.studies.estimate`, an unloaded machine of the calibration kind"
                  f"{at_pace}; one process's hours, a cell in progress counting in full)."
                  f"{open_claims} "
                  "Written by `tools/run_study.py --report_only` while the "
                  "grid runs: cells not finished are *pending* in the tables, and so is every "
                  "claim reading one, unless its gates already decide it.", ""]
    lines += ["Ours: held-out scores (%), mean ± sample standard deviation over seeds. "
              "Paper: the paper's own numbers (other tasks, other scale), for the ordering. "
              f"Time: {_totals_text(time_totals(rows))}. To run it again: the commands under "
              "each study; a folder holding these cells (`cp -rn THIS_FOLDER/cells OUT/`) "
              "resumes where they stop.", ""]
    glance = claims_glance_lines(studies, rows)
    if glance:
        lines += ["## Every claim", ""] + glance
        for png in plots.get(ALL_CLAIMS, []):
            lines += ["", f"![every claim]({os.path.relpath(png, output_dir)})"]
        lines.append("")
    for study in studies:
        lines += study_section(study, [r for r in rows if r["study"] == study.name],
                               plots.get(study.name, []), output_dir, scale)
    md_path = os.path.join(output_dir, "results.md")
    io_utils.atomic_write_text(md_path, "\n".join(lines) + "\n")
    return {"json": json_path, "md": md_path}


PUBLICATION_BEGIN = "<!-- study publication: begin -->"
PUBLICATION_END = "<!-- study publication: end -->"
"""The lines around the block of a markdown file that `--publish_doc` rewrites."""


def check_publication_doc(path: str) -> tuple[list[str], int, int]:
    """(the lines of `path` with their ends, the index of its `PUBLICATION_BEGIN` line, of its
    `PUBLICATION_END` line) when it holds one of each, in that order; otherwise ValueError (one
    line naming the file and what was expected)."""
    if not os.path.isfile(path):
        raise ValueError(f"--publish_doc={path}: no such file; expected a markdown file "
                         f"holding the lines {PUBLICATION_BEGIN} and {PUBLICATION_END}")
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    begin = [i for i, line in enumerate(lines) if line.strip() == PUBLICATION_BEGIN]
    end = [i for i, line in enumerate(lines) if line.strip() == PUBLICATION_END]
    if len(begin) != 1 or len(end) != 1 or begin[0] > end[0]:
        raise ValueError(f"--publish_doc={path}: expected one line {PUBLICATION_BEGIN} "
                         f"before one line {PUBLICATION_END} (found {len(begin)} and "
                         f"{len(end)})")
    return lines, begin[0], end[0]


def publication_lines(studies: list[Study], rows: list[dict], scale: str, seeds: list[int],
                      results_link: str, claims_plot: str | None,
                      progress: dict | None = None) -> list[str]:
    """The block `--publish_doc` writes: what ran and for how long, every claim's verdict
    with its interval (`claims_glance_lines`, each study linking to its section of
    results.md: the paper's table beside ours, the cells with their gates, baselines and
    times, the plots, the commands), the claims' plot (`claims_plot`: its link, or None)."""
    pseeds = sorted({r["pretraining_seed"] for r in rows if r.get("kind") == "pretraining"
                     and r.get("pretraining_seed") is not None})
    state = "" if progress is None else (
        f" An interim report: {progress['finished']} of {progress['total']} cells finished"
        + ("; every claim is decided, the cells left only fill the tables"
           if progress.get("open_cells") == 0 else "") + ".")
    lines = [f"Scale `{scale}`: fine-tuning seeds {', '.join(map(str, seeds))}, pretraining "
             f"seeds {', '.join(map(str, pseeds)) or '—'}; {_totals_text(time_totals(rows))}."
             f"{state} The tables (the paper's beside ours), every cell with its gate, "
             f"baseline and time, the plots and the commands, per study: "
             + ", ".join(f"[{s.title.split(':')[0]}]({results_link}#{github_anchor(s.title)})"
                         for s in studies) + ".", ""]
    lines += claims_glance_lines(studies, rows, results_link)
    if claims_plot:
        lines += ["", f"![every claim's difference with its 95% interval]({claims_plot})"]
    return lines


def publish(path: str, lines: list[str]) -> None:
    """Replaces the block between the `PUBLICATION_BEGIN` and `PUBLICATION_END` lines of the
    markdown file `path` with `lines` (atomically; the rest of the file as it was).
    ValueError (`check_publication_doc`) when the markers are not there."""
    text, begin, end = check_publication_doc(path)
    block = ["<!-- written by tools/run_study.py --publish_doc: edit the code, not this "
             "block -->", ""] + lines + [""]
    io_utils.atomic_write_text(path, "".join(text[:begin + 1]) + "".join(
        line + "\n" for line in block) + "".join(text[end:]))


def _pending_text(finished: str, done: int, total: int) -> str:
    """A table cell of an interim report with unfinished cells: "pending (0 of 3)", or the
    finished cells' mean with "(pending: 2 of 3 finished)"."""
    if not done:
        return f"pending (0 of {total})"
    return f"{finished} (pending: {done} of {total} finished)"


def _gate_text(gate: dict | None) -> str:
    """A pretraining cell's gate (`gates.pretraining_gate`) in words."""
    if not gate or "threshold_perplexity" not in gate:
        return "no gate" if not gate else str(gate.get("gate", "no gate"))
    best = gate.get("best_perplexity_by_step")
    return (f"gate {'passed' if gate['gate_passed'] else 'NOT passed'} (perplexity ≤ "
            f"{gate['threshold_perplexity']:g} by step {gate['by_step']}: "
            + (f"reached at step {gate['reached_at']}" if gate.get("reached_at") is not None
               else f"best {best}") + ")"
            + ("; a re-run at a lower lr" if gate.get("retry_of") else ""))


def _cpu_text(r: dict) -> str:
    """The text " (N CPU-s)" when the cell recorded its processes' CPU time (cells finished
    since 2026-11-29)."""
    return f" ({r['cpu_s']} CPU-s)" if r.get("cpu_s") is not None else ""


def _pretraining_text(r: dict) -> str:
    """A pretraining row in the "Pretraining cells" line."""
    if r.get("pending"):
        first = r.get("gate")
        return "pending" + (f" (the first run: {_gate_text(first)}; its re-run is not "
                            f"finished)" if first else "")
    text = f"{r['metric']} {r['value']} ({r['steps']} steps, {r['wall_s']} s{_cpu_text(r)}"
    return text + (f", {_gate_text(r['gate'])})" if r.get("gate") else ")")


def _paper_number(x: float) -> str:
    """The paper's number as printed there (one decimal, two for perplexities)."""
    return f"{x:.1f}" if round(x, 1) == x else f"{x:.2f}"


def _fmt(mean: float, spread: float, n: int) -> str:
    return f"{mean:.1f} ± {spread:.1f}" if n > 1 else f"{mean:.1f}"


SHARED_PERPLEXITY = "shared_held_out_perplexity"


def _finished_rows(rows: list[dict], metric: str) -> list[dict]:
    """The finished rows among `rows` (pretraining seeds' rows) that measured `metric`."""
    return [r for r in rows if not r.get("pending") and r.get("metric") == metric
            and r.get("value") is not None]


def _finished_values(rows: list[dict], metric: str, shared: bool = False) -> list[float]:
    """The values of `metric` in the finished rows among `rows` (a variant's pretraining
    seeds); with `shared`, each row's perplexity on the study's shared held-out file."""
    return [float(r[SHARED_PERPLEXITY] if shared else r["value"])
            for r in _finished_rows(rows, metric)]


def uses_shared_held_out(pre: dict[str, list[dict]], metric: str | None) -> bool:
    """Whether a study's held-out perplexity column and ordering read the shared held-out file
    (every variant and pretraining seed scored on the same masked sequences, what the claims
    test): when every finished pretraining row has its figure. Otherwise (a `held_out` cell
    not finished yet, or none at this scale) they read each pretraining cell's own held-out
    evaluation, whose masking draw follows its pretraining seed, for every row alike."""
    finished = [r for rows in pre.values() for r in _finished_rows(rows, metric or "")]
    return bool(finished) and all(r.get(SHARED_PERPLEXITY) is not None for r in finished)


def _pretraining_metric_text(rows: list[dict], metric: str, shared: bool = False) -> str:
    """The table cell of a variant's pretraining metric over its pretraining seeds' rows: the
    value (one seed) or mean ± sample standard deviation (several), "pending" before any
    finishes, "(pending: k of n finished)" while some are left, "—" without the metric.
    `shared`: the rows' shared held-out file perplexities (`uses_shared_held_out`)."""
    values = _finished_values(rows, metric, shared)
    if not values:
        return "pending" if any(r.get("pending") for r in rows) else "—"
    text = (f"{values[0]:.2f}" if len(values) == 1 else
            f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f}")
    return _pending_text(text, len(values), len(rows)) if len(values) < len(rows) else text


def study_section(study: Study, study_rows: list[dict], plots: list[str],
                  output_dir: str, scale: str | None = None) -> list[str]:
    """The markdown of one study: its table (ours beside the paper's), the ordering checks,
    the per-epoch / zero-shot results, the pretraining cells, the claims, every cell with its
    gate, baseline and time, the commands, the plots."""
    summary = summarise(study_rows)
    tasks = table_columns(summary, study_rows)
    sizes = {r["variant"]: r.get("model") for r in study_rows if r.get("model")}
    sized = any(v.size is not None for v in study.variants)
    pre: dict[str, list[dict]] = {}  # variant -> its pretraining rows (one per pretraining seed)
    for r in study_rows:
        if r.get("kind") == "pretraining" or r["task"] == "pretraining":
            pre.setdefault(r["variant"], []).append(r)
    shared = uses_shared_held_out(pre, study.pretraining_metric)
    excluded = not_learned(study_rows)
    pending = pending_cells(study_rows)  # an interim report's unfinished cells
    baseline = baselines_of(study_rows)
    epochs: dict = {}
    for r in study_rows:
        if r.get("kind") == "epoch":
            epochs.setdefault((r["variant"], column_of(r), r["epoch"]), []).append(
                float(r["value"]))
    epoch_numbers = sorted({e for _, _, e in epochs})
    scored = [r for r in study_rows if r.get("kind", "finetuning") == "finetuning"
              and r["task"] != "pretraining"]
    # Per column: what is scored, the paper column it is checked against, what a feature-based
    # column feeds the tagger.
    whats = {column_of(r): metric_name(r["metric"]) for r in scored}
    paper_of = {column_of(r): r["paper_column"] for r in scored if r.get("paper_column")}
    features_of: dict = {}
    for r in scored:
        if r.get("features_described"):
            features_of.setdefault(column_of(r), {})[r["features_described"]] = None
    if len(set(whats.values())) > 1:
        what = "; ".join(f"{w} on {', '.join(c for c in tasks if whats.get(c) == w)}"
                         for w in dict.fromkeys(whats[c] for c in tasks if c in whats))
    else:
        what = next(iter(whats.values()), "accuracy")
    lines = [f"## {study.title}", "", f"`--study={study.name}`; ours: held-out {what} (%); "
             f"paper: {study.metric_note}.", ""]
    header = ["Variant"] + (["L/H/A (ours)"] if sized else [])
    if study.pretraining_metric:
        header.append("held-out MLM ppl (ours)")
    for t in tasks:
        features = f": {' / '.join(features_of[t])}" if t in features_of else ""
        header += [f"{t} epoch {e} (ours)" for e in epoch_numbers] if epoch_numbers else \
            [f"{t}{features} (ours)"]
    header += [f"{c} (paper)" for c in study.paper_columns]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for v in study.variants:
        cells = [v.label] + ([sizes.get(v.name, "—")] if sized else [])
        under = [t for t in tasks if v.name in excluded.get(t, ())]
        if under:
            cells[0] += f" (not learned: {', '.join(under)})"
        if study.pretraining_metric:
            cells.append(_pretraining_metric_text(pre.get(v.name, []), study.pretraining_metric,
                                                  shared))
        for t in tasks:
            done, total = pending.get((v.name, t), (0, 0))
            if epoch_numbers:
                for e in epoch_numbers:
                    values = epochs.get((v.name, t, e), [])
                    text = _fmt(statistics.fmean(values), statistics.stdev(values)
                                if len(values) > 1 else 0.0, len(values)) if values else "—"
                    cells.append(_pending_text(text if values else "", done, total)
                                 if total else text)
            else:
                mean, spread, n = summary.get((v.name, t), (math.nan, 0.0, 0))
                cells.append(_pending_text(_fmt(mean, spread, n) if n else "", done, total)
                             if total else _fmt(mean, spread, n) if n else "—")
        cells += [_paper_number(v.paper[c]) if c in v.paper else "—"
                  for c in study.paper_columns]
        lines.append("| " + " | ".join(cells) + " |")
    if any(t in baseline for t in tasks) or any(r.get("baseline_pending")
                                                for r in study_rows):  # every cell's gate
        cells = ["Trivial baseline (gate)"] + (["—"] if sized else []) + \
            (["—"] if study.pretraining_metric else [])
        waiting = {column_of(r) for r in study_rows if r.get("baseline_pending")}
        for t in tasks:
            name, value = baseline.get(t, ("", None))
            text = f"{value:.1f} ({name})" if value is not None else \
                "pending" if t in waiting else "—"
            cells += [text] * (len(epoch_numbers) if epoch_numbers else 1)
        cells += ["—"] * len(study.paper_columns)
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for t in tasks:
        waiting = sorted({name for name, c in pending if c == t})  # interim: left out
        o = ordering(study, summary, t, column=paper_of.get(t), sizes=sizes,
                     excluded=excluded.get(t, set()) | set(waiting))
        o["excluded"] = [name for name in o["excluded"] if name not in waiting]
        if o["paper_column"] == "average":
            ref = "the mean of the paper's columns"
        elif o["paper_column"] in study.paper_columns:
            ref = f"the paper's {o['paper_column']} column"
        else:
            ref = study.ordering_note or f"the paper's {o['paper_column']}"
        if study.same_size_pairs:
            ref += ", variants of the same size only"
        verdict = "holds" if o["holds"] else \
            "pending" if waiting and not o["pairs"] else "does not hold"
        lines.append(f"- Ordering on {t} ({'final ' if epoch_numbers else ''}"
                     f"{whats.get(t, what)}) vs {ref}: "
                     f"{verdict} ({o['agree']} of {o['pairs']} pairs in the paper's order, "
                     f"{o['ties']} tied)" + (f"; reversed: {'; '.join(o['disagreements'])}"
                                             if o["disagreements"] else "")
                     + (f"; not learned (left out): {', '.join(o['excluded'])}"
                        if o["excluded"] else "")
                     + (f"; pending (left out until all their cells finish): "
                        f"{', '.join(waiting)}" if waiting else ""))
    if study.pretraining_metric and study.pretraining_paper_column:
        ppl = {}  # over the finished pretraining seeds: (mean, sample sd, n)
        for name, rows in pre.items():
            values = _finished_values(rows, study.pretraining_metric, shared)
            if values:
                ppl[(name, "ppl")] = mean_spread(values)
        if ppl:
            o = ordering(study, ppl, "ppl", column=study.pretraining_paper_column,
                         lower_is_better=True)
            waiting = any(r.get("held_out_pending") for rows in pre.values() for r in rows)
            source = ("every model scored on the study's shared held-out file" if shared else
                      "each pretraining cell's own held-out masking draw"
                      + (": the shared file's cells are not all finished" if waiting else ""))
            lines.append(f"- Ordering of the held-out masked-LM perplexity ({source}) vs "
                         f"the paper's {study.pretraining_paper_column} column (lower is better): "
                         f"{'holds' if o['holds'] else 'does not hold'} ({o['agree']} of "
                         f"{o['pairs']} pairs in the paper's order, {o['ties']} tied)")
        elif any(r.get("pending") for rows in pre.values() for r in rows):
            lines.append("- Held-out masked-LM perplexity: pending (pretraining cells not "
                         "finished)")
        else:
            lines.append("- Held-out masked-LM perplexity: not measured at this scale (no "
                         "held-out corpus)")
    zero = [r for r in study_rows if r.get("kind") == "zero_shot" and not r.get("pending")]
    for t in sorted({r["task"] for r in study_rows if r.get("kind") == "zero_shot"
                     and r.get("pending")}):
        lines.append(f"- Zero-shot heuristic on {t}: pending (its cell is not finished)")
    for t in sorted({r["task"] for r in zero}):
        points = sorted((r["steps"], r["value"]) for r in zero if r["task"] == t)
        majority = next(r["majority_class"] for r in zero if r["task"] == t)
        lines.append(f"- Zero-shot heuristic on {t} (GPT pretraining checkpoints; majority "
                     f"class {majority:.1f}%): " + ", ".join(
                         f"step {s}: {v:.1f}" for s, v in points)
                     + ". The paper (Figure 2, right): the heuristics' performance rises "
                     "steadily over pre-training.")
    # One entry per pretraining cell, named by every variant that shares it.
    pre_cells: dict = {}
    for r in study_rows:
        if r["task"] == "pretraining":
            pre_cells.setdefault(r["cell"], (r, []))[1].append(r["variant"])
    if pre_cells:
        # With several pretraining seeds a variant has one cell per seed: name the seed.
        seeds = {cell: r.get("pretraining_seed", r.get("seed"))
                 for cell, (r, _) in pre_cells.items()}
        seeded = len(set(seeds.values())) > 1
        lines += ["", "Pretraining cells: " + "; ".join(
            ", ".join(names) + (f" (pretraining seed {seeds[cell]})" if seeded else "")
            + f": {_pretraining_text(r)}" for cell, (r, names) in pre_cells.items())]
    lines += claim_lines(study_rows)
    lines += budget_lines(study_rows)
    lines += cell_lines(study_rows)
    if scale:  # the scale the commands run at (write_results always gives it)
        lines += command_lines(study, study_rows, scale)
    for png in plots:
        lines += ["", f"![{study.name}]({os.path.relpath(png, output_dir)})"]
    lines.append("")
    return lines


def plot_study(output_dir: str, study: Study, rows: list[dict],
               pretraining_curves: dict[str, list]) -> list[str]:
    """`<study>_scores.png` (bars per task and variant, error bars = spread over seeds) and,
    when the study has pretraining runs, `<study>_pretraining.png` (loss per step). Returns the
    paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    summary = summarise([r for r in rows if r["study"] == study.name])
    tasks = table_columns(summary, [r for r in rows if r["study"] == study.name])
    written = []
    # About a third of an inch per bar plus the legend, at most 14 inches: a 6-variant x 5-task
    # study was 39.5 inches wide (3,555 px at 4 inches high), unreadable on a page.
    bars = len(study.variants) * len(tasks)
    fig, ax = plt.subplots(figsize=(min(14.0, max(4.0, 0.35 * bars) + 3.5), 4))
    width = 0.8 / len(study.variants)
    x = np.arange(len(tasks))
    for i, v in enumerate(study.variants):
        means = [summary.get((v.name, t), (np.nan, 0, 0))[0] for t in tasks]
        spreads = [summary.get((v.name, t), (0, 0.0, 0))[1] for t in tasks]
        ax.bar(x + i * width - 0.4 + width / 2, means, width, yerr=spreads, label=v.label,
               capsize=3)
    scored = [r for r in rows if r["study"] == study.name
              and r.get("kind", "finetuning") == "finetuning" and r["task"] != "pretraining"]
    metric_of = {column_of(r): metric_name(r["metric"]) for r in scored}
    baseline = baselines_of([r for r in rows if r["study"] == study.name])
    label = "trivial baseline (gate)"  # in the legend once
    for j, t in enumerate(tasks):  # the task's gate across its bar group
        if t in baseline:
            ax.hlines(baseline[t][1], j - 0.45, j + 0.45, colors="black", linestyles="dashed",
                      label=label)
            label = None
    ax.set_xticks(x)
    if len(set(metric_of.values())) > 1:  # each bar group says what it scores
        ax.set_xticklabels([f"{t}\n({metric_of.get(t, '')})" for t in tasks], fontsize=8)
        ax.set_ylabel("held-out score (%)")
    else:
        ax.set_xticklabels(tasks)
        ax.set_ylabel(f"held-out {next(iter(metric_of.values()), 'accuracy')} (%)")
    ax.set_title(f"{study.title}\n(error bars: sample standard deviation over seeds)",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    written.append(_save(fig, os.path.join(output_dir, f"{study.name}_scores.png")))
    plt.close(fig)
    if pretraining_curves:
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, curve in pretraining_curves.items():
            if curve:
                steps, values = zip(*curve)
                ax.plot(steps, values, label=label)
        ax.set_xlabel("pretraining step")
        ax.set_ylabel("training loss (masked LM or LM)")
        ax.set_title(f"{study.name}: pretraining", fontsize=10)
        ax.legend(fontsize=7, loc="upper right")
        fig.tight_layout()
        written.append(_save(fig, os.path.join(output_dir, f"{study.name}_pretraining.png")))
        plt.close(fig)
    study_rows = [r for r in rows if r["study"] == study.name]
    epoch_rows = [r for r in study_rows if r.get("kind") == "epoch"]
    if epoch_rows:  # curves per epoch
        fig, ax = plt.subplots(figsize=(6, 4))
        for v in study.variants:
            for t in tasks:
                got: dict = {}
                for r in epoch_rows:
                    if r["variant"] == v.name and r["task"] == t:
                        got.setdefault(r["epoch"], []).append(float(r["value"]))
                if got:
                    xs = sorted(got)
                    ax.plot(xs, [statistics.fmean(got[x]) for x in xs], marker="o",
                            label=f"{v.label} ({t})")
        ax.set_xlabel("fine-tuning epoch")
        ax.set_ylabel("held-out accuracy (%)")
        ax.set_title(study.title, fontsize=9)
        if ax.get_legend_handles_labels()[0]:  # an interim report may have no curve yet
            ax.legend(fontsize=7)
        fig.tight_layout()
        written.append(_save(fig, os.path.join(output_dir, f"{study.name}_epochs.png")))
        plt.close(fig)
    if any(v.transfer_layers is not None for v in study.variants):  # curve per layer
        fig, ax = plt.subplots(figsize=(6, 4))
        for t in tasks:
            points = []
            for v in study.variants:
                if (v.name, t) in summary:
                    size = next((r.get("model") for r in study_rows
                                 if r["variant"] == v.name and r.get("model")), "L0/")
                    n = v.transfer_layers if v.transfer_layers is not None else \
                        int(size.split("/")[0][1:])
                    points.append((n, summary[(v.name, t)][0]))
            if points:
                xs, ys = zip(*sorted(points))
                ax.plot(xs, ys, marker="o", label=t)
        ax.set_xlabel("transformer layers transferred (0: embeddings only)")
        ax.set_ylabel("held-out accuracy (%)")
        ax.set_title(study.title, fontsize=8)
        if ax.get_legend_handles_labels()[0]:  # an interim report may have no curve yet
            ax.legend(fontsize=7)
        fig.tight_layout()
        written.append(_save(fig, os.path.join(output_dir, f"{study.name}_layers.png")))
        plt.close(fig)
    zero = [r for r in study_rows if r.get("kind") == "zero_shot" and not r.get("pending")]
    if zero:  # curve per pretraining step
        fig, ax = plt.subplots(figsize=(6, 4))
        for t in sorted({r["task"] for r in zero}):
            points = sorted((r["steps"], r["value"]) for r in zero if r["task"] == t)
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o", label=f"{t} zero-shot")
            majority = next(r["majority_class"] for r in zero if r["task"] == t)
            ax.axhline(majority, linestyle=":", color="grey")
        ax.set_xlabel("pretraining step (LM checkpoint)")
        ax.set_ylabel("zero-shot accuracy (%)")
        ax.set_title(f"{study.name}: zero-shot heuristics (dotted: majority class)", fontsize=9)
        if ax.get_legend_handles_labels()[0]:  # an interim report may have no curve yet
            ax.legend(fontsize=7)
        fig.tight_layout()
        written.append(_save(fig, os.path.join(output_dir, f"{study.name}_zero_shot.png")))
        plt.close(fig)
    claims_png = plot_claims(os.path.join(output_dir, f"{study.name}_claims.png"),
                             [r for r in study_rows if r.get("kind") == "claim"], study.title)
    return written + ([claims_png] if claims_png else [])


def plot_claims(path: str, claims: list[dict], title: str) -> str | None:
    """A forest plot of `claims` (claim rows): each claim's difference (better − worse) with its
    95% bootstrap interval, the paper's effect (x), an expected null's band (the paper's
    effect ± 1); claims without an interval (not learned, pending) are named with their
    verdict. Perplexity claims get their own panel (another unit). Writes `path` and returns
    it, or None when no claim has an interval (a plot an earlier report left at `path` is
    then removed: it would show intervals this report no longer has)."""
    if not any("ci_low" in r for r in claims):
        if io_utils.exists(path):
            io_utils.remove(path)
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(name, [r for r in claims if bool(r.get("lower_is_better")) == lower])
              for name, lower in (("score points (%)", False),
                                  ("perplexity reduction", True))]
    panels = [(name, group) for name, group in panels if group]
    heights = [len(group) for _, group in panels]
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, height_ratios=heights,
                             figsize=(11, 1.3 + 0.32 * sum(heights)))
    for ax, (unit, group) in zip(axes[:, 0], panels):
        ys = list(range(len(group)))[::-1]
        for y, r in zip(ys, group):
            if r.get("expected_null") and r.get("paper_effect") is not None:
                ax.fill_betweenx([y - 0.35, y + 0.35], r["paper_effect"] - NULL_MARGIN,
                                 r["paper_effect"] + NULL_MARGIN, color="0.85")
            if "ci_low" in r:
                color = {"holds": "tab:green", "reversed": "tab:red",
                         "differs": "tab:red"}.get(r["verdict"], "tab:grey")
                ax.errorbar(r["diff"], y, xerr=[[r["diff"] - r["ci_low"]],
                                                [r["ci_high"] - r["diff"]]],
                            fmt="o", color=color, capsize=3)
            if r.get("paper_effect") is not None:
                ax.plot(r["paper_effect"], y, "x", color="black")
        ax.axvline(0.0, color="black", linewidth=0.8)
        ax.set_yticks(ys)
        ax.set_yticklabels([_short(r.get("text") or r["variant"]) for r in group],
                           fontsize=7)
        ax.set_ylim(-0.7, len(group) - 0.3)
        right = ax.twinx()  # the verdict of each row, on the right
        right.set_ylim(ax.get_ylim())
        right.set_yticks(ys)
        right.set_yticklabels([verdict_label(r) for r in group], fontsize=7)
        ax.set_xlabel(f"ours: better − worse ({unit})", fontsize=8)
    axes[0, 0].set_title(f"{title}\ndot and bar: our difference and its 95% interval; x: the "
                         f"paper's effect; grey: an expected null's band (paper ± "
                         f"{NULL_MARGIN:g})",
                         fontsize=8)
    # Fixed margins: tight_layout misplaces the left labels of panels with a twin axis.
    fig.subplots_adjust(left=0.36, right=0.8, top=1 - 0.6 / fig.get_figheight(),
                        bottom=0.5 / fig.get_figheight(), hspace=0.9 / sum(heights) * 4)
    _save(fig, path)
    plt.close(fig)
    return path


def _short(text: str, width: int = 56) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _save(fig, path: str) -> str:
    with io_utils.atomic_output_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    return path
