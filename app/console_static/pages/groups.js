// Consumer groups: each with its topics, lag and group-consumption counts, its connected consumers and dead letters.

import { get } from "../api.js";
import { h, link, table } from "../dom.js";

export async function render(target) {
  const { groups } = await get("/v1/groups");
  const rows = groups.flatMap((g) => {
    const topics = g.topics.length ? g.topics : [{ topic: "-", lag: 0, received: 0, acked: 0, redelivered: 0, dead_lettered: 0, in_flight: 0 }];
    return topics.map((t) => [
      link(`#/groups/${encodeURIComponent(g.group)}`, g.group),
      t.topic,
      t.lag,
      t.received,
      t.acked,
      t.redelivered,
      t.dead_lettered,
      t.in_flight,
      g.configured ? `max ${g.max_reconsume_times} retries${g.fifo ? ", fifo" : ""}` : "defaults",
      (g.consumers || []).length,
      g.dead_letters ?? 0,
    ]);
  });
  target.append(
    h("h1", {}, "Consumer groups"),
    table(["Group", "Topic", "Lag", "Received", "Acked", "Redelivered", "Dead-lettered", "In flight", "Settings", "Consumers", "Dead letters"], rows, { id: "groups-table" }),
  );
}
