// Overview: the topics with their message counts, replication and dispatch lag, disk use,
// and put/get rates as live charts over the last minutes.

import { lineChart, Sampler } from "../chart.js";
import { bytes, h, link, problemBox, section, table } from "../dom.js";
import { isSystemTopic, topicKind, topicsWithCounts } from "./common.js";

function cards(store) {
  if (!store) return h("p", { class: "loading" }, "Waiting for the first sample…");
  const rt = store.runtime;
  const ha = store.ha || {};
  const state = ha.connection_state || ha.role;
  const replication =
    ha.role === "standalone" || ha.role === undefined ? "standalone" : typeof ha.bytes_behind === "number" ? `${bytes(ha.bytes_behind)} behind (${state})` : state;
  const card = (label, value, id) => h("div", { class: "card", id }, h("div", { class: "label" }, label), h("div", { class: "value" }, value));
  return h(
    "div",
    { class: "cards" },
    card("Role", `${store.role} · ${store.flush_mode}`, "card-role"),
    card("Commitlog", bytes(rt.commitlog_max_offset - rt.commitlog_min_offset), "card-commitlog"),
    card("Disk used", `${(100 * rt.disk_used_ratio).toFixed(1)} %`, "card-disk"),
    card("Replication", replication, "card-replication"),
    card("Dispatch lag", bytes(rt.dispatch_lag_bytes), "card-dispatch"),
    card("Ready", rt.degraded_reasons.length ? `degraded: ${rt.degraded_reasons.join("; ")}` : store.ready ? "yes" : "no", "card-ready"),
  );
}

function charts(live) {
  return h(
    "div",
    { class: "charts" },
    h("figure", { id: "chart-rates" }, h("figcaption", {}, "Messages put and got per second"), lineChart([live.put, live.get])),
    h("figure", { id: "chart-lag" }, h("figcaption", {}, "Replication and dispatch lag (bytes)"), lineChart([live.replication, live.dispatch], { unit: " B" })),
    h("figure", { id: "chart-disk" }, h("figcaption", {}, "Disk used (%)"), lineChart([live.disk], { unit: " %", max: 100 })),
  );
}

const TOPICS_REFRESH_MS = 5000;

async function topicsPart() {
  try {
    const { topics, more } = await topicsWithCounts();
    const rows = topics.map((t) => [link(`#/topics/${encodeURIComponent(t.topic)}`, t.topic), isSystemTopic(t) ? topicKind(t).replace("_", " ") : "", t.queues.length, t.messages]);
    return [table(["Topic", "", "Queues", "Messages"], rows, { id: "overview-topics" }), more ? h("p", {}, `and ${more} more topics`) : ""];
  } catch (err) {
    return [problemBox(err)];
  }
}

export async function render(target, _params, { live }) {
  const liveBox = h("div", { class: "live" });
  const draw = () => liveBox.replaceChildren(live.error ? problemBox(live.error) : "", cards(live.store), charts(live));
  draw();
  live.listeners.add(draw);
  const topicsBox = h("div", {}, ...(await topicsPart()));
  const refresher = new Sampler(TOPICS_REFRESH_MS, async () => topicsBox.replaceChildren(...(await topicsPart())));
  const first = setTimeout(() => refresher.start(), TOPICS_REFRESH_MS);
  target.append(h("h1", {}, "Overview"), liveBox, section("Topics", topicsBox));
  return () => {
    live.listeners.delete(draw);
    clearTimeout(first);
    refresher.stop();
  };
}
