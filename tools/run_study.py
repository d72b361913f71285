"""Runs the papers' experiments: `python tools/run_study.py --list`, or
`--study=NAME|all --scale=tiny|small|base --output_dir=DIR [--seeds=1,2]` (see docs/studies.md).
Flags and the library call: `bert_tf.cli.run_study`; `--help` lists them."""
from bert_tf.cli.run_study import main

if __name__ == "__main__":
    main()
