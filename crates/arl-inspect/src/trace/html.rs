//! The timeline as one self-contained HTML page: the summary's table, one
//! lane per request slot and one per sample, bars coloured by phase (inline
//! SVG, CSS and a few lines of script; nothing fetched).
use super::parse::{SlotItem, Span, Trace};
use super::summary::{pct, shape, text, Phase, Summary};
use arl_env_core::web::esc;
use std::fmt::Write as _;

/// Most sample lanes drawn (the slowest, and the one that finished last).
const MAX_SAMPLE_LANES: usize = 1000;

impl Phase {
    fn class(self) -> &'static str {
        match self {
            Phase::Startup => "p-startup",
            Phase::GroupWait => "p-group",
            Phase::SlotWait => "p-slot",
            Phase::Generation => "p-gen",
            Phase::Tool => "p-tool",
            Phase::Retry => "p-retry",
            Phase::Aborted => "p-abort",
            Phase::Client => "p-client",
            Phase::Finish => "p-finish",
        }
    }
}

/// Lanes for the slot items: each goes to the first lane free when it
/// starts (at most as many lanes as were ever busy at once).
pub fn slot_lanes(items: &[SlotItem]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| items[a].start().total_cmp(&items[b].start()));
    let mut free_at: Vec<f64> = Vec::new();
    let mut lane = vec![0; items.len()];
    for i in order {
        let (a, b) = (items[i].start(), items[i].end());
        let l = match free_at.iter().position(|&f| f <= a + 1e-6) {
            Some(l) => l,
            None => {
                free_at.push(0.0);
                free_at.len() - 1
            }
        };
        free_at[l] = b;
        lane[i] = l;
    }
    lane
}

/// Geometry of the charts.
struct Chart {
    wall: f64,
    left: f64,
    width: f64,
}

const LANE: f64 = 14.0;
const GAP: f64 = 4.0;
const AXIS: f64 = 26.0;

impl Chart {
    fn x(&self, t: f64) -> f64 {
        self.left + t / self.wall * self.width
    }

    fn axis(&self, o: &mut String, height: f64) {
        let step = nice_step(self.wall / 10.0);
        let decimals = if step >= 1.0 { 0 } else { (-step.log10()).ceil() as usize };
        let mut k = 0u64;
        loop {
            let t = k as f64 * step;
            if t > self.wall * 1.0001 {
                break;
            }
            let x = self.x(t);
            let _ = write!(
                o,
                r#"<line class="grid" x1="{x:.1}" y1="{a:.1}" x2="{x:.1}" y2="{height:.1}"/><text class="tick" x="{x:.1}" y="{y:.1}">{t:.decimals$} s</text>"#,
                a = AXIS - 6.0,
                y = AXIS - 10.0,
            );
            k += 1;
        }
    }

    /// A bar; `sample` and `name` say whose it is (for the hover box and the click).
    fn rect(&self, o: &mut String, span: &Span, y: f64, h: f64, sample: usize, name: &str) {
        let x = self.x(span.start);
        let w = (self.x(span.end) - x).max(0.75);
        let _ = write!(
            o,
            r#"<rect class="{}" data-s="{sample}" data-name="{} — " x="{x:.2}" y="{y:.1}" width="{w:.2}" height="{h:.1}"><title>{}</title></rect>"#,
            span.phase.class(),
            esc(name),
            esc(&span.what)
        );
    }
}

/// 1, 2 or 5 times a power of ten, at least `x`.
fn nice_step(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * p).find(|&s| s >= x).unwrap_or(10.0 * p)
}

