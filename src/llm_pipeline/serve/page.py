"""The page at `/`: paste a text, read its summary. One self-contained HTML document.

No external scripts, styles or fonts (the server may run where nothing outside reaches it);
the page calls the predict route with `fetch`, exactly as any client does. `/?text=...`
fills the text in and submits it at once, which makes the page scriptable from a shell
(and testable in a headless browser).
"""

from __future__ import annotations

import html
import json

from llm_pipeline.serve.settings import Settings

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Summarize</title>
<style>
  body { font: 16px/1.5 system-ui, sans-serif; margin: 2rem auto; max-width: 52rem;
         padding: 0 1rem; color: #1b1b1b; background: #fafafa; }
  h1 { font-size: 1.4rem; margin-bottom: .25rem; }
  p.hint { color: #555; margin-top: 0; }
  textarea { width: 100%; height: 14rem; font: inherit; padding: .5rem; box-sizing: border-box; }
  .row { display: flex; gap: 1rem; align-items: center; margin: .75rem 0; flex-wrap: wrap; }
  input[type=number] { width: 5rem; font: inherit; }
  button { font: inherit; padding: .4rem 1.2rem; background: #1a5fb4; color: white;
           border: 0; border-radius: 4px; cursor: pointer; }
  button:disabled { background: #8aa7cf; cursor: wait; }
  #summary { white-space: pre-wrap; background: #fff3c4; border-left: 4px solid #e5a50a;
             padding: .75rem 1rem; min-height: 1.5rem; font-size: 1.1rem; }
  #status.error { color: #a51d2d; font-weight: 600; }
</style>
</head>
<body data-state="idle">
<h1>Summarize</h1>
<p class="hint">Model served at <code>__PREDICT__</code>. Paste a text and press Summarize.</p>
<form id="form">
  <textarea id="text" name="text" placeholder="Text to summarize" required></textarea>
  <div class="row">
    <label>max new tokens <input type="number" id="max_new_tokens" min="1"></label>
    <label>beams <input type="number" id="num_beams" min="1"></label>
    <button type="submit" id="go">Summarize</button>
    <span id="status"></span>
  </div>
</form>
<h2>Summary</h2>
<div id="summary"></div>
<script>
const PREDICT = __PREDICT_JSON__;
const form = document.getElementById("form");
const text = document.getElementById("text");
const statusLine = document.getElementById("status");
const summary = document.getElementById("summary");
const button = document.getElementById("go");

function parameters() {
  const chosen = {};
  for (const name of ["max_new_tokens", "num_beams"]) {
    const value = document.getElementById(name).value;
    if (value !== "") chosen[name] = Number(value);
  }
  return chosen;
}

async function summarize() {
  button.disabled = true;
  document.body.dataset.state = "working";
  statusLine.className = "";
  statusLine.textContent = "Summarizing…";
  const started = performance.now();
  try {
    const response = await fetch(PREDICT, {
      method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({instances: [text.value], parameters: parameters()}),
    });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    summary.textContent = body.predictions[0];
    const seconds = ((performance.now() - started) / 1000).toFixed(2);
    statusLine.textContent = "Done in " + seconds + " s.";
    document.body.dataset.state = "done";
  } catch (error) {
    statusLine.className = "error";
    statusLine.textContent = "Error: " + error.message;
    document.body.dataset.state = "error";
  } finally {
    button.disabled = false;
  }
}

form.addEventListener("submit", (event) => { event.preventDefault(); summarize(); });
const given = new URLSearchParams(location.search).get("text");
if (given) { text.value = given; summarize(); }
</script>
</body>
</html>
"""


def render_page(settings: Settings) -> str:
    """The page, pointed at this server's predict route."""
    route = settings.predict_route
    # json.dumps escapes quotes; "</" must not close the script element early.
    as_js = json.dumps(route).replace("</", "<\\/")
    return _PAGE.replace("__PREDICT_JSON__", as_js).replace("__PREDICT__", html.escape(route))
