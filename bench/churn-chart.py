#!/usr/bin/env python3
"""Draws bench/churn.sh's output as an SVG line chart: GET hit ratio against the working set
(as a share of memory), one line per server, for the cells of one value size, SET:GET ratio and
key pattern.

    python3 bench/churn-chart.py CHURN_LOG VALUE_BYTES RATIO PATTERN OUT.svg
    e.g. python3 bench/churn-chart.py churn.log 1000 1:1 R docs/bench/churn-1k.svg
"""
import re
import sys

HEADER = re.compile(
    r"^== (\d+) B values, working set (\d+)% of \d+ MiB \(\d+ keys\), SET:GET (\S+), keys (\S+),")
ROW = re.compile(r"^(\S+(?: \S+)?)\s+hit_ratio=([\d.]+)")
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 640, 400, 60, 150, 40, 50


def read(path, value, ratio, pattern):
    """{server: [(percent, hit_ratio)]} for the matching cells, in the log's order."""
    lines, cell = {}, None
    for line in open(path, encoding="utf-8"):
        header = HEADER.match(line)
        if header:
            bytes_, percent, r, p = header.groups()
            cell = int(percent) if (bytes_, r, p) == (value, ratio, pattern) else None
            continue
        row = ROW.match(line)
        if row and cell is not None:
            lines.setdefault(row.group(1), []).append((cell, float(row.group(2))))
    return lines


def draw(lines, title):
    xs = sorted({x for points in lines.values() for x, _ in points})
    x_min, x_max = min(xs), max(xs)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x):
        return LEFT + (x - x_min) / max(x_max - x_min, 1) * plot_w

    def py(y):
        return TOP + (1 - y) * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{LEFT}" y="20" font-size="14">{title}</text>']
    for tick in range(0, 11, 2):
        y = py(tick / 10)
        out.append(f'<line x1="{LEFT}" y1="{y}" x2="{LEFT + plot_w}" y2="{y}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y + 4}" text-anchor="end">{tick / 10:.1f}</text>')
    for x in xs:
        out.append(f'<text x="{px(x)}" y="{TOP + plot_h + 18}" text-anchor="middle">{x}%</text>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 8}" text-anchor="middle">'
               'working set, share of memory</text>')
    out.append(f'<text x="14" y="{TOP + plot_h / 2}" transform="rotate(-90 14 {TOP + plot_h / 2})"'
               ' text-anchor="middle">GET hit ratio</text>')
    for i, (server, points) in enumerate(sorted(lines.items())):
        color = COLORS[i % len(COLORS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in sorted(points))
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in points:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
        ly = TOP + 16 * i
        out.append(f'<line x1="{WIDTH - RIGHT + 12}" y1="{ly}" x2="{WIDTH - RIGHT + 32}" y2="{ly}"'
                   f' stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{WIDTH - RIGHT + 38}" y="{ly + 4}">{server}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    log, value, ratio, pattern, target = sys.argv[1:]
    lines = read(log, value, ratio, pattern)
    if not lines:
        sys.exit(f"no {value} B, SET:GET {ratio}, {pattern} cells in {log}")
    title = f"{value} B values, SET:GET {ratio}, keys {pattern}: GET hit ratio"
    with open(target, "w", encoding="utf-8") as out:
        out.write(draw(lines, title))


if __name__ == "__main__":
    main()
