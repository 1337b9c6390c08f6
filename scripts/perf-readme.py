#!/usr/bin/env python3
"""Regenerate the README's performance section from stress_epoll runs on this machine.

    python3 scripts/perf-readme.py                 # 2 full runs, saved as docs/data/bench-run{1,2}.txt
    python3 scripts/perf-readme.py --runs 3 --quick
    python3 scripts/perf-readme.py --from docs/data/bench-run1.txt docs/data/bench-run2.txt
    python3 scripts/perf-readme.py --quick --only pingpong --save /tmp/run{}.txt --readme /tmp/README.md

Runs `cargo run --release --all-features --example stress_epoll` (unless `--from` names existing outputs),
then rewrites what lies between `<!-- perf:begin -->` and `<!-- perf:end -->` in README.md:
the machine (CPU model and vCPUs, as the runs print them, and the kernel), the ratios to
the floor first (they travel between machines), then the ratios to the kernel and peers;
every row idle and contended (the `_contended` rows, measured with one CPU-bound
co-tenant) side by side, with its ratio in each run and every target marked met or missed
(met only if every run meets it), and a tally of the targets. Nothing else in the README
is touched.
"""
import argparse
import os
import platform
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
BEGIN, END = '<!-- perf:begin -->', '<!-- perf:end -->'

# Variants that go into the floor table: the floors, and the token bounce shown beside them.
FLOORS = ('vs_floor', 'vs_token')

# Targets (docs/benchmarks.md): (bench, variant or None for every variant of the bench,
# threads or None) -> minimum ratio. A `_contended` row has the target of its idle row
# unless CONTENDED_TARGETS names one of its own.
TARGETS = [
    (('seed_pri', 'vs_floor', None), 0.8),
    (('seed_in', 'vs_floor', None), 0.8),
    (('harvest', 'vs_floor', None), 0.8),
    (('pingpong', 'vs_floor_spin', None), 0.5),
    (('seed_pri', 'write+read', None), 15.0),
    (('seed_in', 'write+read', None), 10.0),
    (('stress', 'P1Q1', None), 5.0),
    (('stress', 'P2Q1', None), 10.0),
    (('stress', 'P4Q1', None), 10.0),
    (('stress', 'P2Q2', None), 10.0),
    (('pingpong', 'block-cross', None), 1.1),
    (('pingpong', 'spin-cross_vs_kbusy', None), 1.3),
    (('epwait', 'W1', None), 2.0),
    (('epwait', 'W2', None), 2.0),
    (('autoreset_loop', 'AutoReset_vs_Counter+read', None), 1.0),
    (('autoreset_loop', 'AutoReset_vs_kernel', None), 3.0),
    (('async_pingpong', 'vs_Notify', None), 1.2),
    (('async_pingpong', 'vs_AsyncFd', None), 10.0),
    # Costs (latency, ns): the ratio is twin/evfd, so "at most 1.2x the twin's" is >= 0.83.
    (('scale', None, None), 0.83),
    (('mixed', 'wake_async_p50', None), 1.0),
    (('mixed', 'wake_blocking_p50_vs_epoll_wait', None), 1.0),
    (('xproc', 'pingpong_block', None), 1.0),
    (('xproc', 'pingpong_spin_vs_eventfd', None), 3.0),
]

# With one CPU-bound co-tenant: the default blocking hand-offs must stay clear of the
# kernel's blocking equivalent, and an explicit spin must not fall below it.
CONTENDED_TARGETS = [
    (('pingpong', 'block-cross', None), 2.0),
    (('pingpong', 'spin-cross_vs_kblock', None), 1.0),
    (('xproc', 'pingpong_block', None), 1.0),
    (('epwait', 'W1', None), 2.0),
]

SUFFIX = '_contended'

# What each bench's twin is (for the reader of the table).
TWIN = {
    'seed_pri': 'kernel eventfd + epoll', 'seed_in': 'kernel eventfd + epoll',
    'stress': 'kernel eventfd + epoll', 'pingpong': 'kernel epoll',
    'epwait': 'kernel epoll', 'harvest': 'kernel epoll (eventfds)', 'scale': 'evfd at R=10',
    'async_pingpong': 'tokio peer', 'autoreset_loop': 'see variant', 'doorbell': 'plain eventfd',
}


def run_bench(quick, only):
    cmd = ['cargo', 'run', '--release', '--all-features', '--example', 'stress_epoll', '--']
    if quick:
        cmd.append('--quick')
    if only:
        cmd += ['--only', only]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit('stress_epoll failed:\n' + r.stderr[-2000:])
    return r.stdout


def parse(text):
    """(machine line, header line, {(bench, variant, threads): (evfd, twin, ratio, unit)},
    the contended-mode note or '')."""
    machine = header = cotenant = ''
    rows = {}
    for line in text.splitlines():
        if line.startswith('# cpu:'):
            machine = line[2:].strip()
        elif line.startswith('# evfd vs its twin'):
            header = line[2:].strip()
        elif line.startswith('# ' + SUFFIX + ':'):
            cotenant = line[2:].strip()
        elif line.startswith('row '):
            p = line.split()
            kv = dict(x.split('=', 1) for x in p[4:7])
            rows[(p[1], p[2], int(p[3]))] = (float(kv['evfd']), float(kv['twin']),
                                              float(kv['ratio']), p[7])
    return machine, header, rows, cotenant


