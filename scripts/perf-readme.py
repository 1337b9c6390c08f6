#!/usr/bin/env python3
"""Regenerate the README's performance section from stress_epoll runs, on this machine and the others saved.

    python3 scripts/perf-readme.py                 # 2 full runs, saved as docs/data/<machine>/bench-run{1,2}.txt
    python3 scripts/perf-readme.py --runs 3 --quick
    python3 scripts/perf-readme.py --from docs/data/amd-epyc/bench-run*.txt
    python3 scripts/perf-readme.py --quick --only pingpong --save /tmp/run{}.txt --readme /tmp/README.md --this-machine-only

Runs `cargo run --release --all-features --example stress_epoll` (unless `--from` names existing outputs),
saves each run with the commit and kernel it was measured on, then rewrites what lies between
`<!-- perf:begin -->` and `<!-- perf:end -->` in README.md from these runs and the runs saved
from every other machine (`docs/data/<machine>/bench-run*.txt`, whose CPU differs from this
one's; `--this-machine-only` leaves them out): each machine (CPU model and vCPUs, kernel,
commit), the ratios to the floor first (they travel between machines better), then the ratios to the
kernel and peers; every row idle and contended (the `_contended` rows, measured with one
CPU-bound co-tenant) side by side, with its ratio in each run of each machine, and every
target marked met or missed (met only if every run on every machine meets it), and a tally
of the targets. Nothing else in the README is touched.
"""
import argparse
import glob
import re
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
    (('listener', 'block-cross', None), 1.1),
    (('listener', 'block-same', None), 1.1),
    (('listener', 'async', None), 1.2),
    # Costs (latency, ns): the ratio is twin/evfd, so "at most 1.2x the twin's" is >= 0.83.
    (('scale', None, None), 0.83),
    (('waker', 'wake_p50', None), 1.0),
    (('waker', 'burst', None), 10.0),
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
    'async_pingpong': 'tokio peer', 'listener': 'event-listener', 'autoreset_loop': 'see variant',
    'doorbell': 'plain eventfd', 'waker': 'mio Waker',
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
    """{'machine', 'header', 'rows': {(bench, variant, threads): (evfd, twin, ratio, unit)},
    'cotenant': the contended-mode note or '', 'commit', 'kernel': as saved, or ''}."""
    machine = header = cotenant = commit = kernel = ''
    rows = {}
    for line in text.splitlines():
        if line.startswith('# commit:'):
            commit = line.split(':', 1)[1].strip()
        elif line.startswith('# kernel:'):
            kernel = line.split(':', 1)[1].strip()
        elif line.startswith('# cpu:'):
            machine = line[2:].strip().removeprefix('cpu: ')
        elif line.startswith('# evfd vs its twin'):
            header = line[2:].strip()
        elif line.startswith('# ' + SUFFIX + ':'):
            cotenant = line[2:].strip()
        elif line.startswith('row '):
            p = line.split()
            kv = dict(x.split('=', 1) for x in p[4:7])
            rows[(p[1], p[2], int(p[3]))] = (float(kv['evfd']), float(kv['twin']),
                                              float(kv['ratio']), p[7])
    return {'machine': machine, 'header': header, 'rows': rows, 'cotenant': cotenant,
            'commit': commit, 'kernel': kernel}


def slug(machine):
    """A machine's folder under docs/data: 'AMD EPYC, 2 vCPUs' -> 'amd-epyc'."""
    m = re.sub(r'\(r\)|\(tm\)', '', machine.split(',')[0].lower())
    return re.sub(r'[^a-z0-9]+', '-', m).strip('-') or 'unknown'


