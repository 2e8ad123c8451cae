// Push subscriptions: each with its target, state, lag and delivery counts (refreshed every few
// seconds); create or replace one, stop one.

import { call, enc, get } from "../api.js";
import { confirmButton, h, link, problemBox, section, table, time, values } from "../dom.js";

// How often the table is drawn again while the page is open.
const REFRESH_MS = 2000;

function rows(subscriptions, onChange) {
  return subscriptions.map((s) => [
    link(`#/groups/${encodeURIComponent(s.group)}`, s.group),
    link(`#/topics/${encodeURIComponent(s.topic)}`, s.topic),
    s.url,
    s.state,
    s.counts.delivered,
    s.counts.failed,
    s.counts.errors,
    s.counts.too_large,
    s.counts.in_flight,
    s.counts.last_status ?? "-",
    s.counts.last_attempt_ms ? time(s.counts.last_attempt_ms) : "-",
    s.lag,
    confirmButton("Stop", `Stop pushing ${s.group}?`, async () => {
      try {
        await call("DELETE", `/v1/groups/${enc(s.group)}/push`);
      } finally {
        onChange();
      }
    }),
  ]);
}

function createForm(onDone) {
  const out = h("div", { class: "result" });
  const form = h(
    "form",
    {
      id: "create-push",
      onsubmit: async (e) => {
        e.preventDefault();
        const v = values(form);
        const body = { topic: v.topic, url: v.url, secret: v.secret };
        if (v.max_in_flight) body.max_in_flight = Number(v.max_in_flight);
        if (v.timeout_ms) body.timeout_ms = Number(v.timeout_ms);
        try {
          await call("PUT", `/v1/groups/${enc(v.group)}/push`, body);
          out.replaceChildren(h("span", { class: "ok" }, `Push subscription ${v.group} saved`));
          form.querySelector("input[name=secret]").value = "";
          onDone();
        } catch (err) {
          out.replaceChildren(problemBox(err));
        }
      },
    },
    h("input", { name: "group", placeholder: "group", required: true, maxlength: 127 }),
    h("input", { name: "topic", placeholder: "topic", required: true, maxlength: 127 }),
    h("input", { name: "url", type: "url", placeholder: "https://host/path (an allowed host)", required: true, size: 36 }),
    h("input", { name: "secret", type: "password", placeholder: "signing secret (16+ characters)", required: true, minlength: 16, autocomplete: "off" }),
    h("input", { name: "max_in_flight", type: "number", min: 1, placeholder: "in flight", title: "max_in_flight (default 16)" }),
    h("input", { name: "timeout_ms", type: "number", min: 100, placeholder: "timeout ms", title: "timeout_ms (default 10000)" }),
    h("button", { type: "submit" }, "Create / replace"),
  );
  return h("div", {}, form, out);
}

export async function render(target, _match, { current }) {
  const listBox = h("div", {});
  let timer = null;
  const refresh = async () => {
    clearTimeout(timer);
    try {
      const { subscriptions } = await get("/v1/push");
      const columns = ["Group", "Topic", "URL", "State", "Delivered", "Failed", "Errors", "Too large", "In flight", "Last status", "Last attempt (UTC)", "Lag", ""];
      listBox.replaceChildren(
        subscriptions.length ? table(columns, rows(subscriptions, refresh), { id: "push-table" }) : h("p", { id: "push-empty" }, "No push subscriptions."),
      );
    } catch (err) {
      listBox.replaceChildren(problemBox(err));
    }
    if (current()) timer = setTimeout(refresh, REFRESH_MS);
  };
  await refresh();
  target.append(
    h("h1", {}, "Push subscriptions"),
    h("p", {}, "The broker POSTs each message of the topic to the URL as the group, signed with the secret (tidemq-signature); a 2xx acks it, anything else is retried with RocketMQ's backoff, then dead-lettered."),
    listBox,
    section("Create or replace a push subscription", createForm(refresh)),
  );
  return () => clearTimeout(timer);
}
