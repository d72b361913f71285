"""The README's first command (`tools/quickstart.py`): raw text -> pretrained BERT and GPT-1 ->
fine-tuned -> served, on embedded data, with a picture and a short report. See `job.py`."""
from bert_tf.quickstart.job import QuickstartOptions, RunFolder, run_quickstart

__all__ = ["QuickstartOptions", "RunFolder", "run_quickstart"]
