// tandem job console: plain JavaScript over the public HTTP API (/v1/jobs...). No build step.
// Model text is only ever inserted as text (textContent), never as HTML.
"use strict";

const $ = (sel) => document.querySelector(sel);
// `session` counts the tokens the page has used: an answer to a request sent under an earlier
// token (before Sign out, or another token entered) is dropped, never shown (see `api`).
const state = { token: localStorage.getItem("tandem.token") || "", session: 0, jobId: null, stream: null, turns: {}, pauseId: null };

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function notice(text) { $("#notice").textContent = text || ""; }

// Thrown by `api` for an answer that came back after the token changed: whatever asked for it
// stops there (its `finally` still runs), and nothing of it reaches the page.
class StaleSession extends Error {}
window.addEventListener("unhandledrejection", (event) => {
  if (event.reason instanceof StaleSession) event.preventDefault();
});

function current(session) {
  if (session !== state.session) throw new StaleSession("the token changed meanwhile");
}

async function api(path, options = {}) {
  const session = state.session;
  const headers = Object.assign({ Accept: "application/json" }, options.headers || {});
  if (state.token) headers.Authorization = "Bearer " + state.token;
  const response = await fetch(path, Object.assign({}, options, { headers }));
  current(session);
  if (response.status === 401) {
    $("#token-form").hidden = false;
    $("#who").hidden = true;
    notice("This API needs a token: enter one of TANDEM_API_TOKENS.");
  } else if (response.status === 403) {
    notice(await errorText(response.clone())); // the scope the token lacks
  }
  return response;
}

// The JSON body of an answer `api` gave, unless the token changed while it was read.
async function jsonOf(response) {
  const session = state.session;
  const read = await response.json();
  current(session);
  return read;
}

// Whom the token acts for: its tenant's jobs are the only ones the API lists and shows.
async function showWho() {
  const response = await api("/v1/me");
  if (!response.ok) return;
  const me = await jsonOf(response);
  $("#tenant").textContent = `tenant ${me.tenant}${me.admin ? " (admin: every tenant)" : ""} · ${me.scopes.join(", ")}`;
  $("#who").hidden = false;
  $("#sign-out").hidden = !state.token;
}

// Another token (or none): nothing read with the one before stays on the page or on its way to
// it. The open job, its stream, its pause, the forms typed into for it and the job list go;
// answers still under way are dropped when they come (`session`).
function newSession() {
  state.session += 1;
  closeJob();
  $("#jobs").replaceChildren();
  $("#tenant").textContent = "";
  notice("");
}

function signOut() {
  state.token = "";
  localStorage.removeItem("tandem.token");
  newSession();
  history.replaceState(null, "", location.pathname); // the job in the address was the old token's
  $("#who").hidden = true;
  $("#token-form").hidden = false;
  notice("Signed out: enter a token.");
}

function useToken(event) {
  event.preventDefault();
  newSession();
  state.token = $("#token").value.trim();
  $("#token").value = "";
  localStorage.setItem("tandem.token", state.token);
  $("#token-form").hidden = true;
  $("#jobs").append(el("li", "muted", "loading…"));
  showWho();
  refreshJobs();
  // A job named in the address (a link, or the page opened before a token was entered) is
  // opened for this token: the API shows it only if this token may read it.
  const wanted = new URLSearchParams(location.search).get("job");
  if (wanted) openJob(wanted);
}

async function errorText(response) {
  const session = state.session;
  let text;
  try {
    const error = (await response.json()).error;
    // A field's message the main message already says (an answer that does not fit its schema)
    // is not said twice.
    const fields = (error.fields || [])
      .filter((f) => !error.message.includes(f.message))
      .map((f) => `${f.field}: ${f.message}`).join("\n");
    text = fields ? `${error.message}\n${fields}` : error.message;
  } catch (e) {
    text = `HTTP ${response.status}`;
  }
  current(session);
  return text;
}

// -- text helpers (the same tags the CLI display reads) ------------------------------------------

function stripThinking(text) {
  return text.replace(/<(think|deep_thinking|shallow_thinking)>[\s\S]*?<\/\1>/g, "");
}

// The inner text of the first <name>...</name> (to the end when unclosed); a closing tag inside a
// function call's payload or string does not count (see "the Actor's action" below).
function tag(text, name) {
  const plain = stripThinking(text);
  const open = `<${name}>`, close = `</${name}>`;
  const start = plain.indexOf(open);
  if (start < 0) return null;
  const inner = start + open.length;
  let pos = inner;
  for (;;) {
    const end = plain.indexOf(close, pos), call = plain.indexOf(CALL_OPEN, pos);
    if (end < 0) return plain.slice(inner).trim();
    if (call < 0 || end < call) return plain.slice(inner, end).trim();
    const after = callEnd(plain, call + CALL_OPEN.length);
    pos = after >= 0 ? after : cutEnd(plain, call + CALL_OPEN.length);
  }
}

// -- the Actor's action, summarised -----------------------------------------------------------------
// A call's payload may hold any text, "</function_call>" included: blocks are cut as the parser cuts
// them (tandem.reasoner.function_calling), payload wrappers and JSON strings skipped whole.

const CALL_OPEN = "<function_call>", CALL_CLOSE = "</function_call>";
const PAYLOAD_START = "__PAYLOAD_START__", PAYLOAD_END = "__PAYLOAD_END__";

