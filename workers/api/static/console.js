// tandem job console: plain JavaScript over the public HTTP API (/v1/jobs...). No build step.
// Model text is only ever inserted as text (textContent), never as HTML.
"use strict";

const $ = (sel) => document.querySelector(sel);
const state = { token: localStorage.getItem("tandem.token") || "", jobId: null, stream: null, turns: {}, pauseId: null };

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function notice(text) { $("#notice").textContent = text || ""; }

async function api(path, options = {}) {
  const headers = Object.assign({ Accept: "application/json" }, options.headers || {});
  if (state.token) headers.Authorization = "Bearer " + state.token;
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (response.status === 401) {
    $("#token-form").hidden = false;
    $("#who").hidden = true;
    notice("This API needs a token: enter one of TANDEM_API_TOKENS.");
  } else if (response.status === 403) {
    notice(await errorText(response.clone())); // the scope the token lacks
  }
  return response;
}

// Whom the token acts for: its tenant's jobs are the only ones the API lists and shows.
async function showWho() {
  const response = await api("/v1/me");
  if (!response.ok) return;
  const me = await response.json();
  $("#tenant").textContent = `tenant ${me.tenant}${me.admin ? " (admin: every tenant)" : ""} · ${me.scopes.join(", ")}`;
  $("#who").hidden = false;
  $("#sign-out").hidden = !state.token;
}

function signOut() {
  state.token = "";
  localStorage.removeItem("tandem.token");
  state.jobId = null;
  if (state.stream) state.stream.abort();
  $("#jobs").replaceChildren();
  $("#who").hidden = true;
  $("#token-form").hidden = false;
  notice("Signed out: enter a token.");
}

async function errorText(response) {
  try {
    const body = await response.json();
    const fields = (body.error.fields || []).map((f) => `${f.field}: ${f.message}`).join("\n");
    return fields ? `${body.error.message}\n${fields}` : body.error.message;
  } catch (e) {
    return `HTTP ${response.status}`;
  }
}

// -- text helpers (the same tags the CLI display reads) ------------------------------------------

function stripThinking(text) {
  return text.replace(/<(think|deep_thinking|shallow_thinking)>[\s\S]*?<\/\1>/g, "");
}

function tag(text, name) {
  const match = stripThinking(text).match(new RegExp(`<${name}>([\\s\\S]*?)(</${name}>|$)`));
  return match ? match[1].trim() : null;
}

function actionText(content) {
  const action = tag(content, "action");
  let shown = action === null ? stripThinking(content) : action;
  shown = shown.replace(/<function_call>[\s\S]*?<\/function_call>/g, "[tool call]");
  shown = shown.replace(/<deliverable>[\s\S]*?(<\/deliverable>|$)/g, "[deliverable written]");
  return shown.trim();
}

// -- recent jobs -------------------------------------------------------------------------------------

async function refreshJobs() {
  const response = await api("/v1/jobs?limit=30");
  if (!response.ok) return;
  const { jobs } = await response.json();
  const list = $("#jobs");
  list.replaceChildren();
  if (!jobs.length) list.append(el("li", "muted", "no jobs yet"));
  for (const job of jobs) {
    const item = el("li", job.job_id === state.jobId ? "current" : "");
    item.dataset.id = job.job_id;
    const when = job.updated_at ? new Date(job.updated_at * 1000).toLocaleTimeString() : "";
    item.append(el("code", "", job.job_id.slice(0, 8)), el("span", "muted", `${job.reasoner} · ${when}`),
      el("span", `state ${job.state}`, job.state));
    item.addEventListener("click", () => openJob(job.job_id));
    list.append(item);
  }
}

// -- one job -----------------------------------------------------------------------------------------

function setState(name) {
  const badge = $("#job-state");
  badge.textContent = name;
  badge.className = `state ${name}`;
  $("#cancel").disabled = ["completed", "truncated", "failed", "cancelled"].includes(name);
  $("#resume").hidden = !["truncated", "failed", "cancelled"].includes(name);
}

function roundBox(round, maxRounds) {
  let box = document.getElementById(`round-${round}`);
  if (!box) {
    box = el("section", "round");
    box.id = `round-${round}`;
    box.append(el("h3", "", `Round ${round + 1}` + (maxRounds ? ` of ${maxRounds}` : "")));
    $("#rounds").append(box);
  }
  return box;
}

function turnBox(round, role) {
  const key = `${round}:${role}`;
  if (!state.turns[key]) {
    const box = el("div", "turn");
    const who = el("div", "who", role === "thinker" ? "Thinker" : "Actor");
    const thinking = el("pre", "thinking");
    const content = el("pre", "content");
    const tools = el("div", "tools");
    box.append(who, thinking, content, tools);
    roundBox(round).append(box);
    state.turns[key] = { box, who, thinking, content, tools, attempt: null };
  }
  return state.turns[key];
}

function onDelta(ev) {
  const turn = turnBox(ev.round, ev.role);
  if (turn.attempt !== ev.attempt) { // a new model call (or the step started over): start clean
    turn.attempt = ev.attempt;
    turn.thinking.textContent = "";
    turn.content.textContent = "";
  }
  turn.thinking.textContent += ev.reasoning || "";
  turn.content.textContent += ev.content || "";
  turn.content.classList.add("streaming");
}

