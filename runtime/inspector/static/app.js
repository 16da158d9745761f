// The tidelog inspector's page: plain JavaScript, no build step, no other site.
// Everything read from the log is put in the page with textContent (never as markup),
// and session ids go into URLs through encodeURIComponent / URLSearchParams only.
"use strict";

const TOKEN_KEY = "tidelog-inspector-token";
const WINDOW = 200;           // events per window
const LIST_POLL_MS = 2000;    // how often the session list is refreshed
const UNKNOWN = "TOOL_OUTCOME_UNKNOWN";

const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function pretty(value) {
  return JSON.stringify(value, null, 2);
}

function showTime(ts) {
  return new Date(ts * 1000).toISOString().replace("T", " ").replace("Z", "");
}

// -- the token: from the URL fragment once, then kept for this tab ------------------------

function takeToken() {
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token");
  if (token) {
    sessionStorage.setItem(TOKEN_KEY, token);
    params.delete("token");
    history.replaceState(null, "", location.pathname + location.search + (params.toString() ? "#" + params.toString() : ""));
  }
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

async function api(path, query, options) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query || {})) {
    if (value !== null && value !== undefined) params.set(key, String(value));
  }
  const headers = Object.assign({}, (options && options.headers) || {});
  if (token()) headers["X-Tidelog-Token"] = token();
  const response = await fetch(path + (params.toString() ? "?" + params : ""), Object.assign({}, options, { headers }));
  const body = await response.json();
  if (!response.ok) {
    const error = new Error(body.error || response.statusText);
    error.status = response.status;
    throw error;
  }
  return body;
}

// -- state -------------------------------------------------------------------------------

const state = {
  info: null,
  prefix: "",
  internal: false,
  listed: [],          // sessions shown, in id order
  next: null,          // cursor of the next page
  id: null,            // the session shown
  head: 0,             // its last committed seq known here
  asOf: null,          // the seq viewed (null: live at the head)
  events: [],          // the loaded window, in seq order, no gaps
  source: null,        // the EventSource of the live view
  valuesTimer: null,
  loadingOlder: false,
  generation: 0,       // bumped whenever the view changes, so stale answers are dropped
};

function setStatus(text, cls) {
  const node = $("status");
  node.textContent = text;
  node.className = "status " + (cls || "");
}

// -- the session list --------------------------------------------------------------------

function sessionItem(info) {
  const li = el("li");
  li.dataset.id = info.id;
  if (info.id === state.id) li.classList.add("current");
  const link = el("a");
  link.href = "#s=" + encodeURIComponent(info.id);
  const title = el("div", "sid", info.id);
  if (info.writer) title.append(el("span", "badge writer", "writer"));
  if (info.internal) title.append(el("span", "badge", "internal"));
  link.append(title);
  let meta = "head " + info.head + " · " + showTime(info.updated_at);
  if (info.parent) meta += " · fork of " + info.parent.id + "@" + info.parent.seq;
  link.append(el("div", "small", meta));
  li.append(link);
  return li;
}

function renderSessions() {
  const list = $("sessions");
  list.replaceChildren(...state.listed.map(sessionItem));
  $("more-sessions").hidden = state.next === null;
}

async function loadSessions(more) {
  const query = { limit: 100, prefix: state.prefix || null, internal: state.internal ? 1 : null };
  if (more) query.after = state.next;
  const page = await api("/api/sessions", query);
  state.listed = more ? state.listed.concat(page.sessions) : page.sessions;
  state.next = page.next;
  renderSessions();
}

async function refreshSessions() {
  // Refreshes as many sessions as are shown (the first pages), so paging stays put.
  try {
    const limit = Math.min(1000, Math.max(100, state.listed.length));
    const page = await api("/api/sessions", { limit, prefix: state.prefix || null, internal: state.internal ? 1 : null });
    state.listed = page.sessions;
    state.next = page.next;
    renderSessions();
  } catch (error) {
    setStatus("server unreachable", "down");
  }
}

// -- transcript rendering ----------------------------------------------------------------

