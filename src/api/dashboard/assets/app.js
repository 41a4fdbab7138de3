// aurad dashboard: reads the JSON API of the daemon that served it.
// Every piece of text from the API is inserted as a text node (el() below),
// never as HTML. The bearer token, when the API asks for one, is kept in
// sessionStorage and sent as a header; there are no cookies.
"use strict";

const TOKEN_KEY = "aurad.token";
const PAGE = 25;
const STATES = ["queued", "running", "waiting_approval", "succeeded", "failed",
  "timed_out", "cancelled", "budget_exceeded", "skipped", "missed", "interrupted"];
const TRIGGERS = ["api", "cli", "schedule", "webhook", "after", "watch", "retry", "mcp"];

let stream = null; // the AbortController of the open event stream
let renderSeq = 0; // bumps on each navigation; late answers of an old view are dropped
let poller = null; // the interval of the shown list's live refresh

// The lists (Agents, Runs, Schedules) update live by polling: the API has
// no stream of list changes (only each run's event stream), so the shown
// list is read again every LIVE_MS while the tab is visible, and redrawn
// only when what it shows changed.
const LIVE_MS = 4000;

// ---------- DOM ----------

// el("tag", {attr: value, class: "x", onclick: fn}, child, "text", [more])
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function view() { return document.getElementById("view"); }

let noticeAt = 0; // when the notice was shown; the next-but-one view clears it

function notice(text, kind) {
  noticeAt = Date.now();
  const box = document.getElementById("notice");
  box.textContent = text || "";
  box.className = kind || "";
  box.hidden = !text;
}

// ---------- API ----------

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function headers(extra) {
  const h = Object.assign({ Accept: "application/json" }, extra || {});
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) h.Authorization = "Bearer " + token;
  return h;
}

async function api(path, options) {
  const opts = Object.assign({}, options || {});
  opts.headers = headers(opts.body !== undefined ? { "Content-Type": "application/json" } : {});
  if (opts.body !== undefined) opts.body = JSON.stringify(opts.body);
  const response = await fetch(path, opts);
  if (response.status === 401) {
    askToken();
    throw new ApiError(401, "this daemon needs its token: enter it above");
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new ApiError(response.status, body.error || response.statusText);
  return body;
}

function askToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  const form = document.getElementById("token-form");
  form.hidden = false;
  document.getElementById("token-input").focus();
}

function setupToken() {
  const form = document.getElementById("token-form");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("token-input");
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    form.hidden = true;
    route();
  });
}

// Reads the SSE stream of `path` with fetch (EventSource cannot send the
// token), calling onEvent(kind, data, id) per event until it ends.
async function readEvents(path, onEvent, signal) {
  const response = await fetch(path, { headers: headers({ Accept: "text/event-stream" }), signal });
  if (response.status === 401) { askToken(); throw new ApiError(401, "token needed"); }
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    throw new ApiError(response.status, body.error || response.statusText);
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let kind = "message", id = null;
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") kind = text;
        else if (field === "data") data.push(text);
        else if (field === "id") id = text;
      }
      if (data.length) onEvent(kind, JSON.parse(data.join("\n")), id);
    }
  }
}

// ---------- formatting ----------

// Every time shown says its zone: the browser's own, by its short name
// ("UTC", "GMT+1", "EST": the names depend on its language), as
// 2026-12-06 11:34:05 UTC. The title holds the
// instant in UTC.
const TIME_FORMAT = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
  second: "2-digit", hourCycle: "h23", timeZoneName: "short", numberingSystem: "latn",
});

