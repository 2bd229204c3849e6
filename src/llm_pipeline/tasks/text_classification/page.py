"""Text classification's part of the server's page at `/`: paste a text (and, for a model of
pairs, a second one), see every label's score as a bar, highest first.

The page asks for every label (`top_k` = the number of labels the loaded model scores), so
it offers no settings. The labels come from the loaded model (`Classifier.describe`) on the
page; while the model loads, or where the server has a token, the page reads them from
`/stats` instead (which asks for the token; the page, which anyone may fetch, does not).
`/?text=...` (with `&text_pair=...`) fills the boxes and sends at once. The frame around it
(the call to the predict route, the token box) is `serve.page`'s.
"""

from collections.abc import Mapping
from typing import Any

from llm_pipeline.serve.page import Widget, as_js
from llm_pipeline.serve.settings import Settings

_STYLE = """
  #text { height: 14rem; }
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

_BODY = """
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

#: The second text box, offered unless the model says it reads single texts.
_PAIR_BOX = """<label class="block" for="text_pair">Second text (optional: the other half of a
  pair, such as the passage for a question)</label>
  <textarea id="text_pair" name="text_pair"
    placeholder="Leave empty to classify the text alone"></textarea>"""


def _fill(settings: Settings, model: Mapping[str, Any] | None) -> dict[str, str]:
    """The model's labels (none behind a token, or while it loads), and the second text box
    unless the model says it reads single texts."""
    labels = None
    if model is not None and "labels" in model and settings.token is None:
        labels = {key: model[key] for key in ("labels", "multi_label", "threshold")}
    single = model is not None and model.get("text_pair") is False
    return {"__MODEL_JSON__": as_js(labels), "__PAIR_BOX__": "" if single else _PAIR_BOX}


#: The labels widget (`TextClassification.serving_widget`).
WIDGET = Widget(body=_BODY, style=_STYLE, fill=_fill)
