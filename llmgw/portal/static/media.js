// What the Images and Workflows pages share: /v1 called with the session's chat credential, the chosen project
// in x-llmgw-project (as chat.js does), refusals as the page's sentences, and a server-sent events reader
// (EventSource cannot send the Authorization header). Every sentence comes from the page's data- attributes.
"use strict";

(function () {
  // The credential is the whole of it: no cookie goes to /v1.
  function call(data, path, options) {
    const asked = Object.assign({ method: "GET", credentials: "omit" }, options || {});
    asked.headers = Object.assign({ Authorization: "Bearer " + data.token, "x-llmgw-project": data.project },
      asked.headers || {});
    return fetch(path, asked);
  }

  function postJSON(data, path, body, signal) {
    return call(data, path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      signal: signal,
    });
  }

  // The sentence for a refusal: the one for its code, else the session's end for a 401, else the gateway's own.
  function sentenceFor(data, status, error) {
    const code = (error && error.code) || "";
    const attribute = "error" + code.split("_").map((w) => w.charAt(0).toUpperCase() + w.slice(1)).join("");
    let sentence = code && data[attribute];
    if (!sentence) {
      sentence = status === 401 ? data.errorInvalidApiKey : data.errorOther;
    }
    // The rule a guardrail applied is a name, not text of the prompt: safe to show.
    const rule = ((error && error.message) || "").match(/\(rule ([^)\s]+)\)/);
    return sentence.replace("{rule}", rule ? rule[1] : "?").replace("{detail}", (error && error.message) || "");
  }

  async function refusal(data, response) {
    let error = null;
    try {
      error = (await response.json()).error;
    } catch (e) {
      error = null;
    }
    return sentenceFor(data, response.status, error);
  }

  // Each event of a text/event-stream body, as onEvent(name, parsed data); ends when the stream does.
  async function readEvents(response, onEvent) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let name = "message";
    let lines = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n")) !== -1) {
        const line = buffer.slice(0, end).replace(/\r$/, "");
        buffer = buffer.slice(end + 1);
        if (line === "") {
          if (lines.length) {
            let parsed = null;
            try {
              parsed = JSON.parse(lines.join("\n"));
            } catch (e) {
              parsed = null;
            }
            if (parsed !== null && onEvent(name, parsed) === false) {
              reader.cancel();
              return;
            }
          }
          name = "message";
          lines = [];
        } else if (line.startsWith("event:")) {
          name = line.slice(6).trim();
        } else if (line.startsWith("data:")) {
          lines.push(line.slice(5).trim());
        }
      }
    }
  }

  // A licence as the answer or the catalog gives it (id, name, url, commercial), into `into`, with createElement
  // and textContent only: the catalog's text is never markup, and its address is a link only when it is http(s).
  function licence(data, into, given) {
    into.replaceChildren();
    if (!given || typeof given !== "object") return;
    const label = given.name || given.id || given.url || "";
    if (!label) return;
    into.append(data.labelLicence + " ");
    let href = null;
    try {
      const url = new URL(given.url || "");
      href = url.protocol === "https:" || url.protocol === "http:" ? url.href : null;
    } catch (e) {
      href = null;
    }
    if (href) {
      const a = document.createElement("a");
      a.href = href;
      a.rel = "noopener noreferrer nofollow";
      a.textContent = label;
      into.appendChild(a);
    } else {
      into.append(label);
    }
    if (given.commercial === true) into.append(" (" + data.labelCommercialYes + ")");
    if (given.commercial === false) into.append(" (" + data.labelCommercialNo + ")");
  }

  function showError(element, sentence) {
    element.textContent = sentence || "";
    element.hidden = !sentence;
  }

  window.LlmgwMedia = { call, postJSON, sentenceFor, refusal, readEvents, licence, showError };
})();
