// One consumer group: its connected consumers; per topic, each queue's committed offset and lag, the
// group-consumption counts, and resetting the group's offsets to the first message stored at or after a
// time; its dead letters, sent back one by one or all at once, or all moved back by a redrive (with its
// progress); deleting the group.

import { call, enc, get, query } from "../api.js";
import { confirmButton, duration, h, link, problemBox, section, table, time } from "../dom.js";
import { bodyBytes } from "../message_view.js";

const DEAD_LETTERS_SHOWN = 100; // dead letters listed (the oldest kept first)

async function offsetsTable(group, topic) {
  const r = await get(`/v1/groups/${enc(group)}/offsets${query({ topic })}`);
  const rows = r.queues.map((q) => [q.queue_id, q.committed_offset, q.min_offset, q.max_offset, q.lag]);
  return table(["Queue", "Committed", "Min offset", "Max offset", "Lag"], rows, { class: "offsets", "data-topic": topic });
}

// The first offset of each queue at or after `ms`, committed for the group in one request.
async function resetToTime(group, topic, ms) {
  const info = await get(`/v1/topics/${enc(topic)}`);
  const commits = await Promise.all(
    info.queues.map(async (q) => {
      const r = await get(`/v1/topics/${enc(topic)}/queues/${q.queue_id}/offset${query({ timestamp_ms: ms })}`);
      return { topic, queue_id: q.queue_id, offset: r.offset };
    }),
  );
  await call("PUT", `/v1/groups/${enc(group)}/offsets`, commits);
  return commits;
}

function resetForm(group, topic, onDone) {
  const out = h("div", { class: "result" });
  const input = h("input", { type: "datetime-local", step: 1, name: "at", required: true });
  const run = async () => {
    const ms = new Date(input.value).getTime();
    if (Number.isNaN(ms)) {
      out.replaceChildren(problemBox({ problem: { code: "REQUEST_INVALID", title: "Choose a time first" } }));
      return;
    }
    try {
      const commits = await resetToTime(group, topic, ms);
      out.replaceChildren(h("span", { class: "ok" }, `Reset to ${time(ms)} UTC: ${commits.map((c) => `${c.queue_id}→${c.offset}`).join(", ")}`));
      onDone();
    } catch (err) {
      out.replaceChildren(problemBox(err));
    }
  };
  return h("div", { class: "reset" }, h("label", {}, "Reset to the time ", input, " "), confirmButton("Reset", `Move ${group}'s offsets on ${topic}?`, run), out);
}

function countsText(t) {
  return `received ${t.received}, acked ${t.acked}, redelivered ${t.redelivered}, dead-lettered ${t.dead_lettered}, in flight ${t.in_flight}, lag ${t.lag}`;
}

async function topicPart(group, t) {
  const box = h("div", {});
  const counts = h("p", { class: "counts" }, countsText(t));
  const draw = async () => {
    try {
      box.replaceChildren(await offsetsTable(group, t.topic));
      const now = (await get(`/v1/groups/${enc(group)}`)).topics.find((row) => row.topic === t.topic);
      if (now) counts.textContent = countsText(now);
    } catch (err) {
      box.replaceChildren(problemBox(err));
    }
  };
  await draw();
  return section(`Topic ${t.topic}`, counts, box, resetForm(group, t.topic, draw));
}

// How often a running redrive's progress is asked for.
const REDRIVE_POLL_MS = 500;

function redriveText(r) {
  const state = r.state === "done" ? `done at ${time(r.finished_ms)} UTC` : "running";
  return `Redrive ${state}: moved ${r.moved} of ${r.total}, skipped ${r.skipped}, ${r.remaining} to go; ${r.dead_letters_after} dead letters after it`;
}

// The latest redrive is asked for only once one was started here (a group never redriven has none: 404).
function redrivePart(group, fifo, current) {
  const status = h("p", { class: "redrive-status" });
  const follow = async (r) => {
    status.textContent = redriveText(r);
    while (r.state !== "done" && current()) {
      await new Promise((resolve) => setTimeout(resolve, REDRIVE_POLL_MS));
      r = await get(`/v1/groups/${enc(group)}/dlq/redrive`);
      status.textContent = redriveText(r);
    }
  };
  const run = async () => {
    try {
      await follow(await call("POST", `/v1/groups/${enc(group)}/dlq/redrive`));
    } catch (err) {
      if (err.problem && err.problem.redrive) {
        status.textContent = "A redrive runs already. ";
        await follow(err.problem.redrive).catch((e) => status.replaceChildren(problemBox(e)));
      } else {
        status.replaceChildren(problemBox(err));
      }
    }
  };
  const button = fifo
    ? h("span", {}, "A FIFO group's dead letters cannot be redriven.")
    : confirmButton("Redrive dead letters", `Move every dead letter of ${group} back to be received again?`, run);
  return section("Dead letters", h("p", {}, "A redrive puts the dead letters back into the group's retry topic with reconsume times 0."), button, status);
}

