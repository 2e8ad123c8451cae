// One topic's messages: browse a queue from an offset, search by key, client message id,
// offset message id or store-time range, and open a message (preview and download).

import { enc, get, query } from "../api.js";
import { h, problemBox, section, table, time, values } from "../dom.js";
import { bodyBytes, messageDetail } from "../message_view.js";

const PAGE = 20; // messages per browse page
const RANGE_MAX_PER_QUEUE = 50; // a time-range search reads at most this many messages per queue

function messagesTable(messages, detail) {
  const rows = messages.map((m) => [
    m.queue_id,
    m.queue_offset,
    h("button", { type: "button", class: "linkish", onclick: () => detail.replaceChildren(messageDetail(m)) }, m.msg_id),
    m.tags ?? "",
    (m.keys || []).join(", "),
    time(m.store_timestamp),
    bodyBytes(m).length,
    h("span", { class: "snippet" }, m.encoding === "utf-8" ? m.body.slice(0, 60) : "(binary)"),
  ]);
  return table(["Queue", "Offset", "Message id", "Tags", "Keys", "Stored (UTC)", "Bytes", "Body"], rows, { class: "messages" });
}

async function pull(topic, queue, offset, max) {
  return get(`/v1/topics/${enc(topic)}/queues/${queue}/messages${query({ offset, max, wait_ms: 0 })}`);
}

// Messages stored between begin and end (ms), read queue by queue from the offset at begin.
async function byTimeRange(topic, queues, begin, end) {
  const found = [];
  for (const q of queues) {
    const from = await get(`/v1/topics/${enc(topic)}/queues/${q.queue_id}/offset${query({ timestamp_ms: begin })}`);
    let offset = Math.max(from.offset, q.min_offset);
    let read = 0;
    while (offset < q.max_offset && read < RANGE_MAX_PER_QUEUE) {
      const r = await pull(topic, q.queue_id, offset, PAGE);
      read += r.messages.length;
      const inRange = r.messages.filter((m) => m.store_timestamp >= begin && m.store_timestamp <= end);
      found.push(...inRange);
      if (!r.messages.length || r.messages[r.messages.length - 1].store_timestamp > end || r.next_offset <= offset) break;
      offset = r.next_offset;
    }
  }
  return found.sort((a, b) => a.store_timestamp - b.store_timestamp);
}

function localMs(value) {
  return value ? new Date(value).getTime() : null; // datetime-local: the browser's time zone
}

function browseForm(topic, info, results, detail) {
  const form = h(
    "form",
    {
      id: "browse",
      onsubmit: async (e) => {
        e.preventDefault();
        const v = values(form);
        try {
          const r = await pull(topic, v.queue, v.offset || 0, PAGE);
          const more = r.next_offset < r.max_offset ? `next offset ${r.next_offset}` : "end of queue";
          results.replaceChildren(h("p", {}, `${r.status}: ${r.messages.length} message(s), queue offsets ${r.min_offset}…${r.max_offset}, ${more}`), messagesTable(r.messages, detail));
          form.elements.offset.value = r.next_offset;
        } catch (err) {
          results.replaceChildren(problemBox(err));
        }
      },
    },
    h("label", {}, "Queue ", h("select", { name: "queue" }, info.queues.map((q) => h("option", { value: q.queue_id }, q.queue_id)))),
    h("label", {}, " from offset ", h("input", { name: "offset", type: "number", min: 0, value: 0 })),
    h("button", { type: "submit" }, "Browse"),
  );
  return form;
}

function searchForm(topic, info, results, detail) {
  const form = h(
    "form",
    {
      id: "search",
      onsubmit: async (e) => {
        e.preventDefault();
        const v = values(form);
        const begin = localMs(v.begin) ?? 0;
        const end = localMs(v.end) ?? Date.now() + 1000;
        delete results.dataset.by; // set again when this search's answer is shown
        try {
          let messages;
          if (v.by === "key" || v.by === "msg_id") {
            const r = await get(`/v1/topics/${enc(topic)}/messages${query({ [v.by]: v.text, begin_ms: begin, end_ms: end, max: 64 })}`);
            messages = r.messages;
          } else if (v.by === "offset_msg_id") {
            messages = [await get(`/v1/messages/${enc(v.text)}`)];
          } else {
            messages = await byTimeRange(topic, info.queues, begin, end);
          }
          results.replaceChildren(h("p", {}, `${messages.length} message(s) found`), messagesTable(messages, detail));
        } catch (err) {
          results.replaceChildren(problemBox(err));
        }
        results.dataset.by = v.by;
      },
    },
    h(
      "select",
      { name: "by" },
      h("option", { value: "key" }, "key"),
      h("option", { value: "msg_id" }, "message id (msg_id)"),
      h("option", { value: "offset_msg_id" }, "offset message id"),
      h("option", { value: "time" }, "time range only"),
    ),
    h("input", { name: "text", placeholder: "key or id" }),
    h("label", {}, " stored from ", h("input", { name: "begin", type: "datetime-local", step: 1 })),
    h("label", {}, " to ", h("input", { name: "end", type: "datetime-local", step: 1 })),
    h("button", { type: "submit" }, "Search"),
  );
  return form;
}

export async function render(target, [topic]) {
  const info = await get(`/v1/topics/${enc(topic)}`);
  const results = h("div", { id: "results" });
  const detail = h("div", { id: "detail" });
  const queues = table(
    ["Queue", "Min offset", "Max offset", "Messages"],
    info.queues.map((q) => [q.queue_id, q.min_offset, q.max_offset, q.max_offset - q.min_offset]),
    { id: "queues-table" },
  );
  target.append(
    h("h1", {}, `Topic ${topic}`),
    h("p", {}, `${info.read_queues} read / ${info.write_queues} write queues, perm ${info.perm}`),
    queues,
    section("Browse a queue", browseForm(topic, info, results, detail)),
    section("Search", searchForm(topic, info, results, detail), h("p", { class: "hint" }, "Times are in this browser's time zone; the table shows UTC.")),
    results,
    detail,
  );
}