// Where the block whose inner text starts at `from` ends (just past its closing tag), reading its
// JSON: strings and payloads hide tags. -1 when it is not closed that way.
function callEnd(text, from) {
  let i = from, inString = false;
  while (i < text.length) {
    if (text.startsWith(PAYLOAD_START, i)) {
      const end = text.indexOf(PAYLOAD_END, i + PAYLOAD_START.length);
      if (end < 0) return -1;
      i = end + PAYLOAD_END.length;
    } else if (inString) {
      if (text[i] === "\\") i += 2;
      else { if (text[i] === '"') inString = false; i += 1; }
    } else if (text[i] === '"') {
      inString = true; i += 1;
    } else if (text.startsWith(CALL_CLOSE, i)) {
      return i + CALL_CLOSE.length;
    } else {
      i += 1;
    }
  }
  return -1;
}

// A block whose JSON cannot be read ends at the first closing tag outside payloads (or is unclosed).
function cutEnd(text, from) {
  let i = from;
  for (;;) {
    const close = text.indexOf(CALL_CLOSE, i), payload = text.indexOf(PAYLOAD_START, i);
    if (close < 0) return text.length;
    if (payload < 0 || close < payload) return close + CALL_CLOSE.length;
    const end = text.indexOf(PAYLOAD_END, payload + PAYLOAD_START.length);
    if (end < 0) return text.length;
    i = end + PAYLOAD_END.length;
  }
}

function withoutCalls(text) {
  let out = "", pos = 0, open;
  while ((open = text.indexOf(CALL_OPEN, pos)) >= 0) {
    const inner = open + CALL_OPEN.length;
    const end = callEnd(text, inner);
    out += text.slice(pos, open) + "[tool call]";
    pos = end >= 0 ? end : cutEnd(text, inner);
  }
  return out + text.slice(pos);
}

function actionText(content) {
  const action = tag(content, "action");
  let shown = withoutCalls(action === null ? stripThinking(content) : action);
  shown = shown.replace(/<deliverable>[\s\S]*?(<\/deliverable>|$)/g, "[deliverable written]");
  return shown.trim();
}

// -- recent jobs -------------------------------------------------------------------------------------

async function refreshJobs() {
  if (!$("#token-form").hidden) return; // signed out, or the token was refused: none to list with
  const response = await api("/v1/jobs?limit=30");
  if (!response.ok) return;
  const { jobs } = await jsonOf(response);
  const list = $("#jobs");
  list.replaceChildren();
  if (!jobs.length) list.append(el("li", "muted", "no jobs yet"));
  for (const job of jobs) {
    const item = el("li", job.job_id === state.jobId ? "current" : "");
    item.dataset.id = job.job_id;
    const when = job.updated_at ? new Date(job.updated_at * 1000).toLocaleTimeString() : "";
    const goal = el("div", "job-goal" + (job.goal ? "" : " muted"), job.goal || "(goal no longer stored)");
    goal.title = job.goal || "";
    const line = el("div", "job-line");
    // The open job's state as its stream says (newer than this list can be).
    const shown = job.job_id === state.jobId && view.state ? view.state : job.state;
    line.append(el("code", "", job.job_id.slice(0, 8)), el("span", "muted", `${job.reasoner} · ${when}`),
      el("span", `state ${stateClass(shown)}`, stateLabel(shown)));
    item.append(goal, line);
    item.addEventListener("click", () => openJob(job.job_id));
    list.append(item);
  }
}

// -- one job -----------------------------------------------------------------------------------------

// -- what the page shows of a job is rendered from its state ---------------------------------------
// `view` is the job as the API reports it: its state (JobStatus.state, from GET /v1/jobs/{id}, then
// moved by its events) and, while it is parked for a person, what it waits for. `render` sets every
// panel and button from it, so a question, an approval or Cancel shows only while the job is in that
// state, and none of them on an ended job.

const LIVE = ["queued", "running", "waiting", "awaiting_approval", "waiting_for_children"]; // what POST .../cancel accepts
const ENDED = ["completed", "truncated", "failed", "cancelled"];
const RESUMABLE = ["truncated", "failed", "cancelled"];

// pause: null, {kind: "approval", id, pending} or {kind: "question", id, text, schema}; outcome: the
// job's end (its final event or result) is shown; started: a worker took the job in (its
// job_started event, or a step claimed), so its spec is stored: resume, fork and follow-up need it
// (a job cancelled before it started, or refused at intake, has none).
const view = { state: "", pause: null, outcome: false, started: false };

function stateLabel(name) { return name.startsWith("awaiting_") ? "awaiting a person" : name.replace(/_/g, " "); }

function stateClass(name) { return name.startsWith("awaiting_") ? "awaiting" : name; }

