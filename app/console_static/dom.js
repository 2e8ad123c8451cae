// Small DOM helpers: elements are built with textContent, never from HTML strings of data.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function table(columns, rows, attrs = {}) {
  return h(
    "table",
    attrs,
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.length ? rows.map((r) => h("tr", {}, r.map((cell) => h("td", {}, cell)))) : h("tr", {}, h("td", { colspan: columns.length, class: "empty" }, "none"))),
  );
}

// A problem+json reply (an ApiProblem) or any other error, shown as a box.
export function problemBox(err) {
  const p = err && err.problem ? err.problem : { title: String(err), detail: "" };
  const status = err && err.status ? `${err.status} ` : "";
  return h(
    "div",
    { class: "problem", role: "alert" },
    h("strong", {}, `${status}${p.code || "ERROR"}`),
    " ",
    h("span", { class: "title" }, p.title || ""),
    p.detail ? h("div", { class: "detail" }, p.detail) : null,
  );
}

export function section(title, ...children) {
  return h("section", {}, h("h2", {}, title), ...children);
}

export function bytes(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i ? v.toFixed(1) : v} ${units[i]}`;
}

export function time(ms) {
  if (ms === null || ms === undefined) return "-";
  return new Date(ms).toISOString().replace("T", " ").replace("Z", "");
}

export function duration(ms) {
  if (ms === null || ms === undefined) return "-";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120000) return `${(ms / 1000).toFixed(1)} s`;
  return `${(ms / 60000).toFixed(1)} min`;
}

export function link(href, text) {
  return h("a", { href }, text);
}

// A form's fields by name, as strings.
export function values(form) {
  return Object.fromEntries(new FormData(form).entries());
}

// An inline confirmation: the action runs only after a second, explicit click.
export function confirmButton(label, question, action) {
  const box = h("span", { class: "confirm" });
  const ask = () => {
    box.replaceChildren(
      h("span", { class: "question" }, question),
      " ",
      h("button", { type: "button", class: "danger", onclick: () => { reset(); action(); } }, `Yes, ${label.toLowerCase()}`),
      " ",
      h("button", { type: "button", onclick: reset }, "Cancel"),
    );
  };
  const reset = () => box.replaceChildren(h("button", { type: "button", class: "danger", onclick: ask }, label));
  reset();
  return box;
}
