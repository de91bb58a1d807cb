// unirag serve: the page's behaviour. Plain browser JavaScript, no build step, no external assets.
"use strict";

const state = { token: sessionStorage.getItem("unirag-token") || "", files: {} };
const $ = (sel, root = document) => root.querySelector(sel);

// ---- requests -------------------------------------------------------------------------------
function authHeaders() {
  return state.token ? { Authorization: "Bearer " + state.token } : {};
}

async function api(path, form) {
  let response;
  try {
    response = await fetch(path, { method: form ? "POST" : "GET", body: form, headers: authHeaders() });
  } catch (err) {
    throw new Error("The service cannot be reached (" + err.message + "). Is `unirag serve` still running?");
  }
  let body = null;
  try { body = await response.json(); } catch (_) { /* not JSON */ }
  if (response.status === 401) showTokenForm();
  if (!response.ok) {
    const why = body && body.error ? body.error : response.statusText;
    throw new Error(why + " (HTTP " + response.status + ")");
  }
  return body;
}

// Pool images: plain URLs, or fetched with the token (an <img> cannot send a header).
async function setImage(img, url, size) {
  if (!url) { img.removeAttribute("src"); img.alt = "no image"; return; }
  const src = size ? url + "?size=" + size : url;
  if (!state.token) { img.src = src; return; }
  try {
    const r = await fetch(src, { headers: authHeaders() });
    if (r.ok) img.src = URL.createObjectURL(await r.blob());
  } catch (_) { img.alt = "image not available"; }
}

// ---- errors and busy state --------------------------------------------------------------------
function panelOf(el) { return el.closest("[role=tabpanel]"); }
function showError(panel, message) {
  const box = $(".error", panel);
  box.textContent = message;
  box.hidden = false;
}
function clearError(panel) {
  const box = $(".error", panel);
  box.textContent = "";
  box.hidden = true;
}
async function busy(form, work) {
  const panel = panelOf(form);
  const button = $("button[type=submit]", form);
  clearError(panel);
  button.disabled = true;
  panel.setAttribute("aria-busy", "true");
  try {
    await work();
  } catch (err) {
    showError(panel, err.message || String(err));
  } finally {
    button.disabled = false;
    panel.removeAttribute("aria-busy");
  }
}

// ---- cards ------------------------------------------------------------------------------------
function card(item, metaText) {
  const node = $("#card").content.firstElementChild.cloneNode(true);
  const img = $("img", node);
  img.alt = item.caption ? "Image: " + item.caption : "Pool image " + (item.did || "");
  setImage(img, item.image_url, 320);
  $(".card-caption", node).textContent = item.caption || "(no caption)";
  $(".card-meta", node).textContent = metaText;
  return node;
}
function fillGrid(list, items, meta) {
  list.replaceChildren(...items.map((item, i) => card(item, meta(item, i))));
}
const hitMeta = (h, i) => "#" + (i + 1) + (h.score === null ? "" : " · score " + h.score.toFixed(3))
  + " · " + h.modality + " · " + h.did;

// ---- image inputs (drop zones) ------------------------------------------------------------------
function setupDrop(zone) {
  const input = document.getElementById(zone.dataset.input);
  const preview = $(".preview", zone);
  const clear = $(".clear", zone);
  const show = (file) => {
    state.files[input.id] = file || null;
    if (file) {
      preview.src = URL.createObjectURL(file);
      preview.alt = "Selected image " + file.name;
    }
    preview.hidden = !file;
    clear.hidden = !file;
  };
  input.addEventListener("change", () => show(input.files[0]));
  clear.addEventListener("click", () => { input.value = ""; show(null); input.focus(); });
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    const file = e.dataTransfer.files[0];
    if (file) {
      try { input.files = e.dataTransfer.files; } catch (_) { /* older browsers */ }
      show(file);
    }
  });
}
function fileOf(inputId) {
  const input = document.getElementById(inputId);
  return state.files[inputId] || (input.files && input.files[0]) || null;
}

// ---- tabs (WAI-ARIA tabs pattern: arrows, Home/End) -------------------------------------------------
function setupTabs() {
  const tabs = Array.from(document.querySelectorAll("[role=tab]"));
  const select = (tab, focus) => {
    for (const t of tabs) {
      const on = t === tab;
      t.setAttribute("aria-selected", String(on));
      t.tabIndex = on ? 0 : -1;
      document.getElementById(t.getAttribute("aria-controls")).hidden = !on;
    }
    if (focus) tab.focus();
    history.replaceState(null, "", "#" + tab.id.replace("tab-", ""));
  };
  tabs.forEach((tab, i) => {
    tab.addEventListener("click", () => select(tab, false));
    tab.addEventListener("keydown", (e) => {
      const moves = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 };
      if (e.key in moves) {
        e.preventDefault();
        select(tabs[(moves[e.key] + tabs.length) % tabs.length], true);
      }
    });
  });
  const wanted = document.getElementById("tab-" + location.hash.slice(1));
  if (wanted) select(wanted, false);
}

// ---- forms ----------------------------------------------------------------------------------------
// Example selection (diversity, one per image, near-duplicate guard, filters): the same fields on
// /v1/search, /v1/caption and /v1/generate-image, written once in index.html's
// <template id="selection-controls"> and copied into each <div class="row selection" data-prefix="P">
// with ids "P-diversity", "P-one-per-image", ...; filters are "FIELD=VALUE", several separated by ";".
function setupSelectionControls() {
  const template = $("#selection-controls");
  for (const row of document.querySelectorAll(".row.selection[data-prefix]")) {
    const prefix = row.dataset.prefix;
    const controls = template.content.cloneNode(true);
    for (const el of controls.querySelectorAll("[id]")) el.id = el.id.replace("PREFIX-", prefix + "-");
    for (const el of controls.querySelectorAll("label[for]")) el.htmlFor = el.htmlFor.replace("PREFIX-", prefix + "-");
    row.appendChild(controls);
  }
}

