#!/usr/bin/env python3
"""Writes tests/fixtures/gguf/mapped/ once: two tiny mixture-of-experts
checkpoints written by transformers' own classes (Qwen3MoeForCausalLM and
DeepseekV3ForCausalLM, bf16, `save_pretrained`), and the GGUFs llama.cpp's
own converter (convert_hf_to_gguf.py with its gguf-py, from the
llama-cpp-python sdist's vendor/llama.cpp) makes of them, for
tests/gguf_model_test.cc: waste's mapping of each GGUF against the same
model's config.json and safetensors.

  pip download llama-cpp-python --no-binary :all: --no-deps -d /tmp/l
  tar xzf /tmp/l/llama_cpp_python-*.tar.gz -C /tmp/l
  python3 tools/gguf/make_mapped_fixtures.py \
      --llama-cpp /tmp/l/llama_cpp_python-0.3.36/vendor/llama.cpp

Checked with llama-cpp-python 0.3.36, transformers 5.25, torch 2.15.
The GGUFs are BF16 (--outtype bf16): the checkpoints are bf16, so every
weight is the checkpoint's exactly (the converter keeps norms, the router
and biases F32). The converter's --fuse-gate-up-exps is refused for both
architectures (it fuses qwen3next's and a few others'), so the merged
layout is tested on tensor infos alone. The converter recognises a tokenizer by hashing its
pre-tokenizer's output; this tiny vocabulary (tests/fixtures/convert/
deepseek-v3/tokenizer.json, lent to both) is no release's, so its guess is
replaced by a name it knows: the tokenizer is not what these fixtures test.
The DeepSeek config carries the released scoring_func and topk_method
(transformers' class has neither key), so that the converter writes
expert_gating_func as it does for the released checkpoints.

For the other four architectures waste maps, the converter runs on the
checkpoints of tests/fixtures/convert/ (glm4-moe with its multi-token
prediction layer, gpt-oss with its MXFP4 experts, qwen3-next with --no-mtp,
kimi-linear), its vocabulary step skipped (these have no tokenizer it
takes), and only what the mapping reads is kept, as `<arch>.json`: every
key/value but the tokenizer's (its GGUF value type, its value) and every
tensor's name, dims and type; the GGUFs themselves (0.4-0.7 MB each) are
not committed.
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import torch
import transformers

# The converter with its vocabulary guess replaced (argv: llama.cpp dir,
# pre-tokenizer name, then convert_hf_to_gguf.py's own arguments).
DRIVER = r"""
import os, runpy, sys
root, pre = sys.argv[1], sys.argv[2]
sys.path.insert(0, root)
sys.path.insert(1, os.path.join(root, 'gguf-py'))
script = os.path.join(root, 'convert_hf_to_gguf.py')
sys.argv = [script] + sys.argv[3:]
from conversion import base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
runpy.run_path(script, run_name='__main__')
"""

# The converter without its vocabulary step (argv: llama.cpp dir, then
# convert_hf_to_gguf.py's own arguments).
NO_VOCAB = r"""
import os, runpy, sys
root = sys.argv[1]
sys.path.insert(0, root)
sys.path.insert(1, os.path.join(root, 'gguf-py'))
script = os.path.join(root, 'convert_hf_to_gguf.py')
sys.argv = [script] + sys.argv[2:]
import conversion
found = conversion.get_model_class
def without_vocab(*a, **k):
    c = found(*a, **k)
    c.set_vocab = lambda self: None
    return c