function onReply(ev) {
  const turn = turnBox(ev.round, ev.role);
  turn.content.classList.remove("streaming");
  turn.who.replaceChildren(ev.role === "thinker" ? "Thinker " : "Actor ", el("small", "", ev.model || ""));
  turn.thinking.textContent = ev.reasoning || "";
  if (ev.role === "thinker") {
    const instruction = tag(ev.content, "instruction");
    turn.content.textContent = "";
    turn.content.append(el("div", "label", "instruction"), instruction === null ? stripThinking(ev.content).trim() : instruction);
  } else {
    turn.content.textContent = "";
    turn.content.append(el("div", "label", "action"), actionText(ev.content));
  }
}

function toolRow(ev) {
  const turn = turnBox(ev.round, "actor");
  let row = turn.tools.querySelector(`[data-index="${ev.index}"]`);
  if (!row) {
    row = el("div", "tool");
    row.dataset.index = ev.index;
    row.append(el("span", "call"), el("span", "result"));
    turn.tools.append(row);
  }
  return row;
}

function onToolCall(ev) {
  const args = Object.entries(ev.args || {}).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(", ");
  toolRow(ev).querySelector(".call").textContent = `→ ${ev.name}(${args})` + (ev.error ? ` ✗ ${ev.error}` : "");
}

function onToolResult(ev) {
  const row = toolRow(ev);
  const result = row.querySelector(".result");
  result.className = "result " + (ev.status === "succeeded" ? "ok" : "bad");
  result.textContent = `  ← ${String(ev.output).slice(0, 400)}`;
}

function onFinal(ev) {
  setState(ev.status);
  $("#outcome").hidden = false;
  $("#deliverable").textContent = ev.deliverable || "(no deliverable)";
  $("#outcome-error").textContent = ev.error || "";
  const usage = ev.usage || {};
  $("#usage").textContent = `${ev.rounds} round(s), ${usage.calls || 0} model calls, ${usage.total_tokens || 0} tokens`;
  document.querySelectorAll("pre.streaming").forEach((node) => node.classList.remove("streaming"));
  refreshJobs();
}

function showApproval(pending, pauseId) {
  const waiting = pending && pending.length > 0;
  state.pauseId = waiting ? pauseId || null : null;
  $("#approve").hidden = !waiting;
  $("#reject").hidden = !waiting;
  $("#approval").hidden = !waiting;
  if (waiting) {
    const calls = pending.map((p) => `${p.index}. ${p.tool || p.name || "call"}(${JSON.stringify(p.args || {})})`);
    const pause = state.pauseId ? ` (pause ${state.pauseId})` : "";
    $("#approval").textContent = `Waiting for your decision${pause} on: ${calls.join("; ")}`;
  }
}

async function decideAll(approve) {
  // The decision names the pause it answers (refused with 409 if that pause has ended) and
  // carries a key, so a click sent twice is applied once.
  const key = window.crypto && crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`;
  const body = { decisions: approve, idempotency_key: key };
  if (state.pauseId) body.pause_id = state.pauseId;
  const response = await api(`/v1/jobs/${encodeURIComponent(state.jobId)}/decisions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  notice(response.ok ? (approve ? "approved" : "rejected") : await errorText(response));
}

// A question a tool (or the model's ask_person) asks: shown with its schema until it is answered.
function showQuestion(ev) {
  const asking = Boolean(ev && ev.question);
  state.questionPause = asking ? ev.pause_id || null : null;
  $("#question").hidden = !asking;
  if (!asking) return;
  $("#question-pause").textContent = ev.pause_id ? `pause ${ev.pause_id}` : "";
  $("#question-text").textContent = ev.question;
  $("#question-schema-line").hidden = !ev.answer_schema;
  $("#question-schema").textContent = ev.answer_schema ? JSON.stringify(ev.answer_schema) : "";
  $("#answer-input").value = "";
}

