"""The quickstart's outputs for people and machines: the summary table, `curves.png`,
`report.md` and `summary.json`."""
from __future__ import annotations

import json
import os
import statistics
from typing import Any

from bert_tf import io_utils

# The table names of the fine-tuned models (job.FINETUNE_MODELS).
FINETUNE_LABELS = {"bert_pretrained": "BERT, pretrained", "bert_scratch": "BERT, from scratch",
                   "gpt_pretrained": "GPT-1, pretrained", "gpt_scratch": "GPT-1, from scratch"}

NEXT_COMMANDS = """\
```bash
# Your own text: vocab -> pretraining data -> BERT pretraining (see docs/pretraining_data.md)
python tools/build_vocab.py --input_file=corpus.txt --output_file=vocab.txt --vocab_size=30522
python tools/create_pretraining_data.py --input_file=corpus.txt --output_file=data.tfrecord \\
  --vocab_file=vocab.txt --num_workers=8
python tools/run_pretraining.py --input_file=data.tfrecord --output_dir=pretraining \\
  --bert_config_file=official_configs/models/uncased_L-12_H-768_A-12.json --do_train --do_eval
# GPT-1 language-model data and pretraining on the same text and vocab
python tools/create_gpt_lm_data.py --input_file=corpus.txt --output_file=gpt/lm \\
  --vocab_file=vocab.txt --n_ctx=512 --held_out_fraction=0.01
python tools/run_gpt_pretraining.py --help
# Fine-tuning on GLUE with the released BERT-Base (see README, "Fine-tuning")
python tools/run_classifier.py --task_name=MRPC --do_train --do_eval --data_dir=$GLUE_DIR/MRPC \\
  --vocab_file=$BERT_BASE_DIR/vocab.txt --bert_config_file=$BERT_BASE_DIR/bert_config.json \\
  --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --output_dir=/tmp/mrpc_output
# The papers' ablations as studies (docs/studies.md): list them, then one on the embedded corpus
python tools/run_study.py --list
python tools/run_study.py --study=bert_pretraining_tasks --scale=tiny --output_dir=study_output
# Serve the exported classifier with TF Serving (raw text in, probabilities out)
docker run -p 8501:8501 --mount type=bind,source={export},target=/models/topic_classifier \\
  -e MODEL_NAME=topic_classifier tensorflow/serving
curl -d '{{"instances": ["The while loop repeats while a condition is true."]}}' \\
  http://localhost:8501/v1/models/topic_classifier:predict
```
"""


def _accuracies(results: dict) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in results["finetuning"]["runs"]:
        out.setdefault(r["model"], []).append(r["held_out_accuracy"])
    return out


def build_summary(root: str, options, results: dict, seconds: dict) -> dict:
    """The machine-readable summary (`summary.json`)."""
    bert, gpt = results["bert_pretraining"], results["gpt_pretraining"]
    accs = _accuracies(results)
    return {
        "output_dir": os.path.abspath(root),
        "data": {k: v for k, v in results["data"].items() if k != "max_predictions_per_seq"},
        "model": {"layers": options.num_layers, "hidden": options.hidden_size,
                  "heads": options.num_heads, "seq_length": options.max_seq_length},
        "bert_pretraining": {k: v for k, v in bert.items() if k != "curve"},
        "gpt_pretraining": {k: v for k, v in gpt.items() if k != "curve"},
        "finetuning": {
            "task": "topic group of a documentation paragraph (3 balanced classes, held-out "
                    "topics)",
            "chance": results["finetuning"]["chance"],
            "accuracy": {kind: {"label": FINETUNE_LABELS[kind], "per_seed": dict(zip(
                [str(r["seed"]) for r in results["finetuning"]["runs"] if r["model"] == kind],
                values)), "mean": round(statistics.mean(values), 4)}
                for kind, values in accs.items()},
        },
        "export": results["export"],
        "seconds": seconds,
        "files": sorted(os.listdir(root)),
    }


