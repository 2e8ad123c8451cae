// Topics: each topic's queues with min/max offsets, its put rate (sampled here from the queues'
// max offsets), the rate pulls return it (/metrics' tidemq_topic_pulled_messages_total) and the
// rate its consumer groups receive it (from the groups' received counts), create a topic, delete
// one after an explicit confirmation.

import { call, enc, get, parseLabelledMetric } from "../api.js";
import { lineChart, RateSeries, Sampler } from "../chart.js";
import { confirmButton, h, link, problemBox, section, table, values } from "../dom.js";
import { isSystemTopic, topicKind, topicsWithCounts } from "./common.js";

const SAMPLE_MS = 3000;
const rates = new Map(); // topic -> {put, pulled, received} RateSeries, kept while the console is open

function ratesOf(name) {
  if (!rates.has(name)) rates.set(name, { put: new RateSeries("put"), pulled: new RateSeries("pulled"), received: new RateSeries("received") });
  return rates.get(name);
}

// topic -> messages pulls returned so far (/metrics; empty without the right to read it).
async function pulledByTopic() {
  try {
    return parseLabelledMetric(await get("/metrics"), "tidemq_topic_pulled_messages_total", "topic");
  } catch {
    return new Map();
  }
}

// topic -> messages its groups received so far (group consumption; plain pulls are not counted per topic).
async function receivedByTopic() {
  const out = new Map();
  try {
    for (const g of (await get("/v1/groups")).groups) for (const t of g.topics) out.set(t.topic, (out.get(t.topic) || 0) + t.received);
  } catch {
    // without the right to list groups the received line stays empty; the topics still show
  }
  return out;
}

function queuesText(queues) {
  return queues.map((q) => `${q.queue_id}: ${q.min_offset}…${q.max_offset}`).join(", ");
}

function createForm(onDone) {
  const out = h("div", { class: "result" });
  const form = h(
    "form",
    {
      id: "create-topic",
      onsubmit: async (e) => {
        e.preventDefault();
        const v = values(form);
        try {
          await call("PUT", `/v1/topics/${enc(v.topic)}`, { queues: Number(v.queues), perm: v.perm });
          out.replaceChildren(h("span", { class: "ok" }, `Topic ${v.topic} saved`));
          onDone();
        } catch (err) {
          out.replaceChildren(problemBox(err));
        }
      },
    },
    h("input", { name: "topic", placeholder: "topic name", required: true, maxlength: 127 }),
    h("input", { name: "queues", type: "number", min: 1, value: 4, title: "queues" }),
    h("select", { name: "perm" }, ["rw", "r", "w"].map((p) => h("option", { value: p }, p))),
    h("button", { type: "submit" }, "Create / update"),
  );
  return h("div", {}, form, out);
}

function row(t, onDelete) {
  const cells = {
    queues: h("span", { class: "mono" }, queuesText(t.queues)),
    messages: h("span", {}, t.messages),
    spark: h("div", { class: "spark", "data-topic": t.topic }, lineChart([ratesOf(t.topic).put, ratesOf(t.topic).pulled, ratesOf(t.topic).received], { width: 240, height: 64 })),
  };
  const del = isSystemTopic(t) ? topicKind(t).replace("_", " ") : confirmButton("Delete", `Delete ${t.topic} and its queues?`, () => onDelete(t.topic));
  const cellsRow = [link(`#/topics/${encodeURIComponent(t.topic)}`, t.topic), `${t.read_queues}/${t.write_queues}`, t.perm, cells.queues, cells.messages, cells.spark, del];
  return { cells, cellsRow, key: `${t.topic} ${t.read_queues} ${t.write_queues} ${t.perm}` };
}

export async function render(target) {
  const listBox = h("div", {});
  const status = h("div", {});
  let shown = new Map(); // topic -> row: redrawn in place so a pending confirmation survives a refresh
  let deletions = 0; // topics deleted so far: a refresh that listed before a delete draws nothing
  const onDelete = async (name) => {
    try {
      await call("DELETE", `/v1/topics/${enc(name)}`);
      deletions += 1;
      rates.delete(name);
      await refresh(); // the table no longer shows the topic when the message says it is deleted
      status.replaceChildren(h("span", { class: "ok" }, `Topic ${name} deleted`));
    } catch (err) {
      status.replaceChildren(problemBox(err));
    }
  };
  const draw = (topics, more) => {
    const rows = topics.map((t) => row(t, onDelete));
    const sameTable = rows.length === shown.size && rows.every((r) => shown.has(r.key));
    if (sameTable) {
      for (const r of rows) {
        const old = shown.get(r.key).cells;
        old.queues.replaceWith(r.cells.queues);
        old.messages.replaceWith(r.cells.messages);
        old.spark.replaceWith(r.cells.spark);
        shown.get(r.key).cells = r.cells;
      }
      return;
    }
    shown = new Map(rows.map((r) => [r.key, r]));
    listBox.replaceChildren(
      table(["Topic", "Read/write queues", "Perm", "Queues: min…max offset", "Messages", "Put / pulled / received rate", ""], rows.map((r) => r.cellsRow), { id: "topics-table" }),
      more ? h("p", {}, `and ${more} more topics (not sampled)`) : "",
    );
  };
  const refresh = async () => {
    const seen = deletions;
    try {
      const [{ topics, more }, pulled, received] = await Promise.all([topicsWithCounts(), pulledByTopic(), receivedByTopic()]);
      if (seen !== deletions) return; // listed before a delete: it would show the deleted topic again
      const t = Date.now();
      for (const topic of topics) {
        ratesOf(topic.topic).put.count(t, topic.written);
        if (pulled.has(topic.topic)) ratesOf(topic.topic).pulled.count(t, pulled.get(topic.topic));
        if (received.has(topic.topic)) ratesOf(topic.topic).received.count(t, received.get(topic.topic));
      }
      draw(topics, more);
    } catch (err) {
      if (seen !== deletions) return;
      shown = new Map();
      listBox.replaceChildren(problemBox(err));
    }
  };
  await refresh();
  const sampler = new Sampler(SAMPLE_MS, refresh);
  const first = setTimeout(() => sampler.start(), SAMPLE_MS);
  target.append(h("h1", {}, "Topics"), status, listBox, section("Create or update a topic", createForm(refresh)));
  return () => {
    clearTimeout(first);
    sampler.stop();
  };
}