function entryNode(event, ctx) {
  const data = event.data && typeof event.data === "object" && !Array.isArray(event.data) ? event.data : {};
  const seqTag = el("span", "seq", "#" + event.seq);
  let node;
  if (event.kind === "user" || event.kind === "assistant") {
    node = el("div", "msg " + event.kind);
    const label = event.kind === "assistant" && typeof data.agent === "string" ? "assistant · " + data.agent : event.kind;
    node.append(seqTag, el("span", "label", label));
    node.append(el("div", "body", typeof data.text === "string" ? data.text : pretty(event.data)));
  } else if (event.kind === "tool_call") {
    node = el("div", "tool");
    node.append(seqTag, el("span", "label", "tool call"), el("span", "sid", String(data.name)), el("span", "small", " " + String(data.call_id)));
    node.append(el("pre", "args", pretty(data.arguments)));
    const result = el("div", "result pending", "no result yet");
    node.append(result);
    ctx.calls.set(String(data.call_id), result);
  } else if (event.kind === "tool_result") {
    const slot = ctx.calls.get(String(data.call_id));
    const output = typeof data.output === "string" ? data.output : pretty(data.output);
    const cls = "result" + (data.is_error ? " error" : "") + (output.startsWith(UNKNOWN) ? " unknown" : "");
    if (slot) {
      slot.className = cls;
      slot.replaceChildren(el("span", "label", "result #" + event.seq + (data.is_error ? " (error)" : "")), el("pre", "", output));
      slot.dataset.seq = event.seq;
      return null;
    }
    node = el("div", "tool");
    node.append(seqTag, el("span", "label", "tool result"), el("span", "small", String(data.call_id)));
    const body = el("div", cls);
    body.append(el("pre", "", output));
    node.append(body);
  } else if (event.kind === "tidelog.segment") {
    node = el("div", "boundary", "end of run " + event.run_id + " (its entries are in the history)");
  } else {
    node = el("div", "sidecar");
    node.append(seqTag, el("span", "label", event.kind));
    node.append(el("pre", "", pretty(event.data)));
  }
  return node;
}

function appendTranscript(events, ctx, container) {
  for (const event of events) {
    if (event.run_id && event.run_id !== ctx.run && event.kind !== "tidelog.segment") {
      container.append(el("div", "boundary", "run " + event.run_id));
    }
    ctx.run = event.kind === "tidelog.segment" ? null : event.run_id;
    const node = entryNode(event, ctx);
    if (node) {
      node.dataset.seq = event.seq;
      container.append(node);
    }
  }
}

function eventRow(event) {
  const row = el("tr");
  row.dataset.seq = event.seq;
  row.append(el("td", "", event.seq), el("td", "", event.kind), el("td", "", event.run_id || "-"), el("td", "", showTime(event.ts)));
  const cell = el("td");
  cell.append(el("pre", "", pretty(event.data)));
  row.append(cell);
  return row;
}

let transcriptCtx = null;

function renderEvents() {
  // The whole window again (after a load, a time travel or an earlier page).
  const transcript = $("transcript");
  const first = state.events.length ? state.events[0].seq : state.head + 1;
  const older = el("div", "older", first > 1 ? "scroll up for earlier events (from seq " + (first - 1) + ")" : "start of the session");
  older.id = "older";
  transcriptCtx = { calls: new Map(), run: null };
  transcript.replaceChildren(older);
  appendTranscript(state.events, transcriptCtx, transcript);
  $("event-rows").replaceChildren(...state.events.map(eventRow));
}

function addLive(events) {
  const transcript = $("transcript");
  const stick = transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < 40;
  appendTranscript(events, transcriptCtx, transcript);
  $("event-rows").append(...events.map(eventRow));
  if (stick) transcript.scrollTop = transcript.scrollHeight;
}

// -- one session -------------------------------------------------------------------------

function renderInfo(body) {
  const info = body.session;
  $("session-id").textContent = info.id;
  const lineage = $("lineage");
  lineage.replaceChildren();
  if (info.parent) {
    lineage.append("forked from ");
    const link = el("a", "", info.parent.id);
    link.href = "#s=" + encodeURIComponent(info.parent.id) + "&at=" + info.parent.seq;
    lineage.append(link, " at seq " + info.parent.seq);
  }
  if (body.forks.length) {
    const forks = el("div", "small", "forks: ");
    forks.id = "forks";
    body.forks.forEach((fork, i) => {
      if (i) forks.append(", ");
      const link = el("a", "", fork.id);
      link.href = "#s=" + encodeURIComponent(fork.id);
      forks.append(link, " (at " + fork.seq + ")");
    });
    lineage.append(forks);
  }
  let meta = "head " + body.head + " · created " + showTime(info.created_at) + " · updated " + showTime(info.updated_at);
  if (info.writer) meta += " · written now by " + info.writer;
  $("session-meta").textContent = meta;
  renderValues(body);
}