conversion.get_model_class = without_vocab
runpy.run_path(script, run_name='__main__')
"""

# output name: (checkpoint under tests/fixtures/convert, converter arguments)
METADATA_ONLY = {
    "glm4moe": ("glm4-moe", []),
    "gpt-oss": ("gpt-oss", []),
    "qwen3next": ("qwen3-next", ["--no-mtp"]),
    "kimi-linear": ("kimi-linear", []),
}

VOCAB = 288  # the lent tokenizer's size

FAMILIES = {
    "qwen3moe": dict(
        cls=transformers.Qwen3MoeForCausalLM,
        config=transformers.Qwen3MoeConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            moe_intermediate_size=16, num_experts=8, num_experts_per_tok=2,
            norm_topk_prob=True, rms_norm_eps=1e-6, initializer_range=0.1,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
            tie_word_embeddings=False, bos_token_id=267, eos_token_id=268),
        extra={}, pre="qwen2"),
    "deepseek2": dict(
        cls=transformers.DeepseekV3ForCausalLM,
        config=transformers.DeepseekV3Config(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
            first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4,
            q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
            v_head_dim=16, moe_intermediate_size=16, n_routed_experts=8, n_shared_experts=1,
            num_experts_per_tok=2, n_group=2, topk_group=1, routed_scaling_factor=2.5,
            norm_topk_prob=True, rms_norm_eps=1e-6, initializer_range=0.1,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 64, "beta_fast": 32.0,
                             "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
            tie_word_embeddings=False, bos_token_id=267, eos_token_id=268),
        extra={"scoring_func": "sigmoid", "topk_method": "noaux_tc"}, pre="deepseek-v3"),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, type=pathlib.Path)
    ap.add_argument("--root", default=pathlib.Path(__file__).resolve().parents[2],
                    type=pathlib.Path)
    args = ap.parse_args()
    out = args.root / "tests/fixtures/gguf/mapped"
    tokenizer = args.root / "tests/fixtures/convert/deepseek-v3/tokenizer.json"
    out.mkdir(parents=True, exist_ok=True)
    for name, f in FAMILIES.items():
        torch.manual_seed(44)
        model = f["cls"](f["config"]).to(torch.bfloat16)
        with torch.no_grad():  # the correction bias starts at zero; make it mean something
            for n, p in model.named_parameters():
                if n.endswith("e_score_correction_bias"):
                    p.copy_(torch.randn_like(p) * 0.1)
        d = out / f"{name}-hf"
        shutil.rmtree(d, ignore_errors=True)
        model.save_pretrained(d)
        (d / "generation_config.json").unlink(missing_ok=True)
        cfg = json.loads((d / "config.json").read_text())
        cfg.update(f["extra"])
        (d / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        # Read back as the tests will: every weight as saved.
        back = f["cls"].from_pretrained(d, dtype=torch.float32)
        for (n, p), (_, q) in zip(model.state_dict().items(), back.state_dict().items()):
            assert torch.equal(p.float(), q), n
        shutil.copy(tokenizer, d / "tokenizer.json")
        cmd = [sys.executable, "-c", DRIVER, str(args.llama_cpp), f["pre"], str(d),
               "--outtype", "bf16", "--outfile", str(out / f"{name}.gguf")]
        subprocess.run(cmd, check=True)
        (d / "tokenizer.json").unlink()
    write_metadata_only(args, out)


def metadata_json(path, llama_cpp):
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    import gguf
    r = gguf.GGUFReader(path)
    kv = []
    for name, f in r.fields.items():
        if name.startswith(("tokenizer.", "GGUF.")):
            continue
        t = f.types[0]
        entry = {"key": name, "type": int(t)}
        v = f.contents()
        if t == gguf.GGUFValueType.ARRAY:
            entry["elem"] = int(f.types[1])
        entry["value"] = v
        kv.append(entry)
    tensors = [{"name": t.name, "dims": [int(d) for d in t.shape], "type": int(t.tensor_type)}
               for t in r.tensors]
    return {"metadata": kv, "tensors": tensors}


def write_metadata_only(args, out):
    src = args.root / "tests/fixtures/convert"
    with tempfile.TemporaryDirectory() as tmp:
        for name, (ckpt, extra) in METADATA_ONLY.items():
            g = pathlib.Path(tmp) / f"{name}.gguf"
            subprocess.run([sys.executable, "-c", NO_VOCAB, str(args.llama_cpp), str(src / ckpt),
                            "--outtype", "bf16", "--outfile", str(g)] + extra, check=True)
            j = metadata_json(str(g), args.llama_cpp)
            (out / f"{name}.json").write_text(json.dumps(j, indent=1) + "\n")


if __name__ == "__main__":
    main()
