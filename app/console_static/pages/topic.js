// One topic's messages: its newest ones at once, produce one, browse a queue from an offset, search by
// key, client message id, offset message id or store-time range, and open a message (preview and download).

import { call, enc, get, query } from "../api.js";
import { h, problemBox, section, table, time, values } from "../dom.js";
import { bodyBytes, messageDetail } from "../message_view.js";

const PAGE = 20; // messages per browse page
const NEWEST = 20; // the newest messages shown when the page opens
const PULL_MAX = 32; // messages per pull of a time-range search (the broker's default max)
const RANGE_PAGE = 200; // a time-range search shows this many messages, then "Load more" reads on

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

// A time-range search: each queue read from the offset stored at `begin` until a message past `end`, a page
// of RANGE_PAGE messages at a time; `next()` reads the next page, from where each queue stopped.
class RangeCursor {
  constructor(topic, queues, begin, end) {
    Object.assign(this, { topic, begin, end });
    this.queues = queues.map((q) => ({ id: q.queue_id, min: q.min_offset, max: q.max_offset, offset: null, done: q.max_offset <= q.min_offset }));
  }

  get done() {
    return this.queues.every((q) => q.done);
  }

  async next() {
    const found = [];
    for (const q of this.queues) {
      if (q.offset === null && !q.done) {
        const from = await get(`/v1/topics/${enc(this.topic)}/queues/${q.id}/offset${query({ timestamp_ms: this.begin })}`);
        q.offset = Math.max(from.offset, q.min);
      }
      while (!q.done && found.length < RANGE_PAGE) {
        if (q.offset >= q.max) {
          q.done = true;
          break;
        }
        const r = await pull(this.topic, q.id, q.offset, Math.min(PULL_MAX, RANGE_PAGE - found.length));
        found.push(...r.messages.filter((m) => m.store_timestamp >= this.begin && m.store_timestamp <= this.end));
        const past = r.messages.length && r.messages[r.messages.length - 1].store_timestamp > this.end;
        if (!r.messages.length || past || r.next_offset <= q.offset) q.done = true;
        q.offset = r.next_offset;
      }
    }
    return found.sort((a, b) => a.store_timestamp - b.store_timestamp);
  }
}

async function newest(topic) {
  return (await get(`/v1/topics/${enc(topic)}/messages${query({ max: NEWEST })}`)).messages;
}

// A range search's pages, each appended with a "Load more" button while a queue has more in the range.
async function showRange(cursor, results, detail) {
  const shown = [];
  const status = h("p", { id: "range-status" });
  const list = h("div", {});
  const more = h("button", { type: "button", id: "range-more" }, "Load more");
  const page = async () => {
    shown.push(...(await cursor.next()));
    status.textContent = `${shown.length} message(s) found${cursor.done ? "" : ", more in the range"}`;
    list.replaceChildren(messagesTable(shown, detail));
    more.hidden = cursor.done;
  };
  more.addEventListener("click", () => page().catch((err) => results.append(problemBox(err))));
  results.replaceChildren(status, list, more);
  await page();
}

// One message to produce: a body, keys (comma-separated), a tag, a queue, properties (name=value per line).
function produceForm(topic, info, onSent) {
  const out = h("div", { class: "result", id: "produce-result" });
  const form = h(
    "form",
    {
      id: "produce",
      onsubmit: async (e) => {
        e.preventDefault();
        const v = values(form);
        const message = { body: v.body };
        const keys = v.keys.split(",").map((k) => k.trim()).filter(Boolean);
        if (keys.length) message.keys = keys;
        if (v.tags) message.tags = v.tags;
        if (v.queue !== "") message.queue_id = Number(v.queue);
        const properties = {};
        for (const line of v.properties.split("\n")) {
          const at = line.indexOf("=");
          if (at > 0) properties[line.slice(0, at).trim()] = line.slice(at + 1).trim();
        }
        if (Object.keys(properties).length) message.properties = properties;
        try {
          const sent = await call("POST", `/v1/topics/${enc(topic)}/messages`, message);
          out.replaceChildren(h("span", { class: "ok" }, `Sent to queue ${sent.queue_id} at offset ${sent.queue_offset}: ${sent.msg_id}`));
          onSent();
        } catch (err) {
          out.replaceChildren(problemBox(err));
        }
      },
    },
    h("textarea", { name: "body", rows: 3, cols: 60, placeholder: "message body (text)", required: true }),
    h("input", { name: "keys", placeholder: "keys, comma-separated" }),
    h("input", { name: "tags", placeholder: "tag" }),
    h("label", {}, "Queue ", h("select", { name: "queue" }, h("option", { value: "" }, "any"), info.queues.map((q) => h("option", { value: q.queue_id }, q.queue_id)))),
    h("textarea", { name: "properties", rows: 2, cols: 30, placeholder: "properties: name=value per line" }),
    h("button", { type: "submit" }, "Send"),
  );
  return h("div", {}, form, out);
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
            const now = await get(`/v1/topics/${enc(topic)}`); // the queues' ends as they are now
            await showRange(new RangeCursor(topic, now.queues, begin, end), results, detail);
            results.dataset.by = v.by;
            return;
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
  const showNewest = async () => {
    try {
      const messages = await newest(topic);
      results.replaceChildren(h("p", {}, `The newest ${messages.length} message(s), newest first`), messagesTable(messages, detail));
      results.dataset.by = "newest";
    } catch (err) {
      results.replaceChildren(problemBox(err));
    }
  };
  await showNewest();
  target.append(
    h("h1", {}, `Topic ${topic}`),
    h("p", {}, `${info.read_queues} read / ${info.write_queues} write queues, perm ${info.perm}`),
    queues,
    section("Produce", produceForm(topic, info, showNewest)),
    section("Browse a queue", browseForm(topic, info, results, detail), h("button", { type: "button", id: "show-newest", onclick: showNewest }, "Newest messages")),
    section("Search", searchForm(topic, info, results, detail), h("p", { class: "hint" }, "Times are in this browser's time zone; the table shows UTC.")),
    results,
    detail,
  );
}
