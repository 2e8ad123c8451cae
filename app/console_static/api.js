// Calls to the broker's HTTP API, with the bearer token entered once per tab.
// Every error reply of the API is application/problem+json; it becomes an ApiProblem.

const TOKEN_KEY = "tidemq.console.token";

export class ApiProblem extends Error {
  constructor(status, problem) {
    super(`${status} ${problem.code || ""} ${problem.detail || problem.title || ""}`.trim());
    this.status = status;
    this.problem = problem;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers(json) {
  const out = { accept: "application/json, application/problem+json, text/plain" };
  const t = token();
  if (t) out.authorization = `Bearer ${t}`;
  if (json) out["content-type"] = "application/json";
  return out;
}

async function problemOf(response) {
  const type = response.headers.get("content-type") || "";
  if (type.includes("json")) {
    try {
      return await response.json();
    } catch {
      // fall through: a proxy's broken body is shown as text below
    }
  }
  const text = await response.text().catch(() => "");
  return { title: response.statusText || "Error", status: response.status, detail: text.slice(0, 500) };
}

export async function call(method, path, body) {
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: headers(body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
  } catch (err) {
    throw new ApiProblem(0, { title: "The broker did not answer", detail: String(err), code: "NETWORK_ERROR" });
  }
  if (!response.ok) throw new ApiProblem(response.status, await problemOf(response));
  if (response.status === 204) return null;
  const type = response.headers.get("content-type") || "";
  return type.includes("json") ? response.json() : response.text();
}

export const get = (path) => call("GET", path);

// Query string from an object, skipping empty values.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : "";
}

export const enc = encodeURIComponent;

// Counters of the Prometheus text exposition (/metrics): name -> value, for unlabelled samples.
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const space = line.lastIndexOf(" ");
    const name = line.slice(0, space);
    if (!name.includes("{")) out[name] = Number(line.slice(space + 1));
  }
  return out;
}

// One labelled counter of /metrics: its `label` value -> sample value. Label values are unescaped
// as the exposition format escapes them (\\, \" and \n).
export function parseLabelledMetric(text, name, label) {
  const out = new Map();
  const head = `${name}{${label}="`;
  for (const line of text.split("\n")) {
    if (!line.startsWith(head)) continue;
    const space = line.lastIndexOf(" ");
    const close = line.lastIndexOf('"}', space);
    if (close < head.length) continue;
    const value = line.slice(head.length, close).replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    out.set(value, Number(line.slice(space + 1)));
  }
  return out;
}