def fmt(v):
    if v == float('inf'):
        return '∞'
    if v >= 1000:
        return f'{v:,.0f}'
    if v >= 100:
        return f'{v:.1f}'
    if v >= 10:
        return f'{v:.2f}'
    return f'{v:.3g}'


def lookup(table, key):
    for (b, v, t), minimum in table:
        if key[0] == b and (v is None or key[1] == v) and (t is None or key[2] == t):
            return minimum
    return None


def idle_key(key):
    """The idle row a `_contended` row repeats (the key itself for an idle row)."""
    b, v, t = key
    return (b, v[:-len(SUFFIX)], t) if v.endswith(SUFFIX) else key


def target_of(key):
    if key[1].endswith(SUFFIX):
        own = lookup(CONTENDED_TARGETS, idle_key(key))
        return own if own is not None else lookup(TARGETS, idle_key(key))
    return lookup(TARGETS, key)


def verdict(key, ratios):
    """'' without a target; else met only if every run met it (a row met in one run and
    missed in another is missed)."""
    t = target_of(key)
    if t is None or not ratios:
        return '', None
    ok = sum(r >= t for r in ratios)
    if ok == len(ratios):
        return f'≥ {t:g}: met', True
    if ok == 0:
        return f'≥ {t:g}: **missed**', False
    return f'≥ {t:g}: **missed** (met in {ok} of {len(ratios)} runs)', False


