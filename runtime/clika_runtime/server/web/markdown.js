// A small, safe Markdown renderer: model text becomes DOM nodes built with textContent, never HTML.
// Blocks: fenced code (```lang), headings (#), lists (-, *, 1.), quotes (>), rules (---), paragraphs.
// Inline: `code`, **bold**, *italic*, [text](url) with http(s) urls only (any other link stays text).

const FENCE = /^\s*(```|~~~)\s*([\w+#.-]*)\s*$/;
const HEADING = /^(#{1,6})\s+(.*)$/;
const BULLET = /^\s*[-*+]\s+(.*)$/;
const NUMBERED = /^\s*\d+[.)]\s+(.*)$/;
const QUOTE = /^\s*>\s?(.*)$/;
const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;

export function renderMarkdown(text) {
  const root = document.createDocumentFragment();
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(FENCE);
    if (fence) {
      const code = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) code.push(lines[i++]);
      i += 1; // the closing fence (or the end of a reply still streaming)
      root.append(codeBlock(code.join("\n"), fence[2]));
      continue;
    }
    if (!line.trim()) { i += 1; continue; }
    const heading = line.match(HEADING);
    if (heading) {
      const node = document.createElement(`h${Math.min(heading[1].length + 2, 6)}`);
      appendInline(node, heading[2]);
      root.append(node);
      i += 1;
      continue;
    }
    if (RULE.test(line)) { root.append(document.createElement("hr")); i += 1; continue; }
    if (QUOTE.test(line)) {
      const quoted = [];
      while (i < lines.length && QUOTE.test(lines[i])) quoted.push(lines[i++].match(QUOTE)[1]);
      const node = document.createElement("blockquote");
      node.append(renderMarkdown(quoted.join("\n")));
      root.append(node);
      continue;
    }
    const listKind = BULLET.test(line) ? BULLET : NUMBERED.test(line) ? NUMBERED : null;
    if (listKind) {
      const list = document.createElement(listKind === BULLET ? "ul" : "ol");
      while (i < lines.length && listKind.test(lines[i])) {
        const item = document.createElement("li");
        appendInline(item, lines[i++].match(listKind)[1]);
        list.append(item);
      }
      root.append(list);
      continue;
    }
    const paragraph = [];
    while (i < lines.length && lines[i].trim() && !startsBlock(lines[i])) paragraph.push(lines[i++]);
    const node = document.createElement("p");
    paragraph.forEach((part, index) => {
      if (index) node.append(document.createElement("br"));
      appendInline(node, part);
    });
    root.append(node);
  }
  return root;
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || BULLET.test(line) || NUMBERED.test(line) ||
    QUOTE.test(line) || RULE.test(line);
}

function codeBlock(code, language) {
  const figure = document.createElement("figure");
  figure.className = "code";
  const bar = document.createElement("figcaption");
  const label = document.createElement("span");
  label.textContent = language || "code";
  const copy = document.createElement("button");
  copy.type = "button";
  copy.textContent = "Copy";
  copy.addEventListener("click", () => {
    navigator.clipboard?.writeText(code).then(() => { copy.textContent = "Copied"; }, () => {});
  });
  bar.append(label, copy);
  const pre = document.createElement("pre");
  const node = document.createElement("code");
  node.textContent = code;
  pre.append(node);
  figure.append(bar, pre);
  return figure;
}

// Inline spans, scanned left to right: the earliest marker wins; unmatched markers stay text.
const INLINE = [
  { re: /`([^`]+)`/, make: (m) => element("code", m[1]) },
  // Underscores emphasise whole words only (snake_case and __dunder__ names inside words stay text).
  { re: /\*\*([^*]+)\*\*|(?<!\w)__([^_]+)__(?!\w)/, make: (m) => nested("strong", m[1] ?? m[2]) },
  { re: /\*([^*\s][^*]*)\*|(?<!\w)_([^_\s][^_]*)_(?!\w)/, make: (m) => nested("em", m[1] ?? m[2]) },
  { re: /\[([^\]]+)\]\(([^)\s]+)\)/, make: (m) => link(m[1], m[2]) },
  { re: /\bhttps?:\/\/[^\s<>()]+[^\s<>().,;:!?'"]/, make: (m) => link(m[0], m[0]) },
];

export function appendInline(parent, text) {
  let rest = String(text);
  while (rest) {
    let best = null;
    for (const rule of INLINE) {
      const match = rule.re.exec(rest);
      if (match && (best === null || match.index < best.match.index)) best = { rule, match };
    }
    if (best === null) { parent.append(document.createTextNode(rest)); return; }
    if (best.match.index) parent.append(document.createTextNode(rest.slice(0, best.match.index)));
    parent.append(best.rule.make(best.match));
    rest = rest.slice(best.match.index + best.match[0].length);
  }
}

function element(tag, text) {
  const node = document.createElement(tag);
  node.textContent = text;
  return node;
}

function nested(tag, text) {
  const node = document.createElement(tag);
  appendInline(node, text);
  return node;
}

export function safeUrl(href) {
  try {
    const url = new URL(href, "http://invalid.invalid/");
    if ((url.protocol === "http:" || url.protocol === "https:") && /^https?:\/\//i.test(href)) return url.href;
  } catch (_) { /* not a URL: shown as text */ }
  return null;
}

function link(label, href) {
  const url = safeUrl(href);
  if (url === null) return document.createTextNode(`[${label}](${href})`);
  const node = document.createElement("a");
  node.href = url;
  node.textContent = label;
  node.rel = "noopener noreferrer nofollow";
  node.target = "_blank";
  return node;
}
