#!/usr/bin/env python3
"""Trains waste's demo model: a small DeepSeek-V3-shaped MoE on Python's docs.

    python3 tools/demo_model/train.py --out models/demo-moe            # about 45 min on 2 cores
    python3 tools/demo_model/train.py --out /tmp/try --steps 20        # a quick look

Corpus: the reStructuredText sources of Python 3.11's documentation as
Debian 12's package python3.11-doc ships them
(/usr/share/doc/python3.11/html/_sources/**/*.rst.txt, PSF License 2.0).
The files are sorted by path; every 20th (index % 20 == 10) is held out and
never trained on. The held-out text is written to heldout.txt.

Tokenizer: byte-level BPE trained with Hugging Face `tokenizers` on the
training files, 4092 tokens plus DeepSeek's four special tokens (ids
4092-4095, outside the BPE vocabulary). The pre-tokenizer is Kimi's split
regex (the one waste's engine runs) and then ByteLevel without its own
regex, so waste and `tokenizers` split text alike.

Model: transformers' own DeepseekV3ForCausalLM (MLA, one dense layer then
MoE layers with 32 routed experts, top-4 in 2 of 4 groups, sigmoid scores,
one shared expert). The routing bias e_score_correction_bias is balanced
as DeepSeek-V3 does it (no auxiliary loss: after each step every layer's
bias moves by BIAS_RATE towards the experts that were under-used).

Deterministic from --seed: one thread count (2) is set, the data order is
drawn from the seed, and the model is initialized from it. Writes to --out:
config.json, model.safetensors (bf16), tokenizer.json,
tokenizer_config.json (with a chat template), heldout.txt, train_log.json
(the loss curve, the held-out loss of the saved bf16 weights, the settings).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import random
import time

# Threads that sleep at barriers instead of spinning: the same results, and a
# step takes 2 s rather than 20 when another process shares the two cores.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM  # noqa: E402

CORPUS = "/usr/share/doc/python3.11/html/_sources"
BOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"
USER = "<\uff5cUser\uff5c>"
ASSISTANT = "<\uff5cAssistant\uff5c>"
BPE_VOCAB = 4092
# Kimi's pat_str (engine/tokenizer/pretokenizer.cc, tokenization_kimi.py).
KIMI_PATTERN = (
    r"[\p{Han}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+"
)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}"
    "{% elif m['role'] == 'user' %}" + USER + "{{ m['content'] }}"
    "{% elif m['role'] == 'assistant' %}" + ASSISTANT + "{{ m['content'] }}" + EOS + "{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}"
)

SEQ = 256          # training context
BATCH = 16         # sequences per step
LR = 3e-3
WARMUP = 100
WEIGHT_DECAY = 0.1
BIAS_RATE = 1e-3   # DeepSeek-V3's gamma for the routing bias
EVAL_EVERY = 100


def split_corpus(root: str):
    files = sorted(glob.glob(os.path.join(root, "**", "*.rst.txt"), recursive=True))
    if not files:
        raise SystemExit(f"no *.rst.txt under {root}: apt-get install python3.11-doc")
    held = [f for i, f in enumerate(files) if i % 20 == 10]
    train = [f for i, f in enumerate(files) if i % 20 != 10]
    return train, held


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def make_tokenizer(texts: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(KIMI_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() != BPE_VOCAB:
        raise SystemExit(f"the BPE vocabulary has {tok.get_vocab_size()} tokens, not {BPE_VOCAB}")
    tok.add_special_tokens([BOS, EOS, USER, ASSISTANT])
    return tok


def model_config(bos: int, eos: int) -> DeepseekV3Config:
    return DeepseekV3Config(
        vocab_size=BPE_VOCAB + 4, hidden_size=256, intermediate_size=768, moe_intermediate_size=128,
        num_hidden_layers=4, first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4,
        n_routed_experts=32, num_experts_per_tok=4, n_group=4, topk_group=2, n_shared_experts=1,
        routed_scaling_factor=2.5, norm_topk_prob=True, q_lora_rank=128, kv_lora_rank=64,
        qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, head_dim=16,
        max_position_embeddings=1024, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        rope_interleave=True, rms_norm_eps=1e-6, initializer_range=0.02, tie_word_embeddings=False,
        attention_bias=False, bos_token_id=bos, eos_token_id=eos, pad_token_id=None,
        num_nextn_predict_layers=0)


def heldout_loss(model, ids: torch.Tensor, seq: int) -> float:
    """Mean next-token loss over consecutive windows of seq tokens."""
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        n = (len(ids) - 1) // seq
        for b in range(0, n, BATCH):
            rows = [ids[i * seq:(i + 1) * seq + 1] for i in range(b, min(n, b + BATCH))]
            x = torch.stack([r[:-1] for r in rows])
            y = torch.stack([r[1:] for r in rows])
            logits = model(input_ids=x).logits.float()
            total += torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                                       reduction="sum").item()
            count += y.numel()
    model.train()
    return total / count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=1400)
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()

    train_files, held_files = split_corpus(args.corpus)
    train_texts = [read(f) for f in train_files]
    held_texts = [read(f) for f in held_files]
    tok = make_tokenizer(train_texts)
    bos, eos = tok.token_to_id(BOS), tok.token_to_id(EOS)

    def encode_docs(texts):
        out = []
        for t in texts:
            out.append(bos)
            out.extend(tok.encode(t, add_special_tokens=False).ids)
        return torch.tensor(out, dtype=torch.long)

    train_ids = encode_docs(train_texts)
    held_ids = encode_docs(held_texts)
    print(f"corpus: {len(train_files)} training files ({len(train_ids)} tokens), "
          f"{len(held_files)} held out ({len(held_ids)} tokens)", flush=True)

    config = model_config(bos, eos)
    model = DeepseekV3ForCausalLM(config)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "gate.weight" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "gate.weight" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=(0.9, 0.95))

    # The routing bias: count each layer's choices during a step.
    loads = {}
    routers = [(i, layer.mlp.gate) for i, layer in enumerate(model.model.layers)
               if hasattr(layer.mlp, "gate")]
    for i, gate in routers:
        def hook(_m, _inp, out, i=i):
            loads[i] = loads.get(i, 0) + torch.bincount(out[2].reshape(-1), minlength=config.n_routed_experts)
        gate.register_forward_hook(hook)

    gen = torch.Generator().manual_seed(args.seed)
    curve = []
    t0 = time.time()
    for step in range(1, args.steps + 1):
        lr = LR * min(1.0, step / WARMUP) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(train_ids) - SEQ - 1, (BATCH,), generator=gen)
        x = torch.stack([train_ids[s:s + SEQ] for s in starts])
        y = torch.stack([train_ids[s + 1:s + SEQ + 1] for s in starts])
        loads.clear()
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for i, gate in routers:
                load = loads[i].float()
                gate.e_score_correction_bias += BIAS_RATE * torch.sign(load.mean() - load)
        row = {"step": step, "lr": lr, "train_loss": loss.item(), "seconds": round(time.time() - t0, 1)}
        if step % EVAL_EVERY == 0 or step == args.steps:
            row["heldout_loss"] = heldout_loss(model, held_ids[: 64 * SEQ + 1], SEQ)
        curve.append(row)
        if step % 10 == 0 or "heldout_loss" in row:
            print(json.dumps(row), flush=True)

    # Save as bf16, then score the saved weights themselves.
    model = model.to(torch.bfloat16)
    model.save_pretrained(args.out)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
                   "add_bos_token": True, "model_max_length": 1024, "chat_template": CHAT_TEMPLATE},
                  f, indent=1, ensure_ascii=False)
    with open(os.path.join(args.out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write("".join(held_texts))
    saved = DeepseekV3ForCausalLM.from_pretrained(args.out, dtype=torch.float32)
    final = heldout_loss(saved, held_ids, SEQ)
    log = {"seed": args.seed, "steps": args.steps, "seq": SEQ, "batch": BATCH, "lr": LR, "warmup": WARMUP,
           "weight_decay": WEIGHT_DECAY, "bias_rate": BIAS_RATE, "threads": torch.get_num_threads(),
           "torch": torch.__version__, "corpus": args.corpus, "train_files": len(train_files),
           "train_tokens": len(train_ids), "heldout_files": [os.path.relpath(f, args.corpus) for f in held_files],
           "heldout_tokens": len(held_ids), "heldout_loss_bf16": final,
           "heldout_perplexity_bf16": math.exp(final), "seconds": round(time.time() - t_start, 1),
           "curve": curve}
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
    print(f"held-out loss {final:.4f} (perplexity {math.exp(final):.3f}) in {log['seconds']} s", flush=True)


if __name__ == "__main__":
    main()