function render() {
  const name = view.state;
  const ended = ENDED.includes(name), live = LIVE.includes(name);
  const asks = name === "awaiting_approval" && view.pause ? view.pause.kind : null;
  const badge = $("#job-state");
  badge.textContent = stateLabel(name);
  badge.className = `state ${stateClass(name)}`;
  badge.dataset.state = name;
  badge.hidden = !name;
  // The job list is read every few seconds: its line for this job says what the page says meanwhile.
  const listed = state.jobId && document.querySelector(`#jobs li[data-id="${CSS.escape(state.jobId)}"] .state`);
  if (listed && name) {
    listed.textContent = stateLabel(name);
    listed.className = `state ${stateClass(name)}`;
  }
  $("#approval").hidden = asks !== "approval";
  $("#approve").hidden = asks !== "approval";
  $("#reject").hidden = asks !== "approval";
  $("#question").hidden = asks !== "question";
  $("#cancel").hidden = !live;
  $("#message-form").hidden = !live;
  $("#resume").hidden = !(RESUMABLE.includes(name) && view.started);
  $("#fork").hidden = !(ended && view.started && state.rounds > 0); // the job's end says it stored a round
  if (!ended) $("#fork-form").hidden = true;
  $("#follow-up-form").hidden = !(ended && view.started);
  $("#outcome").hidden = !(ended && view.outcome);
}

function setState(name) {
  view.state = name;
  render();
}

// A step of an ended job's stream (a late decision, say) does not bring it back: only a resume
// (job_started) and its final event move an ended job.
function moveTo(name) {
  if (!ENDED.includes(view.state)) setState(name);
}

// Work under way: a step that waited (state "waiting", or for its children) runs again.
function working() {
  if (view.state !== "waiting" && view.state !== "waiting_for_children") return;
  if ($("#notice").textContent.startsWith("waiting: ")) notice("");
  setState("running");
}

// A wait ends when its step is taken again, which no event says until the model answers: once the
// wait is over, the job's status says whether it runs.
let recheck = null;
function recheckAfter(seconds) {
  clearTimeout(recheck);
  const jobId = state.jobId;
  recheck = setTimeout(async () => {
    if (jobId !== state.jobId || view.state !== "waiting") return;
    const response = await api(`/v1/jobs/${encodeURIComponent(jobId)}`);
    if (!response.ok) return;
    const now = (await jsonOf(response)).status.state;
    if (jobId === state.jobId && view.state === "waiting" && now === "running") working();
  }, Math.max(1, seconds) * 1000 + 500);
}

function currentState() { return view.state; }

function roundBox(round, maxRounds) {
  let box = document.getElementById(`round-${round}`);
  if (!box) {
    box = el("section", "round");
    box.id = `round-${round}`;
    box.append(el("h3", "", `Round ${round + 1}`));
    $("#rounds").append(box);
  }
  if (maxRounds) box.querySelector("h3").textContent = `Round ${round + 1} of ${maxRounds}`;
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
    const later = Array.from(turn.tools.children).find((r) => Number(r.dataset.index) > ev.index);
    turn.tools.insertBefore(row, later || null); // in call order, whichever result comes first
  }
  return row;
}

function callText(name, args) {
  return `→ ${name}(${Object.entries(args || {}).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(", ")})`;
}

const SHOWN_CHARS = 400;
// `text` in `node`: whole up to SHOWN_CHARS; past that its start, and the rest one click away
// (a closed <details>), so a long call or result neither floods the round nor widens the page.
function clipped(node, text) {
  if (text.length <= SHOWN_CHARS) { node.textContent = text; return; }
  const more = el("details", "more");
  more.append(el("summary", "", `show all ${text.length.toLocaleString("en")} characters`), el("pre", "full", text));
  node.replaceChildren(`${text.slice(0, SHOWN_CHARS)}…`, more);
}

function onToolCall(ev) {
  clipped(toolRow(ev).querySelector(".call"), callText(ev.name, ev.args) + (ev.error ? ` ✗ ${ev.error}` : ""));
}

function onToolResult(ev) {
  const row = toolRow(ev);
  const call = row.querySelector(".call");
  if (!call.textContent) { // a call that never ran (rejected): as it was asked, if it was
    const asked = (state.asked || {})[`${ev.round}:${ev.index}`];
    clipped(call, asked ? callText(ev.name, asked.args) : `→ ${ev.name}`);
  }
  const result = row.querySelector(".result");
  result.className = "result " + (ev.status === "succeeded" ? "ok" : "bad");
  clipped(result, `  ← ${String(ev.output)}`);
}

function onFinal(ev) {
  state.rounds = ev.rounds || 0;
  endPause();
  view.outcome = true;
  setState(ev.status);
  $("#deliverable").textContent = ev.deliverable || "(no deliverable)";
  $("#outcome-error").textContent = ev.error || "";
  const usage = ev.usage || {};
  $("#usage").textContent = `${ev.rounds} round(s), ${usage.calls || 0} model calls, ${usage.total_tokens || 0} tokens`;
  document.querySelectorAll("pre.streaming").forEach((node) => node.classList.remove("streaming"));
  refreshJobs();
}

// -- per-call decisions: approve or reject each waiting call, its args edited and checked ----------------
// The API stores each decision at once (a pause is complete once every call has one); edited args
// are checked here against the tool's schema (GET /v1/jobs/{id}: approval.schemas), and the API
// checks them again: its refusal is shown next to the call.

const approval = { pauseId: null, calls: [], schemas: {}, loaded: null };

// The job's pause is over (decided, answered, ended, or another job opened): nothing to ask.
function endPause() {
  view.pause = null;
  approval.pauseId = null;
  approval.calls = [];
  $("#approval-calls").replaceChildren();
  $("#question-text").textContent = "";
  $("#answer-input").value = "";
}

