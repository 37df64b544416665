// The Images page: a picture made through /v1/images/generations with the session's chat credential, shown with
// its seed and licence, and the recent ones kept as thumbnails in this browser's localStorage under the person's
// id (at most data-keep, the oldest dropped). No picture made here is kept on the gateway (docs/portal.md, "Images").
"use strict";

(function () {
  const root = document.getElementById("images");
  const media = window.LlmgwMedia;
  if (!root || !media) return;
  const $ = (id) => document.getElementById(id);
  const data = root.dataset;
  const storageKey = "llmgw.images." + data.person;
  const keep = Number(data.keep) || 12;
  const THUMB = 160; // px, the longer side: a thumbnail of a few kilobytes, so a dozen fit in localStorage easily
  const elements = {
    form: $("images-form"),
    model: $("images-model"),
    prompt: $("images-prompt"),
    size: $("images-size"),
    seed: $("images-seed"),
    make: $("images-make"),
    error: $("images-error"),
    result: $("images-result"),
    picture: $("images-picture"),
    seedShown: $("images-seed-shown"),
    licence: $("images-licence"),
    download: $("images-download"),
    recent: $("images-recent"),
    forget: $("images-forget"),
    project: $("images-project"),
  };
  let making = false;
  let pictures = load();

  function load() {
    try {
      const saved = JSON.parse(localStorage.getItem(storageKey) || "null");
      if (saved && Array.isArray(saved.pictures)) return saved.pictures.slice(0, keep);
    } catch (e) {
      // A damaged entry is started afresh rather than breaking the page.
    }
    return [];
  }

  function save() {
    try {
      localStorage.setItem(storageKey, JSON.stringify({ pictures: pictures }));
      return true;
    } catch (e) {
      return false;
    }
  }

  // --- the recent pictures

  function showRecent() {
    elements.recent.replaceChildren();
    for (const kept of pictures) {
      const item = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "thumb";
      button.title = kept.prompt;
      const img = document.createElement("img");
      img.src = kept.thumb; // a data URL this page drew itself
      img.alt = kept.prompt;
      const caption = document.createElement("span");
      caption.textContent = data.labelSeed.replace("{seed}", String(kept.seed ?? "?"));
      button.append(img, caption);
      // Choosing one puts its prompt, model, size and seed back in the form: Make then makes it again.
      button.addEventListener("click", () => {
        if (making) return;
        elements.prompt.value = kept.prompt;
        if ([...elements.model.options].some((o) => o.value === kept.model)) elements.model.value = kept.model;
        if ([...elements.size.options].some((o) => o.value === kept.size)) elements.size.value = kept.size;
        elements.seed.value = kept.seed ?? "";
        elements.prompt.focus();
      });
      item.appendChild(button);
      elements.recent.appendChild(item);
    }
    elements.forget.hidden = !pictures.length;
  }

  // A small JPEG of the picture, drawn on a canvas: what is kept, never the picture itself.
  function thumbnail(img) {
    const scale = Math.min(1, THUMB / Math.max(img.naturalWidth, img.naturalHeight));
    const canvas = document.createElement("canvas");
    canvas.width = Math.max(1, Math.round(img.naturalWidth * scale));
    canvas.height = Math.max(1, Math.round(img.naturalHeight * scale));
    canvas.getContext("2d").drawImage(img, 0, 0, canvas.width, canvas.height);
    return canvas.toDataURL("image/jpeg", 0.8);
  }

  function remember(img, made) {
    pictures.unshift(Object.assign({ thumb: thumbnail(img) }, made));
    pictures = pictures.slice(0, keep);
    while (!save() && pictures.length > 1) pictures.pop(); // full: the oldest go until it fits
    if (!save()) media.showError(elements.error, data.errorStorage);
    showRecent();
  }

  // --- making

  function setMaking(on) {
    making = on;
    elements.make.disabled = on || !elements.model.value;
    elements.make.textContent = on ? data.labelMaking : data.labelMake;
    elements.prompt.disabled = on;
    root.classList.toggle("busy", on);
  }

  function seedValue() {
    const text = elements.seed.value.trim();
    if (!text) return null;
    const n = Number(text);
    // A seed is up to 2^64-1; past what a double holds exactly it goes as its digits, which the gateway reads.
    return Number.isSafeInteger(n) ? n : text;
  }

  async function make() {
    const asked = { model: elements.model.value, prompt: elements.prompt.value, size: elements.size.value, n: 1 };
    const seed = seedValue();
    if (seed !== null) asked.seed = seed;
    setMaking(true);
    media.showError(elements.error, "");
    try {
      const response = await media.postJSON(data, data.endpoint, asked);
      if (!response.ok) {
        media.showError(elements.error, await media.refusal(data, response));
        return;
      }
      const text = await response.text();
      const answer = JSON.parse(text);
      // A seed is up to 2^64-1, which JSON.parse rounds past 2^53: the digits are read from the text itself (no
      // other "seed" is in the answer; a picture's base64 has no quotes), so the one shown makes the picture again.
      const exact = text.match(/"seed"\s*:\s*(\d+)/);
      if (exact) answer.seed = exact[1];
      await show(answer, asked);
    } catch (e) {
      media.showError(elements.error, data.errorNetwork);
    } finally {
      setMaking(false);
    }
  }

  async function show(answer, asked) {
    const first = answer && Array.isArray(answer.data) ? answer.data[0] : null;
    const seed = answer.seed ?? asked.seed ?? null;
    elements.seedShown.textContent = seed === null ? "" : data.labelSeed.replace("{seed}", String(seed));
    media.licence(data, elements.licence, answer.license);
    elements.result.hidden = false;
    if (first && first.b64_json) {
      const url = "data:image/png;base64," + first.b64_json;
      await new Promise((resolve) => {
        elements.picture.onload = resolve;
        elements.picture.onerror = resolve;
        elements.picture.src = url;
      });
      elements.picture.alt = asked.prompt;
      elements.picture.hidden = false;
      elements.download.href = url;
      elements.download.download = asked.model + (seed === null ? "" : "-" + seed) + ".png";
      elements.download.hidden = false;
      remember(elements.picture, { prompt: asked.prompt, model: asked.model, size: asked.size, seed: seed,
                                   at: Date.now() });
    } else if (first && first.url) {
      // An outside provider's address: shown as a link, since the page loads pictures from the gateway only.
      elements.picture.hidden = true;
      elements.download.hidden = true;
      const link = document.createElement("a");
      link.href = first.url;
      link.rel = "noopener noreferrer nofollow";
      link.textContent = first.url;
      elements.seedShown.replaceChildren(data.labelElsewhere + " ", link);
    } else {
      elements.result.hidden = true;
      media.showError(elements.error, data.labelNoPicture);
    }
  }

  // --- wiring

  elements.form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (making || !elements.prompt.value.trim() || !elements.model.value) return;
    make();
  });
  elements.forget.addEventListener("click", () => {
    if (!window.confirm(data.labelForgetConfirm)) return;
    pictures = [];
    save();
    showRecent();
  });
  if (elements.project) {
    // Choosing a project reloads the page with that project's models.
    elements.project.addEventListener("change", () => elements.project.form.submit());
  }
  setMaking(false);
  showRecent();
})();
