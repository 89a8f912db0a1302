#!/usr/bin/env python3
# Offline simulation of eviction policies on a routing trace (one JSON line per
# token, "layers": the experts of each MoE layer), one use per acquire, no I/O.
# Not part of the product; the daemon is measured with `waste replay`.
#   policy_sim.py [TRACE [EXPERTS]]          the decay table of docs/log/
#       2026-11-30-issues-3-to-5.md ("The policy fixed"): per-slot LFRU by how often uses halve,
#       LRU, WARP-style best-of-16 sampling; caches of 3, 6, 12, 24 and 48% of the trace's records
#   policy_sim.py --floor [TRACE [EXPERTS]]  the floor-region candidates of issue 18
#       (per-record uses, frequency-aware admission, SLRU, scan resistance) at 1.5-48%
# Records are MoE layers x EXPERTS (by default one more than the largest expert id
# seen); the trace defaults to the real Kimi-Linear one, run from the repository root.
import json, random, sys
args = sys.argv[1:]
floor = '--floor' in args
args = [a for a in args if a != '--floor']
toks = [json.loads(l)['layers'] for l in open(args[0] if args else '../shared/data/trace_kimi_linear_300.jsonl')]
experts = int(args[1]) if len(args) > 1 else 1 + max(e for t in toks for es in t for e in es)
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

# The floor-region candidates. Every demanded record takes a slot (a client
# computes on it), so "not admitting" a record means it takes a probation
# slot, the next to be reused. The current layer's records are not evicted.
#   lfru          today's rule before issue 18: uses per slot, from 1 at admission
#   record        uses per record, kept while it is out of the cache
#   tinylfu       per-slot LFRU picks the victim; a newcomer no more used (per
#                 record) than it goes to probation instead, evicting the oldest
#                 probationer; a hit ends probation
#   tinylfu-rec   the same with the victim by per-record uses
#   slru          segmented LRU: a hit moves a record to the protected 80%
#   mru-cold      scan resistance: the newest record never hit goes first, else LRU
# `fade` is the number of uses between halvings of every count.
def floor_run(slots, pol, fade):
    uses = [0] * records               # per record, faded (all policies but lfru read it)
    res = {}                            # record -> [slot uses, last use, protected, probation, hit]
    clock = n = hits = 0
    for t in toks:
        for L, es in enumerate(t):
            cur = {L * experts + e for e in es}
            for e in es:
                k = L * experts + e; n += 1; clock += 1
                if n % fade == 0:
                    for m in res.values(): m[0] //= 2
                    for i in range(records): uses[i] //= 2
                uses[k] += 1
                m = res.get(k)
                if m is not None:
                    hits += 1; m[0] += 1; m[1] = clock; m[2] = m[4] = True; m[3] = False
                    continue
                probation = False
                if len(res) >= slots:
                    cand = [x for x in res if x not in cur] or list(res)
                    if pol == 'lru': v = min(cand, key=lambda x: res[x][1])
                    elif pol == 'lfru': v = min(cand, key=lambda x: (res[x][0], res[x][1]))
                    elif pol == 'record': v = min(cand, key=lambda x: (uses[x], res[x][1]))
                    elif pol in ('tinylfu', 'tinylfu-rec'):
                        if pol == 'tinylfu': v = min(cand, key=lambda x: (res[x][0], res[x][1]))
                        else: v = min([x for x in cand if not res[x][3]] or cand, key=lambda x: (uses[x], res[x][1]))
                        if uses[k] <= uses[v]:
                            probation = True
                            v = min([x for x in cand if res[x][3]] or [v], key=lambda x: res[x][1])
                    elif pol == 'slru':
                        protected = [x for x in cand if res[x][2]]
                        pool = protected if len(protected) > 0.8 * slots else [x for x in cand if not res[x][2]]
                        v = min(pool or cand, key=lambda x: res[x][1])
                    elif pol == 'mru-cold':
                        cold = [x for x in cand if not res[x][4]]
                        v = max(cold, key=lambda x: res[x][1]) if cold else min(cand, key=lambda x: res[x][1])
                    del res[v]
                res[k] = [1, clock, False, probation, False]
    return 100 * hits / n

if not floor:
    lfru = lambda m: (m[0], m[1]); lru = lambda m: (m[1],)
    # Cache hit rate % by size (of the Kimi trace's 6,656 records: 200, 399, 799, 1597, 3195 slots).
    for share in (3, 6, 12, 24, 48):
        s = max(1, round(share * records / 100))
        print('%d%% %d slots' % (share, s), 'LRU %.1f' % run(s, lru), 'LRU best-of-16 %.1f' % run(s, lru, 16),
              ' '.join('LFRU halved every %dx %.1f' % (d, run(s, lfru, 0, d)) for d in (2, 4, 8, 16, 64)),
              'LFRU best-of-16 %.1f' % run(s, lfru, 16), flush=True)
else:
    # (column, policy, uses between halvings for a cache of s slots)
    cols = [('LRU', 'lru', lambda s: 4 * s),
            ('LFRU per slot, halved every 4 x slots (before)', 'lfru', lambda s: 4 * s),
            ('per record, 4 x slots', 'record', lambda s: 4 * s),
            ('per record, 4 x max(slots, records/16) (the rule now)', 'record', lambda s: 4 * max(s, records // 16)),
            ('per record, 1 x records', 'record', lambda s: records),
            ('TinyLFU admission, per-slot victim', 'tinylfu', lambda s: 4 * s),
            ('TinyLFU admission, per-record victim', 'tinylfu-rec', lambda s: 4 * s),
            ('SLRU 80/20', 'slru', lambda s: 4 * s),
            ('newest never-hit first', 'mru-cold', lambda s: 4 * s)]
    print('| cache | slots | ' + ' | '.join(c[0] for c in cols) + ' |')
    print('|---' * (2 + len(cols)) + '|')
    for share in (1.5, 3, 6, 12, 24, 48):
        s = max(1, round(share * records / 100))
        print('| %g%% | %d | ' % (share, s) + ' | '.join('%.1f' % floor_run(s, p, f(s)) for _, p, f in cols) + ' |',
              flush=True)