function renderValues(body) {
  const values = $("values");
  values.replaceChildren(el("div", "small", "as of seq " + body.as_of_seq));
  for (const [name, value] of Object.entries(body.values)) {
    const box = el("div", "run");
    box.dataset.projection = name;
    box.append(el("span", "label", name), el("pre", "", pretty(value)));
    values.append(box);
  }
}

function decisionText(d) {
  let text = (d.approved ? "approved" : "rejected") + " call " + d.call_id + " by " + d.by + " at " + showTime(d.at);
  if (d.message) text += ": " + d.message;
  return text;
}

async function control(path, body) {
  // A run control (writes enabled): its outcome, or why it was refused, as text.
  const by = $("decider").value.trim();
  if (by) body.by = by;
  const out = $("control-result");
  try {
    const answer = await api(path, {}, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    if (answer.decision) out.textContent = decisionText(answer.decision);
    else out.textContent = answer.requested ? "asked run " + answer.run_id + " to stop" : "run " + answer.run_id + " is " + answer.status + ": nothing to stop";
  } catch (error) {
    out.textContent = "refused: " + error.message;
  }
  await refreshRuns(state.generation, true);
}

function approvalNode(run, call, writes) {
  const box = el("div", "approval");
  box.dataset.call = call.call_id;
  box.append(el("div", "small pending", "awaits approval: " + call.name + " (" + call.call_id + ")"));
  box.append(el("pre", "", pretty(call.arguments)));
  if (writes) {
    const row = el("div", "decide");
    const message = el("input");
    message.type = "text";
    message.className = "message";
    message.placeholder = "message for the model (reject)";
    const yes = el("button", "approve", "approve");
    const no = el("button", "reject", "reject");
    yes.addEventListener("click", () => control("/api/approve", { run_id: run.run_id, call_id: call.call_id }));
    no.addEventListener("click", () => control("/api/reject", { run_id: run.run_id, call_id: call.call_id, message: message.value || null }));
    row.append(yes, no, message);
    box.append(row);
  }
  return box;
}

let shownRuns = null;

function renderRuns(body) {
  const writes = !!(state.info && state.info.writes);
  $("run-controls").hidden = !writes;
  const runs = $("runs");
  runs.replaceChildren();
  if (!body.runs.length) runs.append(el("div", "small", "no run checkpoints stored for this session"));
  for (const run of body.runs) {
    const box = el("div", "run");
    box.dataset.run = run.run_id;
    box.append(el("span", "sid", run.run_id), el("span", "badge " + run.status, run.status));
    if (writes && run.status === "running") {
      const stop = el("button", "stop", "stop");
      stop.addEventListener("click", () => control("/api/stop", { run_id: run.run_id }));
      box.append(" ", stop);
    }
    box.append(el("div", "small", "agent " + run.agent + " · turns " + run.turns + " · saved " + showTime(run.updated_at) +
      (run.first_seq !== null ? " · seq " + run.first_seq + "–" + run.last_seq : " · not in the history yet")));
    const checkpoint = el("a", "small checkpoint", "checkpoint " + run.checkpoint);
    checkpoint.href = "#s=" + encodeURIComponent(run.checkpoint);
    const where = el("div", "small");
    where.append(checkpoint);
    box.append(where);
    const asking = new Set(run.pending_approvals.map((call) => call.call_id));
    for (const call of run.pending_approvals) box.append(approvalNode(run, call, writes));
    for (const call of run.pending_calls) {
      if (!asking.has(call.call_id)) box.append(el("div", "small pending", "pending tool call " + call.name + " (" + call.call_id + ")"));
    }
    for (const d of run.decisions) box.append(el("div", "small decision" + (d.approved ? "" : " rejected"), decisionText(d)));
    for (const callId of run.unknown_outcomes) {
      box.append(el("div", "small unknown", "outcome unknown after a crash: call " + callId));
    }
    if (run.error) box.append(el("div", "small error", "error: " + run.error.type + ": " + run.error.message));
    runs.append(box);
  }
}

async function refreshRuns(generation, always) {
  // Runs change in their checkpoints, not in the conversation: re-read them while shown
  // (re-drawn only when they changed, so a message being typed is kept).
  if (!state.id) return;
  try {
    const body = await api("/api/runs", { id: state.id });
    if (generation !== state.generation) return;
    const key = JSON.stringify(body.runs);
    if (always || key !== shownRuns) {
      shownRuns = key;
      renderRuns(body);
    }
  } catch (error) {
    // The next refresh tries again.
  }
}

function updateTravel() {
  const at = state.asOf === null ? state.head : state.asOf;
  $("at-range").max = String(state.head);
  $("at-range").value = String(at);
  $("at").max = String(state.head);
  $("at").value = String(at);
  $("viewing").textContent = state.asOf === null ? "live at seq " + state.head : "viewing as of seq " + state.asOf + " (head " + state.head + ")";
  $("live").disabled = state.asOf === null;
  $("fork-form").hidden = !(state.info && state.info.writes);
}

function closeStream() {
  if (state.source) {
    state.source.close();
    state.source = null;
  }
}

async function openSession(id, asOf) {
  const generation = ++state.generation;
  closeStream();
  state.id = id;
  state.asOf = asOf;
  state.events = [];
  $("empty").hidden = true;
  $("session").hidden = false;
  for (const li of $("sessions").children) li.classList.toggle("current", li.dataset.id === id);
  let body, window;
  try {
    body = await api("/api/session", { id, as_of_seq: asOf });
    window = await api("/api/events", { id, until_seq: body.as_of_seq, limit: WINDOW, from_end: 1 });
  } catch (error) {
    if (generation !== state.generation) return;
    $("session-id").textContent = id;
    $("lineage").replaceChildren();
    $("session-meta").textContent = "cannot open: " + error.message;
    $("transcript").replaceChildren();
    $("event-rows").replaceChildren();
    return;
  }
  if (generation !== state.generation) return;
  state.head = body.head;
  state.events = window.events;
  renderInfo(body);
  renderEvents();
  updateTravel();
  // A session opens at its end: the pane shown now, and each other one when first shown.
  for (const pane of [$("transcript"), $("events")]) {
    pane.dataset.fresh = "1";
    if (!pane.hidden) toEnd(pane);
  }
  shownRuns = null;
  refreshRuns(generation, true);
  if (asOf === null) {
    openStream(generation, body.as_of_seq);
  } else {
    setStatus("paused at seq " + asOf, "paused");
  }
}

function lastSeq() {
  return state.events.length ? state.events[state.events.length - 1].seq : (state.asOf === null ? state.head : state.asOf);
}

function openStream(generation, since) {
  // The browser reconnects on its own and sends Last-Event-ID, so the server resumes
  // right after the last event received; events already here are skipped by seq.
  const query = new URLSearchParams({ id: state.id, since_seq: String(since) });
  if (token()) query.set("token", token());
  const source = new EventSource("/api/stream?" + query);
  state.source = source;
  setStatus("live", "live");
  source.addEventListener("open", () => { if (generation === state.generation) setStatus("live", "live"); });
  source.addEventListener("event", (message) => {
    if (generation !== state.generation) return;
    const event = JSON.parse(message.data);
    const last = lastSeq();
    if (event.seq <= last) return;              // already shown
    if (event.seq !== last + 1) {               // never leave a gap: reload the window
      openSession(state.id, null);
      return;
    }
    state.events.push(event);
    state.head = Math.max(state.head, event.seq);
    addLive([event]);
    updateTravel();
    scheduleValues(generation);
  });
  source.addEventListener("expired", () => {
    if (generation === state.generation) openSession(state.id, null);
  });
  source.addEventListener("error", () => {
    if (generation !== state.generation) return;
    if (source.readyState === EventSource.CLOSED) {
      setStatus("disconnected; retrying", "down");
      setTimeout(() => { if (generation === state.generation) openStream(generation, lastSeq()); }, 1000);
    } else {
      setStatus("reconnecting", "down");
    }
  });
}

function scheduleValues(generation) {
  // Projection values and runs follow the live head, at most a few times a second.
  if (state.valuesTimer) return;
  state.valuesTimer = setTimeout(async () => {
    state.valuesTimer = null;
    if (generation !== state.generation) return;
    try {
      const body = await api("/api/session", { id: state.id });
      if (generation !== state.generation || state.asOf !== null) return;
      renderInfo(body);
      await refreshRuns(generation, false);
    } catch (error) {
      // The next event schedules another try.
    }
  }, 250);
}

async function loadOlder() {
  if (state.loadingOlder || !state.events.length || state.events[0].seq <= 1) return;
  state.loadingOlder = true;
  const generation = state.generation;
  try {
    const first = state.events[0].seq;
    const body = await api("/api/events", { id: state.id, until_seq: first - 1, limit: WINDOW, from_end: 1 });
    if (generation !== state.generation) return;
    // Earlier events go above: each pane keeps the events in view where they were.
    const panes = [$("transcript"), $("events")];
    const fromBottom = panes.map((pane) => pane.scrollHeight - pane.scrollTop);
    state.events = body.events.concat(state.events);
    renderEvents();
    panes.forEach((pane, i) => { pane.scrollTop = pane.scrollHeight - fromBottom[i]; });
  } catch (error) {
    setStatus("cannot load earlier events: " + error.message, "down");
  } finally {
    state.loadingOlder = false;
  }
}

// -- navigation --------------------------------------------------------------------------

function route() {
  const params = new URLSearchParams(location.hash.slice(1));
  const id = params.get("s");
  if (id === null) return;
  const at = params.get("at");
  openSession(id, at === null ? null : Number(at));
}

function travel(at) {
  const params = new URLSearchParams({ s: state.id });
  if (at !== null) params.set("at", String(at));
  location.hash = params.toString();
}

async function fork() {
  const newId = $("fork-id").value;
  const at = state.asOf === null ? lastSeq() : state.asOf;
  try {
    const body = await api("/api/fork", {}, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ id: state.id, new_id: newId, at_seq: at }),
    });
    $("fork-result").textContent = "forked " + body.session.id + " at seq " + at;
    await refreshSessions();
    const hash = new URLSearchParams({ s: body.session.id }).toString();
    if (location.hash === "#" + hash) route();
    else location.hash = hash;
  } catch (error) {
    $("fork-result").textContent = "fork refused: " + error.message;
  }
}