const STYLE: &str = r"
body{font:13px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:22px 0 6px}
.meta{color:#555;margin:0 0 10px}
table{border-collapse:collapse}td,th{padding:2px 10px;text-align:right}td:first-child,th:first-child{text-align:left}
tr.total td{border-top:1px solid #999;font-weight:600}
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px;border:1px solid #0003}
svg{display:block;max-width:100%;height:auto}
.tick{font-size:10px;fill:#666;text-anchor:middle}.lane{font-size:11px;fill:#333}.lane.crit{font-weight:700;fill:#b00}
.grid{stroke:#0000001a}.life{stroke:#999;stroke-width:1}
rect{stroke:#fff;stroke-width:1}rect.hl{stroke:#000;stroke-width:1.5}
.p-startup{fill:#bbb;background:#bbb}.p-group{fill:#e6e6e6;background:#e6e6e6}.p-slot{fill:#f2b134;background:#f2b134}
.p-gen{fill:#3b7dd8;background:#3b7dd8}.p-tool{fill:#2ca25f;background:#2ca25f}.p-retry{fill:#d7301f;background:#d7301f}
.p-abort{fill:#7a3fa0;background:#7a3fa0}.p-client{fill:#999;background:#999}.p-finish{fill:#bbb;background:#bbb}
#tip{position:fixed;pointer-events:none;background:#fff;border:1px solid #888;padding:3px 6px;font-size:12px;max-width:520px;box-shadow:0 1px 4px #0003}
pre{background:#f6f6f6;padding:8px;overflow:auto}
";

/// Hover shows a bar's details; a click marks every bar of its sample.
const SCRIPT: &str = r#"
'use strict';
(function () {
  var tip = document.getElementById('tip');
  var marked = [];
  document.querySelectorAll('svg rect[data-s]').forEach(function (r) {
    var t = r.querySelector('title');
    var text = t ? t.textContent : '';
    r.addEventListener('mousemove', function (e) {
      tip.textContent = (r.getAttribute('data-name') || '') + text;
      tip.style.left = (e.clientX + 12) + 'px';
      tip.style.top = (e.clientY + 12) + 'px';
      tip.hidden = false;
    });
    r.addEventListener('mouseleave', function () { tip.hidden = true; });
    r.addEventListener('click', function () {
      marked.forEach(function (m) { m.classList.remove('hl'); });
      marked = Array.prototype.slice.call(document.querySelectorAll('svg rect[data-s="' + r.getAttribute('data-s') + '"]'));
      marked.forEach(function (m) { m.classList.add('hl'); });
    });
  });
  document.body.setAttribute('data-timeline', 'ready');
})();
"#;

/// The timeline as one self-contained HTML page (inline CSS, SVG and script;
/// nothing fetched): the page top to bottom, header, table, the two charts.
pub fn html(t: &Trace, s: &Summary, top: usize) -> String {
    let chart = Chart { wall: s.wall.max(1e-9), left: 190.0, width: 1000.0 };
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>Rollout trace: {}</title><style>{STYLE}</style></head><body>"#,
        esc(&t.source)
    );
    header(&mut o, t, s);
    table(&mut o, t, s, top);
    slot_chart(&mut o, &chart, t);
    sample_chart(&mut o, &chart, t, s);
    let _ = write!(o, r#"<div id="tip" hidden></div><script>{SCRIPT}</script></body></html>"#);
    o
}

/// The title line and the legend.
fn header(o: &mut String, t: &Trace, s: &Summary) {
    let _ = write!(
        o,
        r#"<h1>Rollout trace</h1><p class="meta">{} · {} samples{}{} · wall time {:.3} s{}</p>"#,
        esc(&t.source),
        t.samples.len(),
        t.concurrency.map(|c| format!(" · --concurrency {c}")).unwrap_or_default(),
        t.start.as_deref().map(|x| format!(" · started {}", esc(x))).unwrap_or_default(),
        s.wall,
        if t.run_end.is_none() { " (unfinished run)" } else { "" }
    );
    o.push_str(r#"<div class="legend">"#);
    for p in [Phase::GroupWait, Phase::SlotWait, Phase::Generation, Phase::Tool, Phase::Retry, Phase::Aborted] {
        let _ = write!(o, r#"<span><i class="{}"></i>{}</span>"#, p.class(), esc(p.label()));
    }
    o.push_str("</div>");
}

/// Where the time went: the critical path's segments, then the text summary.
fn table(o: &mut String, t: &Trace, s: &Summary, top: usize) {
    let crit = s.critical.map(|c| &t.samples[c]);
    let _ = write!(
        o,
        "<h2>Where the wall time went: critical path through {}</h2><table><tr><th>segment</th><th>seconds</th><th>share</th></tr>",
        crit.map_or("no sample".to_string(), |c| format!("sample <b>{}</b> (finished last)", esc(&c.name())))
    );
    let mut sum = 0.0;
    for &(p, x) in &s.path {
        sum += x;
        let _ = write!(
            o,
            r#"<tr><td><i class="{}" style="display:inline-block;width:10px;height:10px;margin-right:6px"></i>{}</td><td>{x:.3}</td><td>{:.1}%</td></tr>"#,
            p.class(),
            esc(p.label()),
            pct(x, s.wall)
        );
    }
    let _ =
        write!(o, r#"<tr class="total"><td>total</td><td>{sum:.3}</td><td>{:.1}%</td></tr></table>"#, pct(sum, s.wall));
    let _ = write!(o, "<pre>{}</pre>", esc(&text(t, s, top)));
}

/// An SVG chart's opening tag, `height` high.
fn svg(chart: &Chart, height: f64) -> String {
    let width = chart.left + chart.width + 20.0;
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0} {height:.0}" width="{width:.0}" height="{height:.0}">"#
    )
}

/// Request slots: one lane each, every request from sent to answered.
fn slot_chart(o: &mut String, chart: &Chart, t: &Trace) {
    let lanes = slot_lanes(&t.slots);
    let n_lanes = lanes.iter().copied().max().map_or(0, |m| m + 1);
    let height = AXIS + n_lanes as f64 * (LANE + GAP) + 4.0;
    let _ = write!(
        o,
        r#"<h2>Request slots ({n_lanes} lanes{}): each request from when it was sent until its answer was in</h2>{}"#,
        t.concurrency.map(|c| format!(", --concurrency {c}")).unwrap_or_default(),
        svg(chart, height)
    );
    chart.axis(o, height);
    for l in 0..n_lanes {
        let y = AXIS + l as f64 * (LANE + GAP);
        let _ = write!(o, r#"<text class="lane" x="4" y="{:.1}">slot {}</text>"#, y + LANE - 3.0, l + 1);
    }
    for (item, &l) in t.slots.iter().zip(&lanes) {
        let y = AXIS + l as f64 * (LANE + GAP);
        let name = t.samples[item.sample].name();
        for seg in &item.segs {
            chart.rect(o, seg, y, LANE, item.sample, &name);
        }
    }
    o.push_str("</svg>");
}

/// Samples: one lane each, in start order; the slowest ones when there are
/// very many.
fn sample_chart(o: &mut String, chart: &Chart, t: &Trace, s: &Summary) {
    let mut shown: Vec<usize> = if t.samples.len() > MAX_SAMPLE_LANES {
        let mut v: Vec<usize> = s.slowest.iter().copied().take(MAX_SAMPLE_LANES).collect();
        if let Some(c) = s.critical.filter(|c| !v.contains(c)) {
            v.push(c);
        }
        v
    } else {
        (0..t.samples.len()).collect()
    };
    shown.sort_by(|&a, &b| t.samples[a].start.total_cmp(&t.samples[b].start).then(a.cmp(&b)));
    let height = AXIS + shown.len() as f64 * (LANE + GAP) + 4.0;
    let _ = write!(
        o,
        r#"<h2>Samples ({}{}): from when the episode started until it ended</h2>{}"#,
        shown.len(),
        if shown.len() < t.samples.len() { format!(" slowest of {}", t.samples.len()) } else { String::new() },
        svg(chart, height)
    );
    chart.axis(o, height);
    let ready = t.ready.unwrap_or(0.0);
    for (row, &i) in shown.iter().enumerate() {
        sample_lane(o, chart, t, i, AXIS + row as f64 * (LANE + GAP), s.critical == Some(i), ready);
    }
    o.push_str("</svg>");
}

/// Sample `i`'s lane at `y`: its name, its group's wait to start (after
/// `ready`), its life line and its spans.
fn sample_lane(o: &mut String, chart: &Chart, t: &Trace, i: usize, y: f64, is_crit: bool, ready: f64) {
    let x = &t.samples[i];
    let full = x.name();
    let mut name = full.clone();
    if name.chars().count() > 26 {
        name = name.chars().take(25).collect::<String>() + "…";
    }
    let _ = write!(
        o,
        r#"<text class="lane{}" x="4" y="{:.1}">{}{}</text>"#,
        if is_crit { " crit" } else { "" },
        y + LANE - 3.0,
        esc(&name),
        if is_crit { " ◀ last" } else { "" }
    );
    if x.start > ready {
        let wait = Span {
            phase: Phase::GroupWait,
            start: ready,
            end: x.start,
            what: format!("waiting to start (its group queued), {:.3} s", x.start - ready),
        };
        chart.rect(o, &wait, y + LANE * 0.3, LANE * 0.4, i, &full);
    }
    let mid = y + LANE / 2.0;
    let _ = write!(
        o,
        r#"<line class="life" x1="{:.2}" y1="{mid:.1}" x2="{:.2}" y2="{mid:.1}"><title>{}: {}, {:.3} s</title></line>"#,
        chart.x(x.start),
        chart.x(x.finish()),
        esc(&full),
        esc(&shape(x)),
        x.finish() - x.start
    );
    for span in &x.spans {
        let h = if span.phase == Phase::SlotWait { LANE * 0.6 } else { LANE };
        let yy = if span.phase == Phase::SlotWait { y + LANE * 0.2 } else { y };
        chart.rect(o, span, yy, h, i, &full);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(1.0), 1.0);
        assert_eq!(nice_step(1.2), 2.0);
        assert_eq!(nice_step(37.0), 50.0);
    }
}
