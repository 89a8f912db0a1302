#!/usr/bin/env python3
"""Writes the forward-pass fixtures the C++ tests compare against.

    python3 tools/reference/make_fixtures.py --waste build/bin/waste --out tests/fixtures/forward

For each preset (tiny-kimi, tiny-deepseek): `waste synth` writes the
container (deterministic: same seed, same bytes), the oracle runs a fixed
prompt and 8 greedy decode steps in float32, and three files are written:

  <preset>.json                metadata, prompt, greedy ids, top-10s, routing, checks, versions
  <preset>.logits.bin          float32 LE [9][vocab]: last prompt position, then decode steps 1..8
  <preset>.prefill_logits.bin  float32 LE [prompt_len][vocab]: every prompt position (whole-prompt forward)
  <preset>.hidden.bin          float32 LE [n_layers + 1][hidden]: residual stream of the last prompt
                               token after the embedding and after each layer (before the final norm)

Oracles: tiny-deepseek -> transformers' DeepseekV3ForCausalLM; tiny-kimi ->
reference_model.py (fla's naive_recurrent_kda). Each is cross-checked
against the other implementation available (reference_model.py for
DeepSeek; transformers' KimiLinearForCausalLM and fla's naive_chunk_kda for
Kimi), and every result records how far apart they are.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from hf_models import block_fla  # noqa: E402

block_fla()  # before transformers is imported: its Kimi-Linear must take the PyTorch path

import numpy as np  # noqa: E402
import torch  # noqa: E402

from container import Container  # noqa: E402
from hf_models import HFRunner, hf_deepseek_v3, hf_kimi_linear  # noqa: E402
from reference_model import ReferenceModel, rope_tables  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)  # transformers: rope_scaling -> rope_parameters

PRESETS = ("tiny-kimi", "tiny-deepseek")
SEED = 1
DECODE_STEPS = 8
TOP = 10
# Fixed prompt: the BOS id first (taken from the config), then ids spread over
# the 512-entry vocabulary, avoiding the special ids 376..388 (tiny-kimi has 7, tiny-deepseek 13).
PROMPT_TAIL = [17, 101, 211, 300, 42, 487, 5, 333, 128, 256, 64]


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for p in ("torch", "transformers", "fla-core", "numpy", "safetensors", "einops"):
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            out[p] = None
    return out


def tool_identity(waste: str) -> dict:
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(waste))))
    ident = {"waste_binary": os.path.relpath(os.path.abspath(waste), repo)
             if os.path.abspath(waste).startswith(repo + os.sep) else os.path.abspath(waste)}
    try:
        ident["version"] = subprocess.run([waste, "--version"], capture_output=True, text=True,
                                          check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    try:
        ident["commit"] = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True,
                                         text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--", "engine/format",
                                "engine/synth", "engine/model/router.cc"],
                               capture_output=True, text=True, check=True).stdout.strip()
        ident["synth_sources_modified"] = bool(dirty)
    except (OSError, subprocess.CalledProcessError):
        pass
    return ident


def canon_routing(entries: list) -> list:
    """Per MoE layer: experts of each token sorted by id, with their weights."""
    out = []
    for e in entries:
        toks = []
        for ids, ws in zip(e["experts"], e["weights"]):
            pairs = sorted(zip(ids, ws))
            toks.append({"experts": [int(i) for i, _ in pairs],
                         "weights": [round(float(w), 7) for _, w in pairs]})
        out.append({"layer": e["layer"], "tokens": toks})
    return out


class Runner:
    """One implementation behind one interface: new_session() -> feed(ids, trace)."""

    def __init__(self, name: str, make):
        self.name, self.make = name, make

    def session(self):
        return self.make()


def own_runner(c: Container, **kw) -> Runner:
    model = ReferenceModel(c, **kw)

    def make():
        st = model.new_state()
        return lambda ids, trace=None: model.forward(ids, st, trace)

    return Runner(f"reference_model.py{'' if not kw else ' ' + json.dumps(kw)}", make)


def hf_runner(c: Container, build) -> Runner:
    model = build if isinstance(build, torch.nn.Module) else build(c)

    def make():
        r = HFRunner(model)
        return r.forward

    return Runner(f"transformers {type(model).__name__}", make)


def run(runner: Runner, prompt: list, steps: int, feed: list | None = None, chunks=None):
    """Prefill (whole prompt, or in the given chunk sizes), then `steps`
    decode steps feeding `feed` (or the greedy argmax). Returns
    (prefill_logits [T, V], rows [steps + 1, V], fed ids, trace)."""
    fwd = runner.session()
    trace = {}
    if chunks is None:
        pre = fwd(prompt, trace)
    else:
        parts, i = [], 0
        for n in chunks:
            parts.append(fwd(prompt[i:i + n]))
            i += n
        assert i == len(prompt)
        pre = torch.cat(parts, 0)
    rows = [pre[-1]]
    fed, dec_traces = [], []
    for s in range(steps):
        tok = int(rows[-1].argmax()) if feed is None else feed[s]
        fed.append(tok)
        t = {}
        rows.append(fwd([tok], t)[0])
        dec_traces.append(t)
    trace["decode"] = dec_traces
    return pre, torch.stack(rows), fed, trace


def maxdiff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def expert_sets(trace: dict) -> list:
    """Chosen experts, sorted, for every MoE layer of every token (prefill, then decode)."""
    steps = [trace.get("routing", [])] + [t.get("routing", []) for t in trace["decode"]]
    return [[sorted(ids) for ids in e["experts"]] for r in steps for e in r]


def min_margin(trace: dict) -> float | None:
    steps = [trace.get("routing", [])] + [t.get("routing", []) for t in trace["decode"]]
    m = [x for r in steps for e in r for x in e.get("margin", [])]
    return min(m) if m else None


def make_fixture(preset: str, waste: str, work: str, out: str) -> dict:
    path = os.path.join(work, preset)
    cmd = [waste, "synth", "--force", "--preset", preset, "--seed", str(SEED), path]
    subprocess.run(cmd, check=True, capture_output=True)
    c = Container(path)
    cfg = c.config
    bos = int(cfg["bos_token_id"])
    prompt = [bos] + PROMPT_TAIL
    vocab = int(cfg["vocab_size"])
    assert max(prompt) < vocab

    if cfg["model_type"] == "kimi_linear":
        oracle = own_runner(c)
        others = [hf_runner(c, hf_kimi_linear), own_runner(c, kda_mode="chunk")]
    else:
        hfm = hf_deepseek_v3(c)
        oracle = hf_runner(c, hfm)
        others = [own_runner(c)]

    pre, rows, fed, trace = run(oracle, prompt, DECODE_STEPS)
    argmax = [int(r.argmax()) for r in rows]
    assert fed == argmax[:DECODE_STEPS]

    checks = {}
    if cfg["model_type"] != "kimi_linear" and not cfg.get("mla_use_nope"):
        inv_freq, attn_factor, mult = rope_tables(cfg)
        rot = hfm.model.rotary_emb
        att = hfm.model.layers[0].self_attn
        qk = int(cfg["qk_nope_head_dim"]) + int(cfg["qk_rope_head_dim"])
        checks["rope_tables_identical_to_hf"] = bool(
            torch.equal(rot.inv_freq, inv_freq) and rot.attention_scaling == attn_factor
            and att.scaling == qk ** -0.5 * mult and hfm.config.rope_interleave)
    # Prefill token by token (and in uneven chunks) through the same code, then the same decode.
    p1, r1, _, _ = run(oracle, prompt, DECODE_STEPS, feed=fed, chunks=[1] * len(prompt))
    checks["token_by_token_prefill_max_abs_diff"] = maxdiff(p1, pre)
    checks["token_by_token_then_decode_max_abs_diff"] = maxdiff(r1, rows)
    p2, r2, _, _ = run(oracle, prompt, DECODE_STEPS, feed=fed, chunks=[5, 4, 3])
    checks["chunked_5_4_3_prefill_max_abs_diff"] = max(maxdiff(p2, pre), maxdiff(r2, rows))
    # Decode with the cache against recomputing the whole sequence from scratch.
    worst = 0.0
    seq = list(prompt)
    for s in range(DECODE_STEPS):
        seq.append(fed[s])
        full = oracle.session()(seq)
        worst = max(worst, maxdiff(full[-1], rows[s + 1]))
    checks["decode_cache_vs_full_recompute_max_abs_diff"] = worst
    # Other implementations, fed the oracle's tokens.
    cross = []
    margin = min_margin(trace)
    for other in others:
        po, ro, _, to = run(other, prompt, DECODE_STEPS, feed=fed)
        cross.append({"implementation": other.name,
                      "prefill_max_abs_diff": maxdiff(po, pre),
                      "rows_max_abs_diff": maxdiff(ro, rows),
                      "same_argmax": [int(r.argmax()) for r in ro] == argmax,
                      "same_routing": expert_sets(to) == expert_sets(trace)})
        if margin is None:
            margin = min_margin(to)
    checks["cross_implementation"] = cross

    # Sanity.
    finite = bool(torch.isfinite(rows).all() and torch.isfinite(pre).all())
    spread = [float(r.std()) for r in rows]
    distinct = len(set(argmax))
    sanity = {
        "finite": finite,
        "min_row_std": min(spread),
        "max_abs_logit": float(rows.abs().max()),
        "distinct_argmax_ids": distinct,
        "degenerate": distinct == 1,
        "min_routing_margin": margin,
        "min_routing_margin_note": "smallest gap, over every token and MoE layer, between the k-th and "
                                   "(k+1)-th biased score (and between the last kept and first dropped "
                                   "group score): how far the routing is from a tie",
    }
    if not finite or min(spread) == 0.0:
        raise SystemExit(f"{preset}: logits are not finite or a row is constant")

    top = []
    for i, r in enumerate(rows):
        v, ix = r.topk(TOP)
        top.append({
            "row": i,
            "position": len(prompt) - 1 + i,
            "input_id": prompt[-1] if i == 0 else fed[i - 1],
            "argmax": argmax[i],
            "top10_ids": [int(x) for x in ix],
            "top10_logits": [round(float(x), 6) for x in v],
            "top1_top2_gap": float(v[0] - v[1]),
        })

    attention = {"softmax_scale": None, "rope": None}
    if cfg.get("kv_lora_rank"):
        qk = int(cfg["qk_nope_head_dim"]) + int(cfg["qk_rope_head_dim"])
        if cfg.get("mla_use_nope"):
            attention = {"softmax_scale": qk ** -0.5, "rope": None,
                         "note": "mla_use_nope: no rotary embedding on any dimension"}
        else:
            inv_freq, attn_factor, mult = rope_tables(cfg)
            attention = {
                "softmax_scale": qk ** -0.5 * mult,
                "rope": {"interleaved_pairs": bool(cfg.get("rope_interleave", True)),
                         "inv_freq": [float(x) for x in inv_freq],
                         "cos_sin_scale": attn_factor,
                         "note": "angle(pos, i) = float32(pos) * inv_freq[i] in float32; pair i is "
                                 "(2i, 2i+1) of the rope dims when interleaved_pairs"},
            }
    hashes = c.file_hashes()
    meta = {
        "preset": preset,
        "seed": SEED,
        "synth_command": ["waste", "synth", "--force", "--preset", preset, "--seed", str(SEED), "OUT"],
        "tool": tool_identity(waste),
        "container": {"manifest_sha256": hashes["manifest.json"], "files_sha256": hashes},
        "model_type": cfg["model_type"],
        "vocab": vocab,
        "hidden": int(cfg["hidden_size"]),
        "n_layers": int(cfg["num_hidden_layers"]),
        "oracle": oracle.name,
        "precision": "float32 throughout; weights dequantized exactly from the container",
        "bos_id": bos,
        "prompt_ids": prompt,
        "decode_input_ids": fed,
        "argmax_ids": argmax,
        "files": {
            "logits": {"file": f"{preset}.logits.bin", "dtype": "float32-le", "shape": [DECODE_STEPS + 1, vocab],
                       "rows": "row 0: logits at the last prompt position (whole-prompt forward); "
                               "row i (1..8): logits after feeding decode_input_ids[i-1] at position "
                               "len(prompt)-1+i"},
            "prefill_logits": {"file": f"{preset}.prefill_logits.bin", "dtype": "float32-le",
                               "shape": [len(prompt), vocab]},
            "hidden": {"file": f"{preset}.hidden.bin", "dtype": "float32-le",
                       "shape": [int(cfg["num_hidden_layers"]) + 1, int(cfg["hidden_size"])],
                       "rows": "last prompt token: after the embedding, then after each layer "
                               "(residual stream, before the final norm)"},
        },
        "attention": attention,
        "rows": top,
        "routing": {
            "note": "per MoE layer, per token: chosen experts sorted by id, with their final weights "
                    "(renormalized, times routed_scaling_factor)",
            "prefill": canon_routing(trace["routing"]),
            "decode": [canon_routing(t["routing"]) for t in trace["decode"]],
        },
        "checks": checks,
        "sanity": sanity,
        "tolerance_hint": {
            "logits_abs": 1e-3,
            "note": "independent float32 implementations of this math agree to ~1e-5 (see checks); an "
                    "engine with other summation orders should stay well inside 1e-3 absolute on these "
                    "logits, and its argmax must match wherever top1_top2_gap is clearly larger",
        },
        "versions": versions(),
    }
    os.makedirs(out, exist_ok=True)
    rows.numpy().astype("<f4").tofile(os.path.join(out, f"{preset}.logits.bin"))
    pre.numpy().astype("<f4").tofile(os.path.join(out, f"{preset}.prefill_logits.bin"))
    trace["hidden"].numpy().astype("<f4").tofile(os.path.join(out, f"{preset}.hidden.bin"))
    with open(os.path.join(out, f"{preset}.json"), "w") as f:
        f.write(compact_json(meta) + "\n")
    return meta


def compact_json(obj) -> str:
    """Indented JSON with arrays of numbers (or of short strings) kept on one line."""
    text = json.dumps(obj, indent=1)
    pattern = re.compile(r"\[\s*((?:-?[\d.eE+-]+|\"[^\"\n]{0,40}\"|true|false|null)"
                         r"(?:,\s*(?:-?[\d.eE+-]+|\"[^\"\n]{0,40}\"|true|false|null))*)\s*\]")
    return pattern.sub(lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--waste", required=True, help="the waste binary (build/bin/waste)")
    ap.add_argument("--out", required=True, help="fixture directory (tests/fixtures/forward)")
    ap.add_argument("--work", default="/tmp/waste-reference", help="where the containers are written")
    ap.add_argument("--preset", action="append", choices=PRESETS, help="default: all")
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a scratch directory and compare with the fixtures in --out "
                         "instead of overwriting them")
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    import transformers

    transformers.logging.set_verbosity_error()  # "falling back to its reference PyTorch implementation"
    bad = 0
    for preset in args.preset or PRESETS:
        dest = os.path.join(args.work, "check") if args.check else args.out
        m = make_fixture(preset, args.waste, args.work, dest)
        if args.check:
            bad += compare(preset, args.out, dest)
        ch = m["checks"]
        print(f"{preset}: prompt {m['prompt_ids']}")
        print(f"  greedy {m['argmax_ids']}  (distinct {m['sanity']['distinct_argmax_ids']}"
              f"{', DEGENERATE' if m['sanity']['degenerate'] else ''})")
        print(f"  token-by-token prefill vs whole: {ch['token_by_token_prefill_max_abs_diff']:.3g}; "
              f"then decode: {ch['token_by_token_then_decode_max_abs_diff']:.3g}; "
              f"chunks 5/4/3: {ch['chunked_5_4_3_prefill_max_abs_diff']:.3g}; "
              f"cache vs recompute: {ch['decode_cache_vs_full_recompute_max_abs_diff']:.3g}")
        for x in ch["cross_implementation"]:
            print(f"  vs {x['implementation']}: prefill {x['prefill_max_abs_diff']:.3g}, "
                  f"rows {x['rows_max_abs_diff']:.3g}, same argmax {x['same_argmax']}, "
                  f"same routing {x['same_routing']}")
        print(f"  min routing margin {m['sanity']['min_routing_margin']:.3g}, "
              f"min top1-top2 gap {min(r['top1_top2_gap'] for r in m['rows']):.3g}")
        print(f"  manifest sha256 {m['container']['manifest_sha256']}")
    return 1 if bad else 0


def compare(preset: str, committed: str, fresh: str) -> int:
    """0 when the regenerated fixture agrees with the committed one."""
    a = json.load(open(os.path.join(committed, f"{preset}.json")))
    b = json.load(open(os.path.join(fresh, f"{preset}.json")))
    problems = []
    if a["container"]["files_sha256"] != b["container"]["files_sha256"]:
        problems.append("the container's bytes changed (waste synth no longer writes the same files)")
    for key in ("prompt_ids", "decode_input_ids", "argmax_ids"):
        if a[key] != b[key]:
            problems.append(f"{key}: {a[key]} -> {b[key]}")
    for f in ("logits", "prefill_logits", "hidden"):
        x = np.fromfile(os.path.join(committed, a["files"][f]["file"]), "<f4")
        y = np.fromfile(os.path.join(fresh, b["files"][f]["file"]), "<f4")
        d = float(np.abs(x - y).max()) if x.shape == y.shape else float("inf")
        print(f"  check {f}: max abs diff to the committed fixture {d:.3g}")
        if not d <= 1e-5:
            problems.append(f"{f} differs by {d:.3g}")
    for p in problems:
        print(f"  MISMATCH {preset}: {p}")
    return len(problems)


if __name__ == "__main__":
    sys.exit(main())