function toEnd(pane) {
  delete pane.dataset.fresh;
  pane.scrollTop = pane.scrollHeight;
}

function selectTab(name) {
  for (const button of document.querySelectorAll(".tabs button")) button.classList.toggle("active", button.dataset.tab === name);
  for (const pane of document.querySelectorAll(".pane")) {
    pane.hidden = pane.dataset.pane !== name;
    if (!pane.hidden && pane.dataset.fresh) toEnd(pane);
  }
}

async function start() {
  takeToken();
  try {
    state.info = await api("/api/info");
  } catch (error) {
    setStatus("cannot reach the inspector: " + error.message, "down");
    return;
  }
  $("mode").textContent = state.info.writes ? "writes enabled" : "read-only";
  setStatus("ready", "");
  $("prefix").addEventListener("input", () => { state.prefix = $("prefix").value; loadSessions(false); });
  $("internal").addEventListener("change", () => { state.internal = $("internal").checked; loadSessions(false); });
  $("more-sessions").addEventListener("click", () => loadSessions(true));
  $("at-range").addEventListener("input", () => { $("at").value = $("at-range").value; });
  $("view-at").addEventListener("click", () => travel(Math.max(0, Math.min(state.head, Number($("at").value) || 0))));
  $("live").addEventListener("click", () => travel(null));
  $("fork").addEventListener("click", fork);
  for (const button of document.querySelectorAll(".tabs button")) button.addEventListener("click", () => selectTab(button.dataset.tab));
  for (const pane of [$("transcript"), $("events")]) {
    pane.addEventListener("scroll", () => { if (pane.scrollTop < 60) loadOlder(); });
  }
  window.addEventListener("hashchange", route);
  await loadSessions(false);
  setInterval(refreshSessions, LIST_POLL_MS);
  setInterval(() => { if (!$("runs-pane").hidden) refreshRuns(state.generation, false); }, LIST_POLL_MS);
  route();
}

start();
