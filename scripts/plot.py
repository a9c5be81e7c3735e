#!/usr/bin/env python3
"""Plot an arl run's metrics.jsonl as one SVG (standard library only).

    scripts/plot.py RUN/metrics.jsonl -o RUN/reward.svg [--title T]

metrics.jsonl holds one JSON object per line with a "phase":
  {"phase": "rl",   "step": N, "reward_mean": …, "accuracy": …, "tool_call_rate": …}
  {"phase": "eval", "step": N, "greedy_accuracy": …, "mean_at_k": …, "pass_at_k": …}
(other phases and keys are ignored). The left panel is the sampled training
reward per RL step (and its accuracy when the reward has costs); the right
panel is held-out evaluation at each evaluated step: greedy accuracy, mean@k
and pass@k, and where the evaluation has them (runs on real models) the
greedy last-number reading and answer-format rate. Step 0 is the model RL
starts from (after SFT, or a pretrained checkpoint).
"""
import argparse
import json
import os
import sys
import tempfile

W, H = 960, 470
PANEL_W, PANEL_H = 400, 300
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def panel(x0, y0, title, series, xmax, xlabel, hline=None):
    """series: [(label, [(x, y)], color, dashed)] with y in [0, 1]; hline:
    (label, y) drawn as a grey dotted reference line."""
    out = []
    sx = lambda x: x0 + (x / xmax if xmax else 0) * PANEL_W
    sy = lambda y: y0 + PANEL_H - max(0.0, min(1.0, y)) * PANEL_H
    out.append(f'<text x="{x0 + PANEL_W / 2}" y="{y0 - 14}" text-anchor="middle" font-size="16" font-weight="bold">{esc(title)}</text>')
    out.append(f'<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#444"/>')
    for i in range(0, 11, 2):
        y = i / 10
        out.append(f'<line x1="{x0}" y1="{sy(y)}" x2="{x0 + PANEL_W}" y2="{sy(y)}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 - 6}" y="{sy(y) + 4}" text-anchor="end" font-size="12">{y:.1f}</text>')
    ticks = sorted({0, xmax} | {round(xmax * f) for f in (0.25, 0.5, 0.75)})
    for t in ticks:
        out.append(f'<text x="{sx(t)}" y="{y0 + PANEL_H + 16}" text-anchor="middle" font-size="12">{t}</text>')
    out.append(f'<text x="{x0 + PANEL_W / 2}" y="{y0 + PANEL_H + 34}" text-anchor="middle" font-size="13">{esc(xlabel)}</text>')
    legend = []
    if hline is not None:
        label, y = hline
        out.append(f'<line x1="{x0}" y1="{sy(y):.1f}" x2="{x0 + PANEL_W}" y2="{sy(y):.1f}" stroke="#888" stroke-width="1.5" stroke-dasharray="2,3"/>')
        legend.append((label, "#888", ' stroke-dasharray="2,3"'))
    for label, pts, color, dashed in series:
        if not pts:
            continue
        d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        dash = ' stroke-dasharray="6,4"' if dashed else ""
        out.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for x, y in pts:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>')
        legend.append((label, color, dash))
    # The legend goes under the panel, two entries per row, clear of the curves.
    for k, (label, color, dash) in enumerate(legend):
        lx = x0 + (k % 2) * (PANEL_W / 2)
        ly = y0 + PANEL_H + 56 + 18 * (k // 2)
        out.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 24}" y2="{ly - 4}" stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{lx + 30}" y="{ly}" font-size="12">{esc(label)}</text>')
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--title", default="arl: SFT warm start, then GRPO with a calculator tool")
    a = ap.parse_args()
    rl, ev = [], []
    with open(a.metrics) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                m = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot.py: {a.metrics} line {n}: {e}")
            (rl if m.get("phase") == "rl" else ev if m.get("phase") == "eval" else []).append(m)
    xmax = max([m["step"] for m in rl + ev] + [1])
    left = [
        ("sampled reward (mean)", [(m["step"], m["reward_mean"]) for m in rl if "reward_mean" in m], COLORS[0], False),
        ("tool-call rate", [(m["step"], m["tool_call_rate"]) for m in rl if "tool_call_rate" in m], COLORS[4], True),
    ]
    right = [
        ("greedy accuracy", [(m["step"], m["greedy_accuracy"]) for m in ev if "greedy_accuracy" in m], COLORS[1], False),
        ("mean@k (sampled)", [(m["step"], m["mean_at_k"]) for m in ev if "mean_at_k" in m], COLORS[2], False),
        ("pass@k (sampled)", [(m["step"], m["pass_at_k"]) for m in ev if "pass_at_k" in m], COLORS[3], True),
    ]
    # Runs whose evaluation also reads the last number (experiments on real models).
    if any("greedy_lenient" in m for m in ev):
        right += [
            ("greedy, last number", [(m["step"], m["greedy_lenient"]) for m in ev if "greedy_lenient" in m], COLORS[4], True),
            ("greedy answer format", [(m["step"], m["greedy_answer_format"]) for m in ev if "greedy_answer_format" in m], COLORS[0], True),
        ]
    body = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif">',
            f'<rect width="{W}" height="{H}" fill="white"/>',
            f'<text x="{W / 2}" y="24" text-anchor="middle" font-size="18">{esc(a.title)}</text>']
    sft = next((m for m in ev if m["step"] == 0 and "mean_at_k" in m), None)
    hline = ("step-0 level", sft["mean_at_k"]) if sft else None
    body += panel(60, 70, "training: per RL step", left, xmax, "RL step (0 = the starting model)", hline)
    body += panel(540, 70, "held-out evaluation", right, xmax, "RL step (0 = the starting model)")
    body.append("</svg>")
    d = os.path.dirname(os.path.abspath(a.output))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".plot-")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(body) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, a.output)


if __name__ == "__main__":
    main()
