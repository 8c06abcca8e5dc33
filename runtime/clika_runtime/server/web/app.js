// The chat page: conversations from the server's store, a model picker, streamed replies with Stop.
import * as api from "./chat.js";
import { renderMarkdown } from "./markdown.js";

const $ = (id) => document.getElementById(id);
const state = { id: null, messages: [], models: [], controller: null, editing: null, images: [], stats: new Map() };

function newId() {
  const now = new Date();
  const pad = (n) => String(n).padStart(2, "0");
  const stamp = `${now.getFullYear()}${pad(now.getMonth() + 1)}${pad(now.getDate())}-${pad(now.getHours())}${pad(now.getMinutes())}${pad(now.getSeconds())}`;
  return `web-${stamp}-${Math.random().toString(36).slice(2, 6)}`;
}

function status(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

// -- rendering -------------------------------------------------------------------------------------

function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.filter((p) => p && p.type === "text").map((p) => p.text ?? "").join("\n");
}

function imagesOf(content) {
  if (!Array.isArray(content)) return [];
  return content.filter((p) => p && (p.type === "image_url" || p.type === "image"));
}

function folded(summary, body) {
  const details = document.createElement("details");
  const head = document.createElement("summary");
  head.textContent = summary;
  details.append(head, body);
  return details;
}

function preformatted(text) {
  const pre = document.createElement("pre");
  pre.textContent = text;
  return pre;
}

function messageNode(message, index) {
  const node = document.createElement("article");
  node.className = `message ${message.role}`;
  const who = document.createElement("h2");
  who.textContent = message.role === "user" ? "You" : message.role === "assistant" ? "Assistant" : message.role;
  node.append(who);
  if (message.reasoning_content) node.append(folded("Reasoning", preformatted(message.reasoning_content)));
  const body = document.createElement("div");
  body.className = "content";
  if (message.role === "user") {
    const text = document.createElement("p");
    text.className = "plain";
    text.textContent = textOf(message.content);
    body.append(text);
    for (const part of imagesOf(message.content)) {
      const url = part.image_url?.url ?? "";
      if (url.startsWith("data:image/")) {
        const img = document.createElement("img");
        img.src = url;
        img.alt = "attached image";
        body.append(img);
      } else {
        body.append(document.createTextNode("[image]"));
      }
    }
  } else {
    body.append(renderMarkdown(textOf(message.content)));
  }
  node.append(body);
  if (message.tool_calls?.length) {
    node.append(folded(`Tool calls (${message.tool_calls.length})`, preformatted(JSON.stringify(message.tool_calls, null, 2))));
  }
  const stats = state.stats.get(message);
  if (stats) {
    const line = document.createElement("p");
    line.className = "stats";
    line.textContent = stats;
    node.append(line);
  }
  node.append(actions(message, index));
  return node;
}

function actions(message, index) {
  const bar = document.createElement("div");
  bar.className = "actions";
  const button = (label, handler) => {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.addEventListener("click", handler);
    bar.append(b);
  };
  if (message.role === "user") {
    button("Edit", () => {
      state.editing = index;
      $("prompt").value = textOf(message.content);
      $("prompt").focus();
      status("Editing: send to replace this message and what follows it.");
    });
  }
  if (message.role === "assistant" && index === state.messages.length - 1) button("Regenerate", regenerate);
  return bar;
}

function render() {
  const area = $("messages");
  area.replaceChildren(...state.messages.filter((m) => m.role !== "system").map((m) => messageNode(m, state.messages.indexOf(m))));
  area.scrollTop = area.scrollHeight;
}

async function renderSidebar() {
  let listed = [];
  try {
    listed = await api.conversations();
  } catch (error) {
    status(`Cannot list conversations: ${error.message}`, true);
  }
  const nav = $("conversations");
  nav.replaceChildren(...listed.map((c) => {
    const row = document.createElement("div");
    row.className = "conversation" + (c.id === state.id ? " current" : "");
    const open = document.createElement("button");
    open.type = "button";
    open.className = "open";
    open.textContent = c.title;
    open.title = c.id;
    open.dataset.id = c.id;
    open.addEventListener("click", () => openConversation(c.id));
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "remove";
    remove.textContent = "×";
    remove.setAttribute("aria-label", `Delete ${c.title}`);
    remove.addEventListener("click", async () => {
      await api.deleteConversation(c.id);
      if (c.id === state.id) newChat();
      renderSidebar();
    });
    row.append(open, remove);
    return row;
  }));
}

// -- conversations ---------------------------------------------------------------------------------

function newChat() {
  history.replaceState(null, "", "/");
  Object.assign(state, { id: null, messages: [], editing: null, images: [] });
  state.stats = new Map();
  $("system").value = localStorage.getItem("clika.system") ?? "";
  render();
  renderSidebar();
}

async function openConversation(id) {
  try {
    const messages = await api.conversation(id);
    state.id = id;
    state.messages = messages;
    state.stats = new Map();
    const system = messages.find((m) => m.role === "system");
    $("system").value = system ? textOf(system.content) : "";
    history.replaceState(null, "", `/#${encodeURIComponent(id)}`);
    render();
    renderSidebar();
    status("");
  } catch (error) {
    status(`Cannot open ${id}: ${error.message}`, true);
  }
}

async function save() {
  state.id ??= newId();
  history.replaceState(null, "", `/#${encodeURIComponent(state.id)}`);
  await api.saveConversation(state.id, state.messages);
  renderSidebar();
}

// -- sending ---------------------------------------------------------------------------------------

function withSystem(messages) {
  const system = $("system").value.trim();
  const rest = messages.filter((m) => m.role !== "system");
  return system ? [{ role: "system", content: system }, ...rest] : rest;
}

