"""The CPU time of a study grid before it runs (`tools/run_study.py --estimate`), from a cost
model calibrated on the published `small` run (docs/studies_small/results.json, 2026-11: L2
H128 A2 at length 64, batch 32, on this machine kind's 2 cores shared with other work):

* BERT pretraining 8,000 steps x 32 x 64 = 16.4M tokens in 380 s (MLM + NSP, data generation
  and the held-out evaluation included): `RATE["bert_pretraining"]` s per token; the
  left-to-right model's 775 s: `RATE["gpt_pretraining"]` (its LM head scores every position);
* BERT fine-tuning: 5,000 SST-2 examples x 3 epochs x 64 in 20 s, of which ~10 s are the
  cell's fixed cost (`OVERHEAD_S`): `RATE["bert_finetuning"]`; GPT cells took 1.7x (no aux
  LM), 4x (aux LM), 2.2x (the BiLSTM head) as long; feature-based NER 2.3x fine-tuned NER;
* a model of L layers and width H costs 0.3 + 0.7 L H / (2 x 128) of the L2 H128 model's time
  per token (the fixed part: embeddings, the data pipeline), and a length S 1 + S / (8 H)
  of the length-64 cost per token relative to 1 + 64 / (8 H) (attention's S^2 H against the
  feed-forward's 8 S H^2);
* SQuAD reads `squad_windows` windows per question (about 2 for its ~160-WordPiece
  paragraphs at length >= 192 with stride 64, 4 at length 64), at `SQUAD_EFFICIENCY` of the
  classification cells' cost per token (the published SQuAD cells took 46 s on average where
  the classification rate said 111 s).

Checked on the published run's own grid (Table 5, GPT Table 5, BERT vs GPT at small_v1, 3
seeds): 2.52 h estimated, 2.32 h measured (pretraining 0.68 vs 0.78 h; MRPC under, SQuAD
over by up to 0.1 h each).

The estimate is a plan, not a measurement: a loaded machine, or another machine kind, takes
longer (the published cells ran beside other helpers' tests; the gated grid's first 29 cells on
an AVX2 AMD host took about 3x their estimate). Every cell counts in full; cells already done
in the output folder are not subtracted. The interim report (`--report_only`) says both this
plan's hours left and the same cells at the pace the finished ones kept (`paced_seconds`).
"""
from __future__ import annotations

import dataclasses

RATE = {"bert_pretraining": 380 / 16.4e6, "gpt_pretraining": 775 / 16.4e6,
        "bert_finetuning": 10 / (5000 * 3 * 64)}
OVERHEAD_S = {"pretraining": 30.0, "finetuning": 10.0, "baseline": 20.0, "zero_shot": 60.0,
              "data": 600.0}
GPT_FACTOR = {"default": 1.7, "aux_lm": 4.0, "bilstm": 2.2}
FEATURE_BASED_FACTOR = 2.3
SQUAD_EFFICIENCY = 0.4
CLOZE_CANDIDATES = 5
TASK_TRAIN = {"SST-2": 67349, "CoLA": 8551, "MRPC": 3668, "RTE": 2490, "STS-B": 5749,
              "IMDb": 22500, "SQuAD": 7750, "conll2003": 14041, "topic": 459}
"""Training examples of each task (SQuAD: the questions of the dev-article split's training
articles; IMDb: 25,000 minus the 2,500 held out)."""
TASK_HELD_OUT = {"SST-2": 872, "CoLA": 1043, "MRPC": 408, "RTE": 277, "STS-B": 1500,
                 "IMDb": 2500, "SQuAD": 2817, "conll2003": 3250, "topic": 150}


def squad_windows(seq: int) -> float:
    """Windows per SQuAD question at length `seq` (module docstring)."""
    return 2.0 if seq >= 192 else 3.0 if seq >= 128 else 4.0


def _size(layers: int, hidden: int, seq: int) -> float:
    per_token = 0.3 + 0.7 * layers * hidden / 256.0
    return per_token * (1 + seq / (8.0 * hidden)) / (1 + 64 / (8.0 * hidden))


def pretraining_seconds(scale, layers: int, hidden: int, model: str) -> float:
    """One pretraining cell: each phase's tokens (`Scale.pretraining_phases`: a two-phase
    scale's short phase costs less per token) at the model's rate, plus the fixed cost."""
    rate = RATE["gpt_pretraining" if model == "gpt" else "bert_pretraining"]
    return OVERHEAD_S["pretraining"] + sum(
        rate * steps * scale.pretraining_batch * seq * _size(layers, hidden, seq)
        for steps, seq in scale.pretraining_phases())


@dataclasses.dataclass
class CellEstimate:
    kind: str
    key: str
    seconds: float


HELD_OUT_SEQUENCES = 1000
"""About the held-out masked-LM sequences of `small`'s held-out documents (1% of the IMDb
corpus at length 192, dupe_factor 1): the Table 6 held-out cells' forward passes."""


