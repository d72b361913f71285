"""GPT-1 language-model pretraining (the BERT pretraining loop with GPT-1's model and optimizer).

  python tools/create_gpt_lm_data.py --input_file=corpus.txt.gz --output_file=data/lm \
    --vocab_file=vocab.txt --n_ctx=128 --held_out_fraction=0.01
  python tools/run_gpt_pretraining.py --gpt_config_file=gpt_config.json \
    --input_file='data/lm-*.tfrecord' --eval_input_file='data/lm_heldout-*.tfrecord' \
    --output_dir=out --do_train --do_eval --train_batch_size=32 --num_train_steps=10000 \
    --num_warmup_steps=200 --learning_rate=2.5e-4 --lr_schedule=warmup_cosine

Flags are run_pretraining.py's where the meaning is the same, plus the original GPT-1 optimizer's
(--lr_schedule, --lr_warmup, --l2, --vector_l2, --max_grad_norm, --b1, --b2, --e). Writes
out/training_checkpoints (a restart resumes exactly), out/train (TensorBoard), out/curves.png,
out/original_params (params_shapes.json + params_0..9.npy), out/eval_results.txt (held-out
perplexity) and, with --export_dir, an LM SavedModel. Flags and the library call:
`bert_tf.cli.run_gpt_pretraining`; `--help` lists them.
"""
from bert_tf.cli.run_gpt_pretraining import main

if __name__ == "__main__":
    main()
