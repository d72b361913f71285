"""`tools/run_study.py`: the papers' experiments (BERT Tables 5-8, GPT-1 Table 5 and Figure 2,
BERT vs GPT per epoch) at the tiny, small or base scale. Flags: the fields of
`bert_tf.studies.run.StudyRunOptions`."""
from __future__ import annotations

from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.studies.run import StudyRunOptions, run_study


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(run_study, StudyRunOptions, argv)


if __name__ == "__main__":
    main()
