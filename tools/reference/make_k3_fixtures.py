#!/usr/bin/env python3
"""Writes tests/fixtures/k3/: Kimi K3's two oracles on one tiny container.

    /work/pyenv/bin/python tools/reference/make_k3_fixtures.py --warp /tmp/warp-build --out tests/fixtures/k3

--warp is a built copy of WARP (sqliteai/warp at 7f1fbba: `make` in a copy of
its source; never committed). The steps, each recorded in k3.json:

1. make_k3_checkpoint.py's tiny random K3 checkpoint (--seed) into a scratch
   directory, in the released layout;
2. WARP's own converter (tools/convert.py, VQ3R: the only expert format it
   writes; it reads the MXFP4 experts through its mxfp4.py) turns it into a
   WARP v0 container, out/warp-vq3r/, byte-identical run to run;
3. warp_logits.c, compiled against WARP's libwaste.a, gives WARP's logits at
   every position of the prompt, fed one token at a time and as whole prefixes;
4. k3_model.py gives the PyTorch reference's on the same container (read
   through container.py, which dequantizes exactly) and, separately, on the
   raw checkpoint (checkpoint.py, MXFP4 decoded); it is also run over the
   prompt in chunks, to show float32's own noise;
5. the agreement: worst max|diff| / max|logit| of a row, ordered top-10
   identical at every position, the smallest routing margin and top-11 gap.

With --waste, WARP and the reference also run on `waste synth --preset tiny-k3
--seed 1` (not committed: the test writes it again, byte for byte).

Files: warp-vq3r/ (the container), reference.logits.bin (the reference on the
container), warp.logits.bin (WARP, token by token), checkpoint.logits.bin (the
reference on the raw checkpoint), tiny-k3.{reference,warp}.logits.bin (the
synthetic preset), each float32 LE [positions][vocab]; k3.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.modules["fla"] = None  # fla's package __init__ needs Triton; k3_model loads its naive KDA by path

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import make_k3_checkpoint  # noqa: E402
from checkpoint import Checkpoint  # noqa: E402
from container import Container  # noqa: E402
from k3_model import K3Model  # noqa: E402

PROMPT_SEED = 7
PROMPT_LEN = 72
SYNTH = ["synth", "--preset", "tiny-k3", "--seed", "1", "--force", "--quiet"]
SYNTH_PROMPT_SEED, SYNTH_PROMPT_LEN = 11, 40


def prompt_ids(cfg: dict, seed: int = PROMPT_SEED, n: int = PROMPT_LEN) -> list:
    """BOS, then ordinary ids (the specials, from the BOS on, avoided), drawn from a seed."""
    g = torch.Generator().manual_seed(seed)
    n_plain = cfg["bos_token_id"]  # the specials start at the BOS
    return [cfg["bos_token_id"]] + torch.randint(0, n_plain, (n - 1,), generator=g).tolist()


def run(cmd: list, **kw) -> str:
    print("+ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)
    return r.stdout


def topk(row: np.ndarray, k: int = 10) -> list:
    return sorted(range(len(row)), key=lambda i: (-row[i], i))[:k]


def agreement(got: np.ndarray, want: np.ndarray) -> dict:
    """Per row: max|diff| over the reference's max|logit|, and the ordered top 10."""
    rel = np.abs(got - want).max(1) / np.abs(want).max(1)
    same = [topk(g) == topk(w) for g, w in zip(got, want)]
    return {"worst_rel": float(rel.max()), "worst_at": int(rel.argmax()),
            "top10_identical_rows": int(sum(same)), "rows": len(same),
            "argmax_identical": bool((got.argmax(1) == want.argmax(1)).all())}


def top_gap(x: np.ndarray) -> float:
    """Smallest gap between neighbours among a row's 11 largest logits."""
    s = -np.sort(-x, 1)[:, :11]
    return float((s[:, :-1] - s[:, 1:]).min())


def sha256s(d: str) -> dict:
    out = {}
    for n in sorted(os.listdir(d)):
        with open(os.path.join(d, n), "rb") as f:
            out[n] = hashlib.sha256(f.read()).hexdigest()
    return out


def reference(src, ids: list) -> tuple[np.ndarray, dict, np.ndarray]:
    m = K3Model(src)
    trace = {}
    whole = m.forward(ids, m.new_state(), trace).numpy()
    st = m.new_state()
    chunked = np.concatenate([m.forward(ids[i:i + 5], st).numpy() for i in range(0, len(ids), 5)])
    return whole, trace, chunked


def warp_run(driver: str, container: str, ids: list, scratch: str, V: int) -> tuple:
    ids_file = os.path.join(scratch, "ids.json")
    with open(ids_file, "w") as f:
        json.dump(ids, f)
    step_bin, prefill_bin = os.path.join(scratch, "step.bin"), os.path.join(scratch, "prefill.bin")
    run([driver, container, ids_file, step_bin, prefill_bin])
    return (np.fromfile(step_bin, "<f4").reshape(len(ids), V),
            np.fromfile(prefill_bin, "<f4").reshape(len(ids), V))


