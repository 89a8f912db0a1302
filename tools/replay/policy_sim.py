#!/usr/bin/env python3
# Offline simulation of eviction policies on a routing trace (one JSON line per
# token, "layers": the experts of each MoE layer), as used for the decay choice
# in docs/MEASUREMENTS.md ("The policy fixed"). Usage: policy_sim.py [TRACE].
# Not part of the product; the daemon is measured with `waste replay`.
import json, random, sys
toks = [json.loads(l)['layers'] for l in open(sys.argv[1] if len(sys.argv) > 1 else '../shared/data/trace_kimi_linear_300.jsonl')]
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
                        cand = [c for c in cand if c not in cur] or [x for x in keys if x not in cur]
                    else:
                        cand = [x for x in keys if x not in cur]
                    v = min(cand, key=lambda x: rank(meta[x]))
                    i = pos.pop(v); last = keys.pop()
                    if last != v: keys[i] = last; pos[last] = i
                    del meta[v]
                meta[k] = [1, clock]; pos[k] = len(keys); keys.append(k)
    return 100 * hits / n
lfru = lambda m: (m[0], m[1]); lru = lambda m: (m[1],)
# Cache hit rate % by size (slots of 6,656 records: 3, 6, 12, 24, 48%).
for s in (200, 399, 799, 1597, 3195):
    print(s, 'LRU %.1f' % run(s, lru), 'LRU best-of-16 %.1f' % run(s, lru, 16),
          ' '.join('LFRU halved every %dx %.1f' % (d, run(s, lfru, 0, d)) for d in (2, 4, 8, 16, 64)),
          'LFRU best-of-16 %.1f' % run(s, lfru, 16), flush=True)
