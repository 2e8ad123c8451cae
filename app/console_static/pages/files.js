// The store's files: each with its kind, size and modification time, totals per kind.

import { get } from "../api.js";
import { bytes, h, section, table, time } from "../dom.js";

export async function render(target) {
  const listing = await get("/v1/store/files");
  const kinds = new Map();
  for (const f of listing.files) {
    const k = kinds.get(f.kind) || { files: 0, bytes: 0 };
    k.files += 1;
    k.bytes += f.size_bytes;
    kinds.set(f.kind, k);
  }
  const summary = table(["Kind", "Files", "Size"], [...kinds].map(([kind, k]) => [kind, k.files, bytes(k.bytes)]), { id: "kinds-table" });
  const rows = listing.files.map((f) => [h("span", { class: "mono" }, f.path), f.kind, bytes(f.size_bytes), time(f.modified_ms)]);
  target.append(
    h("h1", {}, "Store files"),
    h("p", {}, `${listing.files.length} files, ${bytes(listing.total_bytes)} under `, h("span", { class: "mono" }, listing.root), listing.truncated ? " (more files than listed)" : ""),
    section("By kind", summary),
    section("Files", table(["Path", "Kind", "Size", "Modified (UTC)"], rows, { id: "files-table" })),
  );
}