def stamp():
    """The lines a saved run opens with: the commit measured (with `-dirty` when the tree
    had changes, other than the ones this script writes: a second run follows the first's
    saved output) and the kernel."""
    def git(*a):
        r = subprocess.run(['git', *a], cwd=ROOT, capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ''
    rev = git('rev-parse', '--short', 'HEAD') or 'unknown'
    if git('status', '--porcelain', '--untracked-files=no', '--', '.',
           ':(exclude)docs/data', ':(exclude)README.md'):
        rev += '-dirty'
    return f'# commit: {rev}\n# kernel: {platform.release()}\n'


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


def verdict(key, groups):
    """'' without a target; else met only if every run of every machine met it (a row met
    in one run or on one machine and missed in another is missed). `groups`: one list of
    ratios per machine."""
    t = target_of(key)
    ratios = [r for g in groups for r in g]
    if t is None or not ratios:
        return '', None
    ok = sum(r >= t for r in ratios)
    if ok == len(ratios):
        return f'≥ {t:g}: met', True
    if ok == 0:
        return f'≥ {t:g}: **missed**', False
    return f'≥ {t:g}: **missed** (met in {ok} of {len(ratios)} runs)', False


def staleness(commits, first_runs, first):
    """For a machine other than the first whose runs are at another commit: how many commits
    of the first machine's runs they lack (git's count; nothing if git cannot tell)."""
    newest = sorted({r['commit'] for r in first_runs if r['commit']})
    if first or not commits or len(newest) != 1 or set(commits) == set(newest):
        return ''
    try:
        n = max(int(subprocess.run(['git', '-C', ROOT, 'rev-list', '--count',
                                    f'{c}..{newest[0]}'], capture_output=True, text=True,
                                   check=True).stdout.strip()) for c in commits)
    except (OSError, ValueError, subprocess.CalledProcessError):
        return ''
    return (f' ({n} commit{"s" if n != 1 else ""} before machine 1\'s runs: its columns do not '
            'show what changed since)') if n else ''


def section(machines, args=''):
    """`machines`: [(machine name, [run, ...], [saved path, ...])], this machine first."""
    keys = []
    for _, runs, _ in machines:
        for run in runs:
            for k in run['rows']:
                k = idle_key(k)
                if k not in keys:
                    keys.append(k)
    any_contended = any(k[1].endswith(SUFFIX) for _, runs, _ in machines for run in runs
                        for k in run['rows'])
    multi = len(machines) > 1
    short = {m: m.split(',')[0].replace('(R)', '').replace('(TM)', '').strip()
             for m, _, _ in machines}
    tally = {'met': [], 'missed': []}
    out = []
    for m, runs, names in machines:
        n = len(runs)
        commits = sorted({r['commit'] for r in runs if r['commit']})
        kernel = next((r['kernel'] for r in runs if r['kernel']), '') or platform.release()
        header = runs[0]['header']
        out.append(f'Machine{" " + str(machines.index((m, runs, names)) + 1) if multi else ""}: '
                   f'**{m}**, Linux {kernel}. '
                   f'{n} {"full " if not args else ""}run{"s" if n > 1 else ""} of `cargo run --release '
                   f'--all-features --example stress_epoll{args}` ({header})'
                   + (f', at commit {", ".join(commits)}' if commits else '')
                   + staleness(commits, machines[0][1], first=machines[0][0] == m)
                   + '; raw output in the source repository: '
                   + ', '.join(f'`{os.path.relpath(p, ROOT)}`' for p in names)
                   + ' (not in the published package).')
        out.append('')
    if multi:
        out.append('Each table gives every machine its own columns. The machines differ in '
                   'what evfd is measured against: the floor\'s atomics and the kernel\'s '
                   'syscalls cost different amounts on each, which is why the floor ratios '
                   'lead. A row is met only if it is met on every machine.')
        out.append('')
    if any_contended:
        shares = [f'{short[m] + " " if multi else ""}run {i + 1}: '
                  + r['cotenant'].split('during each pass: ', 1)[-1]
                  for m, runs, _ in machines for i, r in enumerate(runs) if r['cotenant']]
        out.append('Every run measures the hand-offs and the hot paths twice: **idle**, and **contended** (the rows with a contended column), with one '
                   'CPU-bound co-tenant process (`sh -c \'while :; do :; done\'`, unpinned, same '
                   'nice level) that the harness starts before and kills after each family\'s '
                   'contended pass — the host of a device backend, whose vCPU threads never '
                   'sleep. A hand-off that spins while its peer is off the CPU shows there; the '
                   'kernel\'s blocking wake does not care.'
                   + (' The co-tenant\'s share of one CPU per pass (its CPU time over the '
                      'pass\'s wall time): ' + '; '.join(shares) + '.' if shares else ''))
        out.append('')
    first_m = machines[0][0]
    out.append('`docs/data/seed_pri.svg` (in the source repository) plots `seed_pri` from the first '
               f'run{" of " + short[first_m] if multi else ""}. Generated by `python3 scripts/perf-readme.py` from the runs above: run it on '
               'your machine to get your own figures. Ratios are bigger-is-better (evfd/twin '
               'for throughput, twin/evfd for costs), one per run; differences under ~15% are '
               'noise on 2-vCPU VMs, and the cross-CPU rows swing more. A target is met only '
               'if every run meets it: a row met in one run and missed in another is missed.')
    out.append('')

    def cells(key, runs):
        vals = [r['rows'].get(key) for r in runs]
        ratios = [v[2] for v in vals if v]
        text = ' / '.join(f'{fmt(v[2])}×' if v else '–' for v in vals) if ratios else '–'
        first = next((v for v in vals if v), None)
        return text, ratios, first

    def label(m, runs):
        r = ' / '.join(f'run {i + 1}' for i in range(len(runs)))
        return f'{short[m]}: {r}' if multi else r

    def table(sel, title, note):
        if not any(sel(k) for k in keys):
            return
        out.append(f'### {title}')
        out.append('')
        out.append(note)
        out.append('')
        first = f' ({short[first_m]} run 1)' if multi else ' (run 1)'
        if any_contended:
            idle_cols = ' | '.join(f'idle ({label(m, runs)})' for m, runs, _ in machines)
            cont_cols = ' | '.join(f'contended ({label(m, runs)})' for m, runs, _ in machines)
            out.append(f'| bench | variant | thr | {idle_cols} | idle target | {cont_cols} | '
                       f'contended target | evfd idle{first} | twin idle{first} | unit |')
            out.append('|---|---|---:|' + '---:|' * len(machines) + '---|'
                       + '---:|' * len(machines) + '---|---:|---:|---|')
        else:
            cols = ' | '.join(f'ratio ({label(m, runs)})' for m, runs, _ in machines)
            out.append(f'| bench | variant | thr | {cols} | target | evfd{first} '
                       f'| twin{first} | unit |')
            out.append('|---|---|---:|' + '---:|' * len(machines) + '---|---:|---:|---|')
        for k in keys:
            if not sel(k):
                continue
            ck = (k[0], k[1] + SUFFIX, k[2])
            icells = [cells(k, runs) for _, runs, _ in machines]
            ccells = [cells(ck, runs) for _, runs, _ in machines]
            iv, iok = verdict(k, [c[1] for c in icells])
            cv, cok = verdict(ck, [c[1] for c in ccells])
            for key, ok in ((k, iok), (ck, cok)):
                if ok is not None:
                    tally['met' if ok else 'missed'].append(key)
            ifirst = icells[0][2]
            anyfirst = next((c[2] for c in icells + ccells if c[2]), None)
            ev, tw = (fmt(ifirst[0]), fmt(ifirst[1])) if ifirst else ('–', '–')
            itext = ' | '.join(c[0] for c in icells)
            if any_contended:
                ctext = ' | '.join(c[0] for c in ccells)
                out.append(f'| {k[0]} | {k[1]} | {k[2]} | {itext} | {iv} | {ctext} | {cv} '
                           f'| {ev} | {tw} | {anyfirst[3]} |')
            else:
                out.append(f'| {k[0]} | {k[1]} | {k[2]} | {itext} | {iv} | {ev} | {tw} '
                           f'| {anyfirst[3]} |')
        out.append('')

    table(lambda k: k[1].startswith(FLOORS), 'Against the floor',
          'evfd next to the least work any correct implementation must do, written with bare '
          'atomics (a futex token for `vs_floor_park`) and run in the same process '
          '(definitions: [docs/benchmarks.md](https://docs.rs/crate/evfd/latest/source/docs/benchmarks.md)). 1 = at the floor. These '
          'ratios travel between machines better than the kernel\'s (both sides pay the same '
          'atomics), but on a CPU whose atomics are cheap evfd\'s other work weighs more. (`harvest`\'s '
          'floor swaps each slot; evfd\'s harvest of a Counter item only loads it. '
          '`pingpong vs_token_spin`, untargeted: a bare token bounced through one atomic per '
          'side, less than the loop must do, for scale.)')
    costs = []
    for m, runs, _ in machines:
        floor = [r['rows'].get(('seed_pri', 'vs_floor', 1)) for r in runs]
        floor = [f for f in floor if f]
        if floor:
            ns = 1e6 / sorted(f[1] for f in floor)[len(floor) // 2]
            costs.append(f'{ns:.1f} ns' + (f' on {short[m]}' if multi else ''))
    cost = ''
    if costs:
        cost = (f' {"On this machine the" if not multi else "The"} floor\'s `write`+`read` pair '
                f'(load + CAS + swap on a private line) takes {", ".join(costs)}.')
    table(lambda k: not k[1].startswith(FLOORS), 'Against the kernel and the peers',
          'The same runs, evfd against the kernel\'s eventfd/epoll (or tokio, event-listener, mio\'s '
          '`Waker`, or evfd itself for `scale`). **Kernel ratios scale with the CPU\'s atomic cost**: evfd\'s fast '
          'paths are a few atomic instructions where the kernel\'s are a syscall, so a CPU '
          'whose `lock cmpxchg` costs 4× more shows ratios several times smaller (the same '
          'commit gave `seed_pri` 72× on one 2-vCPU machine and 17–23× on another).' + cost
          + (' Compare machines by the floor table; read this one as "on this machine".'
             if not multi else ' Compare machines by the floor table.'))

    def name(k):
        return f'`{k[0]} {k[1]}' + (f' ({k[2]} thr)`' if k[0].startswith('seed') else '`')
    met, missed = tally['met'], tally['missed']
    where = 'on this machine' if not multi else f'on these {len(machines)} machines'
    out.append(f'**Targets: {len(met)} met, {len(missed)} missed** {where}'
               + (': missed ' + ', '.join(name(k) for k in missed) + '.' if missed else '.'))
    return '\n'.join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    ap.add_argument('--runs', type=int, default=2)
    ap.add_argument('--quick', action='store_true')
    ap.add_argument('--only', help='one benchmark family (passed to stress_epoll; for trying '
                    'the script, not for the README)')
    ap.add_argument('--from', dest='files', nargs='+', help='existing stress_epoll outputs')
    ap.add_argument('--save', help='where to save new runs ({} = run number; default '
                    'docs/data/<machine>/bench-run{}.txt)')
    ap.add_argument('--this-machine-only', action='store_true',
                    help='leave out the runs saved from other machines')
    ap.add_argument('--readme', default=os.path.join(ROOT, 'README.md'))
    a = ap.parse_args()
    names = []
    runs = []
    if a.files:
        for f in a.files:
            names.append(os.path.abspath(f))
            runs.append(parse(open(f).read()))
    else:
        for i in range(a.runs):
            print(f'run {i + 1}/{a.runs} ...', file=sys.stderr)
            t = stamp() + run_bench(a.quick, a.only)
            run = parse(t)
            save = a.save or os.path.join(ROOT, 'docs', 'data', slug(run['machine']),
                                          'bench-run{}.txt')
            path = os.path.abspath(save.format(i + 1))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'w') as f:
                f.write(t)
            names.append(path)
            runs.append(run)
    if not runs[0]['rows']:
        sys.exit('no `row` lines in the runs')
    # This machine's (or the named) runs first, grouped by machine; then every other
    # machine's saved runs.
    machines = []
    for path, run in zip(names, runs):
        for m in machines:
            if m[0] == run['machine']:
                m[1].append(run)
                m[2].append(path)
                break
        else:
            machines.append((run['machine'], [run], [path]))
    if not a.this_machine_only:
        seen = {m[0] for m in machines}
        for d in sorted(glob.glob(os.path.join(ROOT, 'docs', 'data', '*', ''))):
            paths = sorted(glob.glob(os.path.join(d, 'bench-run*.txt')))
            saved = [(p, parse(open(p).read())) for p in paths
                     if os.path.abspath(p) not in names]
            saved = [(p, r) for p, r in saved if r['rows'] and r['machine'] not in seen]
            if saved:
                machines.append((saved[0][1]['machine'], [r for _, r in saved],
                                 [os.path.abspath(p) for p, _ in saved]))
                seen.add(saved[0][1]['machine'])
    args = (' -- --only ' + a.only) if a.only and not a.files else ''
    body = section(machines, args)
    readme = open(a.readme).read()
    if BEGIN not in readme or END not in readme:
        sys.exit(f'{a.readme} has no {BEGIN} … {END} block')
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(a.readme, 'w') as f:
        f.write(head + BEGIN + '\n' + body + '\n' + END + tail)
    plot = os.path.join(ROOT, 'scripts', 'plot.py')
    if os.path.exists(plot) and ('seed_pri', 'write+read', 1) in runs[0]['rows']:
        # The seed_pri chart (docs/data/seed_pri.svg) from the first run, as the section cites it.
        subprocess.run([sys.executable, plot, names[0], os.path.join(ROOT, 'docs', 'data', 'seed_pri.svg')],
                       check=False)
    print(f'{a.readme}: performance section regenerated from '
          + ', '.join(f'{len(r)} run(s) on {m}' for m, r, _ in machines), file=sys.stderr)


if __name__ == '__main__':
    main()
