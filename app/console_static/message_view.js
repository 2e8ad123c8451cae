// One message in detail: its fields and properties, the body as text, JSON or hex, and a download.

import { h, table, time } from "./dom.js";

const HEX_PREVIEW_BYTES = 4096; // the hex view shows the first 4 KiB; the download has everything

export function bodyBytes(m) {
  if (m.encoding === "base64") return Uint8Array.from(atob(m.body), (c) => c.charCodeAt(0));
  return new TextEncoder().encode(m.body);
}

function hexDump(data) {
  const lines = [];
  const n = Math.min(data.length, HEX_PREVIEW_BYTES);
  for (let i = 0; i < n; i += 16) {
    const row = Array.from(data.slice(i, Math.min(i + 16, n)));
    const hex = row.map((b) => b.toString(16).padStart(2, "0")).join(" ");
    const text = row.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(`${i.toString(16).padStart(8, "0")}  ${hex.padEnd(47)}  ${text}`);
  }
  if (data.length > n) lines.push(`… ${data.length - n} more bytes`);
  return lines.join("\n");
}

function asJson(m) {
  if (m.encoding !== "utf-8") return "(the body is not UTF-8 text)";
  try {
    return JSON.stringify(JSON.parse(m.body), null, 2);
  } catch (err) {
    return `(not JSON: ${err.message})`;
  }
}

function preview(m, mode) {
  if (mode === "hex") return hexDump(bodyBytes(m));
  if (mode === "json") return asJson(m);
  return m.encoding === "utf-8" ? m.body : "(binary body: see hex)";
}

export function download(m) {
  const blob = new Blob([bodyBytes(m)], { type: "application/octet-stream" });
  const a = h("a", { href: URL.createObjectURL(blob), download: `${m.topic}-${m.queue_id}-${m.queue_offset}.bin` });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

export function messageDetail(m) {
  const body = h("pre", { class: "body", id: "message-body" }, preview(m, "text"));
  const modes = h(
    "div",
    { class: "modes" },
    ["text", "json", "hex"].map((mode) => h("button", { type: "button", "data-mode": mode, onclick: () => (body.textContent = preview(m, mode)) }, mode.toUpperCase())),
    h("button", { type: "button", id: "download", onclick: () => download(m) }, "Download"),
  );
  const fields = [
    ["msg_id", m.msg_id],
    ["offset_msg_id", m.offset_msg_id],
    ["queue / offset", `${m.queue_id} / ${m.queue_offset}`],
    ["commitlog offset", m.commitlog_offset],
    ["tags", m.tags ?? "-"],
    ["keys", (m.keys || []).join(", ") || "-"],
    ["born", time(m.born_timestamp)],
    ["stored", time(m.store_timestamp)],
    ["reconsume times", m.reconsume_times],
    ["body", `${bodyBytes(m).length} bytes, ${m.encoding}${bodyNote(m)}`],
    ...Object.entries(m.properties || {}).map(([k, v]) => [`property ${k}`, v]),
  ];
  return h("div", { class: "message", id: "message-detail" }, h("h3", {}, `Message ${m.msg_id}`), table(["Field", "Value"], fields), modes, body);
}

// A body stored compressed is shown inflated; one the broker could not inflate is shown as stored.
function bodyNote(m) {
  if (m.body_error) return `, stored compressed and not inflated: ${m.body_error}`;
  return m.compressed ? ", stored compressed (shown inflated)" : "";
}
