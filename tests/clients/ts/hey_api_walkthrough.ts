// README's walk-through through a client made by @hey-api/openapi-ts (./hey).
// Usage: node hey_api_walkthrough.js BASE_URL TOPIC; prints a JSON summary, exits non-zero on a failed check.
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { client } from "./hey/client.gen";
import {
  ack,
  commitOffsets,
  getOffsets,
  getPushSubscription,
  metrics,
  produce,
  pull,
  pullBatch,
  putPushSubscription,
  putTopic,
  queryMessages,
  receive,
  startRedrive,
} from "./hey/sdk.gen";
import type { Message, ProblemCode, SendResult } from "./hey/types.gen";

const [baseUrl, topic] = process.argv.slice(2);
client.setConfig({ baseUrl });
const billing = `billing-${topic}`;
const shipping = `shipping-${topic}`;

function check(condition: boolean, what: string): asserts condition {
  if (!condition) throw new Error(`check failed: ${what}`);
}

async function send(body: string, tags: string): Promise<SendResult> {
  const { data, error } = await produce({ path: { topic }, body: { body, tags, keys: ["order-1"], queue_id: 0 } });
  check(error === undefined && data !== undefined, `produce: ${JSON.stringify(error)}`);
  check(data.kind === "message", "a single message's reply is a SendResult");
  return data;
}

async function pullFrom(offset: number, query: { wait_ms?: number; tag?: string } = {}): Promise<Message[]> {
  const { data, error } = await pull({ path: { topic, queue_id: 0 }, query: { offset, ...query } });
  check(error === undefined && data !== undefined, `pull: ${JSON.stringify(error)}`);
  return data.status === "FOUND" ? data.messages : [];
}

async function heldPulls(): Promise<number> {
  const { data } = await metrics({ parseAs: "text" });
  const line = (data ?? "").split("\n").find((l) => l.startsWith("tidemq_held_pulls "));
  return line === undefined ? 0 : Number(line.split(" ")[1]);
}

// A push receiver on loopback: records each delivery's body and whether its tidemq-signature checks, answers 204.
const SECRET = "change-me-to-a-long-random-secret";

async function pushReceiver(): Promise<{ url: string; bodies: string[]; signed: boolean[]; close: () => void }> {
  const bodies: string[] = [];
  const signed: boolean[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const fields = Object.fromEntries(String(req.headers["tidemq-signature"] ?? "").split(",").map((p) => p.split("=", 2)));
      const mac = createHmac("sha256", SECRET).update(`${fields.t}.`).update(body).digest("hex");
      signed.push(fields.v1 !== undefined && mac.length === fields.v1.length && timingSafeEqual(Buffer.from(mac), Buffer.from(fields.v1)));
      bodies.push(body.toString("utf-8"));
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return { url: `http://127.0.0.1:${port}/hook`, bodies, signed, close: () => server.close() };
}

async function until(done: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 300 && !done(); i++) await new Promise((r) => setTimeout(r, 50));
  check(done(), what);
}

