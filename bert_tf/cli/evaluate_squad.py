"""`bert-tf-evaluate-squad` / tools/evaluate_squad.py: score SQuAD predictions with the official
v1.1 / v2.0 metrics.

Same interface as the official scripts (positional arguments and argparse options, not absl
flags; the one tool outside `bert_tf.cli.run_tool`, because its command line is the official
one, and free of TensorFlow, so it starts at once):

  bert-tf-evaluate-squad dev-v1.1.json predictions.json
  bert-tf-evaluate-squad dev-v2.0.json predictions.json --na-prob-file null_odds.json \
      [--na-prob-thresh 1.0] [--out-file eval.json]

The version comes from the data file's ``version`` field ("1.1" or "v2.0"); ``--version``
overrides it. v1.1 prints ``{"exact_match": ..., "f1": ...}`` on one line, v2.0 prints the
official key set indented, as the official scripts do; ``--out-file`` writes the JSON instead.
Exit status 1 with one line `error: ...` naming the file for an unreadable or malformed input.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional


def build_parser() -> argparse.ArgumentParser:
    """Command line of the official scripts (v2.0's options, which extend v1.1's)."""
    parser = argparse.ArgumentParser(
        description="Official evaluation for SQuAD v1.1 and v2.0 (version from the data file).")
    parser.add_argument("data_file", metavar="data.json", help="Input data JSON file.")
    parser.add_argument("pred_file", metavar="pred.json", help="Model predictions.")
    parser.add_argument("--out-file", "-o", metavar="eval.json",
                        help="Write accuracy metrics to file (default is stdout).")
    parser.add_argument("--na-prob-file", "-n", metavar="na_prob.json",
                        help="Model estimates of probability of no answer (v2.0).")
    parser.add_argument("--na-prob-thresh", "-t", type=float, default=1.0,
                        help='Predict "" if no-answer probability exceeds this (default = 1.0).')
    parser.add_argument("--version", choices=["1.1", "2.0"], default=None,
                        help="Score as this SQuAD version instead of the data file's.")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="Do not report missing predictions on stderr.")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the evaluation; returns the exit status."""
    from bert_tf.evaluation import squad

    parser = build_parser()
    if argv is None and len(sys.argv) == 1:  # as the official scripts: help, exit status 1
        parser.print_help()
        return 1
    args = parser.parse_args(argv)
    warn = None if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    try:
        result = squad.evaluate_files(args.data_file, args.pred_file,
                                      na_prob_file=args.na_prob_file,
                                      na_prob_thresh=args.na_prob_thresh,
                                      version=args.version, warn=warn)
    except squad.SquadFileError as e:
        print(f"error: evaluate_squad: {e}", file=sys.stderr)
        return 1
    except (KeyError, TypeError) as e:
        print(f"error: evaluate_squad: {args.data_file} is not in the SQuAD layout "
              f"(article -> paragraphs -> qas -> id/answers): {e!r}", file=sys.stderr)
        return 1
    if args.out_file:
        with open(args.out_file, "w", encoding="utf-8") as f:
            json.dump(result, f)
    elif "exact_match" in result:
        print(json.dumps(result))
    else:
        print(json.dumps(result, indent=2))
    return 0


def console_main() -> None:
    """Entry point of the console script: exits with `main`'s status."""
    sys.exit(main())


if __name__ == "__main__":
    console_main()
