#!/usr/bin/env python3
"""Plot an arl run's metrics.jsonl as one SVG (standard library only).

    scripts/plot.py RUN/metrics.jsonl -o RUN/reward.svg [--title T]

metrics.jsonl holds one JSON object per line with a "phase":
  {"phase": "rl",   "step": N, "reward_mean": …, "accuracy": …, "tool_call_rate": …,
                    "loss": …, "grad_norm": …, "entropy": …, "clip_frac": …, "response_len": …, "kl_loss": …}
  {"phase": "eval", "step": N, "greedy_accuracy": …, "mean_at_k": …, "pass_at_k": …}
(other phases and keys are ignored). The top left panel is the sampled
training reward per RL step (and its accuracy when the reward has costs);
the top right panel is held-out evaluation at each evaluated step: greedy
accuracy, mean@k and pass@k, and where the evaluation has them (runs on real
models) the greedy last-number reading and answer-format rate. Below, one
small panel per training signal the `rl` lines carry (loss, grad norm,
entropy, clip fraction, mean response length, KL loss, value loss). Every
panel's y range follows its data: [0, 1] when the values lie in it (rates,
accuracies), else the data's range with a margin (rewards of -1..1, negative
tool costs, losses). Step 0 is the model RL starts from (after SFT, or a
pretrained checkpoint). The title comes from the experiment (`TITLE` in its
file; scripts/run.sh passes it).
"""
import argparse
import json
import math
import os
import sys
import tempfile

W = 960
PANEL_W, PANEL_H = 400, 300
SMALL_W, SMALL_H = 170, 110
# Training signals of the `rl` lines: (key, panel title).
SIGNALS = [
    ("loss", "loss"),
    ("grad_norm", "grad norm"),
    ("entropy", "entropy"),
    ("clip_frac", "clip fraction"),
    ("response_len", "response length"),
    ("kl_loss", "KL loss"),
    ("value_loss", "value loss"),
]
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def nice_step(span, n=5):
    """A round tick spacing giving about n intervals over span."""
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def y_range(values, unit=True):
    """(lo, hi, ticks): with `unit`, [0, 1] when every value lies in it;
    otherwise the data's range widened to round ticks."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals or (unit and min(vals) >= 0 and max(vals) <= 1):
        return 0.0, 1.0, [i / 5 for i in range(6)]
    lo, hi = min(vals), max(vals)
    if hi - lo < 1e-12:
        pad = abs(hi) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    step = nice_step(hi - lo)
    lo, hi = math.floor(lo / step) * step, math.ceil(hi / step) * step
    ticks, t = [], lo
    while t <= hi + step / 2:
        ticks.append(round(t, 10) + 0.0)  # no -0.0
        t += step
    return lo, hi, ticks


def fmt(v, ticks):
    """A tick label with as many decimals as the tick spacing needs."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    if max(abs(t) for t in ticks) >= 1e5:
        return f"{v:.3g}"
    dec = max(0, math.ceil(-math.log10(step) - 1e-9))
    while dec < 8 and abs(round(step, dec) - step) > step * 1e-6:
        dec += 1
    return f"{v:.{dec}f}"


