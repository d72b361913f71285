#!/usr/bin/env python3
"""In-graph BERT packing (trim + [CLS]/[SEP] + pad) of `bert_tf.export.preprocessor.bert_pack_inputs`
against the same packing composed of tensorflow-text's `RoundRobinTrimmer`, `combine_segments`
and `pad_model_inputs`, for 1, 2 and 8 segments (issue 35: the trace and export cost of the text
signatures and preprocessors).

  python bench/bench_packing.py                   # trace time, graph ops, run time per batch
  python bench/bench_packing.py --export_dir=/tmp/x --init_checkpoint=... --bert_config_file=...
      --vocab_file=...                            # and the wall time of each export type

Per segment count and implementation: the seconds to trace one function with both input ranks
(what an exported preprocessor does 16 times, and again when saving), its graph's op count, and
the milliseconds per packing call on `--batch` random examples (medians of `--rounds`
alternating rounds of `--calls` calls). tests/export/test_preprocessor.py checks that the two
give the same tensors. stdout: one JSON object with the CPU. A benchmark: nothing is asserted;
compare ratios within one run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--export_dir", default="", help="also time each BERT export type here")
    parser.add_argument("--bert_config_file", default="")
    parser.add_argument("--init_checkpoint", default="")
    parser.add_argument("--vocab_file", default="")
    args = parser.parse_args()

    import numpy as np

    import bert_tf  # noqa: F401  (oneDNN on AVX2 CPUs, as the tools run)
    import tensorflow as tf
    import tensorflow_text as tf_text

    from bert_tf.export.preprocessor import bert_pack_inputs
    from host import cpu_description

    def ours(segments, seq_length):
        return bert_pack_inputs(segments, seq_length, 101, 102)

    def tensorflow_text(segments, seq_length):
        flat = [s.merge_dims(-2, -1) if s.ragged_rank > 1 else s for s in segments]
        trimmed = tf_text.RoundRobinTrimmer(max_seq_length=seq_length - len(flat) - 1).trim(flat)
        ids, types = tf_text.combine_segments(trimmed, start_of_sequence_id=101,
                                              end_of_segment_id=102)
        word_ids, mask = tf_text.pad_model_inputs(ids, max_seq_length=seq_length)
        type_ids, _ = tf_text.pad_model_inputs(types, max_seq_length=seq_length)
        return {"input_word_ids": word_ids, "input_mask": mask, "input_type_ids": type_ids}

    rng = np.random.default_rng(0)

    def words(batch):  # [batch, (words), (wordpieces)]: 10-60 words of 1-3 pieces
        words_per_row = rng.integers(10, 61, batch)
        pieces_per_word = rng.integers(1, 4, words_per_row.sum())
        values = rng.integers(1000, 30000, pieces_per_word.sum()).astype(np.int32)
        return tf.RaggedTensor.from_nested_row_lengths(values, [words_per_row, pieces_per_word])

    implementations = {"bert_tf": ours, "tensorflow_text": tensorflow_text}
    results = {}
    for n in (1, 2, 8):
        segments = [words(args.batch) for _ in range(n)]
        seq_length = tf.constant(args.seq_length)
        row = {}
        functions = {}
        for name, fn in implementations.items():
            function = tf.function(fn)
            start = time.perf_counter()
            ops = 0
            for rank in (3, 2):
                spec = tf.RaggedTensorSpec([None] * rank, tf.int32, ragged_rank=rank - 1)
                concrete = function.get_concrete_function([spec] * n,
                                                          tf.TensorSpec([], tf.int32))
                ops += len(concrete.graph.get_operations())
            row[name] = {"trace_s_both_ranks": round(time.perf_counter() - start, 3),
                         "graph_ops_both_ranks": ops, "ms_per_call": []}
            functions[name] = function
            function(segments, seq_length)  # warm up
        for _ in range(args.rounds):
            for name, function in functions.items():
                start = time.perf_counter()
                for _ in range(args.calls):
                    function(segments, seq_length)
                row[name]["ms_per_call"].append(
                    round((time.perf_counter() - start) / args.calls * 1e3, 3))
        for name in implementations:
            row[name]["median_ms_per_call"] = statistics.median(row[name]["ms_per_call"])
        row["tensorflow_text_over_bert_tf"] = {
            "trace": round(row["tensorflow_text"]["trace_s_both_ranks"]
                           / row["bert_tf"]["trace_s_both_ranks"], 2),
            "run": round(row["tensorflow_text"]["median_ms_per_call"]
                         / row["bert_tf"]["median_ms_per_call"], 2)}
        results[f"{n}_segments"] = row

    exports = {}
    if args.export_dir:
        from bert_tf.export.exporter import BERT_MODEL_TYPES, ExportOptions, export_savedmodel

        for model_type in BERT_MODEL_TYPES:
            extra = {"classifier": {"label_list": ["0", "1"]}, "ner": {"label_list": ["O", "B"]},
                     "multiple_choice": {"num_choices": 2}}.get(model_type, {})
            opts = ExportOptions(model_type=model_type,
                                 export_dir=os.path.join(args.export_dir, model_type), version=1,
                                 seq_length=args.seq_length, allow_untrained_head=True,
                                 bert_config_file=args.bert_config_file,
                                 init_checkpoint=args.init_checkpoint,
                                 vocab_file=args.vocab_file, **extra)
            start = time.perf_counter()
            export_savedmodel(opts)
            exports[model_type] = round(time.perf_counter() - start, 1)

    print(json.dumps({"cpu": cpu_description(), "batch": args.batch,
                      "seq_length": args.seq_length, "rounds": args.rounds, "calls": args.calls,
                      "packing": results, "export_wall_s": exports}, indent=1))


if __name__ == "__main__":
    main()
