#!/usr/bin/env python3
"""Writes the Qwen3-Next fixture of convert_test (tests/fixtures/convert/qwen3-next/).

    /work/pyenv/bin/python tools/convert_fixtures/make_qwen3_next.py --out tests/fixtures/convert

transformers' own Qwen3NextForCausalLM on a tiny random config: 4 layers,
full attention every 2nd (layers 1 and 3: gated GQA, 4 query heads over 2 KV
heads, q/k RMSNorm, partial rotary 0.25 of a 32-wide head), Gated DeltaNet
on the others (2 key heads of 16 serving 4 value heads of 16: two value heads
per key head), every layer MoE (16 experts, top-4, softmax, norm_topk_prob)
with a sigmoid-gated shared expert. Every parameter is random (the norms'
zero-centered weights too) and rounded to bfloat16; save_pretrained writes
the bf16 checkpoint. qwen3-next.logits.bin: float32 LE [T][vocab], the
logits of that model (float32, eager) at every position of the prompt in
qwen3-next.json.

transformers runs a whole prompt through its chunked torch gated delta rule
(torch_chunk_gated_delta_rule, chunks of 64); the same forward with fla's
naive_recurrent_gated_delta_rule in its place is recorded in the json
(max |difference| of the logits), as is a token-by-token run through the
cache (transformers' recurrent step).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))

from hf_models import block_fla  # noqa: E402

block_fla()  # transformers must take its PyTorch path on a CPU

import torch  # noqa: E402

SEED = 21
POSITIONS = 300
VOCAB = 256


def fla_naive():
    spec = importlib.util.find_spec("fla")
    if spec is None:  # block_fla hides it: find the installed file by path
        import site
        for d in site.getsitepackages():
            p = pathlib.Path(d) / "fla" / "ops" / "gated_delta_rule" / "naive.py"
            if p.exists():
                break
    s = importlib.util.spec_from_file_location("fla_gdr_naive", p)
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    return m.naive_recurrent_gated_delta_rule


def top_gap(logits: torch.Tensor) -> float:
    s = logits.sort(-1, descending=True)[0][:, :11]
    return float((s[:, :-1] - s[:, 1:]).min())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import transformers
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
    from transformers.models.qwen3_next import modeling_qwen3_next as mq

    torch.manual_seed(SEED)
    cfg = Qwen3NextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4,
        num_experts=16, num_experts_per_tok=4, moe_intermediate_size=16,
        shared_expert_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        rms_norm_eps=1e-6, initializer_range=0.1, tie_word_embeddings=False,
        bos_token_id=0, eos_token_id=1, pad_token_id=None,
        attn_implementation="eager", experts_implementation="eager")
    model = Qwen3NextForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") and "linear_attn" not in name:
                p.copy_(torch.randn_like(p) * 0.2)  # zero-centered: the norm scales by 1 + w
            elif name.endswith("linear_attn.norm.weight"):
                p.copy_(1 + torch.randn_like(p) * 0.2)
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn_like(p) * 0.5)
            elif name.endswith("conv1d.weight"):
                p.copy_(torch.rand_like(p) - 0.5)
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn_like(p))
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())

    g = torch.Generator().manual_seed(SEED)
    prompt = [0] + torch.randint(2, VOCAB, (POSITIONS - 1,), generator=g).tolist()
    ids = torch.tensor([prompt])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
        # fla's naive recurrence in place of transformers' chunked rule.
        naive = fla_naive()
        chunked = mq.torch_chunk_gated_delta_rule

        def recurrent(query, key, value, g, beta, initial_state=None, output_final_state=False,
                      use_qk_l2norm_in_kernel=False, **kw):
            if use_qk_l2norm_in_kernel:
                query, key = mq.l2norm(query, dim=-1, eps=1e-6), mq.l2norm(key, dim=-1, eps=1e-6)
            r = value.shape[2] // key.shape[2]
            query, key = query.repeat_interleave(r, dim=2), key.repeat_interleave(r, dim=2)
            return naive(query, key, value, beta, g, initial_state=initial_state,
                         output_final_state=output_final_state)

        mq.torch_chunk_gated_delta_rule = recurrent
        try:
            logits_naive = model(input_ids=ids).logits[0].float()
        finally:
            mq.torch_chunk_gated_delta_rule = chunked
        # Token by token through the cache: the recurrent step.
        from transformers import DynamicCache
        cache = DynamicCache(config=cfg)
        rows = []
        for t in range(POSITIONS):
            out = model(input_ids=ids[:, t:t + 1], cache=cache, use_cache=True)
            cache = out.cache if hasattr(out, "cache") and out.cache is not None else out.past_key_values
            rows.append(out.logits[0, -1].float())
        logits_steps = torch.stack(rows)

    d = os.path.join(args.out, "qwen3-next")
    shutil.rmtree(d, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(d, max_shard_size="400KB")
    logits.numpy().astype("<f4").tofile(os.path.join(args.out, "qwen3-next.logits.bin"))
    meta = {
        "oracle": "transformers " + transformers.__version__ +
                  " Qwen3NextForCausalLM (float32, eager), whole prompt at once",
        "maker": "tools/convert_fixtures/make_qwen3_next.py",
        "prompt_ids": prompt,
        "logits": {"file": "qwen3-next.logits.bin", "dtype": "float32-le",
                   "shape": [POSITIONS, VOCAB], "rows": "every prompt position"},
        "argmax": [int(i) for i in logits.argmax(-1)],
        "max_abs_logit": float(logits.abs().max()),
        "min_top11_gap": top_gap(logits),
        "agreement": {
            "fla_naive_recurrent_gated_delta_rule_vs_chunked": float((logits_naive - logits).abs().max()),
            "token_by_token_through_the_cache_vs_whole_prompt": float((logits_steps - logits).abs().max()),
        },
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "fla-core": "0.6.0 (naive.py by path)"},
    }
    with open(os.path.join(args.out, "qwen3-next.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(json.dumps({k: meta[k] for k in ("max_abs_logit", "min_top11_gap", "agreement")}, indent=1))


if __name__ == "__main__":
    main()
