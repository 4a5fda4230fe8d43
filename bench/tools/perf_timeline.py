#!/usr/bin/env python3
"""Which threads run when: a critical-path view of a benchmark from `perf record -a` samples.

Record system-wide while the benchmark runs (every CPU, so idle shows too), then feed the samples:

  perf record -F 4999 -a -g -o perf.data -- build/bin/osprey-bench-transport --sparse-only \\
      --sparse-ops push --sparse-keys 100000x16 --transport tcp
  perf script -i perf.data -F comm,pid,tid,time,ip,sym | bench/tools/perf_timeline.py - [--bin-us 200]

Threads are named by process and thread (`P1/main`, `P1/ZMQbg/IO/0`, ...: P1 is the first
process seen, P2 the next). Prints (1) each thread's share of the samples with its top symbols,
(2) how the wall time splits into time bins by the set of threads active in the bin (e.g. "P2/main
alone 41%": the server thread ran while everything else waited -- a serial stage), and
(3) with --window MS, a bin-by-bin listing of that many milliseconds from the middle of the run,
each active thread with the first osprey frame of its stack. A bin counts a thread active when at
least one of its samples falls in it, so use bins of several sample periods.
"""
import argparse
import collections
import re
import sys

HEAD = re.compile(r'^\s*(.+?)\s+(\d+)/(\d+)\s+([\d.]+):')


def samples(stream):
    """Yields (time, pid, tid, comm, leaf symbol, first osprey frame) per sample."""
    block = []
    for line in stream:
        if line.strip():
            block.append(line.rstrip('\n'))
            continue
        yield from parse(block)
        block = []
    yield from parse(block)


def parse(block):
    if not block:
        return
    m = HEAD.match(block[0])
    if not m:
        return
    comm, pid, tid, t = m.group(1), int(m.group(2)), int(m.group(3)), float(m.group(4))
    frames = []
    for line in block[1:]:
        parts = line.split(None, 1)
        frames.append(parts[1].rsplit(' (', 1)[0] if len(parts) > 1 else '?')
    leaf = frames[0] if frames else '?'
    ours = next((f for f in frames if 'osprey::' in f), leaf)
    yield t, pid, tid, comm, leaf, ours


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('script', help="`perf script` output ('-': stdin)")
    ap.add_argument('--bin-us', type=float, default=250, help='time bin in microseconds (default 250)')
    ap.add_argument('--window', type=float, default=0, help='list this many ms bin by bin')
    ap.add_argument('--min-share', type=float, default=1.0, help='hide threads under this %% of samples')
    a = ap.parse_args()
    stream = sys.stdin if a.script == '-' else open(a.script, errors='replace')
    rows = list(samples(stream))
    if not rows:
        sys.exit('no samples: was it `perf script -F comm,pid,tid,time,ip,sym` of a `perf record -a`?')
    procs = {}
    names = {}
    for t, pid, tid, comm, _, _ in rows:
        if pid == 0:
            continue
        procs.setdefault(pid, f'P{len(procs) + 1}')
        names.setdefault(tid, f'{procs[pid]}/{"main" if tid == pid else comm}' + ('' if tid == pid else f'.{tid}'))
    busy = [r for r in rows if r[1] != 0]
    total = len(rows)
    counts = collections.Counter(r[2] for r in busy)
    leaves = collections.Counter((r[2], r[4]) for r in busy)
    shown = {tid for tid, c in counts.items() if 100.0 * c / total >= a.min_share}
    print(f'{total} samples, {100.0 * (total - len(busy)) / total:.0f}% idle')
    for tid, c in counts.most_common():
        if tid not in shown:
            continue
        top = sorted(((n, leaf) for (t, leaf), n in leaves.items() if t == tid), reverse=True)[:4]
        print(f'  {names[tid]:28s} {100.0 * c / total:5.1f}%  ' + ', '.join(f'{s[:40]} {n * 100 // c}%' for n, s in top))
    # One pass puts each shown thread's samples in their time bin: the set of threads active per
    # bin, and (for the listing) each one's first osprey frame.
    t0, t1 = rows[0][0], rows[-1][0]
    width = a.bin_us / 1e6
    nbins = int((t1 - t0) / width) + 1
    active = [set() for _ in range(nbins)]
    frames = [set() for _ in range(nbins)]
    for t, _, tid, _, _, ours in busy:
        if tid in shown:
            b = int((t - t0) / width)
            active[b].add(tid)
            frames[b].add(f'{names[tid]}:{ours.split("(")[0][-36:]}')
    sets = collections.Counter(frozenset(s) for s in active)
    print(f'\nwall time by the threads active in {a.bin_us:g} us bins:')
    for s, c in sets.most_common(12):
        label = ' + '.join(sorted(names[t] for t in s)) or '(none of them)'
        print(f'  {100.0 * c / nbins:5.1f}%  {label}')
    if a.window > 0:
        first = nbins // 2
        print(f'\n{a.window:g} ms from the middle of the run:')
        for i in range(min(int(a.window * 1000 / a.bin_us), nbins - first)):
            print(f'  {i * a.bin_us / 1000:7.2f} ms  ' + '  '.join(sorted(frames[first + i])))

if __name__ == '__main__':
    main()
