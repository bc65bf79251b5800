// The fleet page: polls /page/v1/view, renders it, counts down to each NotBefore, and sends the
// buttons' requests to the control API with the bearer token kept in this tab's sessionStorage.
// In a large fleet the document summarises its groups (doc.summarised): an open group's VMs come
// from /page/v1/group, and the search box asks /page/v1/search, both again at every poll.
// Plain DOM, no framework, no build step. Text from the coordinator is only ever set as textContent.
"use strict";

(function () {
  const POLL_MS = 2000;
  const POLL_HIDDEN_MS = 10000;
  const BIG_FLEET = 300; // above this many VMs, quiet groups start collapsed
  const NAMED_TILES = 60; // groups up to this size show VM names on their tiles
  const QUIET_GROUPS = 100; // a summarised document's groups with every VM ok, drawn at first (then 100 more)
  const TOKEN_KEY = "se-coordinator-token";
  // A summarised group's keys left out of the document at these values (view/page.py LEFT_OUT).
  const LEFT_OUT = { unavailable: 0, paused: false, zonal: false, notable: 0, vms: [], spans: [], down: [],
    peak: 0, spanCount: 0, started: 0, spanEnd: null };

  const $ = (id) => document.getElementById(id);
  const stats = { renders: 0, lastRenderMs: 0, lastFetchMs: 0, lastBytes: 0, lastVms: 0, polls: 0, errors: 0 };
  window.sePage = stats;

  let doc = null; // the last document
  let pressing = false; // a pointer is down on a button (redraw)
  let redrawOwed = false; // a poll came while it was
  let fetchedAt = 0; // Date.now() when it arrived
  let skew = 0; // server now - client now, seconds
  let search = "";
  const collapsed = new Map(); // group -> true/false, once the user chose
  const groupKeys = new Map(); // group -> key of what was rendered
  const groupNodes = new Map();
  let selected = null; // [groupIndex, vmIndex]
  let pollTimer = null;
  const loaded = new Map(); // group -> its VMs fetched (summarised documents): {vms, spans, tlEvents, size}
  const loading = new Set(); // groups being fetched
  const failed = new Map(); // group -> when its fetch last failed
  let found = null; // the last search's answer (summarised documents): {query, count, groups: Map}
  let quietShown = QUIET_GROUPS; // how many quiet groups of a summarised document are drawn

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === "class") node.className = v;
        else if (k === "style") node.style.cssText = v; // CSSOM: allowed by the page's CSP
        else if (k === "text") node.textContent = v;
        else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
        else node.setAttribute(k, v === true ? "" : v);
      }
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }

  // -- time -----------------------------------------------------------------------------------

  function serverNow() { return Date.now() / 1000 + skew; }

  function parseTime(text) { return text ? Date.parse(text) / 1000 : null; }

  function span(seconds) {
    seconds = Math.max(0, Math.round(seconds));
    const d = Math.floor(seconds / 86400), h = Math.floor(seconds / 3600) % 24,
      m = Math.floor(seconds / 60) % 60, s = seconds % 60;
    const two = (n) => String(n).padStart(2, "0");
    if (d) return `${d}d ${two(h)}:${two(m)}:${two(s)}`;
    if (h) return `${h}:${two(m)}:${two(s)}`;
    return `${m}:${two(s)}`;
  }

  function countdownText(notBefore) {
    const left = notBefore - serverNow();
    return left >= 0 ? `in ${span(left)}` : `due ${span(-left)} ago`;
  }

  function countdown(notBeforeUtc) {
    const t = parseTime(notBeforeUtc);
    if (t === null) return el("span", { class: "countdown", text: "no NotBefore" });
    return el("span", { class: "countdown", "data-nb": String(t), title: notBeforeUtc, text: countdownText(t) });
  }

  function tick() {
    for (const node of document.querySelectorAll("[data-nb]")) {
      const t = Number(node.dataset.nb);
      node.textContent = countdownText(t);
      node.classList.toggle("due", t - serverNow() < 0);
    }
    if (selected && !pressing) renderDetail();
  }

  function ago(utc) {
    const t = parseTime(utc);
    return t === null ? "" : `${span(serverNow() - t)} ago`;
  }

  // -- the token and the buttons ------------------------------------------------------------

  function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

  function askToken() {
    return new Promise((resolve) => {
      const dialog = $("token-dialog");
      $("token-input").value = token();
      const done = (ok) => {
        $("token-form").onsubmit = null; $("token-cancel").onclick = null; $("token-forget").onclick = null;
        dialog.close();
        resolve(ok);
      };
      $("token-form").onsubmit = (e) => {
        e.preventDefault();
        const value = $("token-input").value.trim();
        if (!value) return;
        sessionStorage.setItem(TOKEN_KEY, value);
        done(true);
        poll();
      };
      $("token-cancel").onclick = () => done(false);
      $("token-forget").onclick = () => { sessionStorage.removeItem(TOKEN_KEY); done(false); showTokenState(); };
      dialog.showModal();
      $("token-input").focus();
    });
  }

  function showTokenState() {
    $("token-button").textContent = token() ? "Token ✓" : "Token";
  }

  function notice(text, error) {
    const n = $("notice");
    n.textContent = text;
    n.className = error ? "error" : "";
    n.hidden = false;
    clearTimeout(notice.timer);
    notice.timer = setTimeout(() => { n.hidden = true; }, error ? 15000 : 6000);
  }

  // kind: pause|resume|hold|release|approve; body: {scope} or {eventId}
  async function act(kind, body, title, text) {
    if (!token() && !(await askToken())) return;
    const reason = await askReason(title, text, kind === "approve");
    if (reason === null) return;
    const payload = { ...body, reason: reason.text }; // the server records the token's name as the actor
    if (kind === "approve") payload.scopes = reason.override ? ["all"] : [];
    let reply;
    try {
      reply = await fetch(`/v1/${kind}`, {
        method: "POST", body: JSON.stringify(payload),
        headers: { "Content-Type": "application/json", "Authorization": `Bearer ${token()}` },
      });
    } catch (e) {
      notice(`${kind}: the coordinator did not answer (${e.message})`, true);
      return;
    }
    let answer = {};
    try { answer = await reply.json(); } catch (e) { answer = {}; }
    if (reply.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      showTokenState();
      notice(`${kind}: the token was refused; give it again`, true);
      return;
    }
    if (!reply.ok) {
      const where = answer.leader ? ` (the leader is ${answer.leader})` : "";
      notice(`${kind} refused: ${answer.error || reply.statusText}${where}`, true);
      return;
    }
    const d = answer.decision || {};
    const state = answer.published === false ? "in force, not yet published (the Event Hub does not answer)" : "published";
    notice(`${kind}: ${d.subject || ""} ${state} (${d.id || ""})`);
    poll();
  }

  function askReason(title, text, approve) {
    return new Promise((resolve) => {
      const dialog = $("action-dialog");
      $("action-title").textContent = title;
      $("action-text").textContent = text || "";
      $("action-reason").value = "";
      $("override-label").hidden = !approve;
      $("action-override").checked = false;
      const done = (value) => { $("action-form").onsubmit = null; $("action-cancel").onclick = null; dialog.close(); resolve(value); };
      $("action-form").onsubmit = (e) => {
        e.preventDefault();
        const reason = $("action-reason").value.trim();
        if (!reason) return;
        done({ text: reason, override: $("action-override").checked });
      };
      $("action-cancel").onclick = () => done(null);
      dialog.showModal();
      $("action-reason").focus();
    });
  }

  // -- rendering ------------------------------------------------------------------------------

  function render() {
    const started = performance.now();
    renderHeader();
    renderScopes();
    renderGates();
    renderPending();
    renderStarted();
    renderDecisions();
    renderGroups();
    renderTimeline();
    renderDetail();
    const expand = $("expand-all");
    expand.disabled = doc.summarised;
    expand.title = doc.summarised ? "Groups are summarised in a fleet this large: open them one by one" : "";
    stats.lastRenderMs = performance.now() - started;
    if (!stats.renders) stats.firstRenderMs = stats.lastRenderMs;
    stats.renders += 1;
    stats.lastVms = doc.fleet.vms;
    $("footer").textContent = `${doc.fleet.vms} VMs in ${doc.groups.length} groups · document ` +
      `${(stats.lastBytes / 1024).toFixed(0)} KB, fetched in ${stats.lastFetchMs.toFixed(0)} ms, ` +
      `rendered in ${stats.lastRenderMs.toFixed(0)} ms · as of ${doc.time}`;
    document.body.dataset.rendered = String(stats.renders);
    if (stats.renders === 1) { // when the first render is on the screen, from the navigation's start
      requestAnimationFrame(() => setTimeout(() => { stats.drawnMs = performance.now(); }, 0));
    }
  }

  function renderTimeline() {
    if (!doc) return;
    const started = performance.now();
    window.seTimeline.render($("timeline"), doc, { el, needle: search.toLowerCase(), big: doc.fleet.vms > BIG_FLEET,
      range: Number($("tl-range").value) || 0, rerender: renderTimeline, detail: detailOf });
    stats.lastTimelineMs = performance.now() - started;
  }

  // A shard's page names its subscriptions and links to the other shards' pages ([shard] peers).
  function renderShards(shard) {
    const nav = $("shards");
    nav.replaceChildren();
    if (!shard) return;
    nav.append(el("span", { class: "shard-self", "data-shard": shard.name, text: `shard ${shard.name}`,
      title: `owns ${(shard.subscriptions || []).join(", ")}` }));
    for (const [name, url] of Object.entries(shard.peers || {}).sort()) {
      if (!/^https?:\/\/[^/\s]+$/.test(url)) continue;
      nav.append(" · ", el("a", { href: `${url}/`, "data-shard": name, text: `shard ${name}` }));
    }
  }

  function renderHeader() {
    const s = doc.service;
    $("service").textContent = s ? `${s.name} · ${s.instance} · ${s.role}` : "";
    renderShards(s && s.shard);
    const f = doc.fleet;
    const azure = doc.azure;
    $("fleet-counts").textContent = `${f.vms} VMs · ${f.watched} watched · ${f.unavailable} unavailable · ` +
      `${f.openEvents} open events` + (azure ? ` · ${azure.agentless.length} agentless · ` +
      `${azure.findings.length} Azure/agent disagreement${azure.findings.length === 1 ? "" : "s"}` : "");
    const banner = $("banner");
    banner.replaceChildren();
    const fleetPaused = doc.paused.find((p) => p.scope === "fleet");
    if (fleetPaused) {
      banner.append(el("span", { class: "paused", id: "paused-banner",
        text: `Paused by ${fleetPaused.actor || "?"}: ${fleetPaused.reason || ""}` }));
    } else if (doc.paused.length) {
      banner.append(el("span", { class: "paused", text: `${doc.paused.length} scope(s) paused` }));
    }
    if (doc.shadow) banner.append(el("span", { class: "shadow", text: "shadow mode: nothing is sent" }));
    const svc = doc.service || {};
    if (svc.gap) banner.append(el("span", { class: "conflict", id: "gap-banner", text: `the fold has a gap, not acting: ${svc.gap}` }));
    else if (svc.stale && svc.acting) banner.append(el("span", { class: "paused", id: "stale-banner", text: `no early approval: ${svc.stale}` }));
    for (const c of doc.nameConflicts || []) {
      banner.append(el("span", { class: "conflict", "data-conflict": c.name,
        text: `name ${c.name} claimed by ${c.vms.length} VMs: ${c.vms.join(", ")}` }));
    }
    const rekeyed = (doc.identities && doc.identities.rekeyed) || [];
    if (rekeyed.length) {
      const r = rekeyed[0];
      banner.append(el("span", { class: "rekeyed", id: "rekeyed-banner",
        text: `${r.name || r.vmId} registered a new identity key at ${r.time}` +
          (rekeyed.length > 1 ? ` (${rekeyed.length} key changes in all)` : "") }));
    }
    if (doc.blackout) banner.append(el("span", { class: "blackout", text: `blackout ${doc.blackout}` }));
    for (const a of doc.alerts || []) {
      if (a.kind === "gate-closed") continue; // each closed gate has its own banner (below)
      banner.append(el("span", { class: `alert sev-${a.severity}`, "data-alert": a.kind, text: a.summary }));
    }
    for (const h of doc.health || []) {
      banner.append(el("span", { class: "unwell", "data-vm": h.name, "data-reason": h.reason,
        text: `${h.name} held: ${h.reason}, ${h.detail}` + (h.eventId ? ` after ${h.eventId}` : "") }));
    }
    for (const g of doc.gates || []) {
      if (g.open) continue;
      banner.append(el("span", { class: "gate", "data-gate": g.name, text: `gate ${g.name} closed: ${g.reason}` }));
    }
    for (const [part, r] of Object.entries((s && s.reachability) || {})) {
      if (r.reachable) continue; // an unreachable part, or the Azure feed's events all refused
      banner.append(el("span", { class: "down", "data-part": part,
        text: `${part} ${r.state || "unreachable"} since ${r.failingSince}: ${r.lastError || ""}` }));
    }
    const button = $("pause-fleet");
    button.textContent = fleetPaused ? "Resume all" : "Pause all";
    button.dataset.paused = fleetPaused ? "1" : "0";
  }

  function gauge(label, used, max, scope, paused) {
    const share = max > 0 ? Math.min(1, used / max) : (used > 0 ? 1 : 0);
    const level = used >= max ? "full" : (share >= 0.5 ? "high" : "");
    const kind = paused ? "resume" : "pause";
    return el("div", { class: "gauge", "data-scope": scope },
      el("span", { text: label + (paused ? " (paused)" : ""), title: scope }),
      el("span", { class: "meter", title: `${used} of at most ${max} unavailable` },
        el("i", { class: level, style: `width:${Math.round(share * 100)}%` })),
      el("span", { text: `${used}/${max}` }),
      el("button", { class: "small", type: "button", text: paused ? "Resume" : "Pause",
        onclick: () => act(kind, { scope }, `${kind === "pause" ? "Pause" : "Resume"} ${label}`,
          kind === "pause" ? "No early approval in this scope until resumed; approvals already sent stand."
            : "Early approvals in this scope start again.") }));
  }

  function renderScopes() {
    const box = $("scopes");
    box.replaceChildren();
    if (!doc.scopes.length) {
      box.append(el("div", { class: "muted", text: "No budgeted scope has a VM unavailable." }));
    }
    for (const s of doc.scopes) box.append(gauge(s.label, s.used, s.max, s.scope, s.paused));
    const totals = Object.entries(doc.scopeTotals || {}).map(([k, v]) => `${k}: ${v.scopes} (${v.full} full)`);
    if (totals.length) box.append(el("div", { class: "muted", text: `Scopes: ${totals.join(" · ")}` }));
    for (const p of doc.paused) {
      if (doc.scopes.some((s) => s.scope === p.scope) || p.scope === "fleet") continue;
      box.append(el("div", { class: "gauge", "data-scope": p.scope }, el("span", { text: `${p.label} (paused)` }),
        el("span"), el("span"), el("button", { class: "small", type: "button", text: "Resume",
          onclick: () => act("resume", { scope: p.scope }, `Resume ${p.label}`, "") })));
    }
  }

  function renderGates() {
    const box = $("gates");
    box.replaceChildren();
    const gates = doc.gates || [], windows = doc.windows || [];
    $("gates-heading").hidden = !gates.length && !windows.length;
    for (const g of gates) {
      box.append(el("div", { class: `gate-row ${g.open ? "" : "closed"}`, "data-gate": g.name, title: g.scope },
        el("span", { text: `${g.name} (${g.type}, ${g.scope})` }),
        el("span", { text: `${g.open ? "open" : "CLOSED"}: ${g.reason}` })));
    }
    for (const w of windows) {
      const said = [`early approval ${w.open ? "open" : "closed"}`];
      if (w.window) said.push(`${w.window.startUtc <= doc.time ? "window" : "next window"} ` +
        `${w.window.name}: ${w.window.text}`);
      if (w.blackout) said.push(`blackout ${w.blackout.name}: ${w.blackout.text}`);
      box.append(el("div", { class: `window-row ${w.open ? "" : "closed"}`, "data-scope": w.scope },
        el("span", { text: w.scope }), el("span", { text: said.join(" · ") })));
    }
  }

  function renderPending() {
    const box = $("pending");
    box.replaceChildren();
    $("pending-count").textContent = doc.pending.length ? `(${doc.pending.length})` : "";
    if (!doc.pending.length) box.append(el("div", { class: "muted", text: "Nothing scheduled." }));
    for (const p of doc.pending.slice(0, 200)) {
      const names = p.affected.join(", ") + (p.affectedCount > p.affected.length ?
        ` and ${p.affectedCount - p.affected.length} more` : "");
      const approvals = (p.approvals || []).map((a) => `${a.echo ? "echo from" : "approved by"} ` +
        `${a.echo ? a.vm : a.by}${a.echo ? ` (${a.by})` : ""}`).join("; ");
      const card = el("div", { class: "card event", "data-event": p.eventId },
        el("div", { class: "head" }, el("strong", { text: p.eventType || "event" }),
          el("span", { text: names }), countdown(p.notBeforeUtc),
          p.held ? el("span", { class: "code", text: "held" }) : null),
        el("div", { class: "why" }, el("span", { class: "code", text: p.reasonCode }), " ",
          el("span", { text: p.reason || "" })),
        p.nextTryUtc ? el("div", { class: "next-try muted" }, "next acknowledge ", countdown(p.nextTryUtc),
          ` (${p.nextTryUtc})`) : null,
        p.budgets.length ? el("div", { class: "muted", text: p.budgets.map((b) =>
          `${b.label} ${b.withEvent}/${b.max}`).join(" · ") }) : null,
        approvals ? el("div", { class: "muted", text: approvals }) : null,
        el("div", { class: "muted id", text: `${p.eventId} · ${p.eventSource || ""}` }),
        el("div", { class: "buttons" },
          p.held
            ? el("button", { class: "small", type: "button", text: "Release", onclick: () =>
              act("release", { eventId: p.eventId }, `Release ${p.eventType} for ${names}`, "The coordinator may approve it early again.") })
            : el("button", { class: "small", type: "button", text: "Hold", onclick: () =>
              act("hold", { eventId: p.eventId }, `Hold ${p.eventType} for ${names}`, "No early approval for this event; Azure still starts it at its NotBefore.") }),
          p.reasonCode !== "approved" ? el("button", { class: "small danger", type: "button", text: "Approve now",
            onclick: () => act("approve", { eventId: p.eventId }, `Approve ${p.eventType} for ${names} now`,
              "Starts it at once for every VM in its Resources. Budgets still count unless you choose to exceed them.") }) : null));
      box.append(card);
    }
    if (doc.pending.length > 200) box.append(el("div", { class: "muted", text: `and ${doc.pending.length - 200} more` }));
  }

  function renderStarted() {
    const box = $("started");
    box.replaceChildren();
    if (!doc.started.length) box.append(el("div", { class: "muted", text: "Nothing running." }));
    for (const s of doc.started) {
      box.append(el("div", { class: "card" }, el("strong", { text: s.eventType || "event" }), " ",
        el("span", { text: s.affected.join(", ") }), " ",
        el("span", { class: "muted", text: s.due ? `started by Azure (due) ${ago(s.startedUtc)}`
          : `started ${ago(s.startedUtc)}` })));
    }
  }

  function renderDecisions() {
    const box = $("decisions");
    box.replaceChildren();
    if (!doc.decisions.length) box.append(el("li", { class: "muted", text: "No decision yet." }));
    for (const d of doc.decisions) {
      const time = d.time ? d.time.slice(11, 19) : "";
      box.append(el("li", { class: `d-${d.decision}`, title: d.id },
        el("span", { class: "muted", text: `${time} ` }),
        el("span", { class: "kind", text: d.decision }), " ",
        el("span", { text: `${d.eventType ? d.eventType + " " : ""}${d.subject}` }),
        d.target ? el("span", { class: "muted", text: ` → ${d.target}` }) : null,
        el("div", { class: "muted", text: `${d.actor || ""}: ${d.reason || d.reasonCode || ""}${d.shadow ? " (shadow)" : ""}` })));
    }
  }

  // Groups: rows are zones (zonal groups) or fault domains, columns fault (zonal) or update domains.
  function groupKey(g, gi, open, needle, vms) {
    let key = `${gi}|${g.size}|${open}|${needle}|${g.unavailable}|${g.paused}|${g.max}|${g.notable}|` +
      JSON.stringify(g.counts || {}) + `|${vms ? vms.length : "-"}`;
    if (!open || !vms) return key + "|" + g.vms.map((v) => `${v[4]}${v[8] ? "a" : ""}${v[9] ? "f" : ""}`).join(",");
    for (const v of vms) {
      key += `|${v[0]},${v[1]},${v[2]},${v[3]},${v[4]},${v[6] ? v[6].eventId + v[6].status : ""},${v[7]},${v[8]},${v[9]}`;
    }
    return key;
  }

  function isOpen(g, gi, needle) {
    if (needle) return true;
    if (collapsed.has(g.group)) return !collapsed.get(g.group);
    if (doc.summarised) return false; // its VMs are fetched when it is opened
    if (doc.fleet.vms <= BIG_FLEET) return true;
    return g.unavailable > 0 || g.vms.some((v) => v[4] !== "ok");
  }

  // A group's VMs and spans to draw: the document's, or (summarised) those fetched or found.
  // null: not fetched yet (asked for now).
  function detailOf(g) {
    if (!doc.summarised) return { vms: g.vms, spans: g.spans, tlEvents: doc.timeline.events, size: g.size };
    if (search) return found && found.query === search ? (found.groups.get(g.group) || null) : null;
    const d = loaded.get(g.group);
    if (!d) load(g.group);
    return d || null;
  }

  // Rows of a fetched answer with their event (an index into its events) as the event itself.
  function adopt(vms, events) {
    return vms.map((v) => { const r = v.slice(); r[6] = v[6] >= 0 ? events[v[6]] : null; return r; });
  }

  function viewHeaders() { return token() ? { Authorization: `Bearer ${token()}` } : {}; }

  async function fetchJson(url) {
    const reply = await fetch(url, { headers: viewHeaders(), cache: "no-store" });
    if (!reply.ok) return { status: reply.status, body: null };
    return { status: reply.status, body: await reply.json() };
  }

  async function load(group) {
    if (loading.has(group) || (failed.get(group) || 0) > Date.now() - POLL_MS) return;
    loading.add(group);
    try {
      const { status, body } = await fetchJson(`/page/v1/group?group=${encodeURIComponent(group)}`);
      if (body) {
        loaded.set(group, { vms: adopt(body.vms, body.events), spans: body.spans, tlEvents: body.timelineEvents,
          size: body.size });
      } else {
        failed.set(group, Date.now()); // asked again at the next poll, not at once
        if (status === 404) loaded.delete(group);
      }
    } catch (e) {
      stats.errors += 1;
      failed.set(group, Date.now());
    } finally {
      loading.delete(group);
    }
    if (doc) redraw();
  }

  async function find(query) {
    const started = performance.now();
    try {
      const { body } = await fetchJson(`/page/v1/search?q=${encodeURIComponent(query)}`);
      if (!body || query !== search) return;
      const groups = new Map();
      for (const g of body.groups) {
        groups.set(g.group, { vms: adopt(g.vms, body.events), spans: g.spans, tlEvents: body.timelineEvents,
          size: g.vms.length });
      }
      found = { query, count: body.count, groups };
      stats.lastFindMs = performance.now() - started;
    } catch (e) {
      stats.errors += 1;
      return;
    }
    if (doc) redraw();
  }

  // At each poll of a summarised document: the open groups' VMs again, and the search.
  function refresh() {
    if (!doc || !doc.summarised) { loaded.clear(); found = null; return; }
    for (const group of [...loaded.keys()]) {
      const gi = doc.groups.findIndex((g) => g.group === group);
      const open = gi >= 0 && (isOpen(doc.groups[gi], gi, "") || window.seTimeline.isOpen(group));
      if (open) load(group); else loaded.delete(group);
    }
    if (search) find(search);
  }

  function renderGroups() {
    const box = $("groups");
    const needle = search.toLowerCase();
    let matches = 0, firstMatch = null;
    const keep = new Set();
    let prev = null;
    let quiet = 0, quietVms = 0;
    doc.groups.forEach((g, gi) => {
      let hit = null;
      const open = isOpen(g, gi, needle);
      if (doc.summarised && !needle && !open && !g.notable && !g.unavailable && !g.paused) {
        quiet += 1; // every VM ok: the first quietShown of them are drawn
        if (quiet > quietShown) { quietVms += g.size; return; }
      }
      const d = open ? detailOf(g) : null;
      if (needle) {
        if (!d) return;
        hit = d.vms.map((v) => v[0].toLowerCase().includes(needle));
        const count = hit.filter(Boolean).length;
        matches += count;
        if (!count) return;
        if (firstMatch === null) firstMatch = [gi, hit.indexOf(true)];
      }
      const key = groupKey(g, gi, open, needle, d && d.vms);
      keep.add(g.group);
      let node = groupNodes.get(g.group);
      if (!node || groupKeys.get(g.group) !== key) {
        const fresh = groupNode(g, gi, open, hit, d);
        if (node) node.replaceWith(fresh);
        node = fresh;
        groupNodes.set(g.group, node);
        groupKeys.set(g.group, key);
      }
      node.dataset.gi = String(gi);
      const want = prev ? prev.nextSibling : box.firstChild;
      if (node !== want) box.insertBefore(node, want); // document order, moving only what moved
      prev = node;
    });
    for (const [name, node] of groupNodes) {
      if (!keep.has(name)) { node.remove(); groupNodes.delete(name); groupKeys.delete(name); }
    }
    const hidden = quiet - Math.min(quiet, quietShown);
    $("groups-more").hidden = !hidden;
    $("groups-more").firstChild.textContent = hidden ? `${hidden} more group${hidden === 1 ? "" : "s"} with ` +
      `every VM ok (${quietVms} VMs)` : "";
    if (needle && doc.summarised) {
      const count = found && found.query === search ? found.count : null;
      $("search-result").textContent = count === null ? "searching…" :
        `${count} VM${count === 1 ? "" : "s"} match` + (count > matches ? ` (the first ${matches} shown)` : "");
    } else {
      $("search-result").textContent = needle ? `${matches} VM${matches === 1 ? "" : "s"} match` : "";
    }
    if (needle && matches === 1 && firstMatch && (!selected || selected[0] !== firstMatch[0] || selected[1] !== firstMatch[1])) {
      selected = firstMatch;
    }
  }

  function countsText(g) {
    return Object.entries(g.counts || {}).filter(([k]) => k !== "ok").sort((a, b) => b[1] - a[1])
      .map(([k, n]) => `${n} ${STATE_WORDS[k] || k}`).join(", ");
  }

  function groupNode(g, gi, open, hit, d) {
    const busy = g.vms.some((v) => v[4] !== "ok");
    const node = el("div", { class: `group${busy ? " busy" : ""}`, "data-group": g.group });
    const kind = g.paused ? "resume" : "pause";
    const budget = g.max === null ? "" : ` · budget ${g.unavailable}/${g.max}`;
    const head = el("div", { class: "ghead", title: g.group, onclick: (e) => {
      if (e.target.closest("button")) return;
      collapsed.set(g.group, open);
      groupKeys.delete(g.group);
      renderGroups();
    } },
    el("span", { class: "caret", text: open ? "▾" : "▸" }),
    el("span", { class: "name", text: g.label }),
    el("span", { class: "muted", text: `${g.size} VMs · ${g.unavailable} unavailable${budget}${g.paused ? " · paused" : ""}` +
      (doc.summarised && countsText(g) ? ` · ${countsText(g)}` : "") }),
    el("span", { class: "spacer" }),
    el("button", { class: "small", type: "button", text: g.paused ? "Resume group" : "Pause group",
      onclick: () => act(kind, { scope: g.scope }, `${g.paused ? "Resume" : "Pause"} group ${g.label}`, "") }));
    node.append(head);
    if (!open || !d) {
      // A collapsed group shows one strip of its non-ok VMs, so trouble is visible at a glance.
      node.rows = g.vms;
      const strip = el("div", { class: "strip", style: "padding:0 10px 6px" });
      g.vms.forEach((v, vi) => { if (v[4] !== "ok" || v[9]) strip.append(tile(v, gi, vi, false, false)); });
      const more = (g.notable || 0) - g.vms.length;
      if (more > 0) strip.append(el("span", { class: "muted", text: ` and ${more} more: open the group` }));
      if (strip.childNodes.length) node.append(strip);
      if (open) node.append(el("div", { class: "muted loading", style: "padding:0 10px 6px", text: "loading its VMs…" }));
      return node;
    }
    const vms = d.vms;
    node.rows = vms;
    const rowsOf = (v) => (g.zonal ? `zone ${v[1] || "-"}` : `FD ${v[2] || "-"}`);
    const colsOf = (v) => (g.zonal ? `FD ${v[2] || "-"}` : `UD ${v[3] || "-"}`);
    const rows = [...new Set(vms.map(rowsOf))].sort();
    const cols = [...new Set(vms.map(colsOf))].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
    const cells = new Map();
    const named = vms.length <= NAMED_TILES;
    vms.forEach((v, vi) => {
      const k = rowsOf(v) + "|" + colsOf(v);
      if (!cells.has(k)) cells.set(k, []);
      cells.get(k).push(tile(v, gi, vi, named, hit ? hit[vi] : false));
    });
    const table = el("table", { class: "grid" });
    table.append(el("tr", null, el("th"), ...cols.map((c) => el("th", { text: c }))));
    for (const r of rows) {
      table.append(el("tr", null, el("th", { text: r }),
        ...cols.map((c) => el("td", null, ...(cells.get(r + "|" + c) || [])))));
    }
    node.append(table);
    if (!search && d.size > vms.length) {
      node.append(el("div", { class: "muted", style: "padding:0 10px 6px", text: `the first ${vms.length} of ${d.size} VMs` }));
    }
    return node;
  }

  const STATE_WORDS = { due: "started by Azure (due)", "name-conflict": "name claimed twice",
    "key-conflict": "registered with two keys" };

  function tile(v, gi, vi, named, match) {
    const state = v[4];
    const node = el("span", { class: `vm s-${state}${named ? " named" : " dot"}${match ? " match" : ""}` +
      `${v[8] ? " agentless" : ""}${v[9] ? " finding" : ""}`,
      "data-vm": v[0], "data-state": state, "data-i": `${gi}:${vi}`,
      "data-agentless": v[8] ? "1" : null, "data-finding": v[9] || null });
    if (named) {
      node.append(v[0]);
      const event = v[6];
      if (event && state === "pending") node.append(el("small", null, countdown(event.notBeforeUtc)));
    }
    return node;
  }

  function vmAt(i) {
    const g = doc.groups[i[0]];
    const node = g && groupNodes.get(g.group);
    const rows = node && node.rows ? node.rows : (g ? g.vms : []);
    return g ? [g, rows[i[1]]] : [null, null];
  }

  function describeVm(g, v) {
    const age = v[5] < 0 ? "never heard from" :
      `heartbeat ${span(v[5] + (Date.now() - fetchedAt) / 1000)} ago`;
    const where = [v[1] && `zone ${v[1]}`, v[2] && `FD ${v[2]}`, v[3] && `UD ${v[3]}`].filter(Boolean).join(", ");
    const who = v[8] ? "agentless (Azure only)" : (v[7] ? "watched" : "not watched");
    const said = v[10] ? ` · ${v[10]}` : "";
    const finding = v[9] ? ` · Azure and its agent disagree: ${v[9]}` : "";
    const state = STATE_WORDS[v[4]] || v[4];
    return `${v[0]} (${where || "no topology"}) · ${g.label} · ${state} · ${who} · ${v[8] ? "no agent" : age}${said}${finding}`;
  }

  function renderDetail() {
    const box = $("vm-detail");
    if (!selected || !doc) { box.hidden = true; return; }
    const [g, v] = vmAt(selected);
    if (!v) { box.hidden = true; return; }
    const event = v[6];
    box.replaceChildren(el("div", { class: "card" },
      el("strong", { text: describeVm(g, v) }),
      event ? el("div", null, `${event.eventType} ${event.status} `, countdown(event.notBeforeUtc),
        el("span", { class: "muted id", text: ` ${event.eventId}` })) : null,
      el("button", { class: "small", type: "button", text: "Close", onclick: () => { selected = null; renderDetail(); } })));
    box.hidden = false;
  }

  document.addEventListener("click", (e) => {
    const node = e.target.closest(".vm[data-i]");
    if (!node || !doc) return;
    selected = node.dataset.i.split(":").map(Number);
    renderDetail();
  });
  document.addEventListener("mouseover", (e) => {
    const node = e.target.closest(".vm[data-i]");
    if (!node || !doc) return;
    const [g, v] = vmAt(node.dataset.i.split(":").map(Number));
    if (v) node.title = describeVm(g, v);
  });

  // -- polling --------------------------------------------------------------------------------

  // A button held down must still be there when it is released, or its click is lost: while a
  // pointer is down on a button, neither a poll nor the clock redraws; the page redraws after.

  function redraw() {
    if (pressing) { redrawOwed = true; return; }
    render();
  }

  function released() {
    if (!pressing) return;
    pressing = false;
    if (redrawOwed) setTimeout(() => { redrawOwed = false; if (!pressing) render(); }, 0); // after the click
  }

  async function poll() {
    clearTimeout(pollTimer);
    stats.polls += 1;
    const started = performance.now();
    try {
      const reply = await fetch("/page/v1/view", { headers: viewHeaders(), cache: "no-store" });
      if (reply.status === 401) {
        $("footer").textContent = "Viewing from another host needs the token: press Token.";
        stats.errors += 1;
      } else if (!reply.ok) {
        stats.errors += 1;
        $("footer").textContent = `The coordinator answered ${reply.status}; retrying.`;
      } else {
        const text = await reply.text();
        stats.lastBytes = text.length;
        doc = JSON.parse(text);
        doc.groups = doc.groups.map((g) => ({ ...LEFT_OUT, ...g }));
        for (const g of doc.groups) g.vms = adopt(g.vms, doc.events);
        stats.lastFetchMs = performance.now() - started;
        fetchedAt = Date.now();
        skew = doc.now - fetchedAt / 1000;
        redraw();
        refresh();
      }
    } catch (e) {
      stats.errors += 1;
      $("footer").textContent = `The coordinator cannot be reached (${e.message}); retrying.`;
    }
    pollTimer = setTimeout(poll, document.hidden ? POLL_HIDDEN_MS : POLL_MS);
  }

  function setAll(open) {
    if (!doc || (open && doc.summarised)) return;
    for (const g of doc.groups) collapsed.set(g.group, !open);
    groupKeys.clear();
    const started = performance.now();
    renderGroups();
    stats.lastExpandMs = performance.now() - started;
  }

  document.addEventListener("DOMContentLoaded", () => {
    let timer = null;
    $("search").addEventListener("input", (e) => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        search = e.target.value.trim();
        if (!doc) return;
        if (search && doc.summarised) find(search);
        const started = performance.now();
        renderGroups();
        renderTimeline();
        renderDetail();
        stats.lastSearchMs = performance.now() - started;
      }, 150);
    });
    $("pause-fleet").addEventListener("click", () => {
      const paused = $("pause-fleet").dataset.paused === "1";
      act(paused ? "resume" : "pause", { scope: "fleet" }, paused ? "Resume all approvals" : "Pause all approvals",
        paused ? "Early approvals start again." : "No early approval anywhere until resumed; approvals already sent stand, and Azure still starts events at their NotBefore.");
    });
    $("token-button").addEventListener("click", () => askToken().then(showTokenState));
    $("expand-all").addEventListener("click", () => setAll(true));
    $("collapse-all").addEventListener("click", () => setAll(false));
    $("tl-range").addEventListener("change", renderTimeline);
    $("more-groups").addEventListener("click", () => { quietShown += QUIET_GROUPS; renderGroups(); });
    document.addEventListener("pointerdown", (e) => { if (e.target.closest("button")) pressing = true; }, true);
    document.addEventListener("pointerup", released, true);
    document.addEventListener("pointercancel", released, true);
    window.addEventListener("blur", released);
    showTokenState();
    setInterval(tick, 1000);
    poll();
  });
})();
