#!/usr/bin/env python3
# How concentrated a routing trace is (one JSON line per token, "layers": the
# experts of each MoE layer), to compare real routing with the synthetic
# presets'. Usage: skew.py TRACE [EXPERTS] ... (EXPERTS: experts per layer,
# by default one more than the largest id seen). Per trace:
#   used      records demanded at least once, of MoE layers x EXPERTS
#   top10     share of all demands that went to the hottest 10% of records
#   entropy   per layer, the entropy of the experts' demand counts over
#             log(EXPERTS) (1: uniform), averaged over the layers
#   reuse     share of a token's experts, per layer, that the token before chose too
import json, math, sys
from collections import Counter
args = sys.argv[1:]
print('| trace | tokens | MoE layers x experts | top-k | used | top10 | entropy | reuse |')
print('|---|---|---|---|---|---|---|---|')
while args:
    path = args.pop(0)
    experts = int(args.pop(0)) if args and args[0].isdigit() else None
    toks = [json.loads(l)['layers'] for l in open(path)]
    layers = len(toks[0])
    experts = experts or 1 + max(e for t in toks for es in t for e in es)
    counts = Counter((L, e) for t in toks for L, es in enumerate(t) for e in es)
    total = sum(counts.values())
    hot = sorted(counts.values(), reverse=True)[:max(1, layers * experts // 10)]
    ent = 0.0
    for L in range(layers):
        c = [n for (l, _), n in counts.items() if l == L]
        s = sum(c)
        ent += -sum(n / s * math.log(n / s) for n in c) / math.log(experts)
    reuse = [len(set(a) & set(b)) / len(b) for p, t in zip(toks, toks[1:]) for a, b in zip(p, t)]
    print('| %s | %d | %d x %d | %d | %.1f%% | %.1f%% | %.3f | %.1f%% |' % (
        path.split('/')[-1], len(toks), layers, experts, len(toks[0][0]), 100 * len(counts) / (layers * experts),
        100 * sum(hot) / total, ent / layers, 100 * sum(reuse) / len(reuse)))
