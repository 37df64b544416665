// The chat page: conversations kept in this browser, answers streamed from /v1 with the
// session's chat credential, and Stop. No prompt or answer is kept on the server: the
// conversations live in localStorage under the person's id (docs/portal.md, "Chat").
// Every sentence shown comes from the page's data- attributes, already translated.
"use strict";

(function () {
  const root = document.getElementById("chat");
  if (!root) return;
  const $ = (id) => document.getElementById(id);
  const data = root.dataset;
  const storageKey = "llmgw.chat." + data.person;
  const elements = {
    list: $("conversation-list"),
    messages: $("chat-messages"),
    form: $("chat-form"),
    input: $("chat-input"),
    send: $("chat-send"),
    stop: $("chat-stop"),
    model: $("chat-model"),
    system: $("chat-system"),
    error: $("chat-error"),
    project: $("chat-project"),
    bases: root.querySelectorAll("input[name=knowledge-base]"),
  };
  const labels = { copy: data.labelCopy, copied: data.labelCopied };
  let state = load();
  let running = null; // the AbortController of the answer streaming now

  // --- conversations, in localStorage

  function load() {
    try {
      const saved = JSON.parse(localStorage.getItem(storageKey) || "null");
      if (saved && Array.isArray(saved.conversations)) return saved;
    } catch (e) {
      // A damaged entry is started afresh rather than breaking the page.
    }
    return { conversations: [], current: null };
  }

  function save() {
    try {
      localStorage.setItem(storageKey, JSON.stringify(state));
    } catch (e) {
      showError(data.errorStorage || "");
    }
  }

  function current() {
    let conversation = state.conversations.find((c) => c.id === state.current);
    if (!conversation) {
      conversation = newConversation();
    }
    return conversation;
  }

  function newConversation() {
    const conversation = {
      id: String(Date.now()) + Math.random().toString(16).slice(2, 8),
      title: "",
      system: "",
      messages: [],
      updated: Date.now(),
    };
    state.conversations.unshift(conversation);
    state.current = conversation.id;
    save();
    return conversation;
  }

  function deleteConversation() {
    if (running) return;
    const conversation = current();
    if (conversation.messages.length && !window.confirm(data.labelDeleteConfirm)) return;
    state.conversations = state.conversations.filter((c) => c.id !== conversation.id);
    state.current = state.conversations.length ? state.conversations[0].id : null;
    save();
    show();
  }

  // --- drawing

  function show() {
    const conversation = current();
    elements.list.replaceChildren();
    for (const c of state.conversations) {
      const item = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "conversation" + (c.id === conversation.id ? " current" : "");
      button.textContent = c.title || data.labelUntitled;
      button.addEventListener("click", () => {
        if (running) return;
        state.current = c.id;
        save();
        show();
      });
      item.appendChild(button);
      elements.list.appendChild(item);
    }
    elements.system.value = conversation.system || "";
    elements.messages.replaceChildren();
    for (const message of conversation.messages) {
      const body = addMessage(message.role);
      fill(body, message);
    }
    hideError();
  }

  function addMessage(role) {
    const box = document.createElement("article");
    box.className = "message " + role;
    const who = document.createElement("h3");
    who.className = "who";
    who.textContent = role === "user" ? data.labelYou : data.labelAssistant;
    const body = document.createElement("div");
    body.className = "body";
    box.appendChild(who);
    box.appendChild(body);
    elements.messages.appendChild(box);
    return body;
  }

  function fill(body, message) {
    if (message.role === "user") {
      // What the person typed is shown as typed, never formatted.
      const p = document.createElement("p");
      p.className = "typed";
      p.textContent = message.content;
      body.replaceChildren(p);
    } else {
      body.replaceChildren(window.LlmgwMarkdown.render(message.content, document, labels));
    }
    if (message.sources && message.sources.length) {
      // The files the answer cited, as the gateway named them (file_citation annotations): text, never markup.
      const sources = document.createElement("p");
      sources.className = "sources";
      sources.textContent = data.labelSources.replace("{files}", message.sources.join(", "));
      body.appendChild(sources);
    }
    if (message.note) {
      const note = document.createElement("p");
      note.className = "note";
      note.textContent = message.note;
      body.appendChild(note);
    }
    body.parentElement.scrollIntoView({ block: "end" });
  }

  function showError(sentence) {
    elements.error.textContent = sentence;
    elements.error.hidden = !sentence;
  }

  function hideError() {
    showError("");
  }

  // --- refusals, as sentences of this page's language

  function sentenceFor(status, error) {
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

  // --- asking

  function setRunning(controller) {
    running = controller;
    elements.send.hidden = !!controller;
    elements.stop.hidden = !controller;
    elements.input.disabled = !!controller;
    root.classList.toggle("streaming", !!controller);
  }

  async function ask(text) {
    const conversation = current();
    conversation.system = elements.system.value;
    conversation.messages.push({ role: "user", content: text });
    if (!conversation.title) conversation.title = text.trim().slice(0, 60);
    conversation.updated = Date.now();
    save();
    show();
    const answer = { role: "assistant", content: "" };
    const body = addMessage("assistant");
    const messages = conversation.messages.map((m) => ({ role: m.role, content: m.content }));
    if (conversation.system.trim()) messages.unshift({ role: "system", content: conversation.system });
    const controller = new AbortController();
    setRunning(controller);
    let failed = null;
    try {
      const response = await fetch(data.endpoint, {
        method: "POST",
        headers: {
          Authorization: "Bearer " + data.token,
          "Content-Type": "application/json",
          "x-llmgw-project": data.project,
        },
        body: JSON.stringify(request(messages)),
        signal: controller.signal,
        credentials: "omit", // the chat credential is the whole of it: no cookie goes to /v1
      });
      if (!response.ok) {
        let error = null;
        try {
          error = (await response.json()).error;
        } catch (e) {
          error = null;
        }
        failed = sentenceFor(response.status, error);
      } else {
        failed = await readStream(response, answer, body);
      }
    } catch (e) {
      if (e.name === "AbortError") {
        answer.note = data.labelStopped;
      } else {
        failed = data.errorNetwork;
      }
    }
    setRunning(null);
    if (answer.content || answer.note) {
      conversation.messages.push(answer);
      fill(body, answer);
    } else {
      body.parentElement.remove();
    }
    conversation.updated = Date.now();
    save();
    if (failed) showError(failed);
    elements.input.focus();
  }

  // The request's body: the chosen knowledge bases, when any, are llmgw's knowledge_bases (docs/knowledge.md).
  function request(messages) {
    const asked = { model: elements.model.value, messages: messages, stream: true };
    const bases = Array.from(elements.bases).filter((box) => box.checked).map((box) => box.value);
    if (bases.length) asked.knowledge_bases = bases;
    return asked;
  }

  // Server-sent events from the response's body: each `data:` line is a chunk, an error, or [DONE].
  async function readStream(response, answer, body) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n")) !== -1) {
        const line = buffer.slice(0, end).replace(/\r$/, "");
        buffer = buffer.slice(end + 1);
        if (!line.startsWith("data:")) continue;
        const payload = line.slice(5).trim();
        if (payload === "[DONE]") return null;
        let event;
        try {
          event = JSON.parse(payload);
        } catch (e) {
          continue;
        }
        if (event.error) return sentenceFor(0, event.error);
        const choice = event.choices && event.choices[0];
        const piece = choice && choice.delta && choice.delta.content;
        if (piece) {
          answer.content += piece;
          fill(body, answer);
        }
        const cited = choice && choice.delta && choice.delta.annotations;
        if (Array.isArray(cited)) {
          // Sent once, at the answer's end: the files its [n] marks name.
          const files = cited.map((a) => a && a.filename).filter((name) => typeof name === "string");
          answer.sources = Array.from(new Set([...(answer.sources || []), ...files]));
          fill(body, answer);
        }
        if (choice && choice.finish_reason === "content_filter") {
          answer.note = data.errorContentFilter; // a guardrail stopped the answer; what came before stays
          return null;
        }
      }
    }
    return null;
  }

  // --- wiring

  elements.form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = elements.input.value;
    if (!text.trim() || running) return;
    elements.input.value = "";
    ask(text);
  });
  elements.input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      elements.form.requestSubmit();
    }
  });
  elements.stop.addEventListener("click", () => {
    if (running) running.abort();
  });
  $("new-conversation").addEventListener("click", () => {
    if (running) return;
    newConversation();
    show();
    elements.input.focus();
  });
  $("delete-conversation").addEventListener("click", deleteConversation);
  elements.system.addEventListener("change", () => {
    current().system = elements.system.value;
    save();
  });
  if (elements.project) {
    // Choosing a project reloads the page with that project's models.
    elements.project.addEventListener("change", () => elements.project.form.submit());
  }
  show();
})();