function appendSelection(data, prefix) {
  data.append("diversity", $("#" + prefix + "-diversity").value);
  data.append("one_per_image", $("#" + prefix + "-one-per-image").checked ? "true" : "false");
  data.append("near_duplicates", $("#" + prefix + "-near-duplicates").value);
  for (const f of $("#" + prefix + "-filter").value.split(";")) {
    if (f.trim()) data.append("filter", f.trim());
  }
}
const flagText = (x) => (x.near_duplicate ? " · near-duplicate of the query (" + x.near_duplicate + ")" : "");

function setupForms() {
  $("#search-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const form = e.target;
    busy(form, async () => {
      const text = $("#search-text").value.trim();
      const image = fileOf("search-image");
      if (!text && !image) throw new Error("Type a text or choose an image to search with.");
      const data = new FormData();
      if (text) data.append("text", text);
      if (image) data.append("image", image);
      data.append("k", $("#search-k").value);
      data.append("modality", $("#search-modality").value);
      appendSelection(data, "search");
      const res = await api("/v1/search", data);
      const panel = panelOf(form);
      $(".meta", panel).textContent = res.hits.length + " results in " + (res.latency_s * 1000).toFixed(0) + " ms";
      fillGrid($("#search-results"), res.hits, (h, i) => hitMeta(h, i) + flagText(h));
    });
  });

  $("#caption-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const form = e.target;
    busy(form, async () => {
      const image = fileOf("caption-image");
      if (!image) throw new Error("Choose or drop an image to caption.");
      const data = new FormData();
      data.append("image", image);
      data.append("mode", $("#caption-mode").value);
      data.append("k", $("#caption-k").value);
      appendSelection(data, "caption");
      $("#caption-output").hidden = true;
      const res = await api("/v1/caption", data);
      $("#caption-query").src = URL.createObjectURL(image);
      $("#caption-text").textContent = res.caption;
      const cost = res.cost_usd ? " · $" + res.cost_usd.toFixed(4) : "";
      $("#caption-meta").textContent = res.generator + " · " + res.mode + " · " + res.k + " examples · "
        + (res.latency_s * 1000).toFixed(0) + " ms" + cost;
      fillGrid($("#caption-examples"), res.examples, (ex, i) => "example [" + (i + 1) + "] · " + (ex.did || "") + flagText(ex));
      $("#caption-output").hidden = false;
    });
  });

  $("#cir-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const form = e.target;
    busy(form, async () => {
      const image = fileOf("cir-image");
      const text = $("#cir-text").value.trim();
      if (!image) throw new Error("Choose or drop a reference image.");
      if (!text) throw new Error("Say how the target image differs from the reference.");
      const data = new FormData();
      data.append("image", image);
      data.append("text", text);
      data.append("k", $("#cir-k").value);
      const res = await api("/v1/cir", data);
      $(".meta", panelOf(form)).textContent = res.hits.length + " results · stage: " + res.stage
        + (res.note ? " (" + res.note + ")" : "") + " · " + (res.latency_s * 1000).toFixed(0) + " ms";
      fillGrid($("#cir-results"), res.hits, hitMeta);
    });
  });

  $("#generate-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const form = e.target;
    busy(form, async () => {
      const text = $("#generate-text").value.trim();
      if (!text) throw new Error("Describe the image to generate.");
      const data = new FormData();
      data.append("text", text);
      data.append("mode", $("#generate-mode").value);
      data.append("k", $("#generate-k").value);
      appendSelection(data, "generate");
      $("#generate-output").hidden = true;
      const res = await api("/v1/generate-image", data);
      $("#generate-image").src = res.image;
      $("#generate-meta").textContent = res.generator + " · " + res.width + "×" + res.height + " · "
        + (res.latency_s * 1000).toFixed(0) + " ms";
      fillGrid($("#generate-examples"), res.examples, (ex, i) => "example [" + (i + 1) + "] · " + (ex.did || "") + flagText(ex));
      $("#generate-output").hidden = false;
    });
  });
}

// ---- token and status -------------------------------------------------------------------------------
function showTokenForm() {
  const form = $("#token-form");
  form.hidden = false;
  $("#token").focus();
}
function setupToken() {
  $("#token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = $("#token").value.trim();
    sessionStorage.setItem("unirag-token", state.token);
    e.target.hidden = true;
    loadStatus();
  });
}
async function loadStatus() {
  const status = $("#status");
  try {
    const info = await api("/healthz");
    if (!info.counts) {  // token mode without the token: the service only says it is alive
      status.textContent = "service alive; enter the token to use it";
      if (!state.token) showTokenForm();
      return;
    }
    const counts = Object.entries(info.counts).map(([m, n]) => n + " " + m).join(", ");
    status.textContent = "index " + counts + " · encoder " + info.encoder + " · captions by "
      + (info.generator || "none") + " · CIR: " + info.cir;
    if (info.auth && !state.token) showTokenForm();
  } catch (err) {
    status.textContent = "service not reachable: " + err.message;
  }
}

window.addEventListener("unhandledrejection", (e) => {
  const panel = document.querySelector("[role=tabpanel]:not([hidden])");
  if (panel) showError(panel, "Unexpected error: " + (e.reason && e.reason.message ? e.reason.message : e.reason));
});

document.querySelectorAll(".drop").forEach(setupDrop);
setupTabs();
setupSelectionControls();
setupForms();
setupToken();
loadStatus();
