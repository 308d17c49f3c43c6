// Line charts in SVG, drawn here: no chart library, nothing fetched from elsewhere.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

// A chart of `series` ([{name, color, points: [[t, y], ...]}]) titled `title`, width x height px.
function lineChart(title, series, width = 460, height = 200) {
  const pad = { left: 48, right: 12, top: 24, bottom: 22 };
  const root = svg("svg", { width, height, class: "chart", "data-title": title });
  const all = series.flatMap((s) => s.points);
  const t0 = all.length ? Math.min(...all.map((p) => p[0])) : 0;
  const t1 = all.length ? Math.max(...all.map((p) => p[0])) : 1;
  const yMax = Math.max(1, ...all.map((p) => p[1]));
  const x = (t) => pad.left + ((t - t0) / Math.max(1, t1 - t0)) * (width - pad.left - pad.right);
  const y = (v) => height - pad.bottom - (v / yMax) * (height - pad.top - pad.bottom);
  const heading = svg("text", { x: pad.left, y: 15 });
  heading.textContent = title;
  root.append(heading);
  for (const frac of [0, 0.5, 1]) {
    const v = yMax * frac;
    root.append(svg("line", { x1: pad.left, x2: width - pad.right, y1: y(v), y2: y(v), stroke: "#e3e6eb" }));
    const label = svg("text", { x: 4, y: y(v) + 4 });
    label.textContent = v >= 100 ? Math.round(v).toString() : v.toFixed(1);
    root.append(label);
  }
  series.forEach((s, i) => {
    if (s.points.length) {
      const d = s.points.map((p, j) => `${j ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join("");
      root.append(svg("path", { d, fill: "none", stroke: s.color, "stroke-width": 2 }));
    }
    const key = svg("text", { x: width - pad.right - 90 * (series.length - i), y: 15, style: `fill: ${s.color}` });
    key.textContent = "■ " + s.name;
    root.append(key);
  });
  if (!all.length) {
    const empty = svg("text", { x: width / 2 - 40, y: height / 2 });
    empty.textContent = "collecting…";
    root.append(empty);
  }
  return root;
}
