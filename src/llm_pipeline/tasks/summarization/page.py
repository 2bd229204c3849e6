"""Summarization's part of the server's page at `/`: paste a text, read its summary.

`/?text=...` fills the box and sends it at once, which makes the page scriptable from a
shell. The frame around it (the settings, the call to the predict route, the token box) is
`serve.page`'s.
"""

from llm_pipeline.serve.page import Widget

_STYLE = """
  #text { height: 14rem; }
  #summary { white-space: pre-wrap; background: #fff3c4; border-left: 4px solid #e5a50a;
             padding: .75rem 1rem; min-height: 1.5rem; font-size: 1.1rem; }
  #summary:empty { display: none; }
"""

_BODY = """
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

#: The document widget (`Summarization.serving_widget`).
WIDGET = Widget(body=_BODY, style=_STYLE)
