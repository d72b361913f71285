"""Pretraining drivers: the runs behind tools/run_pretraining.py (`bert_pretraining`) and
tools/run_gpt_pretraining.py (`gpt_pretraining`).

They sit above what they drive (the data readers of `pretraining_data`, the trainer of
`training.pretraining_loop`, the exports of `export`), as the fine-tuning drivers of `tasks` do.
"""