async function main(): Promise<void> {
  // Create a topic with 4 queues.
  const created = await putTopic({ path: { topic }, body: { queues: 4 } });
  check(created.response.status === 201 && created.data?.read_queues === 4, "topic created with 4 queues");

  // Send a message with a tag and a key into queue 0, then receive it.
  const first = await send("order 1 created", "created");
  check(first.queue_id === 0 && first.queue_offset === 0, "stored at queue 0, offset 0");
  const got = await pullFrom(0, { wait_ms: 10000 });
  check(got.length === 1 && got[0].body === "order 1 created" && got[0].tags === "created", "pulled the first message");

  // A long poll that waits: held until the next message is sent.
  const held = pullFrom(1, { wait_ms: 10000 });
  for (let i = 0; i < 200 && (await heldPulls()) < 1; i++) await new Promise((r) => setTimeout(r, 25));
  await send("order 1 paid", "paid");
  const woken = await held;
  check(woken.length === 1 && woken[0].body === "order 1 paid", "the held pull answered the message sent after it");

  // Only messages tagged "paid".
  const paid = await pullFrom(0, { tag: "paid" });
  check(paid.length === 1 && paid[0].tags === "paid", "the tag filter kept only 'paid'");

  // Commit the consumer group's position and read its lag.
  const committed = await commitOffsets({ path: { group: billing }, body: { topic, queue_id: 0, offset: 2 } });
  check(committed.data?.committed[0].offset === 2, "offset committed");
  const offsets = await getOffsets({ path: { group: billing }, query: { topic } });
  const queue0 = offsets.data?.queues.find((q) => q.queue_id === 0);
  check(queue0 !== undefined && queue0.committed_offset === 2 && queue0.lag === 0, "lag read");

  // Group consumption: receive with an invisible time, then ack.
  const received: string[] = [];
  for (let round = 0; round < 5 && received.length < 2; round++) {
    const reply = await receive({ path: { group: shipping, topic }, query: { max: 16, invisible_ms: 30000, wait_ms: 1000 } });
    const messages = reply.data?.messages ?? [];
    if (messages.length === 0) continue;
    const acked = await ack({ path: { group: shipping, topic }, body: { receipt_handles: messages.map((m) => m.receipt_handle) } });
    check(acked.data?.results.every((r) => r.status === "OK") === true, "every handle acked");
    received.push(...messages.map((m) => m.body));
  }

  // Push: the broker POSTs both messages to a receiver on loopback, signed with the secret.
  const receiver = await pushReceiver();
  const audit = `audit-${topic}`;
  const made = await putPushSubscription({ path: { group: audit }, body: { topic, url: receiver.url, secret: SECRET } });
  check(made.data?.topic === topic && made.response.status === 201, `push subscription made: ${JSON.stringify(made.error)}`);
  await until(() => receiver.bodies.length >= 2, "both messages pushed");
  receiver.close();
  const pushed = await getPushSubscription({ path: { group: audit } });
  check((pushed.data?.counts.delivered ?? 0) >= 2, "the subscription counts its deliveries");

  // Dead-letter redrive of a group without dead letters: done at once.
  const redrive = await startRedrive({ path: { group: shipping }, body: { max_messages: 10 } });
  check(redrive.response.status === 202 && redrive.data !== undefined, `redrive started: ${JSON.stringify(redrive.error)}`);

  // Find every message with the key order-1.
  const byKey = await queryMessages({ path: { topic }, query: { key: "order-1" } });
  const keyed = (byKey.data?.messages ?? []).map((m) => m.body).sort();

  // The batch format: the stored messages' bytes, the result in headers.
  const batch = await pullBatch({ path: { topic, queue_id: 0 }, query: { offset: 0 } });
  check(batch.data !== undefined, "batch pull answered");
  const bytes = new DataView(await batch.data.arrayBuffer());
  let sizes = 0;
  let count = 0;
  while (sizes < bytes.byteLength) {
    sizes += bytes.getInt32(sizes); // each message starts with its TOTALSIZE
    count++;
  }
  check(sizes === bytes.byteLength, "the batch is whole messages");

  // A bad topic name is a problem with a typed code.
  const bad = await produce({ path: { topic: "bad.topic" }, body: { body: "x" } });
  const code: ProblemCode | undefined = bad.error?.code;

  console.log(
    JSON.stringify({
      held: woken[0].body,
      paid: paid.map((m) => m.body),
      lag: queue0.lag,
      received: received.sort(),
      keyed,
      batch: { count, header_count: batch.response.headers.get("X-Tidemq-Count"), status: batch.response.headers.get("X-Tidemq-Status") },
      problem: code,
      pushed: [...new Set(receiver.bodies)].sort(),
      signed: receiver.signed.every((ok) => ok),
      redrive: redrive.data.state,
    }),
  );
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
