"""SQuAD v1.1 / v2.0 for BERT: reading the JSON, WordPiece features with doc strides, fine-tuning and
prediction, as the original `run_squad.py` does them.

Data flow: `read_squad_examples` (whitespace words, char → word offsets, answer positions) →
`convert_examples_to_features` (query truncation, WordPiece sub-tokens, `[CLS] query [SEP] doc-span
[SEP]` windows every `doc_stride` tokens, max-context flags, start/end targets) → the model
(`BertSpanLabeler`) → `postprocess` (n-best, `get_final_text`, null scores,
output files). `run_squad` drives a whole `tools/run_squad.py` invocation.

Behaviour kept from the original (and where this code differs):
  * Training questions must have exactly one answer unless `is_impossible` (v2.0); the answer's
    text must be found in the whitespace words its `answer_start` points at. The original logs
    "Could not find answer" and skips such a question silently; here each skip names the question
    id, the total is logged, and ``on_bad_answer="raise"`` turns them into a `SquadDataError`.
    An `answer_start` outside the context (an IndexError in the original) is treated the same way.
  * Training targets are token positions in the window; 0 (the [CLS] token) for unanswerable
    questions and for windows that do not contain the whole answer.
  * `num_train_steps = int(len(train_examples) / train_batch_size * num_train_epochs)` counts
    *questions*, not windows, as the original; the training input repeats, shuffles with a
    100-element buffer and drops the last partial batch.
  * The original writes features to `train.tf_record` / `eval.tf_record` and trains with
    TPUEstimator; here features stay in memory and checkpoints are written in the original TF1
    format (`model.ckpt-<step>` + a `checkpoint` state file) in `output_dir`.

Modules: `reading` (json -> examples), `features` (examples -> windows), `postprocess` (logits ->
answers and the output files), `run` (`SquadRunOptions`, `run_squad`). Their public names are
importable from here.
"""
from bert_tf.tasks.squad.features import (FIRST_UNIQUE_ID, DocSpan, InputFeatures,
                                          check_is_max_context, check_lengths,
                                          convert_examples_to_features, features_to_arrays,
                                          improve_answer_span, make_doc_spans)
from bert_tf.tasks.squad.postprocess import (NO_NON_NULL_SCORE_DIFF, RawResult, SquadPredictions,
                                             compute_predictions, compute_softmax,
                                             get_best_indexes, get_final_text,
                                             write_prediction_files, write_predictions)
from bert_tf.tasks.squad.reading import (SquadDataError, SquadExample, examples_from_squad_data,
                                         is_squad_whitespace, load_squad_json,
                                         read_squad_examples, split_paragraph)
from bert_tf.tasks.squad.run import (SquadRunOptions, evaluate_predictions, predict_logits,
                                     run_squad, squad_loss, train_squad, validate_options)

__all__ = ["DocSpan", "FIRST_UNIQUE_ID", "InputFeatures", "NO_NON_NULL_SCORE_DIFF", "RawResult",
           "SquadDataError", "SquadExample", "SquadPredictions", "SquadRunOptions",
           "check_is_max_context", "check_lengths", "compute_predictions", "compute_softmax",
           "convert_examples_to_features", "evaluate_predictions", "examples_from_squad_data",
           "features_to_arrays", "get_best_indexes", "get_final_text", "improve_answer_span",
           "is_squad_whitespace", "load_squad_json", "make_doc_spans", "predict_logits",
           "read_squad_examples", "run_squad", "split_paragraph", "squad_loss", "train_squad",
           "validate_options", "write_prediction_files", "write_predictions"]
