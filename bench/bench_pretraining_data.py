"""Benchmark of create_pretraining_data: documents/s, instances/s and peak memory of faithful mode
and of scalable mode with 1 and 2 workers, printed as JSON.

Corpus: ../shared/data/pretrain/imdb_unsup_corpus.txt.gz (50,000 IMDb reviews, 65 MB of text),
flags --max_seq_length=128 --dupe_factor=5 (others at the original's defaults), vocab
bert-base-uncased. Each mode runs in its own process; peak memory is reported twice:
`peak_rss_mb` = the largest single process (getrusage), `peak_tree_rss_mb` = the largest sum of
RSS over the run's process tree (sampled from /proc every 0.2 s; what the machine must hold).

For scale (issue 6): the original script on the first 10 MB (7,643 documents) took 59.5 s and
1.06 GB peak RSS for 147,388 instances (~2,480 instances/s).

  python bench/bench_pretraining_data.py                       # faithful 10 MB, scalable all
  python bench/bench_pretraining_data.py --faithful_mb=10 --scalable_mb=10 --modes=faithful
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("BERT_TF_SHARED", ROOT.parent / "shared"))
CORPUS = SHARED / "data" / "pretrain" / "imdb_unsup_corpus.txt.gz"
VOCAB = SHARED / "fixtures" / "original" / "vocab_uncased.txt"
ORIGINAL_REFERENCE = {"input_mb": 10, "documents": 7643, "seconds": 59.5, "peak_rss_gb": 1.06,
                      "instances": 147388, "instances_per_second": 2480}

_RUNNER = r"""
import json, resource, sys, time
from absl import logging
logging.set_verbosity(logging.WARNING)
from bert_tf.pretraining_data import PretrainingDataOptions, create_pretraining_data, \
    create_pretraining_data_sharded, load_tokenizer
mode, corpus, out, vocab, workers = sys.argv[1:6]
options = PretrainingDataOptions(max_seq_length=128, dupe_factor=5)
start = time.time()
if mode == "faithful":
    summary = create_pretraining_data(corpus, out + ".tfrecord", load_tokenizer(vocab, True),
                                      options, log_examples=0)
else:
    summary = create_pretraining_data_sharded(corpus, out, vocab, True, options,
                                              num_workers=int(workers), progress_interval=30)
summary["wall_seconds"] = time.time() - start
summary["cpu_seconds_self"] = time.process_time()
summary["peak_rss_self_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
summary["peak_rss_children_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
summary["cpu_seconds"] = sum(r.ru_utime + r.ru_stime for r in
                             (resource.getrusage(resource.RUSAGE_SELF),
                              resource.getrusage(resource.RUSAGE_CHILDREN)))
summary.pop("output_files", None)
print("RESULT " + json.dumps(summary))
"""


def _children_map() -> dict:
    children: dict = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(name))
        except (OSError, IndexError):
            continue
    return children


def _tree_rss_mb(pid: int) -> float:
    kids = _children_map()
    todo, total = [pid], 0
    page = os.sysconf("SC_PAGE_SIZE")
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * page
        except OSError:
            pass
        todo.extend(kids.get(p, []))
    return total / 2**20


def run_mode(mode: str, corpus: str, workdir: str, workers: int) -> dict:
    out = os.path.join(workdir, f"{mode}{workers}", "data")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    load_before = round(os.getloadavg()[0], 2)
    proc = subprocess.Popen([sys.executable, "-c", _RUNNER, mode, corpus, out, str(VOCAB),
                             str(workers)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    peak = [0.0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss_mb(proc.pid))
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} x{workers} failed:\n{stderr[-3000:]}")
    summary = json.loads([line for line in stdout.splitlines()
                          if line.startswith("RESULT ")][-1][len("RESULT "):])
    wall = summary["wall_seconds"]
    return {
        "mode": mode,
        "num_workers": workers,
        "documents": summary["documents"],
        "instances": summary["instances"],
        "seconds": round(wall, 2),
        "documents_per_second": round(summary["documents"] / wall, 1),
        "instances_per_second": round(summary["instances"] / wall, 1),
        "peak_rss_mb": round(max(summary["peak_rss_self_mb"],
                                 summary["peak_rss_children_mb"]), 1),
        "peak_tree_rss_mb": round(peak[0], 1),
        # CPU time of the run's processes (workers included): what the work costs, whatever
        # else the machine is doing; instances per CPU-second x cores = rate on free cores.
        "cpu_seconds": round(summary["cpu_seconds"], 1),
        "instances_per_cpu_second": round(summary["instances"] / summary["cpu_seconds"], 1),
        "load_average_1min_before": load_before,
        "masked_positions": summary["masked_positions"],
        "truncated_instances": summary["truncated_instances"],
        "not_next_share": round(summary["not_next_share"], 4),
    }


def prepare_input(megabytes: float, workdir: str) -> str:
    """The whole .gz corpus, or its first `megabytes` x 10^6 bytes of text (like `head -c`)."""
    if not megabytes:
        return str(CORPUS)
    path = os.path.join(workdir, f"imdb_first_{megabytes:g}MB.txt")
    with gzip.open(CORPUS, "rb") as f:
        data = f.read(int(megabytes * 1_000_000))
    with open(path, "wb") as f:
        f.write(data)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--faithful_mb", type=float, default=10,
                        help="input for faithful mode: first N MB of text (0 = whole corpus)")
    parser.add_argument("--scalable_mb", type=float, default=0,
                        help="input for scalable mode: first N MB of text (0 = whole corpus)")
    parser.add_argument("--modes", default="faithful,scalable1,scalable2",
                        help="comma-separated subset of faithful,scalable1,scalable2")
    parser.add_argument("--output_json", default=None, help="also write the JSON here")
    args = parser.parse_args()
    if not CORPUS.exists():
        sys.exit(f"needs {CORPUS} (the project's ../shared data)")
    workdir = tempfile.mkdtemp(prefix="bench_pretraining_")
    results = []
    try:
        for mode in args.modes.split(","):
            if mode == "faithful":
                corpus = prepare_input(args.faithful_mb, workdir)
                result = run_mode("faithful", corpus, workdir, 1)
                result["input_mb"] = args.faithful_mb or "all"
            else:
                corpus = prepare_input(args.scalable_mb, workdir)
                result = run_mode("scalable", corpus, workdir, int(mode[len("scalable"):]))
                result["input_mb"] = args.scalable_mb or "all"
            results.append(result)
            print(json.dumps(result), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ref = ORIGINAL_REFERENCE["instances_per_second"]
    report = {
        "benchmark": "create_pretraining_data",
        "flags": {"max_seq_length": 128, "dupe_factor": 5, "max_predictions_per_seq": 20,
                  "masked_lm_prob": 0.15, "short_seq_prob": 0.1, "random_seed": 12345},
        "cpu_count": os.cpu_count(),
        "load_average_at_end": os.getloadavg(),
        "original_reference": ORIGINAL_REFERENCE,
        "results": results,
        "vs_original_instances_per_second": {
            f"{r['mode']}{r['num_workers']}": round(r["instances_per_second"] / ref, 2)
            for r in results},
        "targets": {"faithful_instances_per_second_at_least": ref,
                    "scalable2_instances_per_second_at_least": round(1.7 * ref),
                    "scalable_peak_rss_mb_below_whole_corpus": 1536},
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.output_json:
        with open(args.output_json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
