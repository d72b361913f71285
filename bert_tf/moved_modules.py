"""Old module paths of the 2026-11-27 layout change, served from their new homes.

`import bert_tf.gpt.finetuning` (or `from bert_tf.gpt import finetuning`) keeps working: a
meta-path finder maps each old dotted name to the module that now holds the code, so both names
are one module object (state, `mock.patch` targets and `isinstance` checks agree). Each old name
warns once with a `DeprecationWarning` naming the new one. CHANGELOG.md lists the moves.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# old dotted module name -> new dotted module name
MOVED_MODULES = {
    "bert_tf.gpt.text_encoder": "bert_tf.tokenization.gpt_text_encoder",
    "bert_tf.gpt.bpe": "bert_tf.tokenization.gpt_bpe",
    "bert_tf.gpt.bpe_in_graph": "bert_tf.tokenization.gpt_bpe_in_graph",
    "bert_tf.tasks.packing": "bert_tf.tokenization.packing",
    "bert_tf.gpt.params_io": "bert_tf.checkpoints.openai",
    "bert_tf.gpt.lm_data": "bert_tf.pretraining_data.gpt_lm",
    "bert_tf.gpt.optimization": "bert_tf.training.openai_adam",
    "bert_tf.tasks.length_batching": "bert_tf.training.length_batching",
    "bert_tf.gpt.export": "bert_tf.export.gpt",
    "bert_tf.gpt.finetuning": "bert_tf.tasks.gpt_classifier",
    "bert_tf.feature_extraction": "bert_tf.tasks.feature_extraction",
    "bert_tf.gpt.pretraining": "bert_tf.runs.gpt_pretraining",
    "bert_tf.training.pretraining_run": "bert_tf.runs.bert_pretraining",
    "bert_tf.studies.training": "bert_tf.studies.cell_runs",
    "bert_tf.evaluation.squad_cli": "bert_tf.cli.evaluate_squad",
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new_name: str):
        self.new_name = new_name

    def create_module(self, spec):
        return importlib.import_module(self.new_name)

    def exec_module(self, module):
        pass  # the new module is already executed


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds an old module name of MOVED_MODULES and returns the new module under it."""

    def find_spec(self, fullname, path=None, target=None):
        new_name = MOVED_MODULES.get(fullname)
        if new_name is None:
            return None
        warnings.warn(f"{fullname} moved to {new_name}; the old name will be removed",
                      DeprecationWarning, stacklevel=3)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new_name))


def install() -> None:
    """Puts the finder first on sys.meta_path (once)."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
