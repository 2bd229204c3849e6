"""The page at `/`: one self-contained HTML document, in the layout the served task asks for.

* `document` (summarization): paste a text, read its summary.
* `chat` (instruction tuning): a system prompt, the turns so far, a message box, and the
  model's answers; each send posts the whole conversation as one `{"messages": [...]}`
  instance, as any client would.
* `labels` (a classifier): paste a text (and, for a model of pairs, a second one), see every label's
  score as a bar, highest first; the page asks for all of them (`top_k` = the number of
  labels the loaded model scores).

The words on the page and the settings it offers come from the task (`Task.serving_page`);
the settings' bounds come from the server's limits, and the labels from the loaded model.
No external scripts, styles or fonts (the server may run where nothing outside reaches it);
the page calls the predict route with `fetch`. `/?text=...` (document and labels, with
`&text_pair=...`) or `/?message=...` (chat, with `&system=...`) fills the box and sends it
at once, which makes the page scriptable from a shell.

Where the server has a token (`LLM_PIPELINE_SERVE_TOKEN`), the page has a box for it and
sends it as `Authorization: Bearer ...`; `/#token=...` fills the box (a fragment never
reaches the server or its log) and is then dropped from the address bar. The token stays in
the tab's sessionStorage. The labels page then reads the model's labels from `/stats`
rather than from the page, which anyone may fetch.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

from llm_pipeline.serve.settings import Settings
from llm_pipeline.tasks import get_task

_STYLE = """
  body { font: 16px/1.5 system-ui, sans-serif; margin: 2rem auto; max-width: 52rem;
         padding: 0 1rem; color: #1b1b1b; background: #fafafa; }
  h1 { font-size: 1.4rem; margin-bottom: .25rem; }
  p.hint { color: #555; margin-top: 0; }
  textarea { width: 100%; font: inherit; padding: .5rem; box-sizing: border-box; }
  #text { height: 14rem; }
  label.block { display: block; font-weight: 600; margin-top: .75rem; }
  .row { display: flex; gap: 1rem; align-items: center; margin: .75rem 0; flex-wrap: wrap; }
  input[type=number] { width: 5rem; font: inherit; }
  button { font: inherit; padding: .4rem 1.2rem; background: #1a5fb4; color: white;
           border: 0; border-radius: 4px; cursor: pointer; }
  button.quiet { background: #ddd; color: #1b1b1b; }
  button:disabled { background: #8aa7cf; cursor: wait; }
  #summary, .turn.assistant { white-space: pre-wrap; background: #fff3c4;
             border-left: 4px solid #e5a50a; padding: .75rem 1rem; min-height: 1.5rem;
             font-size: 1.1rem; }
  #summary:empty { display: none; }
  #turns { display: flex; flex-direction: column; gap: .5rem; margin: 1rem 0; }
  .turn { white-space: pre-wrap; padding: .6rem 1rem; border-radius: 4px; }
  .turn.user { background: #dbe8fb; border-left: 4px solid #1a5fb4; }
  .turn .role { display: block; font-size: .8rem; color: #555; font-weight: 600; }
  .turn.empty .content { font-style: italic; color: #777; }
  #status.error { color: #a51d2d; font-weight: 600; }
  #text_pair { height: 5rem; }
  #labels { display: flex; flex-direction: column; gap: .4rem; margin: 1rem 0; }
  .score-row { display: grid; grid-template-columns: 12rem 1fr 4.5rem; gap: .75rem;
               align-items: center; }
  .score-row .name { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  .score-row.chosen .name { font-weight: 700; }
  .score-row .track { background: #e6e6e6; height: 1.4rem; border-radius: 3px; }
  .score-row .bar { background: #26a269; height: 100%; border-radius: 3px; }
  .score-row .value { text-align: right; font-variant-numeric: tabular-nums; }
"""

#: How the page offers each generation parameter: its label, the input's attributes, and
#: what an empty box means when the server sets no default.
_INPUTS = {
    "max_new_tokens": ("max new tokens", 'min="1" step="1"', "model's"),
    "num_beams": ("beams", 'min="1" step="1"', "model's"),
    "temperature": ("temperature", 'min="0" step="0.1"', "0: greedy"),
    "top_p": ("top p", 'min="0.05" max="1" step="0.05"', "1"),
}

_DOCUMENT = """
<p class="hint">Model served at <code>__PREDICT__</code>. Paste a text and press __ACTION__.</p>
<form id="form">
  <textarea id="text" name="text" placeholder="__PLACEHOLDER__" required></textarea>
  <div class="row">
    __SETTINGS__
    <button type="submit" id="go">__ACTION__</button>
    <span id="status"></span>
  </div>
</form>
<h2>__OUTPUT__</h2>
<div id="summary"></div>
<script>
__COMMON__
const text = document.getElementById("text");
const summary = document.getElementById("summary");

async function run() {
  const answer = await predict(text.value);
  if (answer !== null) summary.textContent = answer;
}

form.addEventListener("submit", (event) => { event.preventDefault(); run(); });
const given = new URLSearchParams(location.search).get("text");
if (given) { text.value = given; run(); }
</script>
"""

_CHAT = """
<p class="hint">Model served at <code>__PREDICT__</code>. Write a message and press __ACTION__;
the model answers with the whole conversation in view.</p>
<label class="block" for="system">System prompt</label>
<textarea id="system" rows="2" placeholder="Optional: how the assistant should answer"></textarea>
<div id="turns" aria-live="polite"></div>
<form id="form">
  <textarea id="message" rows="3" placeholder="__PLACEHOLDER__" required></textarea>
  <div class="row">
    __SETTINGS__
    <button type="submit" id="go">__ACTION__</button>
    <button type="button" class="quiet" id="reset">New chat</button>
    <span id="status"></span>
  </div>
</form>
<script>
__COMMON__
const system = document.getElementById("system");
const message = document.getElementById("message");
const turnsBox = document.getElementById("turns");
const turns = [];  // {role, content}, the user's and the model's, in order

function draw() {
  turnsBox.replaceChildren(...turns.map((turn) => {
    const box = document.createElement("div");
    box.className = "turn " + turn.role + (turn.content ? "" : " empty");
    const role = document.createElement("span");
    role.className = "role";
    role.textContent = turn.role === "user" ? "You" : "Model";
    const content = document.createElement("div");
    content.className = "content";
    content.textContent = turn.content || "(an empty answer)";
    box.append(role, content);
    return box;
  }));
}

async function send() {
  const content = message.value;
  if (!content.trim()) return;
  const messages = [];
  if (system.value.trim()) messages.push({role: "system", content: system.value});
  // An empty answer is shown but not sent back: a turn must have text.
  messages.push(...turns.filter((turn) => turn.content), {role: "user", content});
  turns.push({role: "user", content});
  message.value = "";
  draw();
  const answer = await predict({messages});
  if (answer === null) {  // put the message back to edit and resend
    turns.pop();
    message.value = content;
  } else {
    turns.push({role: "assistant", content: answer});
  }
  draw();
}

form.addEventListener("submit", (event) => { event.preventDefault(); send(); });
message.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    form.requestSubmit();
  }
});
document.getElementById("reset").addEventListener("click", () => {
  turns.length = 0;
  draw();
  statusLine.textContent = "";
  document.body.dataset.state = "idle";
});
const query = new URLSearchParams(location.search);
if (query.get("system")) system.value = query.get("system");
if (query.get("message")) { message.value = query.get("message"); send(); }
</script>
"""

_LABELS = """
<p class="hint">Model served at <code>__PREDICT__</code>. Paste a text and press __ACTION__;
every label's score is drawn as a bar.</p>
<form id="form">
  <textarea id="text" name="text" placeholder="__PLACEHOLDER__" required></textarea>
  __PAIR_BOX__
  <div class="row">
    <button type="submit" id="go">__ACTION__</button>
    <span id="status"></span>
  </div>
</form>
<h2>__OUTPUT__</h2>
<p class="hint" id="rule"></p>
<div id="labels" aria-live="polite"></div>
<script>
__COMMON__
// The loaded model's labels: on the page, or (still loading, or behind a token) from /stats.
let MODEL = __MODEL_JSON__;
const text = document.getElementById("text");
const pair = document.getElementById("text_pair");  // null for a model of single texts
const labelsBox = document.getElementById("labels");

function showRule() {
  document.getElementById("rule").textContent = MODEL === null ? "" : MODEL.multi_label
    ? "Labels in bold reach the model's threshold (" + MODEL.threshold + ") and are predicted."
    : "The label in bold is the prediction.";
}
showRule();

async function loadedModel() {
  try {
    const response = await fetch("/stats", {headers: requestHeaders()});
    const model = response.ok ? (await response.json()).model : null;
    return model && model.labels ? model : null;
  } catch (error) {
    return null;
  }
}

function draw(scored) {
  labelsBox.replaceChildren(...scored.map(({label, score}, rank) => {
    const row = document.createElement("div");
    const chosen = MODEL.multi_label ? score >= MODEL.threshold : rank === 0;
    row.className = "score-row" + (chosen ? " chosen" : "");
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = label;
    name.title = label;
    const track = document.createElement("div");
    track.className = "track";
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.style.width = (100 * score) + "%";
    track.append(bar);
    const value = document.createElement("span");
    value.className = "value";
    value.textContent = (100 * score).toFixed(1) + "%";
    row.append(name, track, value);
    return row;
  }));
}

async function run() {
  if (MODEL === null) {
    MODEL = await loadedModel();
    showRule();
  }
  if (MODEL === null) {
    statusLine.className = "error";
    statusLine.textContent = "No labels: the model is still loading, or the token is wrong.";
    document.body.dataset.state = "error";
    return;
  }
  const instance = pair && pair.value.trim() ? {text: text.value, text_pair: pair.value}
    : text.value;
  const scored = await predict(instance, {top_k: MODEL.labels.length});
  if (scored !== null) draw(scored);
}

form.addEventListener("submit", (event) => { event.preventDefault(); run(); });
const query = new URLSearchParams(location.search);
if (pair && query.get("text_pair")) pair.value = query.get("text_pair");
if (query.get("text")) { text.value = query.get("text"); run(); }
</script>
"""

#: What every layout shares: the settings, the call to the predict route, the status line.
_COMMON = """const PREDICT = __PREDICT_JSON__;
const SETTINGS = __SETTINGS_JSON__;
const form = document.getElementById("form");
const statusLine = document.getElementById("status");
const button = document.getElementById("go");
const tokenBox = document.getElementById("token");  // only where the server has a token

if (tokenBox !== null) {
  const given = new URLSearchParams(location.hash.slice(1)).get("token");
  if (given) {
    sessionStorage.setItem("token", given);
    history.replaceState(null, "", location.pathname + location.search);
  }
  tokenBox.value = sessionStorage.getItem("token") || "";
  tokenBox.addEventListener("change", () => sessionStorage.setItem("token", tokenBox.value));
}

function requestHeaders() {
  const headers = {"Content-Type": "application/json"};
  if (tokenBox !== null && tokenBox.value) headers.Authorization = "Bearer " + tokenBox.value;
  return headers;
}

function parameters() {
  const chosen = {};
  for (const name of SETTINGS) {
    const value = document.getElementById(name).value;
    if (value !== "") chosen[name] = Number(value);
  }
  return chosen;
}

// The prediction for one instance, or null after showing the server's error; `fixed`:
// parameters the page sets itself.
async function predict(instance, fixed = {}) {
  button.disabled = true;
  document.body.dataset.state = "working";
  statusLine.className = "";
  statusLine.textContent = "Working…";
  const started = performance.now();
  try {
    const response = await fetch(PREDICT, {
      method: "POST",
      headers: requestHeaders(),
      body: JSON.stringify({instances: [instance], parameters: {...parameters(), ...fixed}}),
    });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    const seconds = ((performance.now() - started) / 1000).toFixed(2);
    statusLine.textContent = "Done in " + seconds + " s.";
    document.body.dataset.state = "done";
    return body.predictions[0];
  } catch (error) {
    statusLine.className = "error";
    statusLine.textContent = "Error: " + error.message;
    document.body.dataset.state = "error";
    return null;
  } finally {
    button.disabled = false;
  }
}"""


_LAYOUTS = {"document": _DOCUMENT, "chat": _CHAT, "labels": _LABELS}

#: The labels page's second box, offered unless the model says it reads single texts.
_PAIR_BOX = """<label class="block" for="text_pair">Second text (optional: the other half of a
  pair, such as the passage for a question)</label>
  <textarea id="text_pair" name="text_pair"
    placeholder="Leave empty to classify the text alone"></textarea>"""

#: Where the server has a token: the box the page reads it from (see the module docstring).
_TOKEN_BOX = """
<div class="row"><label>Token <input type="password" id="token" autocomplete="off"
  placeholder="this server's LLM_PIPELINE_SERVE_TOKEN"></label></div>"""


def render_page(settings: Settings, model: Mapping[str, Any] | None = None) -> str:
    """The served task's page, pointed at this server's predict route; `model` is what the
    loaded model says of itself (`ServedModel.describe`), None while it loads."""
    page = get_task(settings.task).serving_page
    route = settings.predict_route
    body = _LAYOUTS[page.layout].replace("__COMMON__", _COMMON)
    # The labels page offers no settings: it asks for every label's score itself.
    offered = () if page.layout == "labels" else page.parameters
    labels = None
    # Behind a token, the labels come from /stats, which asks for it; the page does not.
    if model is not None and "labels" in model and settings.token is None:
        labels = {key: model[key] for key in ("labels", "multi_label", "threshold")}
    values = {
        "__PREDICT_JSON__": _as_js(route),
        "__SETTINGS_JSON__": _as_js(list(offered)),
        "__MODEL_JSON__": _as_js(labels),
        "__SETTINGS__": _settings_inputs(offered, settings),
        "__PAIR_BOX__": "" if model is not None and model.get("text_pair") is False else _PAIR_BOX,
        "__PREDICT__": html.escape(route),
        "__ACTION__": html.escape(page.action),
        "__PLACEHOLDER__": html.escape(page.placeholder),
        "__OUTPUT__": html.escape(page.output),
    }
    for marker, value in values.items():
        body = body.replace(marker, value)
    title = html.escape(page.title)
    token = _TOKEN_BOX if settings.token is not None else ""
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n<style>{_STYLE}</style>\n</head>\n"
        f'<body data-state="idle">\n<h1>{title}</h1>{token}{body}</body>\n</html>\n'
    )


def _settings_inputs(names: tuple[str, ...], settings: Settings) -> str:
    """A number input per parameter the page offers, bounded by the server's limits, its
    placeholder saying what an empty box means (the server's default, if it has one)."""
    highest = {
        "max_new_tokens": settings.max_new_tokens_limit,
        "num_beams": settings.num_beams_limit,
        "temperature": settings.temperature_limit,
    }
    inputs = []
    for name in names:
        label, attributes, unset = _INPUTS[name]
        if name in highest:
            attributes += f' max="{highest[name]:g}"'
        default = getattr(settings.parameters, name)
        shown = unset if default is None else f"{default:g}"
        inputs.append(
            f'<label>{label} <input type="number" id="{name}" {attributes} '
            f'placeholder="{shown}"></label>'
        )
    return "\n    ".join(inputs)


def _as_js(value: object) -> str:
    # json.dumps escapes quotes; "</" must not close the script element early.
    return json.dumps(value).replace("</", "<\\/")
