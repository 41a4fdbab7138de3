// aurad dashboard, the chat page: talk with an agent in a session. Loaded
// beside app.js, whose helpers (el, api, readEvents, approvalButtons, ...)
// it uses; app.js's router calls chatView. Text from the API is inserted
// as text nodes, never as HTML, as everywhere in the dashboard.
"use strict";

// ---------- chat ----------

// #/chat: pick an agent; #/chat/AGENT: its sessions, or a new one;
// #/chat/AGENT/SESSION: the conversation, and a box to go on with it.
async function chatView(root, parts, _params, isCurrent) {
  const [chosen, sessionId] = parts;
  const { agents } = await api("/v1/agents");
  // A pipeline has no conversation: it is left out.
  const chatty = agents.filter((a) => a.steps === undefined);
  root.append(el("h2", {}, "Chat"));
  const agentSelect = select("agent", [["", "choose an agent"], ...chatty.map((a) => [a.name, a.name])], chosen || "");
  agentSelect.addEventListener("change", () => {
    if (agentSelect.value) location.hash = "#/chat/" + encodeURIComponent(agentSelect.value);
  });
  const picker = el("form", { class: "filters", "aria-label": "Pick an agent", id: "chat-pick" }, field("Agent", agentSelect));
  picker.addEventListener("submit", (event) => event.preventDefault());
  root.append(picker);
  if (!chosen) {
    root.append(el("p", {}, chatty.length ? "Choose the agent to talk to." : "No agent can chat (pipelines cannot)."));
    return;
  }
  const path = encodeURIComponent(chosen);
  if (!sessionId) {
    const { sessions } = await api("/v1/sessions?limit=50&agent=" + path);
    const start = el("button", { type: "button", id: "new-session" }, "New session");
    start.addEventListener("click", async () => {
      start.disabled = true;
      try {
        const session = await api("/v1/agents/" + path + "/sessions", { method: "POST", body: {} });
        location.hash = "#/chat/" + path + "/" + encodeURIComponent(session.id);
      } catch (error) {
        start.disabled = false;
        notice("Could not start a session: " + error.message, "bad");
      }
    });
    root.append(el("p", { class: "actions" }, start));
    root.append(sessionTable("Sessions of " + chosen + " (last used first)", chosen, sessions));
    return;
  }
  const { session, messages } = await api("/v1/sessions/" + encodeURIComponent(sessionId));
  const turns = el("span", { id: "chat-turns" }, String(session.turns));
  root.append(el("p", { class: "label" }, "Session ", el("code", {}, session.id), " · ",
    turns, " turn(s) · last used ", timeEl(session.updated_at), " · ",
    el("a", { href: "#/chat/" + path }, "other sessions")));
  const log = el("ol", { class: "chat", id: "chat-log", "aria-live": "polite" });
  root.append(log);
  const chat = makeChat(log, chosen);
  for (const message of messages) chat.stored(message);

  const input = el("textarea", { name: "message", rows: "3", placeholder: "Enter sends, Shift+Enter starts a new line" });
  const send = el("button", { type: "submit", id: "chat-send" }, "Send");
  const stop = el("button", { type: "button", class: "deny", id: "chat-stop", hidden: true }, "Stop");
  const status = el("p", { class: "live", id: "chat-status" }, "");
  const form = el("form", { class: "chat-form", id: "chat-form", "aria-label": "Message" },
    field("Message", input), send, stop);
  root.append(form, status);
  let turn = null; // the run of the turn in flight
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  stop.addEventListener("click", async () => {
    if (!turn) return;
    stop.disabled = true;
    try {
      await api("/v1/runs/" + encodeURIComponent(turn) + "/cancel", { method: "POST", body: {} });
      status.textContent = "Stopping…";
    } catch (error) {
      stop.disabled = false;
      notice("Could not stop the turn: " + error.message, "bad");
    }
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = input.value;
    if (!text.trim() || turn) return;
    send.disabled = true;
    let run;
    try {
      run = await api("/v1/sessions/" + encodeURIComponent(session.id) + "/messages", { method: "POST", body: { input: text } });
    } catch (error) {
      send.disabled = false;
      notice("Could not send: " + error.message, "bad");
      return;
    }
    if (!isCurrent()) return;
    input.value = "";
    turn = run.id;
    chat.user(text, run.id);
    stop.hidden = false;
    stop.disabled = false;
    status.textContent = "Answering…";
    delete status.dataset.finished;
    const controller = new AbortController();
    stream = controller;
    const onEvent = current(isCurrent, (kind, data) => chat.event(kind, data, run));
    try {
      // The turn's answer streams from its run's events.
      await readEvents("/v1/runs/" + encodeURIComponent(run.id) + "/events", onEvent, controller.signal);
      const done = await api("/v1/runs/" + encodeURIComponent(run.id));
      if (!isCurrent()) return;
      status.textContent = done.state === "succeeded" ? "" : "The turn ended " + done.state.replace(/_/g, " ") + ".";
      status.dataset.finished = done.state;
      turns.textContent = String(Number(turns.textContent) + 1);
    } catch (error) {
      if (error.name !== "AbortError" && isCurrent()) status.textContent = "Event stream: " + error.message;
    } finally {
      if (isCurrent()) {
        turn = null;
        stop.hidden = true;
        send.disabled = false;
        input.focus();
      }
    }
  });
  input.focus();
}

