"""The wheel built from the checkout works when installed (not editable) in a fresh venv: its
console scripts run extract_features on the original release's checkpoint and export an encoder
that the C loader harness (built from the wheel's own serving_harness.c) serves; the package data
(official configs, tools/) is inside.

Fast without a download: the checkout's files (tracked + untracked-not-ignored, as `git ls-files`
lists them) are copied to a temp folder and built there with `pip wheel --no-deps
--no-build-isolation` (the main venv's setuptools); the fresh venv has no pip and sees the main
venv's site-packages (TensorFlow & co) through a `.pth` line, so only the wheel is installed into
it (by the main venv's pip, `--python`). The main venv's editable bert_tf is not visible there:
`.pth` files of a directory added by a `.pth` line are not run.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import venv

import pytest

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _checkout_files() -> list[str]:
    if shutil.which("git") is None or not (PROJECT_ROOT / ".git").exists():
        pytest.skip("needs a git checkout (the wheel is built from its files)")
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=PROJECT_ROOT,
                         capture_output=True, check=True)
    return [f for f in out.stdout.decode().split("\0") if f]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """{"venv": path, "bin": path, "python": path} of a fresh venv with the wheel installed."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    for rel in _checkout_files():
        source = PROJECT_ROOT / rel
        if source.is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, src / rel)
    dist = root / "dist"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-w", str(dist), str(src)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = dist.glob("bert_tf-*.whl")

    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    new_site = pathlib.Path(site.stdout.strip())
    (new_site / "main_venv_site_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"venv": env_dir, "bin": env_dir / "bin", "python": python, "site": new_site,
            "work": root}


def _run(cmd: list, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("PYTHONPATH", None)
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)


def test_installed_package_is_the_wheel_with_its_data(installed):
    code = ("import bert_tf, bert_tf.export.loader_harness as lh, bert_tf.presets as p, os; "
            "print(bert_tf.__file__); print(os.path.exists(lh.HARNESS_SOURCE)); "
            "print(len(p.list_presets())); "
            "d = os.path.dirname(bert_tf.__file__); "
            "print(os.path.exists(os.path.join(d, 'official_configs', 'tasks', 'mrpc.flags'))); "
            "print(os.path.exists(os.path.join(d, 'tools', 'run_classifier.py'))); "
            "from bert_tf.tasks.sweep import resolve_script; "
            "print(resolve_script('run_classifier'))")
    proc = _run([installed["python"], "-c", code], cwd=installed["work"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    location, has_harness, presets, has_flags, has_tools, sweep_script = proc.stdout.split()
    assert pathlib.Path(location).is_relative_to(installed["site"]), location
    assert pathlib.Path(sweep_script).is_relative_to(installed["site"]), sweep_script
    assert has_harness == "True" and has_flags == "True" and has_tools == "True"
    assert int(presets) >= 24
    tools = [p.stem for p in (PROJECT_ROOT / "bert_tf" / "cli").glob("*.py")
             if p.stem not in ("__init__", "flags_from_options")] + ["evaluate_squad"]
    missing = [t for t in tools
               if not (installed["bin"] / f"bert-tf-{t.replace('_', '-')}").exists()]
    assert len(tools) >= 13 and not missing, missing


def test_console_scripts_extract_features_and_serve_through_the_c_harness(installed,
                                                                          original_fixtures):
    work = installed["work"]
    ckpt = original_fixtures / "checkpoint"
    vocab = original_fixtures / "vocab_uncased.txt"
    (work / "in.txt").write_text("Hello world.\nThe cat sat ||| on the mat.\n", encoding="utf-8")
    proc = _run([installed["bin"] / "bert-tf-extract-features", f"--input_file={work / 'in.txt'}",
                 f"--output_file={work / 'out.jsonl'}", f"--vocab_file={vocab}",
                 f"--bert_config_file={ckpt / 'bert_config.json'}",
                 f"--init_checkpoint={ckpt / 'bert_model.ckpt'}", "--layers=-1",
                 "--max_seq_length=16"], cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (work / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["linex_index"] for line in lines] == [0, 1]

    # A bad flag value ends in one line `error: ...`, from the installed entry point too.
    proc = _run([installed["bin"] / "bert-tf-extract-features", f"--input_file={work / 'in.txt'}",
                 f"--output_file={work / 'bad.jsonl'}", f"--vocab_file={vocab}",
                 f"--bert_config_file={ckpt / 'bert_config.json'}",
                 f"--init_checkpoint={ckpt / 'bert_model.ckpt'}", "--layers=-9"], cwd=work)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("error: --layers index -9"), proc.stderr
    assert "Traceback" not in proc.stderr

    proc = _run([installed["bin"] / "bert-tf-export-savedmodel", "--model_type=encoder",
                 f"--bert_config_file={ckpt / 'bert_config.json'}",
                 f"--init_checkpoint={ckpt / 'bert_model.ckpt'}", f"--vocab_file={vocab}",
                 "--seq_length=16", f"--export_dir={work / 'export'}"], cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    export_dir = proc.stdout.strip().splitlines()[-1]

    code = f"""
import json, sys
import numpy as np
from bert_tf.export import loader_harness as lh
try:
    harness = lh.build_harness({str(work / 'harness')!r})
except lh.HarnessUnavailable as e:
    print(json.dumps({{"skip": str(e)}})); sys.exit(0)
request = {{"input_word_ids": np.array([[101, 7592, 2088, 102]], np.int32),
           "input_mask": np.ones([1, 4], np.int32), "input_type_ids": np.zeros([1, 4], np.int32)}}
(got,), proc = lh.run_signature(harness, {export_dir!r}, [request])
assert proc.returncode == 0, proc.stderr
print(json.dumps({{"harness": harness, "outputs": sorted(got),
                   "pooled": got["pooled_output"].shape[-1]}}))
"""
    proc = _run([installed["python"], "-c", code], cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(f"cannot build the C loader harness: {result['skip']}")
    assert pathlib.Path(result["harness"]).is_relative_to(work)
    assert "pooled_output" in result["outputs"] and result["pooled"] == 128
