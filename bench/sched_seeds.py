#!/usr/bin/python3
"""sched_seeds.py: one capability's figures per policy over a range of seeds.

Runs gpuq-sim on a workload for each seed (the same arrivals for every
policy), prints per policy the mean over seeds of the capability's p50, p99,
SLO attainment and mean wait, the cache hit ratio and unfinished jobs, and in
how many seeds gpuq is best of the other policies on p50, p99 and SLO at once.
Scheduler settings may be overridden (key=json value; null removes the key, so
the core default applies).

  bench/sched_seeds.py WORKLOAD CAPABILITY FIRST..LAST [policy=NAME] [key=value ...]
  e.g. bench/sched_seeds.py bench/workloads/seed7.json image.fast 1..10
       bench/sched_seeds.py bench/workloads/zoo.json image.sdxl 1..3 policy=gpuq queue_depth=null

GPUQ_SIM names the simulator (default build/gpuq-sim)."""
import json
import os
import subprocess
import sys
import tempfile


def main():
    if len(sys.argv) < 4 or '..' not in sys.argv[3]:
        sys.exit(__doc__)
    wl, cap, seeds = sys.argv[1], sys.argv[2], sys.argv[3]
    first, last = (int(x) for x in seeds.split('..'))
    over = {}
    for kv in sys.argv[4:]:
        if '=' not in kv:
            sys.exit(f"sched_seeds.py: {kv!r}: want key=value")
        k, v = kv.split('=', 1)
        over[k] = v
    policy = over.pop('policy', 'all')
    sim = os.environ.get('GPUQ_SIM', 'build/gpuq-sim')
    path = wl
    if over:
        with open(wl) as f:
            doc = json.load(f)
        sched = doc.setdefault('scheduler', {})
        for k, v in over.items():
            v = json.loads(v)
            if v is None:
                sched.pop(k, None)
            else:
                sched[k] = v
        tmp = tempfile.NamedTemporaryFile('w', suffix='.json', delete=False)
        json.dump(doc, tmp)
        tmp.close()
        path = tmp.name
    figs, wins = {}, 0
    for seed in range(first, last + 1):
        p = subprocess.run([sim, '--workload', path, '--policy', policy, '--seed', str(seed),
                            '--no-timing', '--json'], capture_output=True, text=True)
        if p.returncode:
            sys.exit(p.stderr)
        run = {}
        for pol, r in json.loads(p.stdout).items():
            lat = r['latency'].get(cap)
            if lat is None:
                sys.exit(f"sched_seeds.py: no capability {cap!r} in the report")
            run[pol] = (lat['p50'], lat['p99'], r['slo_attainment'].get(cap, 0),
                        r['per_capability'][cap]['wait_mean'], r['cache_hit_ratio'],
                        r.get('unfinished', 0))
            figs.setdefault(pol, []).append(run[pol])
        g = run.get('gpuq')
        others = [v for pol, v in run.items() if pol not in ('gpuq', 'oracle', 'oracle-prio')]
        if g and others and all(g[0] <= o[0] and g[1] <= o[1] and g[2] >= o[2] for o in others):
            wins += 1
    print(f"{wl} {cap} seeds {first}..{last} {over or ''}")
    print(f"{'policy':14s} {'p50 s':>7s} {'p99 s':>8s} {'SLO':>6s} {'wait s':>7s} {'hit':>6s} {'unfin':>6s}")
    for pol, rows in figs.items():
        m = [sum(r[i] for r in rows) / len(rows) for i in range(6)]
        print(f"{pol:14s} {m[0]:7.3f} {m[1]:8.2f} {m[2]:6.3f} {m[3]:7.3f} {m[4]:6.3f} {m[5]:6.0f}")
    if policy == 'all':
        print(f"gpuq best on p50, p99 and SLO at once in {wins}/{last - first + 1} seeds")


if __name__ == '__main__':
    main()
