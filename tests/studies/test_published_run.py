"""The published `small` run is the tool's output: docs/studies.md's publication block and
docs/studies_small_gated/results.md are what `tools/run_study.py --report_only
--publish_doc` writes from the committed cells (their DONE.json files), byte for byte. A
verdict, an interval or a cell's time edited by hand, or cells committed without the report
written again, fails here. Reads only the committed files; trains nothing (about 30 s)."""
from __future__ import annotations

import os
import shutil

import pytest

from bert_tf.studies.run import StudyRunOptions, run_study

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")
PUBLISHED = os.path.join(DOCS, "studies_small_gated")


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


@pytest.mark.skipif(not os.path.isdir(os.path.join(PUBLISHED, "cells")),
                    reason="docs/studies_small_gated/cells is not in this checkout")
def test_the_published_small_run_is_what_the_tool_writes_from_its_cells(tmp_path):
    docs = tmp_path / "docs"
    out = docs / "studies_small_gated"
    shutil.copytree(os.path.join(PUBLISHED, "cells"), str(out / "cells"))
    doc = docs / "studies.md"
    shutil.copyfile(os.path.join(DOCS, "studies.md"), str(doc))
    result = run_study(StudyRunOptions(study="all", scale="small", output_dir=str(out),
                                       report_only=True, publish_doc=str(doc)),
                       say=lambda _: None)
    assert result["finished"] > 0
    assert _read(str(doc)) == _read(os.path.join(DOCS, "studies.md")), \
        "docs/studies.md's publication block is not what the committed cells give: run " \
        "tools/run_study.py --study=all --scale=small --output_dir=docs/studies_small_gated " \
        "--report_only --publish_doc=docs/studies.md"
    assert _read(str(out / "results.md")) == _read(os.path.join(PUBLISHED, "results.md"))
