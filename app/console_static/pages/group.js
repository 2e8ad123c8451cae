// One consumer group: per topic, each queue's committed offset and lag, the group-consumption
// counts, resetting the group's offsets to the first message stored at or after a time, and
// moving its dead letters back (a redrive, with its progress).

import { call, enc, get, query } from "../api.js";
import { confirmButton, h, link, problemBox, section, table, time } from "../dom.js";

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

export async function render(target, [group], { current }) {
  const info = await get(`/v1/groups/${enc(group)}`);
  const parts = await Promise.all(info.topics.map((t) => topicPart(group, t)));
  const redrive = redrivePart(group, info.fifo, current);
  target.append(
    h("h1", {}, `Group ${group}`),
    h(
      "p",
      {},
      info.configured ? `max ${info.max_reconsume_times} redeliveries${info.fifo ? ", FIFO" : ""}; ` : "default settings; ",
      "dead letters go to ",
      link(`#/topics/${encodeURIComponent(info.dead_letter_topic)}`, info.dead_letter_topic),
    ),
    ...(parts.length ? parts : [h("p", {}, "No topics yet.")]),
    redrive,
  );
}
