"""Fine-tune BERT on a GLUE task (or XNLI, IMDb, your own files): the original run_classifier.py.

  python tools/run_classifier.py --task_name=MRPC --do_train=true --do_eval=true \
    --data_dir=$GLUE_DIR/MRPC --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --max_seq_length=128 \
    --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3.0 --output_dir=/tmp/mrpc_output/

The paper's settings per task are flagfiles: `--flagfile=official_configs/tasks/mrpc.flags`
(or `--config=...`). Writes checkpoints, eval_results.txt, test_results.tsv and the GLUE
submission file <TASK>.tsv. Your own csv/tsv/jsonl files: --task_name=csv --train_file=...
--dev_file=... --test_file=... --text_a_column=... --label_column=... (labels.json holds the
label set). See docs/classifier.md.

The tool is `bert_tf.cli.run_classifier` (console script `bert-tf-run-classifier`); see docs/cli.md.
"""
from bert_tf.cli.run_classifier import main

if __name__ == "__main__":
    main()