// Calls wait for a decision: their cards are built here and shown while the job is parked on them.
function askApproval(pending, pauseId, round) {
  if (showing("approval", pauseId)) return; // its cards stay as the person left them
  endPause();
  if (!pending || !pending.length) return; // nothing left to decide
  state.asked = state.asked || {};
  for (const call of pending) state.asked[`${round}:${call.index}`] = call;
  view.pause = { kind: "approval", id: pauseId || null, pending };
  approval.pauseId = pauseId || null;
  approval.calls = pending;
  const calls = pending.length === 1 ? "1 call waits" : `${pending.length} calls wait`;
  $("#approval-head").textContent = `${calls} for your decision: approve or reject each; edit a call's ` +
    "arguments before approving it.";
  if (approval.pauseId) $("#approval-head").append(el("code", "pause muted", `pause ${approval.pauseId}`));
  for (const call of pending) $("#approval-calls").append(callCard(call));
  approval.loaded = loadApproval(state.jobId).catch(() => {});
}

// Whether the page shows that pause already: the same pause asked again (its event replayed
// after the status showed it, a stream resumed) leaves what the person typed or decided alone.
function showing(kind, pauseId) {
  return !!pauseId && !!view.pause && view.pause.kind === kind && view.pause.id === pauseId;
}

// The schemas and the decisions made so far (a person may have decided some calls already).
async function loadApproval(jobId) {
  const response = await api(`/v1/jobs/${encodeURIComponent(jobId)}`);
  if (!response.ok || jobId !== state.jobId) return;
  const record = (await jsonOf(response)).approval;
  if (!record || record.pause_id !== approval.pauseId) return;
  approval.schemas = record.schemas || {};
  markDecided(record.decisions || []);
}

function callCard(call) {
  const card = el("div", "call-card");
  card.dataset.index = call.index;
  const head = el("div", "call-head");
  head.append(el("strong", "", `${call.index}. ${call.tool || call.name || "call"}`));
  if (call.objective) head.append(el("span", "muted", ` — ${call.objective}`));
  const args = el("textarea", "call-args");
  args.rows = Math.min(8, Math.max(2, JSON.stringify(call.args || {}, null, 2).split("\n").length));
  args.value = JSON.stringify(call.args || {}, null, 2);
  args.spellcheck = false;
  args.setAttribute("aria-label", `arguments of call ${call.index}`);
  const reason = el("input", "call-reason");
  reason.placeholder = "reason (optional; the model reads it on a rejection)";
  const approve = el("button", "call-approve", "Approve");
  approve.type = "button";
  const reject = el("button", "call-reject secondary danger", "Reject");
  reject.type = "button";
  const buttons = el("div", "call-buttons");
  buttons.append(approve, reject, el("span", "call-status muted"));
  card.append(head, args, reason, buttons, el("p", "call-error error"));
  approve.addEventListener("click", () => decideCall(call, true));
  reject.addEventListener("click", () => decideCall(call, false));
  return card;
}

function cardOf(index) { return document.querySelector(`#approval-calls .call-card[data-index="${index}"]`); }

const JSON_TYPES = {
  string: (v) => typeof v === "string",
  integer: (v) => Number.isInteger(v),
  number: (v) => typeof v === "number",
  boolean: (v) => typeof v === "boolean",
  array: (v) => Array.isArray(v),
  object: (v) => v !== null && typeof v === "object" && !Array.isArray(v),
  null: (v) => v === null,
};

// The edited args, or what is wrong with them: JSON, an object, and the schema's required names,
// known names and top-level types (the API checks the whole schema).
function checkArgs(text, schema) {
  let args;
  try { args = JSON.parse(text); } catch (err) { return { problem: `not JSON: ${err.message}` }; }
  if (!JSON_TYPES.object(args)) return { problem: "the arguments must be a JSON object ({...})" };
  if (!schema) return { args };
  const properties = schema.properties || {};
  const missing = (schema.required || []).filter((name) => !(name in args));
  if (missing.length) return { problem: `missing: ${missing.join(", ")}` };
  for (const [name, value] of Object.entries(args)) {
    const spec = properties[name];
    if (!spec) {
      if (schema.additionalProperties === false) {
        return { problem: `unknown argument ${JSON.stringify(name)}; known: ${Object.keys(properties).join(", ") || "none"}` };
      }
      continue;
    }
    const types = [].concat(spec.type || []);
    if (types.length && !types.some((t) => (JSON_TYPES[t] || (() => true))(value))) {
      return { problem: `${name} must be ${types.join(" or ")}, not ${JSON.stringify(value)}` };
    }
  }
  return { args };
}

function newKey() {
  return window.crypto && crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`;
}

async function sendDecisions(decisions) {
  // The decision names the pause it answers (refused if that pause has ended) and carries a key,
  // so a click sent twice is applied once.
  const body = { decisions, idempotency_key: newKey() };
  if (approval.pauseId) body.pause_id = approval.pauseId;
  return api(`/v1/jobs/${encodeURIComponent(state.jobId)}/decisions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
}

async function decideCall(call, approve) {
  const card = cardOf(call.index);
  const error = card.querySelector(".call-error");
  error.textContent = "";
  const decision = { index: call.index, approve };
  const reason = card.querySelector(".call-reason").value.trim();
  if (reason) decision.reason = reason;
  if (approve) {
    const edited = card.querySelector(".call-args").value;
    await approval.loaded; // the tool's schema comes with the pause's record
    const checked = checkArgs(edited, approval.schemas[call.tool]);
    if (checked.problem) { error.textContent = `Arguments: ${checked.problem}`; return; }
    if (JSON.stringify(checked.args) !== JSON.stringify(call.args || {})) decision.args = checked.args;
  }
  card.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  const response = await sendDecisions([decision]);
  if (!response.ok) {
    error.textContent = (await refused(response)).replace(/^job '[^']*': /, ""); // the job is this one
    card.querySelectorAll("button").forEach((b) => { b.disabled = false; });
    return;
  }
  markDecided((await jsonOf(response)).decisions || []);
}