async function send(event) {
  event?.preventDefault();
  if (state.controller) return;
  const text = $("prompt").value.trim();
  if (!text && !state.images.length) return;
  if (state.editing !== null) state.messages = state.messages.slice(0, state.editing);
  state.editing = null;
  const content = state.images.length
    ? [{ type: "text", text }, ...state.images.map((url) => ({ type: "image_url", image_url: { url } }))]
    : text;
  state.messages = withSystem([...state.messages, { role: "user", content }]);
  $("prompt").value = "";
  state.images = [];
  $("attached").replaceChildren();
  await reply();
}

async function regenerate() {
  if (state.controller) return;
  if (state.messages.at(-1)?.role === "assistant") state.messages.pop();
  await reply();
}

function number(id) {
  const value = parseFloat($(id).value);
  return Number.isFinite(value) ? value : undefined;
}

async function reply() {
  const model = $("model").value;
  const assistant = { role: "assistant", content: "" };
  state.messages.push(assistant);
  render();
  const node = $("messages").lastElementChild;
  const body = node.querySelector(".content");
  let reasoning = "";
  const calls = [];
  state.controller = new AbortController();
  $("send").hidden = true;
  $("stop").hidden = false;
  status("Generating…");
  let stopped = false;
  try {
    const request = {
      model,
      messages: state.messages.slice(0, -1),
      temperature: number("temperature"),
      top_p: number("top-p"),
      max_tokens: number("max-tokens"),
    };
    const done = await api.streamReply(request, state.controller.signal, (delta) => {
      if (delta.content) {
        assistant.content += delta.content;
        body.replaceChildren(renderMarkdown(assistant.content));
      }
      if (delta.reasoning) reasoning += delta.reasoning;
      for (const call of delta.toolCalls ?? []) {
        const known = calls[call.index ?? 0] ?? (calls[call.index ?? 0] = { id: call.id, type: "function", function: { name: "", arguments: "" } });
        if (call.function?.name) known.function.name += call.function.name;
        if (call.function?.arguments) known.function.arguments += call.function.arguments;
      }
    });
    state.stats.set(assistant, statsLine(done, model));
    status("");
  } catch (error) {
    if (error.name === "AbortError") {
      stopped = true;
      status("Stopped.");
    } else {
      status(error.message, true);
      if (!assistant.content) state.messages.pop();
    }
  } finally {
    state.controller = null;
    $("send").hidden = false;
    $("stop").hidden = true;
  }
  if (reasoning) assistant.reasoning_content = reasoning;
  if (calls.length) assistant.tool_calls = calls;
  if (stopped) state.stats.set(assistant, "stopped");
  render();
  if (state.messages.at(-1) === assistant) {
    try {
      await save();
    } catch (error) {
      status(`Not saved: ${error.message}`, true);
    }
  }
}

function statsLine(done, modelId) {
  const usage = done.usage;
  if (!usage) return "";
  const rate = done.decodeSeconds > 0 ? usage.completion_tokens / done.decodeSeconds : 0;
  const window = state.models.find((m) => m.id === modelId)?.context_window;
  const used = usage.prompt_tokens + usage.completion_tokens;
  const context = window ? `, context ${used} / ${window} (${Math.round((100 * used) / window)}%)` : "";
  return `${usage.completion_tokens} tokens, ${rate.toFixed(1)} tokens/s${context}`;
}

// -- start -----------------------------------------------------------------------------------------

async function loadModels() {
  try {
    state.models = await api.models();
  } catch (error) {
    status(`Cannot list models: ${error.message}`, true);
    return;
  }
  const saved = localStorage.getItem("clika.model");
  $("model").replaceChildren(...state.models.map((m) => {
    const option = document.createElement("option");
    option.value = m.id;
    option.textContent = m.id;
    return option;
  }));
  if (state.models.some((m) => m.id === saved)) $("model").value = saved;
  if (!state.models.length) status("No model is served: `clika pull NAME`, then reload.", true);
}

function wire() {
  $("composer").addEventListener("submit", send);
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) send(event);
  });
  $("stop").addEventListener("click", () => state.controller?.abort());
  window.addEventListener("hashchange", () => {
    const id = decodeURIComponent(location.hash.slice(1));
    if (id && id !== state.id) openConversation(id);
  });
  $("new-chat").addEventListener("click", newChat);
  $("model").addEventListener("change", () => localStorage.setItem("clika.model", $("model").value));
  $("system").addEventListener("change", () => localStorage.setItem("clika.system", $("system").value));
  $("toggle-settings").addEventListener("click", () => {
    const settings = $("settings");
    settings.hidden = !settings.hidden;
    $("toggle-settings").setAttribute("aria-expanded", String(!settings.hidden));
  });
  $("toggle-sidebar").addEventListener("click", () => document.body.classList.toggle("sidebar-open"));
  $("toggle-theme").addEventListener("click", () => {
    const dark = document.documentElement.dataset.theme !== "dark";
    document.documentElement.dataset.theme = dark ? "dark" : "light";
    localStorage.setItem("clika.theme", document.documentElement.dataset.theme);
  });
  $("image").addEventListener("change", () => {
    for (const file of $("image").files) {
      const reader = new FileReader();
      reader.addEventListener("load", () => {
        state.images.push(reader.result);
        const img = document.createElement("img");
        img.src = reader.result;
        img.alt = file.name;
        $("attached").append(img);
      });
      reader.readAsDataURL(file);
    }
    $("image").value = "";
  });
}

async function start() {
  const theme = localStorage.getItem("clika.theme");
  if (theme) document.documentElement.dataset.theme = theme;
  wire();
  await loadModels();
  const id = decodeURIComponent(location.hash.slice(1));
  if (id) await openConversation(id);
  else newChat();
  document.body.dataset.ready = "true";
}

start();