def panel(x0, y0, title, series, xmax, xlabel, hline=None, w=PANEL_W, h=PANEL_H, small=False):
    # Rates and accuracies keep [0, 1]; a small panel's one signal is zoomed to its data.
    """series: [(label, [(x, y)], color, dashed)]; hline: (label, y) drawn as a
    grey dotted reference line. The y range follows the data (see y_range)."""
    out = []
    values = [y for _, pts, _, _ in series for _, y in pts] + ([hline[1]] if hline else [])
    lo, hi, ticks = y_range(values, unit=not small)
    sx = lambda x: x0 + (x / xmax if xmax else 0) * w
    sy = lambda y: y0 + h - (max(lo, min(hi, y)) - lo) / (hi - lo) * h
    fs = 11 if small else 12
    out.append(f'<text x="{x0 + w / 2}" y="{y0 - (8 if small else 14)}" text-anchor="middle" font-size="{13 if small else 16}" font-weight="bold">{esc(title)}</text>')
    out.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#444"/>')
    for t in ticks:
        out.append(f'<line x1="{x0}" y1="{sy(t):.1f}" x2="{x0 + w}" y2="{sy(t):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 - 5}" y="{sy(t) + 4:.1f}" text-anchor="end" font-size="{fs}">{fmt(t, ticks)}</text>')
    if lo < 0 < hi:
        out.append(f'<line x1="{x0}" y1="{sy(0):.1f}" x2="{x0 + w}" y2="{sy(0):.1f}" stroke="#999"/>')
    xt = sorted({0, xmax} | ({round(xmax * f) for f in (0.25, 0.5, 0.75)} if not small else {round(xmax / 2)}))
    for t in xt:
        out.append(f'<text x="{sx(t):.1f}" y="{y0 + h + 15}" text-anchor="middle" font-size="{fs}">{t}</text>')
    if xlabel:
        out.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 34}" text-anchor="middle" font-size="13">{esc(xlabel)}</text>')
    legend = []
    if hline is not None:
        label, y = hline
        out.append(f'<line x1="{x0}" y1="{sy(y):.1f}" x2="{x0 + w}" y2="{sy(y):.1f}" stroke="#888" stroke-width="1.5" stroke-dasharray="2,3"/>')
        legend.append((label, "#888", ' stroke-dasharray="2,3"'))
    for label, pts, color, dashed in series:
        if not pts:
            continue
        d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        dash = ' stroke-dasharray="6,4"' if dashed else ""
        out.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for x, y in pts:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{2 if small else 3}" fill="{color}"/>')
        legend.append((label, color, dash))
    if small:
        return out
    # The legend goes under the panel, two entries per row, clear of the curves.
    for k, (label, color, dash) in enumerate(legend):
        lx = x0 + (k % 2) * (w / 2)
        ly = y0 + h + 56 + 18 * (k // 2)
        out.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 24}" y2="{ly - 4}" stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{lx + 30}" y="{ly}" font-size="12">{esc(label)}</text>')
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--title", help="default: the run directory's name")
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
    title = a.title or f"arl run {os.path.basename(os.path.dirname(os.path.abspath(a.metrics)))}"
    # One small panel per training signal present (finite numbers only).
    num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    signals = [(k, t, [(m["step"], m[k]) for m in rl if num(m.get(k))]) for k, t in SIGNALS]
    signals = [s for s in signals if s[2]]
    per_row = 5
    rows = (len(signals) + per_row - 1) // per_row
    top_h = 70 + PANEL_H + 56 + 18 * 3
    H = top_h + (30 + rows * (SMALL_H + 60) if rows else 0)
    body = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif">',
            f'<rect width="{W}" height="{H}" fill="white"/>',
            f'<text x="{W / 2}" y="24" text-anchor="middle" font-size="18">{esc(title)}</text>']
    sft = next((m for m in ev if m["step"] == 0 and "mean_at_k" in m), None)
    hline = ("step-0 level", sft["mean_at_k"]) if sft else None
    body += panel(60, 70, "training: per RL step", left, xmax, "RL step (0 = the starting model)", hline)
    body += panel(540, 70, "held-out evaluation", right, xmax, "RL step (0 = the starting model)")
    if signals:
        body.append(f'<text x="{W / 2}" y="{top_h + 4}" text-anchor="middle" font-size="15" font-weight="bold">training signals per RL step</text>')
    for k, (key, t, pts) in enumerate(signals):
        x0 = 60 + (k % per_row) * (SMALL_W + 15)
        y0 = top_h + 40 + (k // per_row) * (SMALL_H + 60)
        body += panel(x0, y0, t, [(t, pts, COLORS[k % len(COLORS)], False)], xmax, None, w=SMALL_W - 30, h=SMALL_H, small=True)
    body.append("</svg>")
    d = os.path.dirname(os.path.abspath(a.output))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".plot-")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(body) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, a.output)


if __name__ == "__main__":
    main()