async function decideAll(approve) {
  const response = await sendDecisions(approve); // true/false: every call still undecided
  notice(response.ok ? (approve ? "approved" : "rejected") : await refused(response));
  if (response.ok) markDecided((await jsonOf(response)).decisions || []);
}

// Every call of the pause is decided: the panel goes (the rounds show each call's result).
function approvalDone(by) {
  notice(by === "timeout"
    ? "No decision came in time: the undecided calls were rejected, and the job goes on."
    : "Every call is decided: the job goes on.");
  endPause();
}

function markDecided(decisions) {
  for (const d of decisions) {
    const card = cardOf(d.index);
    if (!card) continue;
    card.classList.add("decided", d.approve ? "approved" : "rejected");
    card.querySelectorAll("button, textarea, input").forEach((node) => { node.disabled = true; });
    const edited = d.approve && d.args ? " with edited arguments" : "";
    card.querySelector(".call-status").textContent = d.approve ? `approved${edited}` : `rejected${d.reason ? `: ${d.reason}` : ""}`;
    card.querySelector(".call-error").textContent = "";
  }
}

function onMessage(ev) {
  // A person's message opens the round whose leading model reads it.
  const box = el("div", "turn person");
  box.append(el("div", "who", "Message from you"), el("pre", "content", ev.text || ""));
  const round = roundBox(ev.round);
  round.insertBefore(box, round.querySelector(".turn:not(.person)"));
  // The message this page is sending may show here before the API's answer to it comes back.
  if (state.sending && ev.text === state.sending) messageSent(ev.round);
}

function compactionLine(ev) {
  // "memory compacted: rounds a–b, N → M tokens", in the round whose request it fitted.
  const span = (ev.summary_of_rounds && ev.summary_of_rounds.length ? ev.summary_of_rounds : ev.rounds_dropped) || [0, 0];
  const first = (span[0] || 0) + 1, last = (span[1] || 0) + 1;
  const rounds = first === last ? `round ${first}` : `rounds ${first}–${last}`;
  const fmt = (n) => Number(n || 0).toLocaleString("en");
  const how = ev.how === "summarized" ? "summarized" : "left out";
  const line = el("div", "turn compaction",
    `memory compacted: ${rounds}, ${fmt(ev.tokens_before)} → ${fmt(ev.tokens_after)} tokens (${how} for the ${ev.role}; the originals are kept)`);
  roundBox(ev.round).append(line);
}

function messageSent(round) {
  if ($("#message-text").value.trim() === state.sending) $("#message-text").value = "";
  state.sending = null;
  notice(`message sent: read at the start of round ${round + 1}`);
}

async function sendMessage(event) {
  // A key per message, so a click sent twice adds it once; refused (409) once the job has ended.
  event.preventDefault();
  const text = $("#message-text").value.trim();
  if (!state.jobId || !text) return;
  const key = window.crypto && crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`;
  $("#send-message").disabled = true;
  state.sending = text;
  try {
    const response = await api(`/v1/jobs/${encodeURIComponent(state.jobId)}/messages`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ text, idempotency_key: key }),
    });
    if (response.ok) {
      const sent = await jsonOf(response);
      if (state.sending === text) messageSent(sent.round); // else its event said so already
    } else {
      notice(await refused(response));
    }
  } finally {
    state.sending = null;
    $("#send-message").disabled = false;
  }
}

async function loadThread() {
  // The jobs of this job's thread (its spec's thread_id, else its own id), once it has more than one.
  const jobId = state.jobId;
  const response = await api(`/v1/threads/${encodeURIComponent(state.threadId || jobId)}`);
  if (jobId !== state.jobId) return;
  const jobs = response.ok ? (await jsonOf(response)).jobs : [];
  $("#thread").hidden = jobs.length < 2;
  $("#thread-jobs").replaceChildren(...jobs.map((job) => {
    const item = el("li", job.job_id === jobId ? "current" : "");
    item.append(el("span", `state ${job.state}`, job.state), el("span", "goal", ` ${job.goal}`));
    item.addEventListener("click", () => openJob(job.job_id));
    return item;
  }));
}

// -- child jobs: the job's parent, and the jobs it started (GET /v1/jobs/{id}/children) ------------
// Read when the job opens, when it starts children (children_spawned), every few seconds while it
// waits for them, and when it ends; each child_ended moves its child's line. A child's own children are on its view (click it).

const family = { busy: false, again: false };

async function loadFamily() {
  if (family.busy) { family.again = true; return; } // one read at a time; the last ask is read again
  family.busy = true;
  try {
    do {
      family.again = false;
      const jobId = state.jobId;
      if (!jobId) break;
      const response = await api(`/v1/jobs/${encodeURIComponent(jobId)}/children`);
      const body = response.ok ? await jsonOf(response) : null;
      if (body && jobId === state.jobId) showFamily(body);
    } while (family.again);
  } finally {
    family.busy = false;
  }
}

function jobLink(node, jobId) {
  node.textContent = jobId.slice(0, 8);
  node.title = jobId;
  node.href = `?job=${encodeURIComponent(jobId)}`;
  node.onclick = (event) => { event.preventDefault(); event.stopPropagation(); openJob(jobId); };
  return node;
}

function showFamily(body) {
  const parent = body.parent_id, children = body.children || [];
  $("#parent-line").hidden = !parent;
  if (parent) jobLink($("#parent-link"), parent);
  $("#children").hidden = !children.length;
  const ended = children.filter((c) => ENDED.includes(c.state)).length;
  $("#children-count").textContent = `${children.length} started, ${ended} ended`;
  $("#children-list").replaceChildren(...children.map((child) => {
    const item = el("li");
    item.dataset.id = child.job_id;
    const line = el("div", "child-line");
    line.append(el("span", "state"), jobLink(el("a"), child.job_id),
      el("span", "goal" + (child.goal ? "" : " muted"), child.goal || "(goal no longer stored)"));
    line.lastChild.title = child.goal || "";
    item.append(line, el("p", "error"));
    item.addEventListener("click", () => openJob(child.job_id));
    childState(item, child.state, child.error);
    return item;
  }));
}

function childState(item, name, error) {
  const badge = item.querySelector(".state");
  badge.textContent = stateLabel(name);
  badge.className = `state ${stateClass(name)}`;
  item.querySelector(".error").textContent = error || "";
  item.querySelector(".error").hidden = !error;
}

function childEnded(ev) {
  const item = document.querySelector(`#children-list li[data-id="${CSS.escape(ev.child_id)}"]`);
  if (!item) { loadFamily(); return; } // a child the page has not listed yet
  childState(item, ev.status, ev.error);
  const shown = Array.from(document.querySelectorAll("#children-list li"));
  const ended = shown.filter((li) => ENDED.includes(li.querySelector(".state").textContent)).length;
  $("#children-count").textContent = `${shown.length} started, ${ended} ended`;
}

