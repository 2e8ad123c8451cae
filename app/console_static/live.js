// The broker-wide live figures the overview charts: put/get rates from /metrics' counters,
// replication and dispatch lag and disk use from /v1/store, sampled every SAMPLE_MS while the
// console is open, so the charts have the last minutes behind them when the overview is shown.

import { get, parseMetrics } from "./api.js";
import { RateSeries, Sampler, Series } from "./chart.js";

const SAMPLE_MS = 2000;

export class Live {
  constructor() {
    this.put = new RateSeries("put");
    this.get = new RateSeries("get");
    this.replication = new Series("replication lag");
    this.dispatch = new Series("dispatch lag");
    this.disk = new Series("disk used");
    this.store = null; // the last /v1/store reply
    this.error = null; // the last sample's failure (an ApiProblem), shown by the overview
    this.listeners = new Set();
    this.sampler = new Sampler(SAMPLE_MS, () => this.sample());
  }

  async sample() {
    try {
      const [metrics, store] = await Promise.all([get("/metrics"), get("/v1/store")]);
      const t = Date.now();
      const m = parseMetrics(metrics);
      this.put.count(t, m.tidemq_put_messages_total ?? 0);
      this.get.count(t, m.tidemq_get_messages_total ?? 0);
      this.replication.add(t, store.ha && typeof store.ha.bytes_behind === "number" ? store.ha.bytes_behind : 0);
      this.dispatch.add(t, store.runtime.dispatch_lag_bytes ?? 0);
      this.disk.add(t, 100 * (store.runtime.disk_used_ratio ?? 0));
      this.store = store;
      this.error = null;
    } catch (err) {
      this.error = err;
      if (err.status === 401 || err.status === 403) this.sampler.stop(); // restarted when a token is entered
    }
    for (const listener of this.listeners) listener(this);
  }

  restart() {
    this.sampler.stop();
    this.sampler.start();
  }
}
