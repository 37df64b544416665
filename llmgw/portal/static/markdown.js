// The chat's own small Markdown: paragraphs, emphasis, lists, code spans, fenced code with a
// copy button, and http(s) links. A model's answer is text from outside, so the page is built
// with createElement and textContent only, never innerHTML: raw HTML in an answer stays text,
// and a link is made only when its address parses as http: or https:.
"use strict";

(function () {
  const LINK_REL = "noopener noreferrer nofollow";
  const FENCE = /^\s{0,3}(```+|~~~+)\s*([\w+#.-]*)\s*$/;
  const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
  const NUMBERED = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
  const HEADING = /^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$/;
  const BARE_URL = /^https?:\/\/[^\s<>"'`]+/i;
  const MARKDOWN_LINK = /^\[([^\]\n]+)\]\(\s*([^)\s]+)\s*\)/;

  // The address as the browser will follow it, or null unless it is http(s).
  function safeHref(raw) {
    try {
      const url = new URL(raw);
      return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
    } catch (e) {
      return null;
    }
  }

  function link(doc, href, label, into) {
    const a = doc.createElement("a");
    a.href = href;
    a.rel = LINK_REL;
    inline(doc, label, a);
    into.appendChild(a);
  }

  function isWordChar(ch) {
    return ch !== undefined && /[\p{L}\p{N}]/u.test(ch);
  }

  // Inline spans of `text` appended to `into`: code, strong, emphasis, links, and text.
  function inline(doc, text, into) {
    let plain = "";
    const flush = () => {
      if (plain) {
        into.appendChild(doc.createTextNode(plain));
        plain = "";
      }
    };
    let i = 0;
    while (i < text.length) {
      const ch = text[i];
      const rest = text.slice(i);
      if (ch === "`") {
        const ticks = rest.match(/^`+/)[0];
        const end = text.indexOf(ticks, i + ticks.length);
        if (end !== -1) {
          flush();
          const code = doc.createElement("code");
          code.textContent = text.slice(i + ticks.length, end);
          into.appendChild(code);
          i = end + ticks.length;
          continue;
        }
        plain += ticks;
        i += ticks.length;
        continue;
      }
      if ((rest.startsWith("**") || rest.startsWith("__")) && !/\s/.test(text[i + 2] || " ")) {
        const mark = rest.slice(0, 2);
        const end = text.indexOf(mark, i + 2);
        if (end > i + 2 && !/\s/.test(text[end - 1])) {
          flush();
          const strong = doc.createElement("strong");
          inline(doc, text.slice(i + 2, end), strong);
          into.appendChild(strong);
          i = end + 2;
          continue;
        }
      }
      if ((ch === "*" || ch === "_") && !/\s/.test(text[i + 1] || " ") && !(ch === "_" && isWordChar(text[i - 1]))) {
        let end = text.indexOf(ch, i + 1);
        while (end !== -1 && (text[end + 1] === ch || /\s/.test(text[end - 1]))) {
          end = text.indexOf(ch, end + 2);
        }
        if (end > i + 1 && !(ch === "_" && isWordChar(text[end + 1]))) {
          flush();
          const em = doc.createElement("em");
          inline(doc, text.slice(i + 1, end), em);
          into.appendChild(em);
          i = end + 1;
          continue;
        }
      }
      if (ch === "[") {
        const m = rest.match(MARKDOWN_LINK);
        if (m) {
          flush();
          const href = safeHref(m[2]);
          if (href) {
            link(doc, href, m[1], into);
          } else {
            into.appendChild(doc.createTextNode(m[0])); // javascript:, data: and the like stay words
          }
          i += m[0].length;
          continue;
        }
      }
      if ((ch === "h" || ch === "H") && !isWordChar(text[i - 1])) {
        const m = rest.match(BARE_URL);
        if (m) {
          const url = m[0].replace(/[.,;:!?)\]]+$/, "");
          const href = safeHref(url);
          if (href) {
            flush();
            const a = doc.createElement("a");
            a.href = href;
            a.rel = LINK_REL;
            a.textContent = url;
            into.appendChild(a);
            i += url.length;
            continue;
          }
        }
      }
      plain += ch;
      i += 1;
    }
    flush();
  }

  // A paragraph's lines, with a line break where the answer had one.
  function paragraph(doc, lines, into, tag) {
    const p = doc.createElement(tag || "p");
    lines.forEach((line, n) => {
      if (n > 0) p.appendChild(doc.createElement("br"));
      inline(doc, line.trim(), p);
    });
    into.appendChild(p);
  }

  function codeBlock(doc, lines, lang, into, labels) {
    const box = doc.createElement("div");
    box.className = "code-block";
    const copy = doc.createElement("button");
    copy.type = "button";
    copy.className = "copy-code";
    copy.textContent = labels.copy;
    const pre = doc.createElement("pre");
    const code = doc.createElement("code");
    if (lang) code.dataset.lang = lang;
    code.textContent = lines.join("\n");
    copy.addEventListener("click", () => {
      const done = () => {
        copy.textContent = labels.copied;
      };
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(code.textContent).then(done, () => selectText(doc, code));
      } else {
        selectText(doc, code);
      }
    });
    pre.appendChild(code);
    box.appendChild(copy);
    box.appendChild(pre);
    into.appendChild(box);
  }

  // Without the clipboard API (a page not served over https), select the code for Ctrl+C.
  function selectText(doc, node) {
    const range = doc.createRange();
    range.selectNodeContents(node);
    const selection = doc.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  // `text` as a fragment of block elements. An unclosed fence (an answer still streaming) is code so far.
  function render(text, doc, labels) {
    doc = doc || document;
    labels = Object.assign({ copy: "Copy", copied: "Copied" }, labels || {});
    const out = doc.createDocumentFragment();
    const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      const fence = line.match(FENCE);
      if (fence) {
        const body = [];
        i += 1;
        while (i < lines.length && !(lines[i].trim().startsWith(fence[1][0].repeat(fence[1].length))
                                     && lines[i].trim().replace(/[`~]/g, "") === "")) {
          body.push(lines[i]);
          i += 1;
        }
        i += 1; // the closing fence
        codeBlock(doc, body, fence[2], out, labels);
        continue;
      }
      if (!line.trim()) {
        i += 1;
        continue;
      }
      const heading = line.match(HEADING);
      if (heading) {
        paragraph(doc, [heading[1]], out, "h4");
        i += 1;
        continue;
      }
      if (BULLET.test(line) || NUMBERED.test(line)) {
        const numbered = !BULLET.test(line);
        const list = doc.createElement(numbered ? "ol" : "ul");
        const pattern = numbered ? NUMBERED : BULLET;
        const first = line.match(NUMBERED);
        if (numbered && first[1] !== "1") list.start = Number(first[1]);
        while (i < lines.length && pattern.test(lines[i])) {
          const m = lines[i].match(pattern);
          const item = doc.createElement("li");
          inline(doc, (numbered ? m[2] : m[1]).trim(), item);
          list.appendChild(item);
          i += 1;
        }
        out.appendChild(list);
        continue;
      }
      const para = [];
      while (i < lines.length && lines[i].trim() && !FENCE.test(lines[i]) && !BULLET.test(lines[i])
             && !NUMBERED.test(lines[i]) && !HEADING.test(lines[i])) {
        para.push(lines[i]);
        i += 1;
      }
      paragraph(doc, para, out);
    }
    return out;
  }

  window.LlmgwMarkdown = { render: render, safeHref: safeHref };
})();
