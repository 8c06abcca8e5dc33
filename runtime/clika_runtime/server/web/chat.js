// The page's side of the server's API: the key, the models, a streamed chat completion, stored conversations.

const KEY = "clika.apiKey";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function headers(extra = {}) {
  const key = localStorage.getItem(KEY);
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

// A request to the server; a 401 asks for the API key once (kept in localStorage) and tries again.
export async function call(path, options = {}, asked = false) {
  const response = await fetch(path, { ...options, headers: headers(options.headers) });
  if (response.status === 401 && !asked) {
    const key = window.prompt("This server needs its API key (--api-key):");
    if (key) {
      localStorage.setItem(KEY, key.trim());
      return call(path, options, true);
    }
  }
  if (!response.ok) throw new ApiError(response.status, await errorText(response));
  return response;
}

async function errorText(response) {
  try {
    const body = await response.json();
    return body?.error?.message ?? body?.error ?? `${response.status} ${response.statusText}`;
  } catch (_) {
    return `${response.status} ${response.statusText}`;
  }
}

export async function models() {
  const body = await (await call("/v1/models")).json();
  return body.data;
}

export async function conversations() {
  return (await (await call("/api/conversations")).json()).conversations;
}

export async function conversation(id) {
  return (await (await call(`/api/conversations/${encodeURIComponent(id)}`)).json()).messages;
}

export async function saveConversation(id, messages) {
  await call(`/api/conversations/${encodeURIComponent(id)}`, {
    method: "PUT",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ messages }),
  });
}

export async function deleteConversation(id) {
  await call(`/api/conversations/${encodeURIComponent(id)}`, { method: "DELETE" });
}

// Stream one reply: onDelta({content, reasoning, toolCalls}) per chunk; resolves to the usage and timing.
export async function streamReply(body, signal, onDelta) {
  const response = await call("/v1/chat/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
    signal,
  });
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const began = performance.now();
  let firstToken = null;
  let usage = null;
  let finish = null;
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const event = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new ApiError(500, chunk.error.message ?? String(chunk.error));
        if (chunk.usage) usage = chunk.usage;
        for (const choice of chunk.choices ?? []) {
          const delta = choice.delta ?? {};
          if (firstToken === null && (delta.content || delta.reasoning_content)) firstToken = performance.now();
          onDelta({ content: delta.content ?? "", reasoning: delta.reasoning_content ?? "", toolCalls: delta.tool_calls });
          if (choice.finish_reason) finish = choice.finish_reason;
        }
      }
    }
  }
  const decodeSeconds = (performance.now() - (firstToken ?? began)) / 1000;
  return { usage, finish, decodeSeconds };
}