async function followUp(event) {
  event.preventDefault();
  const goal = $("#follow-up-goal").value.trim();
  if (!state.jobId || !goal) return;
  const key = window.crypto && crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`;
  $("#send-follow-up").disabled = true;
  try {
    const response = await api(`/v1/jobs/${encodeURIComponent(state.jobId)}/follow-up`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ goal, idempotency_key: key }),
    });
    if (!response.ok) { notice(await refused(response)); return; }
    $("#follow-up-goal").value = "";
    openJob((await jsonOf(response)).id);
  } finally {
    $("#send-follow-up").disabled = false;
  }
}

// A question a tool (or the model's ask_person) asks: shown with its schema while the job waits on it.
function askQuestion(pauseId, text, schema) {
  if (showing("question", pauseId)) return; // the answer typed so far stays
  endPause();
  if (!text) return;
  view.pause = { kind: "question", id: pauseId || null, text, schema: schema || null };
  $("#question-pause").textContent = pauseId ? `pause ${pauseId}` : "";
  $("#question-text").textContent = text;
  $("#question-schema-line").hidden = !schema;
  $("#question-schema").textContent = schema ? JSON.stringify(schema) : "";
}

// What a parked job waits for, from its status (GET /v1/jobs/{id}): its pause as the events show it.
function askFromStatus(status) {
  if (status.state !== "awaiting_approval") return;
  if (status.pause_kind === "question") {
    const asked = status.question || {};
    askQuestion(status.pause_id, asked.text, asked.answer_schema);
  } else {
    askApproval(status.pending_approval || [], status.pause_id, status.round);
  }
}

async function answerQuestion(event) {
  event.preventDefault();
  const raw = $("#answer-input").value;
  let answer = raw; // JSON when it reads as JSON, else the text itself (as `tandem answer` does)
  try { answer = JSON.parse(raw); } catch (err) { answer = raw; }
  const key = window.crypto && crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`;
  const body = { answer, idempotency_key: key };
  if (view.pause && view.pause.id) body.pause_id = view.pause.id;
  const response = await api(`/v1/jobs/${encodeURIComponent(state.jobId)}/answers`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  notice(response.ok ? "answered" : await refused(response));
}

function handle(ev) {
  switch (ev.type) {
    case "job_started":
      if (ev.spec && ev.spec.goal) showGoal(ev.spec.goal, true);
      state.maxRounds = (ev.spec && ev.spec.max_rounds) || 0;
      if (ev.resumed) view.outcome = false; // the stream goes on after the earlier final
      if (ev.forked_from) showForkOrigin(ev.forked_from, ev.forked_round || 0);
      endPause();
      view.started = true;
      setState("running");
      state.threadId = (ev.spec && ev.spec.thread_id) || null;
      loadThread();
      break;
    case "round_started": roundBox(ev.round, ev.max_rounds); working(); break;
    case "model_delta": onDelta(ev); working(); break;
    case "model_reply": onReply(ev); working(); break;
    case "tool_call": onToolCall(ev); working(); break;
    case "tool_result": onToolResult(ev); working(); break;
    case "waiting":
      notice(`waiting: ${ev.reason}${ev.until && ev.at ? `, retrying in ${Math.max(0, Math.round(ev.until - ev.at))} s` : ""}`);
      moveTo("waiting");
      if (ev.until && ev.at) recheckAfter(ev.until - ev.at);
      break;
    case "approval_requested":
      askApproval(ev.pending || [], ev.pause_id, ev.round);
      moveTo("awaiting_approval");
      break;
    case "approval_decided":
      markDecided(ev.decisions || []);
      if (ev.complete !== false) { approvalDone(ev.by); moveTo("running"); }
      break;
    case "question_asked":
      askQuestion(ev.pause_id, ev.question, ev.answer_schema);
      moveTo("awaiting_approval");
      break;
    case "question_answered":
      endPause();
      moveTo("running");
      break;
    case "message_received": onMessage(ev); break;
    case "memory_compacted": compactionLine(ev); break;
    case "children_spawned": loadFamily(); moveTo("waiting_for_children"); break;
    case "child_ended": childEnded(ev); break;
    case "final": onFinal(ev); loadThread(); loadFamily(); break;
    default: break; // kinds this console does not know yet
  }
}

// Server-sent events over fetch (so the bearer token can be sent); resumes with Last-Event-ID.
async function follow(jobId) {
  const controller = new AbortController();
  state.stream = controller;
  let lastId = "0";
  state.lastEventId = lastId; // the last event handled: how far the page has read the job's stream
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
          state.lastEventId = lastId;
          if (ev.type === "final") ended = true;
        }
      }
      if (!ended) {
        const check = await api(`/v1/jobs/${encodeURIComponent(jobId)}`);
        const body = check.ok ? await jsonOf(check) : {};
        if (body.result) { ended = true; onFinal(body.result); } // e.g. a spec the workers refused
      }
    } catch (err) {
      if (controller.signal.aborted) return;
      notice(`event stream interrupted (${err.message}); reconnecting…`);
    }
    if (!ended) await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  // The stream's own notices (a wait, a reconnection) end with it; an answer to an action stays.
  if (/^(waiting: |event stream interrupted)/.test($("#notice").textContent)) notice("");
}

