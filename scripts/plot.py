#!/usr/bin/env python3
"""Plot `seed_pri` ops/ms against threads, evfd vs the kernel, from stress_epoll output.

    cargo run --release --all-features --example stress_epoll > bench.txt
    python3 scripts/plot.py bench.txt docs/data/seed_pri.svg

Reads the machine-readable `row ...` lines; writes a dependency-free SVG (log-scale y).
"""
import math
import sys


def rows(path):
    out = []
    for line in open(path):
        if not line.startswith("row "):
            continue
        parts = line.split()
        kv = dict(p.split("=", 1) for p in parts[4:7])
        out.append((parts[1], parts[2], int(parts[3]), float(kv["evfd"]), float(kv["twin"])))
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    bench = sys.argv[3] if len(sys.argv) > 3 else "seed_pri"
    data = sorted((t, e, k) for b, _, t, e, k in rows(src) if b == bench)
    if not data:
        sys.exit(f"no `row {bench}` lines in {src}")
    w, h, ml, mr, mt, mb = 640, 400, 80, 150, 40, 50
    lo = 10 ** math.floor(math.log10(min(min(e, k) for _, e, k in data)))
    hi = 10 ** math.ceil(math.log10(max(max(e, k) for _, e, k in data)))
    threads = [t for t, _, _ in data]
    def x(t):
        i = threads.index(t)
        return ml + (w - ml - mr) * (i + 0.5) / len(threads)
    def y(v):
        return mt + (h - mt - mb) * (1 - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)))
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w/2}" y="20" text-anchor="middle" font-size="15">{bench}: ops/ms vs threads (log scale)</text>']
    d = lo
    while d <= hi:
        svg.append(f'<line x1="{ml}" x2="{w-mr}" y1="{y(d):.1f}" y2="{y(d):.1f}" stroke="#ddd"/>')
        svg.append(f'<text x="{ml-6}" y="{y(d)+4:.1f}" text-anchor="end">{d:g}</text>')
        d *= 10
    for t in threads:
        svg.append(f'<text x="{x(t):.1f}" y="{h-mb+18}" text-anchor="middle">N={t}</text>')
    svg.append(f'<text x="{(ml+w-mr)/2}" y="{h-10}" text-anchor="middle">threads</text>')
    for idx, (name, color) in enumerate([("evfd", "#1f77b4"), ("kernel", "#d62728")]):
        pts = [(x(t), y(v[idx])) for t, *v in data]
        svg.append('<polyline fill="none" stroke="%s" stroke-width="2.5" points="%s"/>' % (color, " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)))
        for (a, b), (t, *v) in zip(pts, data):
            svg.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="4" fill="{color}"/>')
            svg.append(f'<text x="{a+7:.1f}" y="{b-7:.1f}" fill="{color}">{v[idx]:,.0f}</text>')
        svg.append(f'<rect x="{w-mr+15}" y="{mt+20+idx*22}" width="14" height="4" fill="{color}"/>')
        svg.append(f'<text x="{w-mr+35}" y="{mt+26+idx*22}">{name}</text>')
    for i, (t, e, k) in enumerate(data):
        svg.append(f'<text x="{w-mr+15}" y="{mt+90+i*18}">N={t}: {e/k:.0f}x</text>')
    svg.append("</svg>")
    open(dst, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
