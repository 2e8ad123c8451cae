// Messages waiting: per delay level (RocketMQ's delay levels) and in the timer wheel.

import { get } from "../api.js";
import { duration, h, section, table, time } from "../dom.js";

export async function render(target) {
  const [schedule, timers] = await Promise.all([get("/v1/schedule"), get("/v1/timers")]);
  const levels = table(
    ["Level", "Delay", "Waiting", "Delivered offset", "Oldest waiting for", "Oldest due in"],
    schedule.levels.map((l) => [l.level, l.delay, l.waiting, `${l.offset} / ${l.max_offset}`, duration(l.oldest_age_ms), duration(l.oldest_due_in_ms)]),
    { id: "levels-table" },
  );
  const timerPart = Object.keys(timers).length
    ? table(
        ["Figure", "Value"],
        [
          ["Pending", timers.pending],
          ["Next due (UTC)", time(timers.next_due_ms)],
          ["Enqueued", timers.enqueued],
          ["Delivered", timers.delivered],
          ["Precision", duration(timers.precision_ms)],
          ["Longest delay", duration(timers.max_delay_ms)],
          ["Lateness p50 / p99 / max", ["p50_ms", "p99_ms", "max_ms"].map((k) => duration(timers.lateness?.[k])).join(" / ")],
        ],
        { id: "timers-table" },
      )
    : h("p", {}, "Timer messages are off on this broker (timer_wheel_enable).");
  const waiting = schedule.levels.reduce((s, l) => s + l.waiting, 0);
  target.append(
    h("h1", {}, "Delayed and timer messages"),
    section(`Delay levels (${waiting} waiting)`, levels),
    section("Timer messages", timerPart),
  );
}
