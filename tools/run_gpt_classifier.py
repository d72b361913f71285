"""Fine-tune GPT-1 on a task as the paper does (traversal input transformations, auxiliary LM
loss --lm_coef, the original OpenAIAdam), through the task readers and official metrics that
run_classifier.py uses.

  python tools/run_gpt_classifier.py --config=official_configs/tasks/gpt_mrpc.flags \
    --task_name=MRPC --data_dir=$GLUE_DIR/MRPC --gpt_config_file=gpt/config.json \
    --encoder_path=gpt/encoder_bpe_40000.json --bpe_path=gpt/vocab_40000.bpe \
    --init_checkpoint=gpt/params --output_dir=/tmp/gpt_mrpc --do_train --do_eval

Tasks: cola, sst-2, imdb (classification), mrpc, qqp (similarity, both orders), mnli, qnli, rte,
wnli, xnli (entailment), swag, rocstories (multiple choice). --init_checkpoint is an original
GPT-1 params folder or a checkpoint of tools/run_gpt_pretraining.py. Writes model.ckpt-N (a run
resumes from --output_dir), eval_results.txt (the official metric), test_results.tsv.
Flags and the library call: `bert_tf.cli.run_gpt_classifier`; `--help` lists them.
"""
from bert_tf.cli.run_gpt_classifier import main

if __name__ == "__main__":
    main()