// The conversation's entries: the messages as stored, and a turn's events
// as they come. Text deltas of a model turn merge into one answer; a tool
// call is one folded line with its result; a call waiting for a person has
// Approve and Deny.
function makeChat(log, agent) {
  let answer = null;
  const calls = new Map();
  const entry = (role, ...children) => {
    const li = el("li", { class: "msg msg-" + role }, children);
    log.append(li);
    return li;
  };
  const who = (role) => el("div", { class: "who" }, role === "user" ? "You" : agent);
  const toolCall = (call) => {
    const result = el("div", { class: "result" }, el("em", {}, "waiting for the result…"));
    const summary = el("summary", {}, el("strong", {}, "Tool "), el("code", {}, call.name));
    const approval = el("div", { class: "approval" });
    const details = el("details", { class: "tool" }, summary,
      el("div", { class: "label" }, "Arguments"), el("pre", { class: "text" }, pretty(call.arguments)), result);
    calls.set(call.id, { summary, result, approval });
    entry("tool", details, approval);
  };
  const toolResult = (id, name, output, isError, note) => {
    const body = [el("div", { class: "label" }, isError ? "Error" : "Result"),
      el("pre", { class: isError ? "text error" : "text" }, output)];
    const call = calls.get(id);
    if (call) { call.result.replaceChildren(...body); call.summary.append(note); }
    else entry("tool", el("details", { class: "tool" }, el("summary", {}, "Result of ", el("code", {}, name), note), body));
  };
  return {
    stored(message) {
      answer = null;
      if (message.role === "user") entry("user", who("user"), el("pre", { class: "text" }, message.content));
      else if (message.role === "assistant") {
        if (message.content) entry("assistant", who("assistant"), el("pre", { class: "text" }, message.content));
        for (const call of message.tool_calls || []) toolCall(call);
      } else if (message.role === "tool") {
        toolResult(message.tool_call_id, message.name, message.content, message.is_error,
          " · " + (message.is_error ? "error" : "ok"));
      }
    },
    user(text, runId) {
      answer = null;
      entry("user", who("user"), el("pre", { class: "text" }, text), el("div", { class: "label" }, "turn ", runLink(runId)));
    },
    event(kind, data, run) {
      if (kind !== "text_delta") answer = null;
      switch (kind) {
        case "text_delta":
          if (!answer) {
            answer = el("pre", { class: "text answer" });
            entry("assistant", who("assistant"), answer);
          }
          answer.append(document.createTextNode(data.text));
          break;
        case "tool_call":
          toolCall(data);
          break;
        case "tool_result":
          toolResult(data.id, data.name, data.output, data.is_error,
            " · " + (data.is_error ? "error" : "ok") + " · " + data.duration_ms + " ms");
          break;
        case "approval_requested": {
          const call = calls.get(data.id);
          const box = call ? call.approval : entry("tool").appendChild(el("div", { class: "approval" }));
          box.replaceChildren(el("span", {}, "Waits for your decision (until ", timeEl(data.timeout_at), ")"),
            approvalButtons({ run_id: run.id, agent: run.agent, call_id: data.id }));
          break;
        }
        case "approval_decided": {
          const call = calls.get(data.id);
          if (call) {
            call.approval.replaceChildren(el("span", { class: "decided" },
              (data.approved ? "Approved" : "Denied") + " by " + String(data.by) + (data.reason ? ": " + data.reason : "")));
          }
          break;
        }
        case "finished":
          if (data.state !== "succeeded") {
            entry("note", stateBadge(data.state), data.reason ? " " + data.reason : "");
          }
          break;
        default:
          break;
      }
    },
  };
}