// The goal: its first lines, and all of it on "show all" (a goal may hold 100,000 characters).
// `full`: the whole goal (from the job's spec), which the status's shortened one does not replace.
function showGoal(text, full) {
  const goal = $("#job-goal");
  if (full) goal.dataset.full = "1";
  else delete goal.dataset.full;
  if (goal.textContent === text) return;
  goal.textContent = text;
  goal.classList.remove("open");
  fitGoal();
}

function fitGoal() {
  const goal = $("#job-goal"), toggle = $("#goal-toggle");
  const open = goal.classList.contains("open");
  toggle.hidden = !open && goal.scrollHeight <= goal.clientHeight + 1;
  toggle.textContent = open ? "show less" : "show the whole goal";
}

function toggleGoal(event) {
  event.preventDefault();
  $("#job-goal").classList.toggle("open");
  fitGoal();
}

// Nothing of a job on the page: no panel, no stream, no pause, no timer, no text typed for it.
function closeJob() {
  if (state.stream) state.stream.abort();
  state.stream = null;
  clearTimeout(recheck);
  state.jobId = null;
  state.turns = {};
  state.asked = {};
  state.rounds = 0;
  state.maxRounds = 0;
  state.threadId = null;
  state.lastEventId = null;
  state.sending = null;
  endPause();
  approval.schemas = {};
  view.outcome = false;
  view.started = false;
  view.state = "";
  render();
  $("#job-id").textContent = "";
  showGoal("");
  $("#rounds").replaceChildren();
  $("#thread").hidden = true;
  $("#thread-jobs").replaceChildren();
  showFamily({ parent_id: null, children: [] });
  $("#deliverable").textContent = "";
  $("#outcome-error").textContent = "";
  $("#usage").textContent = "";
  $("#fork-form").hidden = true;
  $("#fork-round").replaceChildren();
  $("#fork-goal").value = "";
  $("#fork-error").textContent = "";
  $("#question-pause").textContent = "";
  $("#question-schema").textContent = "";
  $("#question-schema-line").hidden = true;
  $("#message-text").value = "";
  $("#follow-up-goal").value = "";
  $("#job").hidden = true;
  $("#empty").hidden = false;
}

// The job as GET /v1/jobs/{id} reports it (`job`: its body), rendered: its state, what it waits
// for, its outcome once it ended. Its events move it on from there.
function showStatus(job) {
  const status = job.status;
  if (job.goal && !$("#job-goal").dataset.full) showGoal(job.goal);
  view.started = view.started || status.epoch > 0;
  if (ENDED.includes(status.state) && job.result) {
    onFinal(job.result);
    return;
  }
  if (status.state === "awaiting_approval") askFromStatus(status); // a pause already shown stays
  else endPause();
  setState(status.state);
}

// An action refused for the job's state (a pause that ended, a job that ended, ...): what the
// page showed came from events that may lag behind the API (a stream held up by a proxy), so the
// job's state is read again and the page renders what the API reports.
async function refused(response) {
  const said = await errorText(response);
  if (response.status >= 400 && response.status < 500 && ![401, 403, 429].includes(response.status)) {
    resync(state.jobId);
  }
  return said;
}

async function resync(jobId) {
  if (!jobId) return;
  const response = await api(`/v1/jobs/${encodeURIComponent(jobId)}`);
  if (!response.ok || jobId !== state.jobId) return;
  const job = await jsonOf(response);
  if (jobId === state.jobId) showStatus(job);
}

