#!/usr/bin/env python3
# Offline simulation of eviction policies on a routing trace (one JSON line per
# token, "layers": the experts of each MoE layer), as used for the decay choice
# in docs/MEASUREMENTS.md ("The policy fixed"). Usage: policy_sim.py [TRACE
# [EXPERTS]]: the cache sizes are 3, 6, 12, 24 and 48% of the trace's records
# (MoE layers x EXPERTS, by default one more than the largest expert id seen).
# Not part of the product; the daemon is measured with `waste replay`.
import json, random, sys
toks = [json.loads(l)['layers'] for l in open(sys.argv[1] if len(sys.argv) > 1 else '../shared/data/trace_kimi_linear_300.jsonl')]
experts = int(sys.argv[2]) if len(sys.argv) > 2 else 1 + max(e for t in toks for es in t for e in es)
records = len(toks[0]) * experts
def run(slots, rank, sample=0, decay=64, seed=1):
    rng = random.Random(seed)
    meta = {}; keys = []; pos = {}
    clock = hints = hits = n = 0
    for t in toks:
        for L, es in enumerate(t):
            cur = {(L, e) for e in es}
            for e in es:
                k = (L, e); n += 1; hints += 1; clock += 1
                if decay and hints % (decay * slots) == 0:
                    for m in meta.values(): m[0] //= 2
                if k in meta:
                    meta[k][0] += 1; meta[k][1] = clock; hits += 1; continue
                if len(meta) >= slots:
                    if sample:
                        cand = [keys[rng.randrange(len(keys))] for _ in range(sample)]
                        cand = [c for c in cand if c not in cur] or [x for x in keys if x not in cur] or keys
                    else:  # a cache smaller than one layer's experts takes any
                        cand = [x for x in keys if x not in cur] or keys
                    v = min(cand, key=lambda x: rank(meta[x]))
                    i = pos.pop(v); last = keys.pop()
                    if last != v: keys[i] = last; pos[last] = i
                    del meta[v]
                meta[k] = [1, clock]; pos[k] = len(keys); keys.append(k)
    return 100 * hits / n
lfru = lambda m: (m[0], m[1]); lru = lambda m: (m[1],)
# Cache hit rate % by size (of the Kimi trace's 6,656 records: 200, 399, 799, 1597, 3195 slots).
for share in (3, 6, 12, 24, 48):
    s = max(1, round(share * records / 100))
    print('%d%% %d slots' % (share, s), 'LRU %.1f' % run(s, lru), 'LRU best-of-16 %.1f' % run(s, lru, 16),
          ' '.join('LFRU halved every %dx %.1f' % (d, run(s, lfru, 0, d)) for d in (2, 4, 8, 16, 64)),
          'LFRU best-of-16 %.1f' % run(s, lfru, 16), flush=True)
