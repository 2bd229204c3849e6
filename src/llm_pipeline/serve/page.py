"""The page at `/`: one self-contained HTML document, the served task's widget in a frame.

The widget is the task's (`Task.serving_widget`, in the task's package: a text and its
summary, a chat, a text and its labels' scores); the frame here is what every task's page
shares: the heading, the token box, the settings the task offers (`Task.serving_page`, their
bounds from the server's limits), and the script that calls the predict route and shows its
status. No external scripts, styles or fonts (the server may run where nothing outside
reaches it); the page calls the predict route with `fetch`, and a query string (`/?text=...`)
fills the widget's box and sends it at once, which makes the page scriptable from a shell.

Where the server has a token (`LLM_PIPELINE_SERVE_TOKEN`), the page has a box for it and
sends it as `Authorization: Bearer ...`; `/#token=...` fills the box (a fragment never
reaches the server or its log) and is then dropped from the address bar. The token stays in
the tab's sessionStorage.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from llm_pipeline.serve.settings import Settings
from llm_pipeline.tasks import get_task

_STYLE = """
  body { font: 16px/1.5 system-ui, sans-serif; margin: 2rem auto; max-width: 52rem;
         padding: 0 1rem; color: #1b1b1b; background: #fafafa; }
  h1 { font-size: 1.4rem; margin-bottom: .25rem; }
  p.hint { color: #555; margin-top: 0; }
  textarea { width: 100%; font: inherit; padding: .5rem; box-sizing: border-box; }
  label.block { display: block; font-weight: 600; margin-top: .75rem; }
  .row { display: flex; gap: 1rem; align-items: center; margin: .75rem 0; flex-wrap: wrap; }
  input[type=number] { width: 5rem; font: inherit; }
  button { font: inherit; padding: .4rem 1.2rem; background: #1a5fb4; color: white;
           border: 0; border-radius: 4px; cursor: pointer; }
  button.quiet { background: #ddd; color: #1b1b1b; }
  button:disabled { background: #8aa7cf; cursor: wait; }
  #status.error { color: #a51d2d; font-weight: 600; }
"""

#: How the page offers each generation parameter: its label, the input's attributes, and
#: what an empty box means when the server sets no default.
_INPUTS = {
    "max_new_tokens": ("max new tokens", 'min="1" step="1"', "model's"),
    "num_beams": ("beams", 'min="1" step="1"', "model's"),
    "temperature": ("temperature", 'min="0" step="0.1"', "0: greedy"),
    "top_p": ("top p", 'min="0.05" max="1" step="0.05"', "1"),
}

#: What every widget builds on: the settings, the call to the predict route, the status line.
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
}

// As predict, with the answer streamed (server-sent events): `onText` gets the text so far
// as it is written; the result is the whole answer, or null after showing the error.
async function predictStream(instance, onText, fixed = {}) {
  button.disabled = true;
  document.body.dataset.state = "working";
  statusLine.className = "";
  statusLine.textContent = "Writing…";
  const started = performance.now();
  try {
    const response = await fetch(PREDICT, {
      method: "POST",
      headers: requestHeaders(),
      body: JSON.stringify({
        instances: [instance], parameters: {...parameters(), ...fixed, stream: true},
      }),
    });
    if (!response.ok) {
      const body = await response.json();
      throw new Error(body.error || response.statusText);
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffered = "", written = "", answer = null;
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffered += value;
      let end;
      while ((end = buffered.indexOf("\\n\\n")) >= 0) {
        const line = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        if (!line.startsWith("data: ")) continue;
        const event = JSON.parse(line.slice(6));
        if (event.error) throw new Error(event.error);
        if (event.text !== undefined) { written += event.text; onText(written); }
        if (event.predictions) answer = event.predictions[0];
      }
    }
    if (answer === null) throw new Error("the stream ended before the answer did");
    const seconds = ((performance.now() - started) / 1000).toFixed(2);
    statusLine.textContent = "Done in " + seconds + " s.";
    document.body.dataset.state = "done";
    return answer;
  } catch (error) {
    statusLine.className = "error";
    statusLine.textContent = "Error: " + error.message;
    document.body.dataset.state = "error";
    return null;
  } finally {
    button.disabled = false;
  }
}"""


#: A marker in a widget's body: `__NAME__`.
_MARKER = re.compile(r"__[A-Z_]+__")


def _fills_nothing(settings: Settings, model: Mapping[str, Any] | None) -> Mapping[str, str]:
    return {}


@dataclass(frozen=True)
class Widget:
    """One task's part of the page (`Task.serving_widget`): its elements, script and styles.

    The frame fills these markers in `body`: `__COMMON__` (the script every widget builds
    on: `form`, `button`, `statusLine`, `requestHeaders()`, and `predict(instance, fixed)`,
    which posts one instance and returns its prediction, or null after showing the
    server's error; `predictStream(instance, onText, fixed)` does the same with the answer
    streamed, `onText` getting the text so far as it is written), `__SETTINGS__` (an input
    per parameter the task's page offers), and the task's words `__ACTION__`,
    `__PLACEHOLDER__`, `__OUTPUT__`, with the route, `__PREDICT__`.
    """

    #: The HTML after the page's heading (and token box), ids `form`, `go` and `status`
    #: among its elements.
    body: str
    #: CSS for the widget's own elements, after the frame's.
    style: str = ""
    #: The widget's own markers, from the server's settings and what the loaded model says
    #: of itself (`ServedModel.describe`; None while it loads).
    fill: Callable[[Settings, Mapping[str, Any] | None], Mapping[str, str]] = _fills_nothing


#: Where the server has a token: the box the page reads it from (see the module docstring).
_TOKEN_BOX = """
<div class="row"><label>Token <input type="password" id="token" autocomplete="off"
  placeholder="this server's LLM_PIPELINE_SERVE_TOKEN"></label></div>"""


def render_page(settings: Settings, model: Mapping[str, Any] | None = None) -> str:
    """The served task's page, pointed at this server's predict route; `model` is what the
    loaded model says of itself (`ServedModel.describe`), None while it loads."""
    task = get_task(settings.task)
    page, widget = task.serving_page, task.serving_widget()
    route = settings.predict_route
    values = {
        "__PREDICT_JSON__": as_js(route),
        "__SETTINGS_JSON__": as_js(list(page.parameters)),
        "__SETTINGS__": _settings_inputs(page.parameters, settings),
        "__PREDICT__": html.escape(route),
        "__ACTION__": html.escape(page.action),
        "__PLACEHOLDER__": html.escape(page.placeholder),
        "__OUTPUT__": html.escape(page.output),
        **widget.fill(settings, model),
    }
    # One pass: a value (a label, the task's words) is never read again for markers.
    body = _MARKER.sub(
        lambda found: values.get(found[0], found[0]), widget.body.replace("__COMMON__", _COMMON)
    )
    title = html.escape(page.title)
    token = _TOKEN_BOX if settings.token is not None else ""
    style = _STYLE + widget.style.lstrip("\n")
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n<style>{style}</style>\n</head>\n"
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


def as_js(value: object) -> str:
    """`value` as a JavaScript literal inside the page's script element."""
    # json.dumps escapes quotes; "</" must not close the script element early.
    return json.dumps(value).replace("</", "<\\/")
