"""The GPT-1 task flagfiles' usage lines name a config that exists (OpenAI shipped none: the
preset official_configs/gpt/openai-gpt.json) and the released folder as --init_checkpoint."""
from __future__ import annotations

import pathlib
import re

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_gpt_flagfiles_point_at_the_shipped_config():
    from bert_tf.gpt.config import GptConfig

    files = sorted((PROJECT_ROOT / "official_configs" / "tasks").glob("gpt_*.flags"))
    assert files
    for path in files:
        text = path.read_text(encoding="utf-8")
        configs = re.findall(r"--gpt_config_file=(\S+)", text)
        assert configs, path
        for config in configs:
            assert "$" not in config, f"{path.name}: {config} is not shipped"
            released = GptConfig.from_json_file(PROJECT_ROOT / config)
            assert (released.n_layer, released.n_embd, released.n_ctx, released.n_vocab) == (
                12, 768, 512, 40478), path.name
        assert "$GPT_DIR/params" not in text, path.name