def synth_case(waste: str, driver: str, out: str, scratch: str) -> dict:
    """WARP and the reference on `waste synth --preset tiny-k3`'s container."""
    d = os.path.join(scratch, "tiny-k3")
    run([waste] + SYNTH + [d])
    c = Container(d)
    V = int(c.config["vocab_size"])
    ids = prompt_ids(c.config, SYNTH_PROMPT_SEED, SYNTH_PROMPT_LEN)
    step, prefill = warp_run(driver, d, ids, scratch, V)
    ref, trace, chunked = reference(c, ids)
    ref.astype("<f4").tofile(os.path.join(out, "tiny-k3.reference.logits.bin"))
    step.astype("<f4").tofile(os.path.join(out, "tiny-k3.warp.logits.bin"))
    return {"command": "waste " + " ".join(SYNTH) + " DIR", "container_sha256": c.file_hashes(),
            "prompt_ids": ids, "vocab": V, "positions": len(ids),
            "files": {"tiny-k3.reference.logits.bin": "k3_model.py, whole prompt",
                      "tiny-k3.warp.logits.bin": "WARP, one token at a time"},
            "agreement": {"warp_vs_reference": agreement(step, ref),
                          "warp_prefill_vs_reference": agreement(prefill, ref),
                          "reference_chunks_of_5_vs_whole": agreement(chunked, ref)},
            "margins": {"routing": min(min(r["margin"]) for r in trace["routing"]),
                        "top11_gap": top_gap(ref)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warp", required=True, help="a built copy of WARP's source tree")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--waste", help="build/bin/waste: also run both oracles on its tiny-k3 preset")
    a = ap.parse_args()
    warp = os.path.abspath(a.warp)
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="k3-fixtures-")
    try:
        ckpt = os.path.join(scratch, "checkpoint")
        outer = make_k3_checkpoint.write(ckpt, a.seed)
        cfg = outer["text_config"]
        ids = prompt_ids(cfg)
        container = os.path.join(out, "warp-vq3r")
        shutil.rmtree(container, ignore_errors=True)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        convert = [sys.executable, os.path.join(warp, "tools", "convert.py"), "--src", ckpt,
                   "--out", container, "--device", "cpu", "--jobs", "1"]
        convert_log = run(convert, env=env)
        driver = os.path.join(scratch, "warp_logits")
        build = ["cc", "-O2", "-I", os.path.join(warp, "src"), "-o", driver,
                 os.path.join(HERE, "warp_logits.c"), os.path.join(warp, "libwaste.a"), "-lm", "-lpthread"]
        run(build)
        V = cfg["vocab_size"]
        warp_step, warp_prefill = warp_run(driver, container, ids, scratch, V)

        ref_c, trace_c, chunk_c = reference(Container(container), ids)
        ref_k, trace_k, chunk_k = reference(Checkpoint(ckpt), ids)

        ref_c.astype("<f4").tofile(os.path.join(out, "reference.logits.bin"))
        warp_step.astype("<f4").tofile(os.path.join(out, "warp.logits.bin"))
        ref_k.astype("<f4").tofile(os.path.join(out, "checkpoint.logits.bin"))
        margin = lambda tr: min(min(r["margin"]) for r in tr["routing"])  # noqa: E731
        meta = {
            "what": "Kimi K3's oracles on one tiny container (README.md)",
            "seed": a.seed, "prompt_ids": ids, "vocab": V, "positions": len(ids),
            "checkpoint_command": f"python3 tools/reference/make_k3_checkpoint.py --out DIR --seed {a.seed}",
            "checkpoint_sha256": sha256s(ckpt),
            "warp": {"source": "sqliteai/warp 7f1fbba, built with `make` in a copy of its tree",
                     "convert": "OMP_NUM_THREADS=1 python3 WARP/tools/convert.py --src CHECKPOINT "
                                "--out tests/fixtures/k3/warp-vq3r --device cpu --jobs 1",
                     "convert_log": convert_log.strip().splitlines(),
                     "driver": "cc -O2 -I WARP/src -o warp_logits tools/reference/warp_logits.c "
                               "WARP/libwaste.a -lm -lpthread; warp_logits CONTAINER IDS.json STEP.bin PREFILL.bin"},
            "container_sha256": sha256s(container),
            "files": {"reference.logits.bin": "k3_model.py on warp-vq3r/ (whole prompt)",
                      "warp.logits.bin": "WARP on warp-vq3r/, one token at a time",
                      "checkpoint.logits.bin": "k3_model.py on the raw checkpoint (MXFP4 decoded)",
                      "layout": "float32 LE [positions][vocab], row t the logits after token t"},
            "agreement": {
                "warp_vs_reference": agreement(warp_step, ref_c),
                "warp_prefill_vs_reference": agreement(warp_prefill, ref_c),
                "warp_prefill_vs_warp_step": agreement(warp_prefill, warp_step),
                "reference_chunks_of_5_vs_whole": agreement(chunk_c, ref_c),
                "checkpoint_reference_chunks_of_5_vs_whole": agreement(chunk_k, ref_k),
                "checkpoint_vs_container_reference": agreement(ref_c, ref_k),
            },
            "margins": {"routing_container": margin(trace_c), "routing_checkpoint": margin(trace_k),
                        "top11_gap_container": top_gap(ref_c), "top11_gap_checkpoint": top_gap(ref_k)},
            "sanity": {"max_abs_logit": float(np.abs(ref_c).max()),
                       "mean_row_std": float(ref_c.std(1).mean()),
                       "distinct_argmax": len(set(ref_c.argmax(1).tolist())),
                       "finite": bool(np.isfinite(ref_c).all() and np.isfinite(warp_step).all())},
            "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                         "numpy": np.__version__},
        }
        if a.waste:
            meta["tiny_k3"] = synth_case(os.path.abspath(a.waste), driver, out, scratch)
        with open(os.path.join(out, "k3.json"), "w") as f:
            json.dump(meta, f, indent=1)
        print(json.dumps({"agreement": meta["agreement"], "margins": meta["margins"],
                          "sanity": meta["sanity"],
                          "tiny_k3": {k: meta.get("tiny_k3", {}).get(k) for k in ("agreement", "margins")}},
                         indent=1))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
