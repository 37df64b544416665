// The Workflows page: a run made with POST /v1/workflows/runs from the chosen model's form (which the server wrote
// from its declared inputs), followed with GET /v1/workflows/runs/ID as an event stream read by fetch (EventSource
// cannot send the chat credential), its progress drawn, and its outputs fetched with the credential: pictures
// shown, other files downloaded. Runs and outputs are the project's, on the gateway (docs/portal.md, "Workflows").
"use strict";

(function () {
  const root = document.getElementById("workflows");
  const media = window.LlmgwMedia;
  if (!root || !media) return;
  const $ = (id) => document.getElementById(id);
  const data = root.dataset;
  const ENDED = new Set(["succeeded", "failed", "cancelled"]);
  const STATUS = {
    queued: data.labelQueued, running: data.labelStatusRunning, succeeded: data.labelSucceeded,
    failed: data.labelFailed, cancelled: data.labelCancelled,
  };
  const elements = {
    model: $("wf-model"),
    project: $("wf-project"),
    forms: [...root.querySelectorAll("form.workflow")],
    error: $("wf-error"),
    run: $("wf-run"),
    title: $("wf-run-title"),
    status: $("wf-run-status"),
    steps: $("wf-steps"),
    stepsLabel: $("wf-steps-label"),
    nodes: $("wf-nodes"),
    nodesLabel: $("wf-nodes-label"),
    outputs: $("wf-outputs"),
    recent: $("wf-recent"),
  };
  let following = null; // {id, controller} of the run drawn now
  let starting = false;
  let blobs = []; // object URLs of the outputs shown, let go when another run is shown

  function showForm() {
    for (const form of elements.forms) form.hidden = form.dataset.model !== elements.model.value;
    buttons();
  }

  function buttons() {
    const open = following && following.open;
    for (const form of elements.forms) {
      const run = form.querySelector("button.run");
      run.disabled = starting || !!open;
      run.textContent = starting || open ? data.labelRunning : data.labelRun;
      form.querySelector("button.cancel").hidden = !open || following.model !== form.dataset.model;
    }
  }

  // --- the form's values

  function asDataURL(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(reader.result);
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
  }

  // Each control's value as the run takes it; an empty one is left out, so its default (or a random seed) applies.
  async function values(form) {
    const inputs = {};
    for (const control of form.querySelectorAll("[data-input]")) {
      const name = control.dataset.input;
      const type = control.dataset.type;
      if (control.type === "checkbox") {
        inputs[name] = control.checked;
      } else if (control.type === "file") {
        const file = control.files && control.files[0];
        // Sent inline as a data URL; the gateway keeps it as a file of the project, and the run its id.
        if (file) inputs[name] = await asDataURL(file);
      } else if (control.value.trim() !== "") {
        // A whole number (a seed up to 2^64-1) goes as its digits, which the gateway reads without rounding.
        inputs[name] = type === "number" ? Number(control.value) : control.value;
      }
    }
    return inputs;
  }

  // --- a run

  async function start(form) {
    starting = true;
    buttons();
    media.showError(elements.error, "");
    try {
      const inputs = await values(form);
      const response = await media.postJSON(data, data.endpoint, { model: form.dataset.model, inputs: inputs });
      if (!response.ok) {
        media.showError(elements.error, await media.refusal(data, response));
        return;
      }
      const run = await response.json();
      starting = false;
      refreshRecent();
      await follow(run);
    } catch (e) {
      if (e.name !== "AbortError") media.showError(elements.error, data.errorNetwork);
    } finally {
      starting = false;
      buttons();
      refreshRecent();
    }
  }

  // Draws the run, then follows its event stream until it ends (again after a pause if the stream closes first).
  async function follow(run) {
    if (following) following.controller.abort();
    const mine = { id: run.id, model: run.model, open: !ENDED.has(run.status), controller: new AbortController() };
    following = mine;
    let last = run;
    draw(last, true);
    buttons();
    try {
      while (!ENDED.has(last.status)) {
        const response = await media.call(data, "/v1/workflows/runs/" + encodeURIComponent(run.id), {
          headers: { Accept: "text/event-stream" },
          signal: mine.controller.signal,
        });
        if (!response.ok) {
          media.showError(elements.error, await media.refusal(data, response));
          break;
        }
        await media.readEvents(response, (name, doc) => {
          if (!doc || doc.id !== run.id) return true;
          last = doc;
          draw(doc, false);
          return name !== "done";
        });
        if (!ENDED.has(last.status)) await new Promise((resolve) => setTimeout(resolve, 1000));
      }
    } catch (e) {
      if (e.name === "AbortError") return; // another run was chosen
      media.showError(elements.error, data.errorNetwork);
    } finally {
      mine.open = false;
      if (following === mine) buttons();
    }
    if (following === mine && ENDED.has(last.status)) await finish(last, mine.controller.signal);
  }

  function draw(run, fresh) {
    elements.run.hidden = false;
    elements.title.textContent = run.model;
    status(elements.status, run.status);
    if (fresh) {
      for (const url of blobs) URL.revokeObjectURL(url);
      blobs = [];
      elements.outputs.replaceChildren();
    }
    const p = run.progress || {};
    const steps = Number(p.max) || 0;
    elements.steps.max = steps || 1;
    elements.steps.value = run.status === "succeeded" ? steps || 1 : Math.min(Number(p.value) || 0, steps || 1);
    if (steps) {
      elements.stepsLabel.textContent = data.labelSteps.replace("{value}", String(p.value || 0))
        .replace("{max}", String(steps));
    } else {
      elements.stepsLabel.textContent = run.status === "queued" ? data.labelWaiting : "";
    }
    elements.steps.hidden = !steps && run.status !== "queued"; // a run that ended before any node said its steps
    const total = Number(p.total_nodes) || 0;
    elements.nodes.max = total || 1;
    elements.nodes.value = Math.min(Number(p.done_nodes) || 0, total || 1);
    elements.nodesLabel.textContent = total ? data.labelNodes.replace("{done}", String(p.done_nodes || 0))
      .replace("{total}", String(total)) : "";
    elements.nodes.hidden = !total;
    // The run's row in the recent runs, kept in step with what is drawn.
    const row = [...elements.recent.rows].find((r) => r.dataset.run === run.id);
    if (row) status(row.cells[2], run.status);
  }

  function status(cell, value) {
    cell.textContent = STATUS[value] || value;
    cell.className = "status status-" + value;
  }

  async function finish(run, signal) {
    elements.outputs.replaceChildren();
    if (run.status === "failed") {
      media.showError(elements.error, media.sentenceFor(data, 0, run.error));
      return;
    }
    if (run.status !== "succeeded") return;
    if (!run.outputs || !run.outputs.length) {
      const note = document.createElement("p");
      note.className = "muted";
      note.textContent = data.labelNoOutputs;
      elements.outputs.appendChild(note);
      return;
    }
    for (const output of run.outputs) {
      const figure = document.createElement("figure");
      figure.className = "output";
      const caption = document.createElement("figcaption");
      const link = document.createElement("a");
      link.className = "button";
      link.textContent = output.filename;
      link.download = output.filename;
      caption.appendChild(link);
      elements.outputs.appendChild(figure);
      if (String(output.content_type || "").startsWith("image/")) {
        const url = await content(output, signal);
        if (!url) continue;
        const img = document.createElement("img");
        img.src = url;
        img.alt = output.filename;
        figure.appendChild(img);
        link.href = url;
      } else {
        // Fetched when asked for: a mesh or a file may be large, and the link must carry the credential.
        link.href = "#";
        link.addEventListener("click", async (event) => {
          if (link.href.startsWith("blob:")) return;
          event.preventDefault();
          const url = await content(output, signal);
          if (!url) return;
          link.href = url;
          link.click();
        });
      }
      figure.appendChild(caption);
    }
  }

  // The output's bytes, fetched with the credential (a plain link would carry none), as an object URL.
  async function content(output, signal) {
    try {
      const response = await media.call(data, "/v1/files/" + encodeURIComponent(output.file_id) + "/content",
        { signal: signal });
      if (!response.ok) {
        media.showError(elements.error, await media.refusal(data, response));
        return null;
      }
      const url = URL.createObjectURL(await response.blob());
      blobs.push(url);
      return url;
    } catch (e) {
      if (e.name !== "AbortError") media.showError(elements.error, data.errorNetwork);
      return null;
    }
  }

  async function cancel() {
    if (!following || !following.open) return;
    const response = await media.call(data, "/v1/workflows/runs/" + encodeURIComponent(following.id) + "/cancel",
      { method: "POST" }).catch(() => null);
    if (response && !response.ok) media.showError(elements.error, await media.refusal(data, response));
    // The stream followed says "cancelled" in its done event.
  }

  // --- the project's recent runs

  function when(seconds) {
    return new Date(seconds * 1000).toISOString().slice(0, 16).replace("T", " ") + " UTC";
  }

  async function refreshRecent() {
    let runs;
    try {
      const response = await media.call(data, "/v1/workflows/runs?limit=" + encodeURIComponent(data.recent));
      if (!response.ok) return; // the list is a convenience: a refusal shows on the next run
      runs = (await response.json()).data || [];
    } catch (e) {
      return;
    }
    elements.recent.replaceChildren();
    if (!runs.length) {
      const row = elements.recent.insertRow();
      const cell = row.insertCell();
      cell.colSpan = 4;
      cell.className = "muted";
      cell.textContent = data.labelNoRuns;
    }
    for (const run of runs) {
      const row = elements.recent.insertRow();
      row.dataset.run = run.id;
      row.insertCell().textContent = when(run.created_at);
      row.insertCell().textContent = run.model;
      status(row.insertCell(), run.status);
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = data.labelShow;
      button.addEventListener("click", () => {
        media.showError(elements.error, "");
        follow(run).then(refreshRecent);
      });
      row.insertCell().appendChild(button);
    }
  }

  // --- wiring

  for (const form of elements.forms) {
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (starting || (following && following.open)) return;
      start(form);
    });
    form.querySelector("button.cancel").addEventListener("click", cancel);
  }
  if (elements.model) elements.model.addEventListener("change", showForm);
  if (elements.project) {
    // Choosing a project reloads the page with that project's models.
    elements.project.addEventListener("change", () => elements.project.form.submit());
  }
  showForm();
  refreshRecent();
})();