def summary_table(summary: dict) -> str:
    """The compact table printed at the end."""
    b, g = summary["bert_pretraining"], summary["gpt_pretraining"]
    f, e = summary["finetuning"], summary["export"]
    rows = [
        ("BERT pretraining", f"{b['steps']} steps {b['objective']}",
         f"held-out MLM acc {b['before']['masked_lm_accuracy']:.3f} -> "
         f"{b['after']['masked_lm_accuracy']:.3f}, loss {b['before']['masked_lm_loss']:.2f} -> "
         f"{b['after']['masked_lm_loss']:.2f}"),
        ("GPT-1 pretraining", f"{g['steps']} steps LM",
         f"held-out perplexity {g['before']['perplexity']:.0f} -> {g['after']['perplexity']:.0f}"),
    ]
    for kind, acc in f["accuracy"].items():
        seeds = ", ".join(f"{v:.3f}" for v in acc["per_seed"].values())
        rows.append((f"fine-tune: {acc['label']}", f"seeds {', '.join(acc['per_seed'])}",
                     f"held-out accuracy {acc['mean']:.3f} ({seeds}; chance "
                     f"{f['chance']:.3f})"))
    rows.append(("export + C API loader", e["export_dir"],
                 f"{e['model']} seed {e['seed']}: {len(e['requests'])} raw-text requests -> "
                 + ", ".join(r["label"] for r in e["requests"])
                 + f"; max |p - p_python| {e['max_abs_diff_vs_python']:.1e}"))
    total = sum(summary["seconds"].values())
    rows.append(("wall time", f"{total:.0f} s", ", ".join(
        f"{k} {v:.0f} s" for k, v in summary["seconds"].items())))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    line = "-" * (w0 + w1 + 4 + max(len(r[2]) for r in rows))
    return "\n".join([line, *(f"{a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows), line])


def write_outputs(root: str, summary: dict, results: dict) -> None:
    """Writes curves.png, report.md and summary.json."""
    from bert_tf.plotting import plot_training_curves
    curves: dict[str, Any] = {
        "BERT pretraining: masked-LM loss": results["bert_pretraining"]["curve"]["masked_lm_loss"],
        "GPT-1 pretraining: LM loss": results["gpt_pretraining"]["curve"]["loss"],
    }
    first_seed = results["finetuning"]["runs"][0]["seed"]
    for r in results["finetuning"]["runs"]:
        if r["seed"] == first_seed:
            curves[f"fine-tuning loss: {FINETUNE_LABELS[r['model']]} (seed {first_seed})"] = (
                r["curve"]["loss"])
    plot_training_curves({k: [tuple(p) for p in v] for k, v in curves.items()},
                         os.path.join(root, "curves.png"),
                         title="bert_tf quickstart (Python documentation text)")
    summary["files"] = sorted(set(summary["files"]) | {"curves.png", "report.md",
                                                       "summary.json"})
    io_utils.atomic_write_text(os.path.join(root, "summary.json"),
                               json.dumps(summary, indent=2) + "\n")
    io_utils.atomic_write_text(os.path.join(root, "report.md"), report_markdown(summary))


def report_markdown(summary: dict) -> str:
    b, g, f = summary["bert_pretraining"], summary["gpt_pretraining"], summary["finetuning"]
    e, d, m = summary["export"], summary["data"], summary["model"]
    lines = [
        "# bert_tf quickstart report", "",
        f"Data: Python's own documentation (`pydoc_data` topics), {d['documents']['train']} "
        f"training and {d['documents']['held_out']} held-out documents (whole topics held out), "
        f"WordPiece vocab of {d['vocab_size']}. Models: L={m['layers']} H={m['hidden']} "
        f"A={m['heads']}, sequence length {m['seq_length']}.", "",
        "## Pretraining (held-out topics)", "",
        "| model | steps x batch | before | after |", "|---|---|---|---|",
        f"| BERT ({b['objective']}) | {b['steps']} x {b['batch_size']} | MLM accuracy "
        f"{b['before']['masked_lm_accuracy']:.3f}, loss {b['before']['masked_lm_loss']:.3f} | "
        f"MLM accuracy {b['after']['masked_lm_accuracy']:.3f}, loss "
        f"{b['after']['masked_lm_loss']:.3f} |",
        f"| GPT-1 (LM) | {g['steps']} x {g['batch_size']} | perplexity "
        f"{g['before']['perplexity']:.1f} | perplexity {g['after']['perplexity']:.1f} |", "",
        "## Fine-tuning", "",
        f"Task: {f['task']}; {d['task']['train']} training and {d['task']['held_out']} held-out "
        f"paragraphs; chance {f['chance']:.3f}.", "",
        "| model | held-out accuracy per seed | mean |", "|---|---|---|",
        *(f"| {a['label']} | " + ", ".join(f"seed {s}: {v:.3f}" for s, v in a["per_seed"].items())
          + f" | {a['mean']:.3f} |" for a in f["accuracy"].values()), "",
        "## Export", "",
        f"`{e['export_dir']}`: the fine-tuned BERT classifier with the best held-out accuracy "
        f"({e['model']}, seed {e['seed']}: {e['held_out_accuracy']:.3f}) with its raw-text "
        f"signature, loaded by the {e['harness']}; largest difference of its "
        f"probabilities from Python's: {e['max_abs_diff_vs_python']:.1e}.", "",
        "| request | label | probabilities |", "|---|---|---|",
        *(f"| {r['text']} | {r['label']} | {', '.join(f'{p:.3f}' for p in r['probabilities'])} |"
          for r in e["requests"]), "",
        "## Files", "",
        *(f"- `{name}`" for name in summary["files"] if not name.startswith(".")), "",
        "## Wall time", "",
        ", ".join(f"{k} {v:.0f} s" for k, v in summary["seconds"].items()), "",
        "## Next commands", "",
        NEXT_COMMANDS.format(export=os.path.join(summary["output_dir"],
                                                 os.path.dirname(e["export_dir"]))),
    ]
    return "\n".join(lines)
