// The fleet page's rollout timeline: one row per VM, grouped, with each maintenance event's stages
// (Scheduled, approved, Started, min_healthy, recovering) as bars on one time axis, under each
// group's header its budget line: VMs down at each moment against the group's max_unavailable, and
// above the groups a row per gate that was closed, a bar for each closed period. SVG with percentage
// coordinates, so nothing is measured; text from the coordinator is only ever set as textContent.
// page.js calls window.seTimeline.render(box, doc, options) after each poll. A summarised document's
// groups carry no spans, only how many (spanCount, started, spanEnd): an open group's VM rows are
// drawn from what options.detail(g) gives (its VMs fetched by page.js), once it has them.
"use strict";

(function () {
  const NS = "http://www.w3.org/2000/svg";
  const ROW = 16; // px per VM row
  const DOWN = 24; // px of a budget line
  const MIN_SPAN = 60; // s: the axis covers at least this much
  const STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  const BAR = { scheduled: [5, 6], approved: [3, 10], started: [1, 14], min_healthy: [4, 8], recovering: [4, 8] }; // [y, height]
  const opened = new Map(); // group -> open or not, once the user chose
  // group -> its header, kept across redraws (a poll redraws every 2 s): a click that began on it
  // ends on the same element, whatever was redrawn in between
  const heads = new Map();

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === "class") node.setAttribute("class", v);
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, String(v));
    }
    for (const c of children) if (c) node.append(c);
    return node;
  }

  function title(text) { return svg("title", { text }); }

  function clock(t, seconds) {
    const iso = new Date(t * 1000).toISOString();
    return seconds ? iso.slice(11, 19) : iso.slice(11, 16);
  }

  function length(seconds) {
    seconds = Math.max(0, Math.round(seconds));
    if (seconds < 120) return `${seconds} s`;
    if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
    return `${(seconds / 3600).toFixed(1)} h`;
  }

  // The axis: [t0, t1] over 0..100 %; now sits near the right edge.
  function axis(doc, range) {
    const now = doc.now;
    let t0 = doc.timeline.start === null ? now - MIN_SPAN : doc.timeline.start;
    if (range) t0 = Math.max(t0, now - range);
    t0 = Math.min(t0, now - MIN_SPAN);
    const t1 = now + (now - t0) * 0.02;
    const at = (t) => Math.min(100, Math.max(0, ((t - t0) / (t1 - t0)) * 100));
    return { t0, t1, now, at, x: (t) => `${at(t).toFixed(3)}%` };
  }

  function ticks(ax) {
    const step = STEPS.find((s) => (ax.t1 - ax.t0) / s <= 8) || 86400;
    const out = [];
    for (let t = Math.ceil(ax.t0 / step) * step; t <= ax.t1; t += step) out.push(t);
    return { step, out };
  }

  function axisRow(el, ax) {
    const { step, out } = ticks(ax);
    const track = svg("svg", { class: "tl-track", height: 18 },
      ...out.map((t) => svg("text", { x: ax.x(t), y: 13, "text-anchor": "middle", text: clock(t, step < 60) })),
      svg("line", { class: "tl-now", x1: ax.x(ax.now), x2: ax.x(ax.now), y1: 0, y2: 18 }));
    return el("div", { class: "tl-row tl-axis" }, el("span", { class: "tl-label muted", text: "UTC" }), track);
  }

  function gridLines(ax, height) {
    return ticks(ax).out.map((t) => svg("line", { class: "tl-grid", x1: ax.x(t), x2: ax.x(t), y1: 0, y2: height }));
  }

  // The budget line: one rect per step with VMs down, the group's max as a dashed line.
  function downRow(el, g, ax) {
    const scale = Math.max(g.peak, (g.max || 0) + 1, 2); // room above the max line for a breach
    const y = (n) => DOWN - 2 - (n / scale) * (DOWN - 4);
    const track = svg("svg", { class: "tl-track", height: DOWN, "data-peak": g.peak }, ...gridLines(ax, DOWN));
    g.down.forEach(([t, n], i) => {
      const next = i + 1 < g.down.length ? g.down[i + 1][0] : ax.now;
      const end = Math.min(next, ax.now);
      if (n <= 0 || end <= ax.t0 || end <= t) return;
      const over = g.max !== null && n > g.max;
      track.append(svg("rect", { class: `tl-level${over ? " over" : ""}`, x: ax.x(t),
        width: `${(ax.at(end) - ax.at(t)).toFixed(3)}%`, y: y(n), height: DOWN - 2 - y(n), "data-n": n,
        "data-start": t, "data-end": next },
      title(`${n} down from ${clock(t, true)}${g.max !== null ? ` (max ${g.max})` : ""}`)));
    });
    if (g.max !== null) {
      track.append(svg("line", { class: "tl-max", x1: "0", x2: "100%", y1: y(g.max), y2: y(g.max), "data-max": g.max },
        title(`max_unavailable ${g.max}`)));
    }
    track.append(svg("line", { class: "tl-now", x1: ax.x(ax.now), x2: ax.x(ax.now), y1: 0, y2: DOWN }));
    const label = g.max === null ? "down" : `down · max ${g.max}`;
    return el("div", { class: "tl-row tl-down" }, el("span", { class: "tl-label muted", text: label }), track);
  }

  // A gate's row: a bar per closed period (doc.timeline.gates: [name, scope, [[closed, opened|null]]]).
  function gateRow(el, gate, ax) {
    const [name, scope, periods] = gate;
    const track = svg("svg", { class: "tl-track", height: ROW }, ...gridLines(ax, ROW));
    for (const [start, end] of periods) {
      const stop = end === null ? ax.now : end;
      if (stop <= ax.t0) continue;
      track.append(svg("rect", { class: `tl-gate${end === null ? " open" : ""}`, x: ax.x(start),
        width: `${(ax.at(stop) - ax.at(start)).toFixed(3)}%`, y: 3, height: 10, "data-gate": name,
        "data-start": start, "data-end": end === null ? "" : end },
      title(`gate ${name} (${scope}) closed ${clock(start, true)}–${end === null ? "now" : clock(end, true)} UTC ` +
        `(${length(stop - start)}): no early approval in ${scope}`)));
    }
    track.append(svg("line", { class: "tl-now", x1: ax.x(ax.now), x2: ax.x(ax.now), y1: 0, y2: ROW }));
    return el("div", { class: "tl-row tl-gate-row", "data-gate": name },
      el("span", { class: "tl-label", text: `gate ${name}`, title: `gate ${name} (${scope})` }), track);
  }

  function vmRow(el, doc, d, vi, mine, ax) {
    const name = d.vms[vi][0];
    const kinds = doc.timeline.kinds, events = d.tlEvents;
    const track = svg("svg", { class: "tl-track", height: ROW });
    const marked = new Set();
    for (const [, k, start, end, e] of mine) {
      const kind = kinds[k];
      const [eventId, eventType, notBefore] = events[e];
      const stop = end === null ? ax.now : end;
      if (stop <= ax.t0) continue;
      const [y, h] = BAR[kind] || [4, 8];
      track.append(svg("rect", { class: `tl-bar k-${kind}${end === null ? " open" : ""}`, x: ax.x(start),
        width: `${(ax.at(stop) - ax.at(start)).toFixed(3)}%`, y, height: h, "data-vm": name, "data-kind": kind,
        "data-start": start, "data-end": end === null ? "" : end, "data-event-id": eventId },
      title(`${name}: ${eventType || "event"} ${kind.replace("_", " ")} ${clock(start, true)}–` +
        `${end === null ? "now" : clock(end, true)} UTC (${length(stop - start)}) · ${eventId}`)));
      if (notBefore !== null && !marked.has(e) && notBefore >= ax.t0 && notBefore <= ax.t1) {
        marked.add(e);
        track.append(svg("line", { class: "tl-nb", x1: ax.x(notBefore), x2: ax.x(notBefore), y1: 0, y2: ROW },
          title(`${eventType || "event"} NotBefore ${clock(notBefore, true)} UTC: Azure starts it then`)));
      }
    }
    return el("div", { class: "tl-row", "data-vm": name },
      el("span", { class: "tl-label", text: name, title: name }), track);
  }

  // A group's header: made once, brought up to date on every redraw.
  function head(el, doc, g, open, rerender) {
    let node = heads.get(g.group);
    if (!node) {
      node = el("div", { class: "tl-head", title: g.group,
        onclick: () => { opened.set(g.group, node.dataset.open !== "1"); rerender(); } },
      el("span", { class: "caret" }), el("span", { class: "name" }), el("span"));
      heads.set(g.group, node);
    }
    const started = doc.summarised ? g.started : g.spans.filter((s) => doc.timeline.kinds[s[1]] === "started").length;
    const [caret, name, summary] = node.children;
    node.dataset.open = open ? "1" : "0";
    caret.textContent = open ? "▾" : "▸";
    name.textContent = g.label;
    summary.className = `muted${g.max !== null && g.peak > g.max ? " over" : ""}`;
    summary.textContent = `${g.size} VMs · ${started} Started · ` +
      `at most ${g.peak} down at once${g.max !== null ? ` (max ${g.max})` : ""}`;
    return node;
  }

  function groupNode(el, doc, g, d, ax, open, rows, rerender) {
    const node = el("div", { class: "tl-group", "data-group": g.group, "data-peak": String(g.peak),
      "data-max": g.max === null ? "" : String(g.max), "data-open": open ? "1" : "0" });
    node.append(head(el, doc, g, open, rerender));
    node.append(downRow(el, g, ax));
    if (open && !d) {
      node.append(el("div", { class: "tl-row muted", text: "loading its VMs…" }));
    } else if (open) {
      const byRow = new Map();
      for (const s of d.spans) {
        if (!byRow.has(s[0])) byRow.set(s[0], []);
        byRow.get(s[0]).push(s);
      }
      // Rows in the order the VMs went down (a rollout reads as a staircase), then by name.
      const first = new Map();
      for (const [vi, k, start] of d.spans) {
        if (doc.timeline.kinds[k] !== "scheduled") first.set(vi, Math.min(start, first.get(vi) ?? Infinity));
      }
      const order = (vi) => first.get(vi) ?? Infinity;
      const sorted = [...(rows || d.vms.map((_, vi) => vi))]
        .sort((a, b) => order(a) - order(b) || d.vms[a][0].localeCompare(d.vms[b][0]));
      for (const vi of sorted) node.append(vmRow(el, doc, d, vi, byRow.get(vi) || [], ax));
    }
    return node;
  }

  function isOpen(group) { return opened.get(group) === true; }

  // options: {el, needle, big (quiet groups are left out, and groups start collapsed), range (s or 0),
  // rerender, detail (g -> {vms, spans, tlEvents} to draw an open group's rows from, or null)}
  function render(box, doc, options) {
    const { el, needle, big, range, rerender, detail } = options;
    const ax = axis(doc, range);
    const shown = [];
    let quiet = 0;
    for (const g of doc.groups) {
      let rows = null; // every VM of what detail gives
      let d = null;
      if (needle) {
        d = detail(g);
        if (!d) continue;
        rows = d.vms.map((_, vi) => vi).filter((vi) => d.vms[vi][0].toLowerCase().includes(needle));
        if (!rows.length) continue;
      }
      const live = doc.summarised ? g.spanCount > 0 && (g.spanEnd === null || g.spanEnd > ax.t0)
        : g.spans.some((s) => s[3] === null || s[3] > ax.t0);
      if (big && !live && !needle) { quiet += 1; continue; }
      const open = needle ? true : (opened.has(g.group) ? opened.get(g.group) : !big);
      if (open && !d) d = detail(g);
      shown.push(groupNode(el, doc, g, d, ax, open, rows, rerender));
    }
    const drawn = new Set(shown.map((n) => n.dataset.group));
    for (const group of [...heads.keys()]) if (!drawn.has(group)) heads.delete(group);
    const gates = (doc.timeline.gates || []).map((gate) => gateRow(el, gate, ax));
    const parts = [axisRow(el, ax), ...gates, ...shown];
    if (!shown.length) parts.push(el("div", { class: "muted", text: "No maintenance in this window." }));
    if (quiet) parts.push(el("div", { class: "muted", text: `${quiet} group${quiet === 1 ? "" : "s"} with no maintenance in this window` }));
    box.replaceChildren(...parts);
  }

  window.seTimeline = { render, isOpen };
})();
