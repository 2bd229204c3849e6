"""The chat part of the server's page at `/`, for every task that serves a causal LM's chat
completions (instruction tuning, preference tuning).

A system prompt, the turns so far, a message box, and the model's answers; each send posts
the whole conversation as one `{"messages": [...]}` instance, as any client would, and
reads the answer as it is written (`"stream": true`).
`/?message=...` (with `&system=...`) fills the box and sends it at once, which makes the page
scriptable from a shell. The frame around it (the settings, the call to the predict route,
the token box) is `serve.page`'s.
"""

from llm_pipeline.serve.page import Widget

_STYLE = """
  .turn.assistant { white-space: pre-wrap; background: #fff3c4;
             border-left: 4px solid #e5a50a; padding: .75rem 1rem; min-height: 1.5rem;
             font-size: 1.1rem; }
  #turns { display: flex; flex-direction: column; gap: .5rem; margin: 1rem 0; }
  .turn { white-space: pre-wrap; padding: .6rem 1rem; border-radius: 4px; }
  .turn.user { background: #dbe8fb; border-left: 4px solid #1a5fb4; }
  .turn .role { display: block; font-size: .8rem; color: #555; font-weight: 600; }
  .turn.empty .content { font-style: italic; color: #777; }
"""

_BODY = """
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
  // The answer is shown as it is written, then as the endpoint returns it whole.
  const writing = {role: "assistant", content: ""};
  turns.push(writing);
  const answer = await predictStream({messages}, (text) => {
    writing.content = text;
    draw();
  });
  turns.pop();
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

#: The chat widget (`serving_widget` of the chat tasks).
CHAT_WIDGET = Widget(body=_BODY, style=_STYLE)
