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


def summarise(rows: list[dict]) -> dict:
    """{(variant, task): (mean, spread, n)} over seeds of the fine-tuning rows; spread is the
    sample standard deviation (0 for one seed)."""
    groups: dict = {}
    for r in rows:
        if r["task"] != "pretraining":
            groups.setdefault((r["variant"], r["task"]), []).append(float(r["value"]))
    return {k: (statistics.fmean(v), statistics.stdev(v) if len(v) > 1 else 0.0, len(v))
            for k, v in groups.items()}


def _paper_reference(study: Study, task: str) -> str:
    if task in study.paper_columns:
        return task
    return study.ordering_column


def _paper_value(study: Study, variant, column: str) -> float | None:
    if column == "average":
        values = [variant.paper.get(c) for c in study.paper_columns]
        return statistics.fmean(values) if values and None not in values else None
    return variant.paper.get(column)


def ordering(study: Study, summary: dict, task: str) -> dict:
    """Pairwise check of the paper's ranking on our task: for every pair of variants with paper
    numbers that differ, does our mean order them the same way?"""
    column = _paper_reference(study, task)
    pairs, agree, ties, disagreements = 0, 0, 0, []
    for a, b in itertools.combinations(study.variants, 2):
        pa, pb = _paper_value(study, a, column), _paper_value(study, b, column)
        if pa is None or pb is None or pa == pb or (a.name, task) not in summary \
                or (b.name, task) not in summary:
            continue
        pairs += 1
        ours = summary[(a.name, task)][0] - summary[(b.name, task)][0]
        if ours * (pa - pb) > 0:
            agree += 1
        elif ours == 0:
            ties += 1
        else:
            hi, lo = (a, b) if pa > pb else (b, a)
            disagreements.append(f"paper: {hi.label} > {lo.label}")
    return {"paper_column": column, "pairs": pairs, "agree": agree, "ties": ties,
            "holds": pairs > 0 and agree == pairs, "disagreements": disagreements}


def write_results(output_dir: str, studies: list[Study], rows: list[dict], scale: str,
                  seeds: list[int], plots: dict[str, list[str]]) -> dict:
    """Writes results.json and results.md; returns {"json": path, "md": path}."""
    json_path = os.path.join(output_dir, "results.json")
    io_utils.atomic_write_text(json_path, json.dumps(rows, indent=1) + "\n")
    lines = [f"# Study results (scale `{scale}`, fine-tuning seeds {', '.join(map(str, seeds))})",
             "", "Ours: held-out accuracy (%), mean ± sample standard deviation over seeds. "
             "Paper: the paper's own numbers (other tasks, other scale), for the ordering.", ""]
    for study in studies:
        study_rows = [r for r in rows if r["study"] == study.name]
        summary = summarise(study_rows)
        tasks = sorted({t for _, t in summary})
        lines += [f"## {study.title}", "", f"`--study={study.name}`; paper: {study.metric_note}.",
                  ""]
        header = ["Variant"] + [f"{t} (ours)" for t in tasks] + \
            [f"{c} (paper)" for c in study.paper_columns]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for v in study.variants:
            cells = [v.label]
            for t in tasks:
                mean, spread, n = summary.get((v.name, t), (math.nan, 0.0, 0))
                cells.append(f"{mean:.1f} ± {spread:.1f}" if n > 1 else f"{mean:.1f}")
            cells += [f"{v.paper[c]:.1f}" if c in v.paper else "—" for c in study.paper_columns]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        for t in tasks:
            o = ordering(study, summary, t)
            ref = ("the mean of the paper's columns" if o["paper_column"] == "average"
                   else f"the paper's {o['paper_column']} column")
            verdict = "holds" if o["holds"] else "does not hold"
            lines.append(f"- Ordering on {t} vs {ref}: {verdict} ({o['agree']} of {o['pairs']} "
                         f"pairs in the paper's order, {o['ties']} tied)"
                         + (f"; reversed: {'; '.join(o['disagreements'])}"
                            if o["disagreements"] else ""))
        pre = [r for r in study_rows if r["task"] == "pretraining"]
        if pre:
            lines += ["", "Pretraining cells: " + "; ".join(
                f"{r['variant']}: {r['metric']} {r['value']} ({r['steps']} steps, "
                f"{r['wall_s']} s)" for r in pre)]
        for png in plots.get(study.name, []):
            lines += ["", f"![{study.name}]({os.path.relpath(png, output_dir)})"]
        lines.append("")
    md_path = os.path.join(output_dir, "results.md")
    io_utils.atomic_write_text(md_path, "\n".join(lines) + "\n")
    return {"json": json_path, "md": md_path}


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
    tasks = sorted({t for _, t in summary})
    written = []
    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(study.variants) * len(tasks)) + 3.5, 4))
    width = 0.8 / len(study.variants)
    x = np.arange(len(tasks))
    for i, v in enumerate(study.variants):
        means = [summary.get((v.name, t), (np.nan, 0, 0))[0] for t in tasks]
        spreads = [summary.get((v.name, t), (0, 0.0, 0))[1] for t in tasks]
        ax.bar(x + i * width - 0.4 + width / 2, means, width, yerr=spreads, label=v.label,
               capsize=3)
    ax.set_xticks(x)
    ax.set_xticklabels(tasks)
    ax.set_ylabel("held-out accuracy (%)")
    ax.set_title(study.title, fontsize=10)
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
    return written


def _save(fig, path: str) -> str:
    with io_utils.atomic_output_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    return path
