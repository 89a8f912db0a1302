#!/usr/bin/env python3
# The replay table of docs/log/2026-12-01.md ("the floor region") for any
# container and trace: for each cache size (a share of the container's expert
# records) and policy, a fresh wasted (empty state directory) with exactly
# that many slots, then `waste replay --json`; prints the cache's hit rate
# and reads per token. Sizes below wasted's floor (its fewest slots) are left out and said so.
#   replay_table.py --bin build/bin --container C --trace T [--shares 1.5,3,6,12,24,48] [--policies lfru,lru]
import argparse, json, subprocess, tempfile

ap = argparse.ArgumentParser()
ap.add_argument('--bin', required=True)
ap.add_argument('--container', required=True)
ap.add_argument('--trace', required=True)
ap.add_argument('--shares', default='1.5,3,6,12,24,48')
ap.add_argument('--policies', default='lfru,lru')
a = ap.parse_args()
plan = json.loads(subprocess.check_output([a.bin + '/waste', 'plan', a.container, '--json']))['wasted']
info = json.loads(subprocess.check_output([a.bin + '/waste', 'info', a.container, '--json']))
first = json.loads(open(a.trace).readline())['layers']
moe_layers, top_k = len(first), len(first[0])
stride = plan['working_set'] // (moe_layers * top_k)
min_slots = plan['min_expert_cache'] // stride
print('| cache | slots | ' + ' | '.join('%s hit rate %%' % p.upper() for p in a.policies.split(',')) +
      ' | ' + ' | '.join('%s reads/token' % p.upper() for p in a.policies.split(',')) + ' |')
print('|---' * (2 + 2 * len(a.policies.split(','))) + '|')
records = moe_layers * info['experts']['per_layer']
for share in [float(s) for s in a.shares.split(',')]:
    rates, reads = [], []
    for policy in a.policies.split(','):
        with tempfile.TemporaryDirectory() as d:
            sock = d + '/s'
            slots = max(1, round(share * records / 100))
            if slots < min_slots:
                rates.append('below the floor (%d slots)' % min_slots); reads.append('')
                continue
            budget = plan['trunk'] + plan['overhead'] + slots * stride + 20000
            subprocess.check_call([a.bin + '/wasted', a.container, '--socket', sock, '--state-dir', d + '/st',
                                   '--log-file', d + '/log', '--budget', str(budget), '--policy', policy])
            r = json.loads(subprocess.check_output([a.bin + '/waste', 'replay', a.container, a.trace,
                                                    '--socket', sock, '--json']))
            subprocess.call([a.bin + '/wastectl', 'stop', '--socket', sock], stdout=subprocess.DEVNULL)
            assert r['slots'] == slots, (r['slots'], slots)
            rates.append('%.1f' % (100 * r['cache_hit_rate'])); reads.append('%.1f' % r['reads_per_token'])
    print('| %g%% | %d | %s | %s |' % (share, slots, ' | '.join(rates), ' | '.join(reads)), flush=True)
