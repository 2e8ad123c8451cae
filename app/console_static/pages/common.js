// Data several pages share: the topics with each queue's offsets.

import { enc, get } from "../api.js";

// Topics whose queues are read at most per refresh (each is one request).
export const MAX_TOPICS_DETAILED = 100;

// A topic's kind as GET /v1/topics says it: user, system (the broker's own), retry or dead_letter (a group's).
export function topicKind(t) {
  return t.kind || "user";
}

export function isSystemTopic(t) {
  return topicKind(t) !== "user";
}

// Every topic with its queues ({queue_id, min_offset, max_offset}) and message count (max - min summed).
export async function topicsWithCounts() {
  const { topics } = await get("/v1/topics");
  const detailed = await Promise.all(
    topics.slice(0, MAX_TOPICS_DETAILED).map(async (t) => {
      const info = await get(`/v1/topics/${enc(t.topic)}`);
      const messages = info.queues.reduce((sum, q) => sum + (q.max_offset - q.min_offset), 0);
      const written = info.queues.reduce((sum, q) => sum + q.max_offset, 0);
      return { ...t, queues: info.queues, messages, written };
    }),
  );
  return { topics: detailed, more: Math.max(0, topics.length - detailed.length) };
}