async function openJob(jobId) {
  closeJob();
  state.jobId = jobId;
  setState(""); // nothing is shown for the job until its status comes
  history.replaceState(null, "", `?job=${encodeURIComponent(jobId)}`);
  $("#empty").hidden = true;
  $("#job").hidden = false;
  $("#job-id").textContent = jobId;
  const response = await api(`/v1/jobs/${encodeURIComponent(jobId)}`);
  if (jobId !== state.jobId) return; // another job was opened meanwhile
  if (!response.ok) {
    const said = await errorText(response);
    if (jobId !== state.jobId) return;
    closeJob(); // unknown, expired, or not this token's tenant's: nothing to show
    notice(said);
    return;
  }
  const job = await jsonOf(response);
  if (jobId !== state.jobId) return;
  showStatus(job);
  refreshJobs();
  loadFamily();
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
    const job = await jsonOf(response);
    openJob(job.id);
  } finally {
    $("#submit").disabled = false;
  }
}

async function cancelJob() {
  if (!state.jobId) return;
  const response = await api(`/v1/jobs/${encodeURIComponent(state.jobId)}/cancel`, { method: "POST" });
  notice(response.ok ? "cancellation requested" : await refused(response));
}

$("#new-job").addEventListener("submit", startJob);
async function resumeJob() {
  if (!state.jobId) return;
  const options = { method: "POST" };
  if (currentState() === "truncated") { // its rounds are spent: it goes on with more
    const suggested = String((state.maxRounds || 10) * 2);
    const raised = window.prompt("It used its rounds. Raise its round budget to:", suggested);
    if (raised === null) return;
    options.headers = { "Content-Type": "application/json" };
    options.body = JSON.stringify({ max_rounds: Number(raised) });
  }
  const response = await api(`/v1/jobs/${encodeURIComponent(state.jobId)}/resume`, options);
  notice(response.ok ? "resumed" : await refused(response));
  if (response.ok) openJob(state.jobId); // follow the new run (its stream goes on after the old final)
}

// -- fork: a new job from the first rounds of an ended one (POST /v1/jobs/{id}/fork) ------------------

function roundsUsed() {
  return Math.max(state.rounds || 0, document.querySelectorAll("#rounds .round").length);
}

function showFork() {
  const used = roundsUsed();
  const select = $("#fork-round");
  select.replaceChildren();
  for (let r = used; r >= 1; r -= 1) {
    const kept = r === 1 ? "round 1" : `rounds 1–${r}`;
    const option = el("option", "", r === used ? `all ${r} round(s), then go on` : `${kept}, then redo from round ${r + 1}`);
    option.value = String(r);
    select.append(option);
  }
  $("#fork-error").textContent = used ? "" : "This job stored no round: there is nothing to fork from.";
  $("#fork-submit").disabled = !used;
  $("#fork-form").hidden = false;
  $("#fork-goal").focus();
}

async function forkJob(event) {
  event.preventDefault();
  $("#fork-error").textContent = "";
  const body = { round: Number($("#fork-round").value) };
  const goal = $("#fork-goal").value.trim();
  if (goal) body.goal = goal;
  $("#fork-submit").disabled = true;
  try {
    const response = await api(`/v1/jobs/${encodeURIComponent(state.jobId)}/fork`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    if (!response.ok) { $("#fork-error").textContent = await refused(response); return; }
    const forked = await jsonOf(response);
    $("#fork-form").hidden = true;
    $("#fork-goal").value = "";
    notice(`forked from ${state.jobId.slice(0, 8)} at round ${body.round}`);
    openJob(forked.id);
  } finally {
    $("#fork-submit").disabled = false;
  }
}

// A fork's stream starts at the round it goes on from: say where its first rounds are.
function showForkOrigin(source, kept) {
  const note = el("p", "fork-origin muted");
  const link = el("a", "", source.slice(0, 8));
  link.href = `?job=${encodeURIComponent(source)}`;
  link.addEventListener("click", (event) => { event.preventDefault(); openJob(source); });
  const rounds = kept === 1 ? "round 1" : `rounds 1–${kept}`;
  note.append("Forked from job ", link, `: it keeps that job's ${rounds} (shown there) and goes on from round ${kept + 1}.`);
  $("#rounds").prepend(note);
}

$("#fork").addEventListener("click", showFork);
$("#fork-cancel").addEventListener("click", () => { $("#fork-form").hidden = true; });
$("#fork-form").addEventListener("submit", forkJob);

$("#cancel").addEventListener("click", cancelJob);
$("#message-form").addEventListener("submit", sendMessage);
$("#follow-up-form").addEventListener("submit", followUp);
$("#resume").addEventListener("click", resumeJob);
$("#approve").addEventListener("click", () => decideAll(true));
$("#reject").addEventListener("click", () => decideAll(false));
$("#question").addEventListener("submit", answerQuestion);
$("#token-form").addEventListener("submit", useToken);
$("#goal-toggle").addEventListener("click", toggleGoal);
window.addEventListener("resize", fitGoal);
$("#sign-out").addEventListener("click", signOut);

const wanted = new URLSearchParams(location.search).get("job");
showWho();
refreshJobs();
setInterval(refreshJobs, 4000);
// While a job waits for its children, their lines follow them from queued to running too (no
// event on the parent says a child started; each end comes at once as child_ended).
setInterval(() => { if (view.state === "waiting_for_children") loadFamily(); }, 4000);
if (wanted) openJob(wanted);