async function answerQuestion(event) {
  event.preventDefault();
  const raw = $("#answer-input").value;
  let answer = raw; // JSON when it reads as JSON, else the text itself (as `tandem answer` does)
  try { answer = JSON.parse(raw); } catch (err) { answer = raw; }
  const key = window.crypto && crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`;
  const body = { answer, idempotency_key: key };
  if (state.questionPause) body.pause_id = state.questionPause;
  const response = await api(`/v1/jobs/${encodeURIComponent(state.jobId)}/answers`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  notice(response.ok ? "answered" : await errorText(response));
}

function handle(ev) {
  switch (ev.type) {
    case "job_started":
      $("#job-goal").textContent = (ev.spec && ev.spec.goal) || "";
      state.maxRounds = (ev.spec && ev.spec.max_rounds) || 0;
      if (ev.resumed) $("#outcome").hidden = true; // the stream goes on after the earlier final
      setState("running");
      break;
    case "round_started": roundBox(ev.round, ev.max_rounds); break;
    case "model_delta": onDelta(ev); break;
    case "model_reply": onReply(ev); break;
    case "tool_call": onToolCall(ev); break;
    case "tool_result": onToolResult(ev); break;
    case "waiting": notice(`waiting: ${ev.reason}${ev.until && ev.at ? `, retrying in ${Math.max(0, Math.round(ev.until - ev.at))} s` : ""}`); break;
    case "approval_requested": showApproval(ev.pending || [], ev.pause_id); break;
    case "approval_decided": if (ev.complete !== false) showApproval([]); break;
    case "question_asked": showQuestion(ev); setState("awaiting_approval"); break;
    case "question_answered": showQuestion(null); setState("running"); break;
    case "final": showApproval([]); showQuestion(null); onFinal(ev); break;
    default: break; // kinds this console does not know yet
  }
}

// Server-sent events over fetch (so the bearer token can be sent); resumes with Last-Event-ID.
async function follow(jobId) {
  const controller = new AbortController();
  state.stream = controller;
  let lastId = "0";
  let ended = false;
  while (!ended && !controller.signal.aborted) {
    try {
      const response = await api(`/v1/jobs/${encodeURIComponent(jobId)}/events`, {
        headers: { Accept: "text/event-stream", "Last-Event-ID": lastId },
        signal: controller.signal,
      });
      if (!response.ok) { notice(await errorText(response)); return; }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let id = null, data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("id: ")) id = line.slice(4);
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          if (!data) continue; // a heartbeat or a comment
          if (id) lastId = id;
          const ev = JSON.parse(data);
          handle(ev);
          if (ev.type === "final") ended = true;
        }
      }
      if (!ended) {
        const check = await api(`/v1/jobs/${encodeURIComponent(jobId)}`);
        const body = check.ok ? await check.json() : {};
        if (body.result) { ended = true; onFinal(body.result); } // e.g. a spec the workers refused
      }
    } catch (err) {
      if (controller.signal.aborted) return;
      notice(`event stream interrupted (${err.message}); reconnecting…`);
    }
    if (!ended) await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  notice("");
}

async function openJob(jobId) {
  if (state.stream) state.stream.abort();
  state.jobId = jobId;
  state.turns = {};
  history.replaceState(null, "", `?job=${encodeURIComponent(jobId)}`);
  $("#empty").hidden = true;
  $("#job").hidden = false;
  $("#job-id").textContent = jobId;
  $("#job-goal").textContent = "";
  $("#rounds").replaceChildren();
  $("#outcome").hidden = true;
  $("#deliverable").textContent = "";
  showQuestion(null);
  const response = await api(`/v1/jobs/${encodeURIComponent(jobId)}`);
  if (!response.ok) { notice(await errorText(response)); return; }
  const job = await response.json();
  setState(job.status.state);
  refreshJobs();
  follow(jobId);
}

async function startJob(event) {
  event.preventDefault();
  $("#form-error").textContent = "";
  const spec = {
    goal: $("#goal").value,
    reasoner: $("#reasoner").value,
    max_rounds: Number($("#max-rounds").value),
  };
  $("#submit").disabled = true;
  try {
    const response = await api("/v1/jobs", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(spec),
    });
    if (!response.ok) { $("#form-error").textContent = await errorText(response); return; }
    const job = await response.json();
    openJob(job.id);
  } finally {
    $("#submit").disabled = false;
  }
}

async function cancelJob() {
  if (!state.jobId) return;
  const response = await api(`/v1/jobs/${encodeURIComponent(state.jobId)}/cancel`, { method: "POST" });
  notice(response.ok ? "cancellation requested" : await errorText(response));
}

$("#new-job").addEventListener("submit", startJob);
async function resumeJob() {
  if (!state.jobId) return;
  const options = { method: "POST" };
  if ($("#job-state").textContent === "truncated") { // its rounds are spent: it goes on with more
    const suggested = String((state.maxRounds || 10) * 2);
    const raised = window.prompt("It used its rounds. Raise its round budget to:", suggested);
    if (raised === null) return;
    options.headers = { "Content-Type": "application/json" };
    options.body = JSON.stringify({ max_rounds: Number(raised) });
  }
  const response = await api(`/v1/jobs/${encodeURIComponent(state.jobId)}/resume`, options);
  notice(response.ok ? "resumed" : await errorText(response));
  if (response.ok) openJob(state.jobId); // follow the new run (its stream goes on after the old final)
}

$("#cancel").addEventListener("click", cancelJob);
$("#resume").addEventListener("click", resumeJob);
$("#approve").addEventListener("click", () => decideAll(true));
$("#reject").addEventListener("click", () => decideAll(false));
$("#question").addEventListener("submit", answerQuestion);
$("#token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  state.token = $("#token").value.trim();
  localStorage.setItem("tandem.token", state.token);
  $("#token-form").hidden = true;
  notice("");
  showWho();
  refreshJobs();
  if (state.jobId) openJob(state.jobId);
});

$("#sign-out").addEventListener("click", signOut);

const wanted = new URLSearchParams(location.search).get("job");
showWho();
refreshJobs();
setInterval(refreshJobs, 4000);
if (wanted) openJob(wanted);
