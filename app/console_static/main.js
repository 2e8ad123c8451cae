// The console's shell: the token box, the navigation and a hash router over the pages.

import { setToken, token } from "./api.js";
import { h, problemBox } from "./dom.js";
import { Live } from "./live.js";
import * as delayed from "./pages/delayed.js";
import * as files from "./pages/files.js";
import * as group from "./pages/group.js";
import * as groups from "./pages/groups.js";
import * as overview from "./pages/overview.js";
import * as push from "./pages/push.js";
import * as topic from "./pages/topic.js";
import * as topics from "./pages/topics.js";

const ROUTES = [
  [/^$/, overview, "overview"],
  [/^topics$/, topics, "topics"],
  [/^topics\/([^/]+)$/, topic, "topics"],
  [/^groups$/, groups, "groups"],
  [/^groups\/([^/]+)$/, group, "groups"],
  [/^push$/, push, "push"],
  [/^delayed$/, delayed, "delayed"],
  [/^files$/, files, "files"],
];
const NAV = [
  ["", "Overview"],
  ["topics", "Topics"],
  ["groups", "Groups"],
  ["push", "Push"],
  ["delayed", "Delayed & timers"],
  ["files", "Store files"],
];

const live = new Live();
let cleanup = null;
let generation = 0;

function tokenBox() {
  const input = h("input", { type: "password", name: "token", placeholder: "bearer token (when the broker has an ACL)", autocomplete: "off", value: token() });
  const state = h("span", { class: "token-state" }, token() ? "token set" : "no token");
  const form = h(
    "form",
    {
      class: "token",
      onsubmit: (e) => {
        e.preventDefault();
        setToken(input.value.trim());
        state.textContent = token() ? "token set" : "no token";
        live.restart();
        route();
      },
    },
    input,
    h("button", { type: "submit" }, "Use token"),
    state,
  );
  return form;
}

function nav(current) {
  return h(
    "nav",
    {},
    NAV.map(([path, label]) => h("a", { href: `#/${path}`, class: current === (path || "overview") ? "current" : null }, label)),
  );
}

async function route() {
  const path = decodeURIComponent(location.hash.replace(/^#\/?/, "")).replace(/\/$/, "");
  const [pattern, page, area] = ROUTES.find(([re]) => re.test(path)) || [null, null, null];
  const match = page ? path.match(pattern) : null;
  if (cleanup) cleanup();
  cleanup = null;
  const mine = ++generation;
  document.querySelector("header nav").replaceWith(nav(area));
  const main = document.querySelector("main");
  main.replaceChildren(h("p", { class: "loading" }, "Loading…"));
  if (!page) {
    main.replaceChildren(problemBox({ status: 404, problem: { code: "NOT_FOUND", title: "No such console page", detail: path } }));
    return;
  }
  const target = h("div", { class: "page" });
  try {
    const done = await page.render(target, match.slice(1), { live, current: () => mine === generation });
    if (mine !== generation) {
      if (typeof done === "function") done();
      return;
    }
    cleanup = typeof done === "function" ? done : null;
  } catch (err) {
    target.replaceChildren(problemBox(err));
  }
  if (mine === generation) {
    main.replaceChildren(target);
    document.body.dataset.page = area;
    document.body.dataset.route = path;
  }
}

document.querySelector("header").append(nav("overview"), tokenBox());
window.addEventListener("hashchange", route);
live.sampler.start();
route();