function when(text) {
  if (!text) return "";
  const date = new Date(text);
  if (isNaN(date)) return text;
  const p = {};
  for (const part of TIME_FORMAT.formatToParts(date)) p[part.type] = part.value;
  return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second} ${p.timeZoneName}`;
}

function utc(text) {
  const date = new Date(text);
  return isNaN(date) ? text : date.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

function timeEl(text) {
  return text ? el("time", { datetime: text, title: utc(text) }, when(text)) : "—";
}

function duration(run) {
  if (!run.started_at) return "";
  const end = run.finished_at ? new Date(run.finished_at) : new Date();
  const ms = end - new Date(run.started_at);
  return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
}

function tokens(usage) {
  if (!usage) return "";
  const input = usage.input_tokens, output = usage.output_tokens;
  if (input == null && output == null) return "";
  return (input ?? "?") + " in / " + (output ?? "?") + " out";
}

function cost(usd) {
  return usd === null || usd === undefined ? "" : "$" + Number(usd).toFixed(4);
}

function stateBadge(state) {
  return el("span", { class: "state state-" + state }, state.replace(/_/g, " "));
}

// Run ids are UUIDv7: their first 12 hex digits are the start time, so runs
// started in the same minute share a prefix. Lists show the time part's head
// and the random tail; the full id is in the link's title and on the run page.
function shortId(id) {
  return id.length > 16 ? id.slice(0, 8) + "\u2026" + id.slice(-4) : id;
}

function runLink(id, text) {
  return el("a", { href: "#/run/" + encodeURIComponent(id), title: id }, text || shortId(id));
}

function pretty(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { return text; }
}

function table(caption, columns, rows) {
  return el("div", { class: "scroll", role: "region", "aria-label": caption, tabindex: "0" },
    el("table", {},
      el("caption", {}, caption),
      el("thead", {}, el("tr", {}, columns.map((c) => el("th", { scope: "col" }, c)))),
      el("tbody", {}, rows.length ? rows
        : el("tr", {}, el("td", { colspan: columns.length, class: "empty" }, "None.")))));
}

function field(label, control) {
  const id = "f-" + label.toLowerCase().replace(/[^a-z0-9]+/g, "-");
  control.id = id;
  return el("div", { class: "field" }, el("label", { for: id }, label), control);
}

function select(name, options, current) {
  return el("select", { name },
    options.map(([value, text]) => el("option", { value, selected: value === current }, text)));
}

function section(title, ...children) {
  return el("section", {}, el("h3", {}, title), children);
}

function errorBox(error) {
  return el("p", { class: "error", role: "alert" }, String(error.message || error));
}

// ---------- router ----------

function parseHash() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(query || "") };
}

async function route() {
  if (stream) { stream.abort(); stream = null; }
  if (poller) { clearInterval(poller); poller = null; }
  const seq = ++renderSeq;
  if (Date.now() - noticeAt > 3000) notice("");
  const { parts, params } = parseHash();
  const name = parts[0] || "agents";
  for (const link of document.querySelectorAll("nav a")) {
    const section = { run: "runs", agent: "agents" }[name] || name;
    if (link.dataset.view === section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const views = {
    agents: agentsView, agent: agentView, runs: runsView, run: runView, chat: chatView,
    schedules: schedulesView, memory: memoryView,
  };
  const render = views[name] || agentsView;
  const container = el("div", { class: "view", "data-route": location.hash });
  try {
    await render(container, parts.slice(1), params, () => seq === renderSeq);
  } catch (error) {
    container.append(errorBox(error));
  }
  if (seq !== renderSeq) return;
  view().replaceChildren(container);
}

function current(isCurrent, fn) {
  return (...args) => { if (isCurrent()) fn(...args); };
}

// Keeps `box` showing draw(data) for the data load() reads, live: read
// again every LIVE_MS while the view is shown and the tab visible, and
// redrawn only when the data changed (so nothing moves under a pointer for
// nothing). `first` is the data already read for the first drawing.
function live(isCurrent, box, load, draw, first) {
  let shown = JSON.stringify(first);
  box.replaceChildren(draw(first));
  let busy = false;
  const tick = async () => {
    if (busy || document.hidden || !isCurrent()) return;
    busy = true;
    try {
      const data = await load();
      const text = JSON.stringify(data);
      if (isCurrent() && text !== shown) {
        shown = text;
        box.replaceChildren(draw(data));
      }
    } catch (_) {
      // A failed read keeps what is shown; the next tick tries again.
    } finally {
      busy = false;
    }
  };
  if (poller) clearInterval(poller);
  poller = setInterval(tick, LIVE_MS);
  return box;
}

// ---------- agents ----------

async function agentsView(root, _parts, _params, isCurrent) {
  const load = async () => {
    const [{ agents }, status, waiting] = await Promise.all([
      api("/v1/agents"), api("/v1/status"), api("/v1/approvals"),
    ]);
    return { agents, status, approvals: waiting.approvals };
  };
  const data = await load();
  root.append(el("h2", {}, "Agents"));
  const lists = el("div", { class: "live-list", id: "agents-live" });
  root.append(lists);
  live(isCurrent, lists, load, (d) => agentsLists(d), data);
  // The form is outside the live part: what is typed stays.
  root.append(startForm(data.agents));
}

function agentsLists({ agents, status, approvals }) {
  const stale = new Set((status.agents || []).filter((a) => a.stale).map((a) => a.name));
  const rows = agents.map((agent) => {
    const last = agent.last_run;
    const next = agent.schedules.flatMap((s) => s.next_fires).sort()[0];
    let health = "ok";
    if (stale.has(agent.name)) health = "stale (file has errors)";
    else if (agent.backoff_until) health = "backing off until " + when(agent.backoff_until);
    else if (agent.consecutive_failures) health = agent.consecutive_failures + " failure(s) in a row";
    return el("tr", {},
      el("th", { scope: "row" }, el("a", { href: "#/agent/" + encodeURIComponent(agent.name) }, agent.name)),
      el("td", {}, agent.description),
      el("td", {}, health),
      el("td", {}, last ? [stateBadge(last.state), " ", runLink(last.id), " ", timeEl(last.created_at)] : "never run"),
      el("td", {}, next ? timeEl(next) : "—"),
      el("td", {}, agent.model));
  });
  const out = document.createDocumentFragment();
  out.append(table("Agents", ["Agent", "Description", "Status", "Last run", "Next fire", "Model"], rows));
  out.append(waitingSection(approvals));
  const channels = status.channels || [];
  if (channels.length) {
    out.append(table("Channels", ["Channel", "Platform", "Agent", "Connection", "In", "Out", "Ignored", "Duplicates", "Last error"],
      channels.map((c) => el("tr", {},
        el("th", { scope: "row" }, c.name), el("td", {}, c.platform), el("td", {}, c.agent),
        el("td", {}, c.connection.state + (c.connection.reason ? ": " + c.connection.reason : "")),
        ...[c.messages_in, c.messages_out, c.ignored, c.duplicates].map((n) => el("td", {}, String(n))),
        el("td", {}, c.last_error ? [timeEl(c.last_error_at), " ", c.last_error] : "—")))));
  }
  const skipped = status.skipped || [];
  out.append(section("Load errors",
    skipped.length
      ? el("ul", { class: "errors" }, skipped.map((item) => el("li", {},
        el("strong", {}, item.kind + " " + item.name), item.stale ? " (last good version kept)" : " (left out)",
        ": ", el("code", {}, item.path + ":" + item.line + ":" + item.column), " ", item.message)))
      : el("p", {}, "Every file loaded.")));
  return out;
}

function startForm(agents) {
  const agentSelect = select("agent", agents.map((a) => [a.name, a.name]), agents[0] && agents[0].name);
  const input = el("textarea", { name: "input", rows: "3", placeholder: "What the run is asked (empty: the agent's prompt)" });
  const form = el("form", { class: "start", "aria-labelledby": "start-title" },
    el("h3", { id: "start-title" }, "Start a run"),
    field("Agent", agentSelect),
    field("Input", input),
    el("button", { type: "submit" }, "Start run"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = input.value.trim() ? { input: input.value } : {};
    try {
      const run = await api("/v1/agents/" + encodeURIComponent(agentSelect.value) + "/runs", { method: "POST", body });
      notice("Started run " + run.id + " of " + run.agent + ".", "ok");
      location.hash = "#/run/" + encodeURIComponent(run.id);
    } catch (error) {
      notice("Could not start the run: " + error.message, "bad");
    }
  });
  return form;
}

function waitingSection(approvals) {
  return section("Waiting for approval",
    approvals.length
      ? el("ul", { class: "waiting" }, approvals.map((call) => el("li", {},
        runLink(call.run_id), " ", call.agent, " ", timeEl(call.requested_at), " ",
        callView(call), approvalButtons(call, route))))
      : el("p", {}, "No run waits for a person."));
}

// The call a decision is about: what the person approves is what they see.
function callView(call) {
  return el("span", { class: "call" }, el("code", {}, call.tool), " ",
    el("pre", { class: "text" }, pretty(call.arguments)));
}

// Approve and Deny for the call `call` ({run_id, agent, call_id}) a run
// waits on; the decision names the call, so it can never reach another.
// `after` runs once the decision is stored (the run view needs nothing:
// its event stream shows it).
function approvalButtons(call, after) {
  const run = { id: call.run_id, agent: call.agent };
  const buttons = [];
  const decide = async (approve) => {
    const body = { call_id: call.call_id, approve };
    if (!approve) body.reason = "denied from the dashboard";
    buttons.forEach((b) => { b.disabled = true; });
    try {
      await api("/v1/runs/" + encodeURIComponent(run.id) + "/approval", { method: "POST", body });
      notice((approve ? "Approved" : "Denied") + " run " + run.id + ".", "ok");
      if (after) after();
    } catch (error) {
      buttons.forEach((b) => { b.disabled = false; });
      notice("Could not decide: " + error.message, "bad");
    }
  };
  const label = (verb) => verb + " run " + shortId(run.id) + " of " + run.agent;
  buttons.push(
    el("button", { type: "button", class: "approve", "aria-label": label("Approve"), onclick: () => decide(true) }, "Approve"),
    el("button", { type: "button", class: "deny", "aria-label": label("Deny"), onclick: () => decide(false) }, "Deny"));
  return el("span", { class: "decide" }, buttons);
}

// ---------- runs ----------

async function runsView(root, _parts, params, isCurrent) {
  const filter = {
    agent: params.get("agent") || "",
    state: params.get("state") || "",
    trigger: params.get("trigger") || "",
    offset: Math.max(0, parseInt(params.get("offset") || "0", 10) || 0),
  };
  const query = new URLSearchParams({ limit: String(PAGE), offset: String(filter.offset) });
  for (const key of ["agent", "state", "trigger"]) if (filter[key]) query.set(key, filter[key]);
  const loadRuns = async () => (await api("/v1/runs?" + query)).runs;
  const [{ agents }, runs] = await Promise.all([api("/v1/agents"), loadRuns()]);
  root.append(el("h2", {}, "Runs"));
  const agentSelect = select("agent", [["", "any"], ...agents.map((a) => [a.name, a.name])], filter.agent);
  const stateSelect = select("state", [["", "any"], ...STATES.map((s) => [s, s.replace(/_/g, " ")])], filter.state);
  const triggerSelect = select("trigger", [["", "any"], ...TRIGGERS.map((t) => [t, t])], filter.trigger);
  const form = el("form", { class: "filters", "aria-label": "Filter runs" },
    field("Agent", agentSelect), field("State", stateSelect), field("Trigger", triggerSelect),
    el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = "#/runs?" + pageQuery(agentSelect.value, stateSelect.value, triggerSelect.value, 0);
  });
  root.append(form);
  root.append(live(isCurrent, el("div", { class: "live-list", id: "runs-live" }), loadRuns,
    (list) => runTable("Runs", list), runs));
  const pager = el("nav", { class: "pager", "aria-label": "Pages" });
  if (filter.offset > 0) {
    pager.append(el("a", { href: "#/runs?" + pageQuery(filter.agent, filter.state, filter.trigger, Math.max(0, filter.offset - PAGE)) }, "← Newer"));
  }
  pager.append(el("span", {}, runs.length ? `${filter.offset + 1}–${filter.offset + runs.length}` : ""));
  if (runs.length === PAGE) {
    pager.append(el("a", { href: "#/runs?" + pageQuery(filter.agent, filter.state, filter.trigger, filter.offset + PAGE) }, "Older →"));
  }
  root.append(pager);
}

function pageQuery(agent, state, trigger, offset) {
  const q = new URLSearchParams();
  if (agent) q.set("agent", agent);
  if (state) q.set("state", state);
  if (trigger) q.set("trigger", trigger);
  if (offset) q.set("offset", String(offset));
  return q.toString();
}

function runTable(caption, runs) {
  return table(caption, ["Run", "Agent", "State", "Trigger", "Created", "Took", "Tokens", "Cost"],
    runs.map((run) => el("tr", {},
      el("th", { scope: "row" }, runLink(run.id)),
      el("td", {}, run.agent),
      el("td", {}, stateBadge(run.state)),
      el("td", {}, run.trigger),
      el("td", {}, timeEl(run.created_at)),
      el("td", {}, duration(run)),
      el("td", {}, tokens(run.usage)),
      el("td", {}, cost(run.cost_usd)))));
}

// ---------- one run ----------

async function runView(root, parts, _params, isCurrent) {
  const id = parts[0] || "";
  const run = await api("/v1/runs/" + encodeURIComponent(id));
  const children = await api("/v1/runs?parent=" + encodeURIComponent(run.id) + "&limit=200");
  root.append(el("h2", {}, "Run ", el("code", {}, run.id), " of ", run.agent));
  const summary = el("dl", { class: "summary" });
  const fillSummary = (r) => {
    const pairs = [
      ["State", stateBadge(r.state)], ["Agent", r.agent], ["Trigger", r.trigger], ["Model", r.model],
      ["Created", timeEl(r.created_at)], ["Started", timeEl(r.started_at)], ["Finished", timeEl(r.finished_at)],
      ["Took", duration(r)], ["Tokens", tokens(r.usage) || "—"], ["Cost", cost(r.cost_usd) || "—"],
    ];
    if (r.parent_run_id) pairs.push(["Parent run", runLink(r.parent_run_id)]);
    if (r.scheduled_for) pairs.push(["Fire", timeEl(r.scheduled_for)]);
    summary.replaceChildren(...pairs.map(([k, v]) => el("div", {}, el("dt", {}, k), el("dd", {}, v))));
    summary.dataset.state = r.state;
  };
  fillSummary(run);
  root.append(summary);
  // Cancel, while the run is queued, running or waiting for a person.
  const cancel = el("button", { type: "button", class: "deny", id: "cancel-run" }, "Cancel run");
  const showCancel = (state) => { cancel.hidden = !["queued", "running", "waiting_approval"].includes(state); };
  cancel.addEventListener("click", async () => {
    cancel.disabled = true;
    try {
      await api("/v1/runs/" + encodeURIComponent(run.id) + "/cancel", { method: "POST", body: {} });
      notice("Cancelling run " + run.id + ".", "ok");
    } catch (error) {
      cancel.disabled = false;
      notice("Could not cancel: " + error.message, "bad");
    }
  });
  showCancel(run.state);
  root.append(el("p", { class: "actions" }, cancel));
  const approval = el("div", { class: "approval" });
  // The call the run waits on, from its approval_requested event.
  let pending = null;
  const showApproval = (r) => approval.replaceChildren(...(r.state === "waiting_approval"
    ? (pending
      ? [el("p", {}, "This run waits for a person's decision on:"), callView(pending), approvalButtons(pending)]
      : [el("p", {}, "This run waits for a person's decision (reading which call…).")])
    : []));
  showApproval(run);
  root.append(approval);
  if (run.error) root.append(section("Error", el("pre", { class: "error" }, run.error)));
  root.append(section("Input", el("pre", { class: "text" }, run.input || "(none)")));
  const output = el("pre", { class: "text", id: "run-output" }, run.output || "");
  root.append(section("Output", output));
  if (children.runs.length) root.append(runTable("Sub-runs and pipeline steps' runs", children.runs));
  const timeline = el("ol", { class: "timeline", id: "timeline", "aria-live": "polite" });
  const live = el("p", { class: "live", id: "live" }, "Reading events…");
  root.append(section("Events", live, timeline));

  const onTimeline = makeTimeline(timeline);
  const onEvent = current(isCurrent, (kind, data) => {
    onTimeline(kind, data);
    if (kind === "started") { live.textContent = "Running…"; showCancel("running"); }
    if (kind === "approval_requested" || kind === "approval_decided") {
      run.state = kind === "approval_requested" ? "waiting_approval" : "running";
      pending = kind === "approval_requested"
        ? { run_id: run.id, agent: run.agent, call_id: data.id, tool: data.name, arguments: data.arguments }
        : null;
      fillSummary(run);
      showApproval(run);
    }
    if (kind === "finished" && data.output) output.textContent = data.output;
  });
  const controller = new AbortController();
  stream = controller;
  // Events before the view is shown go into it while it is detached.
  readEvents("/v1/runs/" + encodeURIComponent(run.id) + "/events", onEvent, controller.signal)
    .then(async () => {
      if (!isCurrent()) return;
      const done = await api("/v1/runs/" + encodeURIComponent(run.id));
      if (!isCurrent()) return;
      fillSummary(done);
      showApproval(done);
      showCancel(done.state);
      output.textContent = done.output || "";
      live.textContent = "Finished: " + done.state.replace(/_/g, " ") + ".";
      live.dataset.finished = done.state;
    })
    .catch((error) => {
      if (error.name !== "AbortError" && isCurrent()) live.textContent = "Event stream: " + error.message;
    });
}

// Returns the event handler appending `timeline` entries: text deltas of a
// turn merge into one answer, each tool call folds with its result.
function makeTimeline(timeline) {
  let answer = null;
  const calls = new Map();
  const item = (kind, ...children) => {
    const li = el("li", { class: "ev ev-" + kind }, children);
    timeline.append(li);
    return li;
  };
  return (kind, data) => {
    if (kind !== "text_delta") answer = null;
    switch (kind) {
      case "started":
        item(kind, el("strong", {}, "Started"), " ", data.agent, " on ", data.model, " (", data.trigger, ")");
        break;
      case "text_delta":
        if (!answer) {
          answer = el("pre", { class: "text" });
          item(kind, el("strong", {}, "Answer"), answer);
        }
        answer.append(document.createTextNode(data.text));
        break;
      case "reasoning_delta":
        item(kind, el("details", {}, el("summary", {}, "Reasoning"), el("pre", { class: "text" }, data.text)));
        break;
      case "tool_call": {
        const result = el("div", { class: "result" }, el("em", {}, "waiting for the result…"));
        const summary = el("summary", {}, el("strong", {}, "Tool "), el("code", {}, data.name));
        const details = el("details", { class: "tool" }, summary,
          el("div", { class: "label" }, "Arguments"), el("pre", { class: "text" }, pretty(data.arguments)), result);
        calls.set(data.id, { summary, result });
        item(kind, details);
        break;
      }
      case "tool_result": {
        const call = calls.get(data.id);
        const body = [el("div", { class: "label" }, data.is_error ? "Error" : "Result"),
          el("pre", { class: data.is_error ? "text error" : "text" }, data.output)];
        const note = " · " + (data.is_error ? "error" : "ok") + " · " + data.duration_ms + " ms";
        if (call) { call.result.replaceChildren(...body); call.summary.append(note); }
        else item(kind, el("details", { class: "tool" }, el("summary", {}, "Result of ", el("code", {}, data.name), note), body));
        break;
      }
      case "usage":
        item(kind, "Model call ", String(data.iteration), data.model ? [" (", el("code", {}, data.model), ")"] : "",
          tokens(data) ? ": " + tokens(data) : " ended",
          data.cost_usd !== undefined ? " · " + cost(data.cost_usd) : "");
        break;
      case "approval_requested":
        item(kind, el("strong", {}, "Waits for approval: "), el("code", {}, data.name), " ",
          el("pre", { class: "text" }, pretty(data.arguments)), "until ", timeEl(data.timeout_at));
        break;
      case "approval_decided":
        item(kind, el("strong", {}, data.approved ? "Approved" : "Denied"), " ", el("code", {}, data.name),
          " by ", String(data.by), data.reason ? ": " + data.reason : "");
        break;
      case "step_started":
        item(kind, el("strong", {}, "Step "), el("code", {}, data.step + (data.index !== undefined ? "[" + data.index + "]" : "")),
          " started (attempt ", String(data.attempt), ")");
        break;
      case "step_finished":
        item(kind, el("strong", {}, "Step "), el("code", {}, data.step + (data.index !== undefined ? "[" + data.index + "]" : "")),
          " ", stateBadge(data.state), data.retrying ? " (will retry)" : "", " · ", data.duration_ms + " ms",
          data.child_run_id ? [" · run ", runLink(data.child_run_id)] : "",
          data.error ? el("pre", { class: "text error" }, data.error) : "",
          data.output ? el("details", {}, el("summary", {}, "Output"), el("pre", { class: "text" }, data.output)) : "");
        break;
      case "memory_recalled":
        item(kind, el("strong", {}, "Recalled "), String(data.memories.length), " memories from ", el("code", {}, data.namespace));
        break;
      case "skills_activated":
        if (data.how === "loaded") {
          item(kind, el("strong", {}, "Skill loaded: "), data.skills.join(", "));
        } else if (data.how === "catalog") {
          item(kind, el("strong", {}, "Skills offered: "), data.skills.join(", "), " (catalog)");
        } else {
          item(kind, el("strong", {}, "Skills: "), data.skills.join(", "), " (", data.how, ")");
        }
        break;
      case "model_fallback":
        item(kind, el("strong", {}, "Fell back"), " from ", el("code", {}, data.from), " to ", el("code", {}, data.to),
          " (", data.reason, "): ", data.error);
        break;
      case "limit_wait":
        item(kind, "Waited ", (data.waited_ms / 1000).toFixed(1), " s for provider ", el("code", {}, data.provider), "'s limits");
        break;
      case "model_retry":
        item(kind, el("strong", {}, "Model call retried"), " (attempt ", String(data.attempt), "): ", data.error);
        break;
      case "context_trimmed":
        item(kind, "Context trimmed: ", String(data.dropped_messages), " message(s) dropped");
        break;
      case "finished":
        item(kind, el("strong", {}, "Finished "), stateBadge(data.state), " · ", tokens(data.usage),
          data.cost_usd !== undefined ? " · " + cost(data.cost_usd) : "", data.reason ? el("pre", { class: "text" }, data.reason) : "");
        break;
      default:
        item(kind, el("code", {}, kind));
    }
  };
}

// ---------- one agent ----------

function triggerList(agent) {
  const items = [];
  for (const s of agent.schedules) {
    items.push(el("li", { class: "trigger trigger-schedule" }, el("strong", {}, "Schedule "), el("code", {}, s.cron),
      " (", s.timezone, "): ", s.description, ". Next: ",
      s.next_fires.length ? s.next_fires.slice(0, 3).map((t, i) => [i ? ", " : "", timeEl(t)]) : "none soon"));
  }
  if (agent.webhook) {
    items.push(el("li", { class: "trigger trigger-webhook" }, el("strong", {}, "Webhook "),
      el("code", {}, "POST /hooks/" + agent.name), " (signed)"));
  }
  for (const after of agent.after || []) {
    items.push(el("li", { class: "trigger trigger-after" }, el("strong", {}, "After "),
      el("a", { href: "#/agent/" + encodeURIComponent(after.agent) }, after.agent), " ", after.on));
  }
  for (const glob of agent.watch || []) {
    items.push(el("li", { class: "trigger trigger-watch" }, el("strong", {}, "Watch "), el("code", {}, glob)));
  }
  return items.length
    ? el("ul", { class: "triggers" }, items)
    : el("p", {}, "No trigger: it runs when asked (the API, the command line, a chat, another agent).");
}

function sessionTable(caption, agent, sessions) {
  return table(caption, ["Session", "Turns", "Last used"],
    sessions.map((s) => el("tr", {},
      el("th", { scope: "row" }, el("a", {
        href: "#/chat/" + encodeURIComponent(agent) + "/" + encodeURIComponent(s.id), title: s.id,
      }, s.title || "(no message yet)")),
      el("td", {}, String(s.turns)),
      el("td", {}, timeEl(s.updated_at)))));
}

async function agentView(root, parts) {
  const name = parts[0] || "";
  const path = encodeURIComponent(name);
  const agent = await api("/v1/agents/" + path);
  const pipeline = agent.steps !== undefined;
  const [{ runs }, { sessions }] = await Promise.all([
    api("/v1/runs?limit=10&agent=" + path),
    pipeline ? { sessions: [] } : api("/v1/sessions?limit=10&agent=" + path),
  ]);
  root.append(el("h2", {}, "Agent ", el("code", {}, agent.name)));
  if (agent.description) root.append(el("p", {}, agent.description));
  const pairs = [
    ["Model", agent.model], ["On overlap", agent.on_overlap],
    ["Last run", agent.last_run ? [stateBadge(agent.last_run.state), " ", runLink(agent.last_run.id)] : "never run"],
    ["Failures in a row", String(agent.consecutive_failures)],
  ];
  if (agent.backoff_until) pairs.push(["Backing off until", timeEl(agent.backoff_until)]);
  if (pipeline) pairs.push(["Pipeline steps", String(agent.steps)]);
  if ((agent.approve || []).length) pairs.push(["Approval for", agent.approve.join(", ")]);
  if ((agent.agents || []).length) pairs.push(["Calls agents", agent.agents.join(", ")]);
  root.append(el("dl", { class: "summary" }, pairs.map(([k, v]) => el("div", {}, el("dt", {}, k), el("dd", {}, v)))));
  root.append(el("p", { class: "actions" },
    pipeline ? "" : [el("a", { href: "#/chat/" + path, id: "chat-with" }, "Chat with " + agent.name), " · "],
    el("a", { href: "#/runs?agent=" + path }, "All its runs")));
  root.append(section("Triggers", triggerList(agent)));
  root.append(section("System prompt", el("pre", { class: "text", id: "agent-system" }, agent.system || "(none)")));
  root.append(section("Prompt (the input of a run started without one)",
    el("pre", { class: "text", id: "agent-prompt" }, agent.prompt || "(none)")));
  const tools = agent.tools || [];
  root.append(section("Tools",
    tools.length ? el("ul", { class: "tools", id: "agent-tools" }, tools.map((t) => el("li", {}, el("code", {}, t))))
      : el("p", {}, "No tools.")));
  root.append(runTable("Recent runs", runs));
  if (!pipeline) root.append(sessionTable("Sessions (last used first)", agent.name, sessions));
}

// ---------- schedules and fires ----------

async function schedulesView(root, _parts, params, isCurrent) {
  const offset = Math.max(0, parseInt(params.get("offset") || "0", 10) || 0);
  const load = async () => {
    const [{ agents }, { fires }] = await Promise.all([
      api("/v1/agents"), api("/v1/fires?limit=" + PAGE + "&offset=" + offset),
    ]);
    // Only what this view shows, so a run's end elsewhere redraws nothing.
    return { schedules: agents.map((a) => [a.name, a.schedules]), fires };
  };
  const data = await load();
  root.append(el("h2", {}, "Schedules"));
  root.append(live(isCurrent, el("div", { class: "live-list", id: "schedules-live" }), load, schedulesLists, data));
  const pager = el("nav", { class: "pager", "aria-label": "Pages of fires" });
  if (offset > 0) pager.append(el("a", { href: "#/schedules?offset=" + Math.max(0, offset - PAGE) }, "← Newer"));
  if (data.fires.length === PAGE) pager.append(el("a", { href: "#/schedules?offset=" + (offset + PAGE) }, "Older →"));
  root.append(pager);
}

function schedulesLists({ schedules, fires }) {
  const out = document.createDocumentFragment();
  const rows = schedules.flatMap(([name, list]) => list.map((s) => el("tr", {},
    el("th", { scope: "row" }, el("a", { href: "#/agent/" + encodeURIComponent(name) }, name)),
    el("td", {}, el("code", {}, s.cron)),
    el("td", {}, s.timezone),
    el("td", {}, s.description),
    el("td", {}, s.next_fires.slice(0, 3).map((t, i) => [i ? ", " : "", timeEl(t)])))));
  out.append(table("Schedules", ["Agent", "Cron", "Time zone", "Means", "Next fires"], rows));
  out.append(table("Fires (newest first; skipped and missed with their reasons)",
    ["Fire", "Agent", "Outcome", "Reason", "Run"],
    fires.map((run) => el("tr", {},
      el("th", { scope: "row" }, timeEl(run.scheduled_for)),
      el("td", {}, run.agent),
      el("td", {}, stateBadge(run.state)),
      el("td", {}, run.error || ""),
      el("td", {}, runLink(run.id))))));
  return out;
}

// ---------- memory ----------

async function memoryView(root, parts) {
  const { namespaces } = await api("/v1/memory");
  root.append(el("h2", {}, "Memory"));
  const chosen = parts[0] || (namespaces[0] && namespaces[0].name);
  root.append(el("nav", { class: "namespaces", "aria-label": "Namespaces" },
    namespaces.length
      ? el("ul", {}, namespaces.map((ns) => el("li", {},
        el("a", { href: "#/memory/" + encodeURIComponent(ns.name), "aria-current": ns.name === chosen ? "page" : null },
          ns.name + " (" + ns.entries + ")"))))
      : el("p", {}, "No memories yet.")));
  if (!chosen) return;
  const { memories } = await api("/v1/memory/" + encodeURIComponent(chosen) + "?limit=200");
  root.append(table("Memories of " + chosen + " (most recently updated first)",
    ["Memory", "Category", "Importance", "Written by run", "Created", "Updated", "Recalled", "Metadata"],
    memories.map((m) => el("tr", {},
      el("td", { class: "content" }, m.content),
      el("td", {}, m.category),
      el("td", {}, String(m.importance)),
      el("td", {}, m.run_id ? runLink(m.run_id) : "by hand"),
      el("td", {}, timeEl(m.created_at)),
      el("td", {}, timeEl(m.updated_at)),
      el("td", {}, String(m.access_count)),
      el("td", {}, Object.keys(m.metadata || {}).length ? el("code", {}, JSON.stringify(m.metadata)) : "")))));
}

// ---------- start ----------

// `aurad dashboard` opens `/#token=...`: the token is kept for this tab
// and taken out of the address (and so out of the history).
function tokenFromAddress() {
  const match = /^#token=([^&]+)$/.exec(location.hash);
  if (!match) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
  history.replaceState(null, "", location.pathname + "#/");
}

document.addEventListener("DOMContentLoaded", () => {
  tokenFromAddress();
  setupToken();
  window.addEventListener("hashchange", route);
  route();
});