function consumersTable(consumers) {
  const now = Date.now();
  const rows = consumers.map((c) => [c.address, c.user_agent || "-", `${duration(Math.max(0, now - c.last_seen_ms))} ago`, c.requests,
    c.waiting ? "waiting" : "", c.topics.join(", ")]);
  return table(["Address", "Client", "Last seen", "Requests", "Held request", "Topics"], rows, { id: "consumers-table" });
}

async function deadLetters(group, info) {
  const now = await get(`/v1/groups/${enc(group)}`);
  if (!now.dead_letters) return []; // no dead-letter topic, or an empty one: nothing to ask for
  try {
    const dlq = info.dead_letter_topic;
    const t = await get(`/v1/topics/${enc(dlq)}`);
    const q = t.queues[0];
    const r = await get(`/v1/topics/${enc(dlq)}/queues/0/messages${query({ offset: q.min_offset, max: DEAD_LETTERS_SHOWN, wait_ms: 0 })}`);
    return r.messages;
  } catch (err) {
    if (err.status === 404) return []; // no dead-letter topic yet: none
    throw err;
  }
}

async function resend(group, offsets, out, onDone) {
  try {
    const r = await call("POST", `/v1/groups/${enc(group)}/dead-letters/resend`, { offsets });
    const sent = r.results.filter((x) => x.status === "RESENT").length;
    const other = r.results.filter((x) => x.status !== "RESENT").map((x) => `${x.offset}: ${x.status}`);
    out.replaceChildren(h("span", { class: "ok" }, `Sent ${sent} back to ${group}${other.length ? ` (${other.join(", ")})` : ""}`));
    onDone();
  } catch (err) {
    out.replaceChildren(problemBox(err));
  }
}

async function deadLetterPart(group, info) {
  const box = h("div", {});
  const out = h("div", { class: "result", id: "resend-result" });
  const draw = async () => {
    try {
      const messages = await deadLetters(group, info);
      const rows = messages.map((m) => [
        m.queue_offset,
        m.properties.RETRY_TOPIC || "-",
        m.reconsume_times,
        time(m.store_timestamp),
        bodyBytes(m).length,
        h("span", { class: "snippet" }, m.encoding === "utf-8" ? m.body.slice(0, 60) : "(binary)"),
        confirmButton("Resend", `Send offset ${m.queue_offset} back to ${group}?`, () => resend(group, [m.queue_offset], out, draw)),
      ]);
      const all = messages.length
        ? confirmButton(`Resend all ${messages.length}`, `Send these ${messages.length} dead letters back to ${group}?`, () =>
            resend(group, messages.map((m) => m.queue_offset), out, draw))
        : null;
      box.replaceChildren(table(["Offset", "From topic", "Attempts", "Dead-lettered (UTC)", "Bytes", "Body", ""], rows, { id: "dead-letters-table" }), all);
    } catch (err) {
      box.replaceChildren(problemBox(err));
    }
  };
  await draw();
  const hint = info.fifo
    ? "A FIFO group reads no retry topic: its dead letters cannot be sent back here."
    : "Resend puts a copy into the group's retry topic: only this group receives it again, with its attempts counted from 0.";
  return section(`Dead letters (${info.dead_letter_topic})`, h("p", { class: "hint" }, hint), box, out);
}

export async function render(target, [group], { current }) {
  const info = await get(`/v1/groups/${enc(group)}`);
  const parts = await Promise.all(info.topics.map((t) => topicPart(group, t)));
  const redrive = redrivePart(group, info.fifo, current);
  const deleted = h("div", { class: "result" });
  const remove = confirmButton("Delete group", `Delete ${group}'s settings and committed offsets?`, async () => {
    try {
      await call("DELETE", `/v1/groups/${enc(group)}`);
      deleted.replaceChildren(h("span", { class: "ok" }, `Group ${group} deleted`));
    } catch (err) {
      deleted.replaceChildren(problemBox(err));
    }
  });
  target.append(
    h("h1", {}, `Group ${group}`),
    h(
      "p",
      {},
      info.configured ? `max ${info.max_reconsume_times} redeliveries${info.fifo ? ", FIFO" : ""}; ` : "default settings; ",
      "dead letters go to ",
      link(`#/topics/${encodeURIComponent(info.dead_letter_topic)}`, info.dead_letter_topic),
    ),
    section("Connected consumers", h("p", { class: "hint" }, "Clients that received, acked or pulled for the group in the last minute, or wait in a held request now."), consumersTable(info.consumers || [])),
    ...(parts.length ? parts : [h("p", {}, "No topics yet.")]),
    await deadLetterPart(group, info),
    redrive,
    section("Delete", remove, deleted),
  );
}