def estimate_grid(studies, scale, seeds: list[int], pretraining_seeds: list[int]
                  ) -> list[CellEstimate]:
    """One `CellEstimate` per distinct cell of the grid (as `run._run` builds it)."""
    cells: dict[str, CellEstimate] = {}

    def add(kind: str, key: str, seconds: float) -> None:
        cells.setdefault(f"{kind}/{key}", CellEstimate(kind, key, round(seconds, 1)))

    add("data", "corpus", OVERHEAD_S["data"])
    for study in studies:
        for v in study.variants:
            layers, hidden, _ = v.model_size(scale)
            if v.pretraining_key:
                seconds = pretraining_seconds(scale, layers, hidden, v.model)
                for p in pretraining_seeds:
                    add("pretraining", f"{v.pretraining_cell(scale)}/p{p}", seconds)
        for e in study.evaluations(scale):
            run = e.run
            layers, hidden, _ = run.model_size(scale)
            seq = scale.seq_for(e.task)
            train = TASK_TRAIN.get(e.task, 5000)
            cap = scale.max_train_for(e.task)
            if cap:
                train = min(train, cap)
            held = TASK_HELD_OUT.get(e.task, 1000)
            if e.task == scale.ner_task and cap:
                held = min(held, cap)
            windows = squad_windows(seq) * SQUAD_EFFICIENCY if e.task == "SQuAD" else 1.0
            tokens = (train * scale.finetuning_epochs + held * (
                scale.finetuning_epochs if run.per_epoch else 1)) * windows * seq
            factor = 1.0
            if run.model == "gpt":
                factor = GPT_FACTOR["bilstm" if run.head == "bilstm" else
                                    "aux_lm" if run.lm_coef else "default"]
            if run.feature_layers:
                factor *= FEATURE_BASED_FACTOR
            seconds = OVERHEAD_S["finetuning"] + RATE["bert_finetuning"] * tokens * factor * \
                _size(layers, hidden, seq)
            add("baseline", e.task, OVERHEAD_S["baseline"])
            for p in (pretraining_seeds if run.pretraining_key else [None]):
                for s in seeds:
                    add("finetuning", f"{run.finetuning_cell(scale)}/p{p}/{e.task}/s{s}",
                        seconds)
        if study.cloze and scale.cloze_items:  # forward passes only: ~1/3 of a step's cost
            add("baseline", "cloze", OVERHEAD_S["baseline"])
            for v in study.variants:
                if v.pretraining_key:
                    layers, hidden, _ = v.model_size(scale)
                    k = CLOZE_CANDIDATES if v.model == "gpt" else 1
                    tokens = scale.cloze_items * k * scale.max_seq_length
                    for p in pretraining_seeds:
                        add("cloze", f"{v.pretraining_cell(scale)}/p{p}",
                            OVERHEAD_S["zero_shot"] + RATE["bert_finetuning"] / 3 * tokens
                            * _size(layers, hidden, scale.max_seq_length))
        if study.pretraining_paper_column and (scale.held_out_every
                                               or scale.corpus == "embedded"):
            # Table 6's per-sequence held-out masked-LM scores: forward passes over ~1% of the
            # corpus (every 100th document), plus writing that file once per cell.
            for v in study.variants:
                if v.pretraining_key and v.model == "bert":
                    layers, hidden, _ = v.model_size(scale)
                    tokens = HELD_OUT_SEQUENCES * scale.max_seq_length
                    for p in pretraining_seeds:
                        add("held_out", f"{v.pretraining_cell(scale)}/p{p}",
                            OVERHEAD_S["zero_shot"] + RATE["bert_finetuning"] / 3 * tokens
                            * _size(layers, hidden, scale.max_seq_length))
        if study.zero_shot:
            add("zero_shot", study.name, OVERHEAD_S["zero_shot"])
    return list(cells.values())


def pace(finished: list[tuple[str, float, float, float | None]]) -> dict[str, float]:
    """Measured / estimated seconds of the finished cells, per kind of cell and overall
    ("all"): `finished` holds (kind, estimated s, wall s, CPU s or None) per cell. The
    measure is the cell's CPU time (`cpu_s`: what it cost this machine, whatever else ran
    beside it) wherever the kind has cells that recorded it, those cells only; a kind none of
    whose cells recorded it is paced by their `wall_s` (the time its process was stopped left
    out), which other work on the machine stretches. A kind with no finished cell gets no
    entry; `paced_seconds` uses the overall ratio for it."""
    sums: dict[str, dict[str, list[float]]] = {}  # kind -> measure -> [estimated, measured]
    for kind, est, wall, cpu in finished:
        for k in (kind, "all"):
            by = sums.setdefault(k, {"cpu": [0.0, 0.0], "wall": [0.0, 0.0]})
            for measure, value in (("cpu", cpu), ("wall", wall)):
                if value is not None:
                    by[measure] = [by[measure][0] + est, by[measure][1] + value]
    ratios = {}
    for k, by in sums.items():
        e, m = by["cpu"] if by["cpu"][0] > 0 else by["wall"]
        if e > 0:
            ratios[k] = m / e
    return ratios


def paced_seconds(pending: list[tuple[str, float]], ratios: dict[str, float]) -> float | None:
    """The estimated seconds of the `pending` cells ((kind, estimated s) each), each scaled
    by its kind's measured / estimated ratio (`pace`), else the overall one; None without
    any finished cell to measure the pace on."""
    if "all" not in ratios:
        return None
    return sum(est * ratios.get(kind, ratios["all"]) for kind, est in pending)


def format_estimate(cells: list[CellEstimate], scale) -> str:
    """The --estimate text: hours per kind of cell and in total."""
    by_kind: dict = {}
    for c in cells:
        n, s = by_kind.get(c.kind, (0, 0.0))
        by_kind[c.kind] = (n + 1, s + c.seconds)
    total = sum(c.seconds for c in cells)
    lines = [f"Estimated CPU time of the grid at --scale={scale.name} (this machine kind, "
             f"unloaded; bert_tf/studies/estimate.py):"]
    lines += [f"  {kind}: {n} cells, {s / 3600:.2f} h" for kind, (n, s) in by_kind.items()]
    lines.append(f"  total: {len(cells)} cells, {total / 3600:.2f} h")
    return "\n".join(lines)
