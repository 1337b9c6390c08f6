#!/usr/bin/env python3
"""Count what one cross-thread hand-off costs (docs/handoff.md), with counters that do not
depend on the machine's load: user-space instructions, atomic read-modify-writes and mutex
round trips (callgrind), and syscalls and context switches (the kernel's own counters via
`perf stat` tracepoints, on a real run).

    cargo build --release --example handoff
    python3 scripts/handoff_count.py [mode[:parked] ...]      # default: every mode, both ways

Each mode of `examples/handoff.rs` is run for N and 2N round trips; the difference divided
by 2N (two hand-offs per round trip) is the cost of one hand-off, setup excluded. The modes
that are not hand-offs count per operation instead: `queued` per `write` + `read` pair
(`squeued`: the pair on a `SharedNotifier`), `harvest` per event of a 200-event
level-triggered harvest, `fdwake` per blocking `Epoll::wait` returning one ready kernel fd
(`kfdwake`: its kernel twin), `asyncwake` per `wait_async` woken by a kernel fd through the
tokio reactor (`kasyncwake`: `AsyncFd`; build with `--all-features`; both counted whole, as
`async`, `notify` and `listener` are). `:parked` runs it with the peer certainly asleep at
each write (the full futex path); `:cross` pins the two threads to CPUs 0 and 1 (where the
adaptive spin can catch wakes). For evfd's threaded shapes only instructions inside its public calls
(`Epoll::wait`, `Notifier::write`, `Notifier::read` and what they call; the last two inline
into their callers, so the example calls them through functions of its own,
`notifier_write` and `notifier_read`, and the `SharedNotifier`'s through `shared_write` and
`shared_read`; event-listener's token in `lread` through `listener_give` and `listener_take`)
are counted, so that the harness and the pause before each write are not.
Under callgrind the threads run one at a time, so a spin never catches a wake there: its
instruction counts describe the parked path; the syscall and context-switch counts come
from real runs.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

BIN = os.path.join(os.path.dirname(__file__), '..', 'target', 'release', 'examples', 'handoff')
MODES = ['epoll', 'epoll_auto', 'read', 'async', 'kepoll', 'kread', 'notify', 'listener', 'lread',
         'queued', 'squeued',
         'harvest', 'fdwake', 'kfdwake', 'asyncwake', 'kasyncwake', 'spinrt',
         'epoll:parked', 'read:parked', 'shared:parked', 'lread:parked', 'kepoll:parked',
         'kread:parked',
         'epoll:cross', 'read:cross', 'kepoll:cross']
N_CG = 2000      # round trips under callgrind
N_PERF = 20000   # round trips under perf stat
N_PARKED = 500   # round trips with the peer asleep (each costs two 300 µs pauses)


def disasm(obj, cache={}):
    """Instruction text by address, and whether the object is position-independent."""
    if obj in cache:
        return cache[obj]
    out = subprocess.run(['objdump', '-d', '--no-show-raw-insn', obj],
                         capture_output=True, text=True).stdout
    ins = {}
    for line in out.splitlines():
        m = re.match(r'\s*([0-9a-f]+):\s+(.*)', line)
        if m:
            ins[int(m.group(1), 16)] = m.group(2).strip()
    cache[obj] = ins
    return ins


def is_rmw(text):
    # x86: every lock-prefixed instruction, and xchg with a memory operand (implicitly locked).
    return text.startswith('lock ') or (text.startswith('xchg') and '(' in text)


def args(mode, n):
    m, _, opt = mode.partition(':')
    return [BIN, m, str(n)] + ([opt] if opt else [])


def callgrind(mode, n):
    """Total instructions, and executed RMW / syscall instructions, for `n` round trips."""
    extra = []
    if mode.split(':')[0] in ('shared', 'squeued'):
        # `SharedNotifier::write` / `read` inline into their callers: the example calls
        # them through functions of its own.
        extra = ['--toggle-collect=handoff::shared_write',
                 '--toggle-collect=handoff::shared_read']
    elif mode.split(':')[0] == 'lread':
        # event-listener's give and blocking take, through the example's own functions.
        extra = ['--toggle-collect=handoff::listener_give',
                 '--toggle-collect=handoff::listener_take']
    elif not mode.startswith('k') and mode.split(':')[0] not in ('async', 'notify', 'listener',
                                                                 'asyncwake'):
        # The public calls a hand-off is made of (none calls another, so that the toggles
        # do not cancel out).
        extra = ['--toggle-collect=evfd::epoll::Epoll::wait',
                 '--toggle-collect=handoff::notifier_write',
                 '--toggle-collect=handoff::notifier_read']
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, 'cg.out')
        subprocess.run(['valgrind', '--tool=callgrind', '--dump-instr=yes', '--dump-line=no',
                        '--compress-pos=no', '--compress-strings=no',
                        '--callgrind-out-file=' + out] + extra + args(mode, n),
                       check=True, capture_output=True)
        costs = collections.Counter()
        fn_of = {}
        ob = fn = None
        skip = False
        total = 0
        for line in open(out):
            if line.startswith('ob='):
                ob = line[3:].strip()
            elif line.startswith('fn='):
                fn = line[3:].strip()
            elif line.startswith('calls='):
                skip = True  # the next cost line is the call's inclusive cost
            elif line.startswith('0x'):
                if skip:
                    skip = False
                    continue
                a, c = line.split()[:2]
                key = (ob, int(a, 16))
                costs[key] += int(c)
                fn_of[key] = fn
                total += int(c)
    rmw = collections.Counter()
    sysc = 0
    by_ob = collections.defaultdict(list)
    for (o, a), c in costs.items():
        by_ob[o].append((a, c))
    for o, items in by_ob.items():
        if not o or not os.path.exists(o):
            continue
        ins = disasm(o)
        if not ins:
            continue
        # The load bias: the page-aligned offset that puts the most executed addresses on
        # instruction starts (0 for a fixed-address object).
        votes = collections.Counter()
        top = sorted(items, key=lambda x: -x[1])[:200]
        starts = sorted(ins)[:: max(1, len(ins) // 4000)]
        for a, _ in top[:20]:
            for s in starts:
                b = a - s
                if b >= 0 and b % 0x1000 == (a - s) % 0x1000 and b & 0xfff == 0:
                    votes[b] += 1
        best, hits = 0, -1
        for b, _ in votes.most_common(40) + [(0, 0)]:
            h = sum(1 for a, _ in top if (a - b) in ins)
            if h > hits:
                best, hits = b, h
        for a, c in items:
            text = ins.get(a - best)
            if text is None:
                continue
            if is_rmw(text):
                rmw[(os.path.basename(o), fn_of[(o, a)])] += c
            if text.startswith('syscall'):
                sysc += c
    return total, rmw, sysc


EVENTS = ['context-switches', 'raw_syscalls:sys_enter', 'syscalls:sys_enter_futex',
          'syscalls:sys_enter_read', 'syscalls:sys_enter_write',
          'syscalls:sys_enter_epoll_pwait', 'syscalls:sys_enter_clock_nanosleep']


def perf(mode, n):
    r = subprocess.run(['perf', 'stat', '-x', ',', '-e', ','.join(EVENTS)] + args(mode, n),
                       capture_output=True, text=True)
    got = {}
    for line in r.stderr.splitlines():
        f = line.split(',')
        if len(f) > 2 and f[0].strip().isdigit():
            got[f[2]] = int(f[0])
    return got


def main():
    modes = sys.argv[1:] or MODES
    print('# per hand-off (two per round trip), setup excluded (N vs 2N round trips);')
    print('# instr/RMW from callgrind, the rest from the kernel\'s counters (perf stat).')
    print('# syscalls excludes the pauses of `:parked` runs (clock_nanosleep).')
    print('%-14s %7s %6s %8s %6s %6s %6s %6s %6s' % (
        'mode', 'instr', 'RMW', 'syscalls', 'futex', 'read', 'write', 'epoll', 'ctxsw'))
    details = []
    for m in modes:
        parked = m.endswith(':parked')
        n_cg = N_PARKED if parked else N_CG
        n_pf = N_PARKED if parked else N_PERF
        i1, r1, _ = callgrind(m, n_cg)
        i2, r2, _ = callgrind(m, 2 * n_cg)
        hand = 2.0 * n_cg
        rmw = {k: (r2[k] - r1[k]) / hand for k in set(r1) | set(r2)}
        p1, p2 = perf(m, n_pf), perf(m, 2 * n_pf)
        ph = 2.0 * n_pf
        d = lambda k: (p2.get(k, 0) - p1.get(k, 0)) / ph
        sysc = d('raw_syscalls:sys_enter') - d('syscalls:sys_enter_clock_nanosleep')
        print('%-14s %7.0f %6.1f %8.2f %6.2f %6.2f %6.2f %6.2f %6.2f' % (
            m, (i2 - i1) / hand, sum(rmw.values()), sysc,
            d('syscalls:sys_enter_futex'), d('syscalls:sys_enter_read'),
            d('syscalls:sys_enter_write'), d('syscalls:sys_enter_epoll_pwait'),
            d('context-switches')))
        sys.stdout.flush()
        details.append((m, rmw))
    for m, rmw in details:
        print('\n## %s: atomic RMWs per hand-off, by function' % m)
        for (o, f), c in sorted(rmw.items(), key=lambda x: -x[1]):
            if abs(c) >= 0.05:
                print('%7.2f  %s  %s' % (c, o, f[:120]))


if __name__ == '__main__':
    main()