def section(runs, names, args=''):
    machine, header, _, cotenant = runs[0]
    keys = []
    for run in runs:
        for k in run[2]:
            k = idle_key(k)
            if k not in keys:
                keys.append(k)
    n = len(runs)
    any_contended = any(k[1].endswith(SUFFIX) for run in runs for k in run[2])
    tally = {'met': [], 'missed': []}
    out = []
    out.append(f'Machine: **{machine.removeprefix("cpu: ")}**, Linux {platform.release()}. '
               f'{n} {"full " if not args else ""}run{"s" if n > 1 else ""} of `cargo run --release '
               f'--all-features --example stress_epoll{args}` ({header}); raw output in the source repository: '
               + ', '.join(f'`{os.path.relpath(p, ROOT)}`' for p in names)
               + ' (not in the published package).')
    out.append('')
    if any_contended:
        shares = [r[3].split('during each pass: ', 1)[-1] for r in runs if r[3]]
        out.append('Every run measures the hand-offs and the hot paths twice: **idle**, and **contended** (the rows with a contended column), with one '
                   'CPU-bound co-tenant process (`sh -c \'while :; do :; done\'`, unpinned, same '
                   'nice level) that the harness starts before and kills after each family\'s '
                   'contended pass — the host of a device backend, whose vCPU threads never '
                   'sleep. A hand-off that spins while its peer is off the CPU shows there; the '
                   'kernel\'s blocking wake does not care.'
                   + (' The co-tenant\'s share of one CPU per pass (its CPU time over the '
                      'pass\'s wall time): ' + '; '.join(f'run {i + 1}: {s}' for i, s in
                                                          enumerate(shares)) + '.'
                      if shares else ''))
        out.append('')
    out.append('`docs/data/seed_pri.svg` (in the source repository) plots `seed_pri` from the first '
               'run. Generated by `python3 scripts/perf-readme.py` from the runs above: run it on '
               'your machine to get your own figures. Ratios are bigger-is-better (evfd/twin '
               'for throughput, twin/evfd for costs), one per run; differences under ~15% are '
               'noise on 2-vCPU VMs, and the cross-CPU rows swing more. A target is met only '
               'if every run meets it: a row met in one run and missed in another is missed.')
    out.append('')

    def cells(key):
        vals = [r[2].get(key) for r in runs]
        ratios = [v[2] for v in vals if v]
        text = ' / '.join(f'{fmt(v[2])}×' if v else '–' for v in vals) if ratios else '–'
        first = next((v for v in vals if v), None)
        return text, ratios, first

    def table(sel, title, note):
        if not any(sel(k) for k in keys):
            return
        out.append(f'### {title}')
        out.append('')
        out.append(note)
        out.append('')
        runs_label = ' / '.join(f'run {i + 1}' for i in range(n))
        if any_contended:
            out.append(f'| bench | variant | thr | idle ({runs_label}) | idle target | '
                       f'contended ({runs_label}) | contended target | evfd idle (run 1) '
                       '| twin idle (run 1) | unit |')
            out.append('|---|---|---:|---:|---|---:|---|---:|---:|---|')
        else:
            out.append(f'| bench | variant | thr | ratio ({runs_label}) | target | evfd (run 1) '
                       '| twin (run 1) | unit |')
            out.append('|---|---|---:|---:|---|---:|---:|---|')
        for k in keys:
            if not sel(k):
                continue
            ck = (k[0], k[1] + SUFFIX, k[2])
            itext, iratios, ifirst = cells(k)
            ctext, cratios, cfirst = cells(ck)
            iv, iok = verdict(k, iratios)
            cv, cok = verdict(ck, cratios)
            for key, ok in ((k, iok), (ck, cok)):
                if ok is not None:
                    tally['met' if ok else 'missed'].append(key)
            first = ifirst or cfirst
            ev, tw = (fmt(ifirst[0]), fmt(ifirst[1])) if ifirst else ('–', '–')
            if any_contended:
                out.append(f'| {k[0]} | {k[1]} | {k[2]} | {itext} | {iv} | {ctext} | {cv} '
                           f'| {ev} | {tw} | {first[3]} |')
            else:
                out.append(f'| {k[0]} | {k[1]} | {k[2]} | {itext} | {iv} | {ev} | {tw} '
                           f'| {first[3]} |')
        out.append('')

    table(lambda k: k[1].startswith(FLOORS), 'Against the floor',
          'evfd next to the least work any correct implementation must do, written with bare '
          'atomics (a futex token for `vs_floor_park`) and run in the same process '
          '(definitions: [docs/benchmarks.md](https://docs.rs/crate/evfd/latest/source/docs/benchmarks.md)). 1 = at the floor. These '
          'ratios travel between machines: both sides pay the same atomics. (`harvest`\'s '
          'floor swaps each slot; evfd\'s harvest of a Counter item only loads it. '
          '`pingpong vs_token_spin`, untargeted: a bare token bounced through one atomic per '
          'side, less than the loop must do, for scale.)')
    floor = [r[2].get(('seed_pri', 'vs_floor', 1)) for r in runs]
    floor = [f for f in floor if f]
    cost = ''
    if floor:
        ns = 1e6 / sorted(f[1] for f in floor)[len(floor) // 2]
        cost = (f' On this machine the floor\'s `write`+`read` pair (load + CAS + swap on a '
                f'private line) takes {ns:.1f} ns.')
    table(lambda k: not k[1].startswith(FLOORS), 'Against the kernel and the peers',
          'The same runs, evfd against the kernel\'s eventfd/epoll (or tokio, or evfd itself '
          'for `scale`). **Kernel ratios scale with the CPU\'s atomic cost**: evfd\'s fast '
          'paths are a few atomic instructions where the kernel\'s are a syscall, so a CPU '
          'whose `lock cmpxchg` costs 4× more shows ratios several times smaller (the same '
          'commit gave `seed_pri` 72× on one 2-vCPU machine and 17–23× on another).' + cost
          + ' Compare machines by the floor table; read this one as "on this machine".')

    def name(k):
        return f'`{k[0]} {k[1]}' + (f' ({k[2]} thr)`' if k[0].startswith('seed') else '`')
    met, missed = tally['met'], tally['missed']
    out.append(f'**Targets: {len(met)} met, {len(missed)} missed** on this machine'
               + (': missed ' + ', '.join(name(k) for k in missed) + '.' if missed else '.'))
    return '\n'.join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    ap.add_argument('--runs', type=int, default=2)
    ap.add_argument('--quick', action='store_true')
    ap.add_argument('--only', help='one benchmark family (passed to stress_epoll; for trying '
                    'the script, not for the README)')
    ap.add_argument('--from', dest='files', nargs='+', help='existing stress_epoll outputs')
    ap.add_argument('--save', default=os.path.join(ROOT, 'docs', 'data', 'bench-run{}.txt'),
                    help='where to save new runs ({} = run number)')
    ap.add_argument('--readme', default=os.path.join(ROOT, 'README.md'))
    a = ap.parse_args()
    names = []
    texts = []
    if a.files:
        for f in a.files:
            names.append(os.path.abspath(f))
            texts.append(open(f).read())
    else:
        for i in range(a.runs):
            print(f'run {i + 1}/{a.runs} ...', file=sys.stderr)
            t = run_bench(a.quick, a.only)
            path = os.path.abspath(a.save.format(i + 1))
            with open(path, 'w') as f:
                f.write(t)
            names.append(path)
            texts.append(t)
    runs = [parse(t) for t in texts]
    if not runs[0][2]:
        sys.exit('no `row` lines in the runs')
    args = (' -- --only ' + a.only) if a.only and not a.files else ''
    body = section(runs, names, args)
    readme = open(a.readme).read()
    if BEGIN not in readme or END not in readme:
        sys.exit(f'{a.readme} has no {BEGIN} … {END} block')
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(a.readme, 'w') as f:
        f.write(head + BEGIN + '\n' + body + '\n' + END + tail)
    plot = os.path.join(ROOT, 'scripts', 'plot.py')
    if os.path.exists(plot) and ('seed_pri', 'write+read', 1) in runs[0][2]:
        # The seed_pri chart (docs/data/seed_pri.svg) from the first run, as the section cites it.
        subprocess.run([sys.executable, plot, names[0], os.path.join(ROOT, 'docs', 'data', 'seed_pri.svg')],
                       check=False)
    print(f'{a.readme}: performance section regenerated from {len(runs)} run(s)',
          file=sys.stderr)


if __name__ == '__main__':
    main()
