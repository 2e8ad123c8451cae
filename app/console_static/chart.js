// Live charts: a bounded series of samples taken in the browser, drawn as SVG polylines.

const SVG = "http://www.w3.org/2000/svg";
export const WINDOW_MS = 5 * 60 * 1000; // the charts show the last five minutes
const MAX_POINTS = 400; // bound on any series, whatever the sampling interval

function svg(tag, attrs, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

// Points [time_ms, value], oldest first, dropping what is older than the window.
export class Series {
  constructor(name) {
    this.name = name;
    this.points = [];
  }

  add(t, value) {
    this.points.push([t, value]);
    while (this.points.length > MAX_POINTS || (this.points.length && this.points[0][0] < t - WINDOW_MS)) this.points.shift();
  }

  last() {
    return this.points.length ? this.points[this.points.length - 1][1] : null;
  }
}

// Rates per second from successive readings of a counter (a reset starts the series afresh).
export class RateSeries extends Series {
  constructor(name) {
    super(name);
    this.prev = null;
  }

  count(t, total) {
    if (this.prev && total >= this.prev[1] && t > this.prev[0]) this.add(t, ((total - this.prev[1]) * 1000) / (t - this.prev[0]));
    this.prev = [t, total];
  }
}

function fmt(v) {
  if (v >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (v >= 1e3) return `${(v / 1e3).toFixed(1)}k`;
  return v >= 10 || v === 0 ? v.toFixed(0) : v.toFixed(1);
}

// An SVG chart of several series over the last WINDOW_MS; the y axis tops at `max`, or the peak value.
export function lineChart(series, { width = 520, height = 140, unit = "/s", max = null, names = true, now = Date.now() } = {}) {
  const pad = { l: 44, r: 8, t: 8, b: 18 };
  const w = width - pad.l - pad.r;
  const hgt = height - pad.t - pad.b;
  const peak = max ?? Math.max(1, ...series.flatMap((s) => s.points.map((p) => p[1])));
  const x = (t) => pad.l + (w * (t - (now - WINDOW_MS))) / WINDOW_MS;
  const y = (v) => pad.t + hgt - (hgt * v) / peak;
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, class: "chart", role: "img" });
  root.append(svg("rect", { x: pad.l, y: pad.t, width: w, height: hgt, class: "plot" }));
  root.append(svg("text", { x: pad.l - 4, y: pad.t + 10, "text-anchor": "end" }, `${fmt(peak)}${unit}`));
  root.append(svg("text", { x: pad.l - 4, y: pad.t + hgt, "text-anchor": "end" }, "0"));
  root.append(svg("text", { x: pad.l, y: height - 4 }, "-5 min"));
  root.append(svg("text", { x: width - pad.r, y: height - 4, "text-anchor": "end" }, "now"));
  series.forEach((s, i) => {
    const pts = s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    root.append(svg("polyline", { points: pts, class: `line line${i}`, "data-series": s.name }));
    const last = s.last();
    // a narrow chart stacks its legends; a wide one sets them side by side
    const at = width < 300 ? { x: pad.l + 6, y: pad.t + 10 + i * 10 } : { x: pad.l + 6 + i * 150, y: pad.t + 12 };
    root.append(svg("text", { ...at, class: `legend legend${i}` }, `${names ? `${s.name} ` : ""}${last === null ? "-" : fmt(last) + unit}`));
  });
  return root;
}

// Calls `sample` now and every `intervalMs` until stopped; one sample at a time, never overlapping.
export class Sampler {
  constructor(intervalMs, sample) {
    this.intervalMs = intervalMs;
    this.sample = sample;
    this.timer = null;
    this.running = false;
  }

  start() {
    if (this.running) return;
    this.running = true;
    const tick = async () => {
      if (!this.running) return;
      try {
        await this.sample();
      } finally {
        if (this.running) this.timer = setTimeout(tick, this.intervalMs);
      }
    };
    tick();
  }

  stop() {
    this.running = false;
    clearTimeout(this.timer);
  }
}
