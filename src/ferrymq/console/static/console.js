// The console's single page: a hash route per page, each page drawn from the /api/... answers.
"use strict";

const page = document.getElementById("page");
const errorBox = document.getElementById("error");
let timer = null; // the dashboard's polling, stopped when another page opens

// h("td", {class: "num"}, "12") → <td class="num">12</td>; text is always text, never HTML.
function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) node.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return node;
}

function showError(message) {
  errorBox.hidden = !message;
  errorBox.textContent = message || "";
}

// GET (or with a body, POST) an API path; an answer that is not 2xx shows its error and throws.
async function api(path, body, method) {
  const init = body === undefined ? { method: method || "GET" } : {
    method: method || "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  };
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    showError(`The console server does not answer (${e.message}).`);
    throw e;
  }
  const value = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
  if (!response.ok) {
    showError(value.error || `HTTP ${response.status}`);
    throw new Error(value.error);
  }
  showError("");
  return value;
}

function table(columns, rows, id) {
  return h("table", { id },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((cell) =>
      cell instanceof Node ? h("td", {}, cell) : h("td", { class: typeof cell === "number" ? "num" : null }, String(cell ?? "")))))));
}

function when(ms) {
  return ms > 0 ? new Date(ms).toISOString().replace("T", " ").replace("Z", "") : "";
}

function field(label, input) {
  return h("label", {}, label, input);
}

// A form whose submit calls `action(values, form)` with its named inputs' values.
function form(id, fields, buttonText, action) {
  const node = h("form", { id }, fields, h("button", { type: "submit" }, buttonText));
  node.addEventListener("submit", async (event) => {
    event.preventDefault();
    const values = Object.fromEntries(new FormData(node).entries());
    try {
      await action(values, node);
    } catch (e) {
      /* the error box says why */
    }
  });
  return node;
}

function link(href, text) {
  return h("a", { href }, text);
}

// --- pages ------------------------------------------------------------------------------------------

async function dashboardPage(view) {
  const cards = h("div", { class: "cards", id: "totals" });
  const charts = h("div", { id: "charts" });
  const top = h("div", { id: "top-lag" });
  view.replaceChildren(h("h2", {}, "Dashboard"), cards, charts, h("h3", {}, "Groups most behind"), top);
  async function refresh() {
    const d = await api("/api/dashboard");
    cards.replaceChildren(
      h("div", { class: "card" }, "Topics", h("b", { id: "topic-count" }, d.topics)),
      h("div", { class: "card" }, "Consumer groups", h("b", {}, d.groups)),
      h("div", { class: "card" }, "Messages stored", h("b", {}, d.now.put)),
      h("div", { class: "card" }, "Messages delivered", h("b", {}, d.now.get)),
      h("div", { class: "card" }, "Total lag", h("b", { id: "total-lag" }, d.now.lag)));
    const points = (key) => d.rates.map((r) => [r.t, r[key]]);
    charts.replaceChildren(
      lineChart("Messages per second", [
        { name: "in", color: "#2f63c4", points: points("in") },
        { name: "out", color: "#17713a", points: points("out") }]),
      lineChart("Lag (messages)", [{ name: "lag", color: "#b5531b", points: points("lag") }]));
    top.replaceChildren(table(["group", "topic", "lag"],
      d.top.map((g) => [link(`#/groups/${encodeURIComponent(g.group)}`, g.group), g.topic, g.lag])));
  }
  await refresh();
  const id = setInterval(() => (view.isConnected ? refresh().catch(() => {}) : clearInterval(id)), 2000);
  timer = id;
}

async function clusterPage(view) {
  const d = await api("/api/cluster");
  const rows = d.groups.flatMap((g) => g.replicas.map((r) => [
    g.cluster, g.broker_name, r.broker_id, r.address,
    h("span", { class: r.role === "master" ? "ok" : r.role === "gone" ? "bad" : null }, r.role),
    r.in_sync === null ? "" : r.in_sync ? "yes" : "no", r.max_offset ?? "",
    g.master_epoch ?? "", g.sync_state_set_epoch ?? "", replication(r.runtime),
    r.runtime ? r.runtime.brokerVersionDesc : "not answering",
    r.runtime ? r.runtime.msgPutTotalTodayNow : "", r.runtime ? r.runtime.runtime : "",
    r.role === "gone" ? "" : h("button", { class: "secondary", onclick: () => showSettings(r.address) }, "Settings")]));
  const settings = h("div", { id: "broker-settings" });
  async function showSettings(address) {
    const all = await api(`/api/cluster/settings?${new URLSearchParams({ broker: address })}`);
    settings.replaceChildren(h("h3", {}, `Settings of ${address} (read-only)`),
      table(["setting", "value"], Object.entries(all), "settings"));
  }
  view.replaceChildren(h("h2", {}, "Cluster"),
    h("p", {}, `NameServer ${d.namesrv}` + (d.controllers ? `, controllers ${d.controllers}` :
      " (no controllers given: epochs and SyncStateSets are not shown)")),
    table(["cluster", "broker", "id", "address", "role", "in SyncStateSet", "CommitLog max offset",
      "master epoch", "SyncStateSet epoch", "replication", "version", "messages stored", "up", ""], rows,
      "brokers"), settings);
}

// A master's replication QoS state (docs/ha.md), and whether a slave acts for its missing master.
function replication(runtime) {
  if (!runtime) return "";
  if (runtime.replicationQosState) return `${runtime.replicationQosState} (QoS level ${runtime.replicationQosLevel})`;
  return runtime.slaveActingMaster === "true" ? "acting master" : "";
}

function permSelect(current) {
  return h("select", { name: "perm" }, [[6, "read+write"], [4, "read"], [2, "write"]].map(([value, words]) =>
    h("option", { value, selected: value === current }, words)));
}

// A client connection as the pages list it (producers and consumers alike).
function connectionRows(connections, id) {
  return connections.length ? table(["client id", "address", "language", "version"],
    connections.map((c) => [c.clientId, c.clientAddr, c.language, c.version]), id) : h("p", { id }, "None online.");
}

async function topicsPage(view) {
  const all = await api("/api/topics");
  const list = h("div", {});
  const filter = h("input", { id: "topic-filter", placeholder: "filter by name" });
  const kind = h("select", { id: "topic-kind" }, ["all", "normal", "fifo", "retry", "dlq", "system"].map((k) => h("option", {}, k)));
  function draw() {
    const words = filter.value.toLowerCase();
    const shown = all.filter((t) => t.topic.toLowerCase().includes(words) && (kind.value === "all" || t.kind === kind.value));
    list.replaceChildren(h("p", {}, `${shown.length} of ${all.length} topics` + (shown.length > 200 ? " (first 200 shown)" : "")),
      table(["topic", "kind", "brokers", "read queues", "write queues", "perm"], shown.slice(0, 200).map((t) =>
        [link(`#/topics/${encodeURIComponent(t.topic)}`, t.topic), t.kind, t.brokers.join(", "), t.readQueues, t.writeQueues, t.perm]), "topics"));
  }
  filter.addEventListener("input", draw);
  kind.addEventListener("change", draw);
  const create = form("create-topic", [
    field("Topic", h("input", { name: "topic", required: true })),
    field("Queues per broker", h("input", { name: "queues", type: "number", value: 8, min: 1, max: 1024 })),
    field("Permission", permSelect(6)),
    field("Ordered", h("input", { name: "order", type: "checkbox", value: "1" })),
  ], "Create topic", async (v) => {
    await api("/api/topics", { topic: v.topic, queues: Number(v.queues), perm: Number(v.perm), order: !!v.order });
    location.hash = `#/topics/${encodeURIComponent(v.topic)}`;
  });
  view.replaceChildren(h("h2", {}, "Topics"), create, h("div", {}, filter, " ", kind), list);
  draw();
}

async function topicPage(view, topic) {
  const d = await api(`/api/topics/${encodeURIComponent(topic)}`);
  const sent = h("div", { id: "sent" });
  const send = form("send-message", [
    field("Tags", h("input", { name: "tags" })),
    field("Keys (space-separated)", h("input", { name: "keys" })),
    field("Body", h("input", { name: "body", size: 40, value: "hello from the console" })),
  ], "Send test message", async (v) => {
    const r = await api(`/api/topics/${encodeURIComponent(topic)}/send`, v);
    sent.replaceChildren(h("p", { class: "ok" }, `${r.status}: message id `, h("code", { id: "sent-id" }, r.msgId),
      ` on ${r.broker} queue ${r.queueId} offset ${r.queueOffset} `,
      link(`#/messages?topic=${encodeURIComponent(topic)}&id=${r.msgId}`, "find it")));
  });
  const first = Object.values(d.config)[0] || {};
  const edit = form("edit-topic", [
    field("Queues per broker", h("input", { name: "queues", type: "number", value: first.writeQueueNums ?? 8, min: 1, max: 1024 })),
    field("Permission", permSelect(first.perm ?? 6)),
  ], "Change", async (v) => {
    await api(`/api/topics/${encodeURIComponent(topic)}`, { queues: Number(v.queues), perm: Number(v.perm) }, "PUT");
    await topicPage(view, topic);
  });
  const producers = h("div", { id: "producers" });
  const producerLookup = form("producer-lookup", [field("Producer group", h("input", { name: "group", required: true }))],
    "Show producers", async (v) => producers.replaceChildren(connectionRows(await api(`/api/producers/${encodeURIComponent(v.group)}`), "producer-connections")));
  const remove = h("button", { class: "secondary", id: "delete-topic", onclick: async () => {
    if (confirm(`Delete topic ${topic}?`)) { await api(`/api/topics/${encodeURIComponent(topic)}`, undefined, "DELETE"); location.hash = "#/topics"; }
  } }, "Delete topic");
  view.replaceChildren(h("h2", {}, `Topic ${topic}`),
    h("h3", {}, "Route"), table(["broker", "cluster", "addresses"], d.route.brokers.map((b) =>
      [b.name, b.cluster, Object.entries(b.addrs).map(([id, a]) => `${id}: ${a}`).join(", ")]), "route"),
    table(["broker", "read queues", "write queues", "perm"], d.route.queues.map((q) => [q.broker, q.read, q.write, q.perm])),
    h("h3", {}, "Change queues or permission"), edit,
    h("h3", {}, "Status"), table(["broker", "queue", "min offset", "max offset", "messages", "last stored"],
      d.status.map((s) => [s.broker, s.queue, s.min, s.max, s.max - s.min, when(s.lastStored)]), "status"),
    h("h3", {}, "Consumer groups"), table(["group", "queues", "lag"], d.groups.map((g) =>
      [link(`#/groups/${encodeURIComponent(g.group)}`, g.group), g.queues, g.lag])),
    h("h3", {}, "Consumers online"), d.consumers.length ? table(["group", "client id", "address", "language", "version"],
      d.consumers.flatMap((g) => g.connections.map((c) => [link(`#/groups/${encodeURIComponent(g.group)}`, g.group),
        c.clientId, c.clientAddr, c.language, c.version])), "topic-consumers") : h("p", { id: "topic-consumers" }, "None online."),
    h("h3", {}, "Producers"), producerLookup, producers,
    h("h3", {}, "Send a test message"), send, sent, h("p", {}, remove));
}

async function groupsPage(view) {
  const all = await api("/api/groups");
  const filter = h("input", { id: "group-filter", placeholder: "filter by name" });
  const list = h("div", {});
  function draw() {
    const shown = all.filter((g) => g.group.toLowerCase().includes(filter.value.toLowerCase()));
    list.replaceChildren(h("p", {}, `${shown.length} of ${all.length} groups, most behind first` + (shown.length > 200 ? " (first 200 shown)" : "")),
      table(["group", "topics", "lag"], shown.slice(0, 200).map((g) =>
        [link(`#/groups/${encodeURIComponent(g.group)}`, g.group), g.topics.join(", "), g.lag]), "groups"));
  }
  filter.addEventListener("input", draw);
  const create = form("create-group", [
    field("Group", h("input", { name: "group", required: true })),
    field("Max retries", h("input", { name: "retryMaxTimes", type: "number", value: 16, min: -1 })),
    field("Orderly", h("input", { name: "orderly", type: "checkbox", value: "1" })),
  ], "Create group", async (v) => {
    await api("/api/groups", { group: v.group, retryMaxTimes: Number(v.retryMaxTimes), orderly: !!v.orderly });
    location.hash = `#/groups/${encodeURIComponent(v.group)}`;
  });
  view.replaceChildren(h("h2", {}, "Consumer groups"), create, filter, list);
  draw();
}

async function groupPage(view, group) {
  const path = `/api/groups/${encodeURIComponent(group)}`;
  const d = await api(path);
  const again = () => groupPage(view, group);
  const progress = Object.entries(d.progress).flatMap(([topic, queues]) => [
    h("h3", {}, `${topic}: lag ${queues.reduce((n, q) => n + q.lag, 0)}`),
    table(["broker", "queue", "broker offset", "consumer offset", "lag", "last consumed message stored"],
      queues.map((q) => [q.broker, q.queue, q.brokerOffset, q.consumerOffset, q.lag, when(q.lastConsumed)]), `progress-${topic}`)]);
  const controls = Object.entries(d.controls).map(([broker, c]) =>
    [broker, c.paused ? "paused" : "consuming", (c.paused_clients || []).join(", "), c.rate_limit ? `${c.rate_limit}/s` : "none"]);
  const topics = Object.keys(d.progress);
  view.replaceChildren(h("h2", {}, `Consumer group ${group}`),
    h("p", {}, "Total lag ", h("b", { id: "group-lag" }, Object.values(d.progress).flat().reduce((n, q) => n + q.lag, 0))),
    ...progress,
    h("h3", {}, "Consumers online"), connectionRows(d.consumers.connections, "consumers"),
    Object.keys(d.consumers.subscriptions).length ? table(["topic", "subscription"],
      Object.entries(d.consumers.subscriptions), "subscriptions") : "",
    h("h3", {}, "Controls"), table(["broker", "state", "paused clients", "rate limit"], controls, "controls"),
    h("p", {},
      h("button", { id: "pause", onclick: async () => { await api(`${path}/pause`, {}); await again(); } }, "Pause"), " ",
      h("button", { id: "resume", onclick: async () => { await api(`${path}/resume`, {}); await again(); } }, "Resume")),
    form("rate-limit", [field("Messages per second per broker (empty: none)", h("input", { name: "perSecond", type: "number", step: "any", min: 0 }))],
      "Set rate limit", async (v) => { await api(`${path}/rate-limit`, { perSecond: v.perSecond }); await again(); }),
    form("reset-offset", [
      field("Topic", h("select", { name: "topic" }, topics.map((t) => h("option", {}, t)))),
      field("To the first message stored at or after", h("input", { name: "time", type: "datetime-local", step: 1 })),
    ], "Reset offset", async (v) => {
      const timestamp = v.time ? new Date(v.time).getTime() : Date.now();
      await api(`${path}/reset`, { topic: v.topic, timestamp });
      await again();
    }),
    h("p", {}, h("button", { class: "secondary", id: "delete-group", onclick: async () => {
      if (confirm(`Delete group ${group} and its offsets?`)) { await api(`${path}?cleanOffsets=true`, undefined, "DELETE"); location.hash = "#/groups"; }
    } }, "Delete group")));
}

function messageRows(found) {
  return table(["message id", "topic", "queue", "offset", "stored", "tags", "keys", "body", ""], found.map((m) => [
    m.msgId, m.topic, m.queueId, m.queueOffset, when(m.storeTimestamp), m.tags, m.keys.join(" "), m.body.slice(0, 80),
    h("button", { class: "secondary", onclick: () => showTrace(m.msgId) }, "Trace")]), "found");
}

async function showTrace(msgId) {
  const box = document.getElementById("trace");
  const t = await api(`/api/messages/${encodeURIComponent(msgId)}/trace`);
  const events = [
    ...t.sends.map((s) => [s.timestamp, `${s.success ? "sent" : "send FAILED"} by ${s.group} to ${s.topic} on ${s.store_host} in ${s.cost_time} ms`]),
    ...(t.stored ? [[t.stored.storeTimestamp, `stored on ${t.storedAt}: queue ${t.stored.queueId} offset ${t.stored.queueOffset}`]] : []),
    ...t.transaction.map((e) => [e.timestamp, `transaction ${e.transaction_state}`]),
    ...t.groups.flatMap((g) => g.attempts.map((a, i) => [a.started,
      `${g.group}: attempt ${i + 1} ${a.success === null ? "running or lost" : a.success ? "succeeded" : "FAILED"}` +
      (a.cost_ms === null ? "" : ` in ${a.cost_ms} ms`) + (g.dead_lettered ? " (dead-lettered)" : "")])),
  ].sort((a, b) => a[0] - b[0]);
  box.replaceChildren(h("h3", {}, `Trace of ${msgId}`), h("ul", { class: "timeline" }, events.map(([ms, what]) => h("li", {}, `${when(ms)}  ${what}`))));
}

async function messagesPage(view, params) {
  const results = h("div", { id: "results" });
  async function search(query) {
    const found = await api(`/api/messages?${new URLSearchParams(query)}`);
    results.replaceChildren(h("p", {}, `${found.length} message(s)`), messageRows(found));
  }
  const local = (ms) => new Date(ms - new Date().getTimezoneOffset() * 60000).toISOString().slice(0, 19);
  view.replaceChildren(h("h2", {}, "Messages"),
    form("by-id", [field("Message id", h("input", { name: "id", size: 34, value: params.get("id") || "" })),
      field("Topic (for a unique id)", h("input", { name: "topic", value: params.get("topic") || "" }))], "Find by id", search),
    form("by-key", [field("Topic", h("input", { name: "topic", required: true })), field("Key", h("input", { name: "key", required: true }))],
      "Find by key", search),
    form("by-time", [field("Topic", h("input", { name: "topic", required: true })),
      field("From", h("input", { name: "begin", type: "datetime-local", step: 1, value: local(Date.now() - 3600000) })),
      field("To", h("input", { name: "end", type: "datetime-local", step: 1, value: local(Date.now() + 60000) }))],
      "Find by time", (v) => search({ topic: v.topic, begin: new Date(v.begin).getTime(), end: new Date(v.end).getTime() })),
    results, h("div", { id: "trace" }));
  if (params.get("id")) await search({ id: params.get("id"), topic: params.get("topic") || "" });
}

async function dlqPage(view, params) {
  const results = h("div", { id: "dead-letters" });
  async function browse(group) {
    const found = await api(`/api/dlq/${encodeURIComponent(group)}`);
    const resend = h("button", { id: "resend-all", onclick: async () => {
      const sent = await api(`/api/dlq/${encodeURIComponent(group)}/resend`, {});
      results.append(h("p", { class: "ok" }, `${sent.length} message(s) sent back to their topics`));
    } }, "Resend all");
    results.replaceChildren(h("p", {}, `${found.length} dead letter(s) of ${group}`), messageRows(found), found.length ? resend : "");
  }
  view.replaceChildren(h("h2", {}, "Dead letters"),
    form("dlq", [field("Consumer group", h("input", { name: "group", required: true, value: params.get("group") || "" }))], "Browse", (v) => browse(v.group)),
    results, h("div", { id: "trace" }));
}

async function amqpPage(view) {
  const d = await api("/api/amqp");
  if (!d.enabled) {
    view.replaceChildren(h("h2", {}, "AMQP"), h("p", { class: "note" }, `AMQP metadata not available: ${d.reason}.`));
    return;
  }
  view.replaceChildren(h("h2", {}, "AMQP"),
    h("h3", {}, "Virtual hosts"), table(["name"], d.vhosts.map((v) => [v.name]), "vhosts"),
    h("h3", {}, "Exchanges"), table(["vhost", "name", "type", "durable"], d.exchanges.map((e) => [e.vhost, e.name, e.type, String(e.durable)]), "exchanges"),
    h("h3", {}, "Queues"), table(["vhost", "name", "durable", "arguments"], d.queues.map((q) => [q.vhost, q.name, String(q.durable), JSON.stringify(q.arguments || {})]), "queues"),
    h("h3", {}, "Bindings"), table(["vhost", "source", "destination", "routing key"], d.bindings.map((b) => [b.vhost, b.source, b.destination, b.routing_key]), "bindings"),
    h("h3", {}, "Users"), table(["name", "tags"], d.users.map((u) => [u.name, Array.isArray(u.tags) ? u.tags.join(", ") : u.tags]), "users"));
}

function proxyList(proxies) {
  if (!proxies.listed) return h("p", { class: "note" }, proxies.reason);
  return table(["proxy", "state", "connect"], proxies.nodes.map((p) =>
    [p.address, p.up ? "up" : "down", p.up ? `${p.connect_ms} ms` : p.error]));
}

async function accessPage(view) {
  const [access, acl] = await Promise.all([api("/api/access"), api("/api/acl")]);
  view.replaceChildren(h("h2", {}, "Proxies & ACL"),
    h("h3", {}, "Proxies"), h("div", { id: "proxies" }, proxyList(access.proxies)),
    h("h3", {}, "ACL"), h("div", { id: "acl" }, acl.enabled ? aclSection(acl, () => accessPage(view)) : h("p", { class: "note" }, acl.reason)));
}

// Users and rules of a cluster with auth on; every change goes to every broker and NameServer.
function aclSection(acl, again) {
  const users = acl.users.map((u) => u.username);
  const byUser = (name) => `/api/acl/users/${encodeURIComponent(name)}`;
  const options = (values) => values.map((v) => h("option", {}, v));
  return [
    h("p", {}, `The console acts as ${acl.actingAs || "nobody (no --access-key given)"}.`),
    h("h4", {}, "Users"),
    table(["user", "type", "status", ""], acl.users.map((u) => [u.username, u.type, u.status,
      h("button", { class: "secondary", onclick: async () => {
        if (confirm(`Delete user ${u.username} and its rules?`)) { await api(byUser(u.username), undefined, "DELETE"); await again(); }
      } }, "Delete")]), "acl-users"),
    form("create-user", [
      field("User (AccessKey)", h("input", { name: "username", required: true })),
      field("Password (SecretKey)", h("input", { name: "password", type: "password", required: true })),
      field("Type", h("select", { name: "type" }, options(["Normal", "Super"]))),
    ], "Create user", async (v) => { await api("/api/acl/users", v); await again(); }),
    form("update-user", [
      field("User", h("select", { name: "user" }, options(users))),
      field("New password (empty: unchanged)", h("input", { name: "password", type: "password" })),
      field("Type", h("select", { name: "type" }, options(["", "Normal", "Super"]))),
      field("Status", h("select", { name: "status" }, options(["", "enable", "disable"]))),
    ], "Update user", async (v) => { await api(byUser(v.user), v, "PUT"); await again(); }),
    h("h4", {}, "Rules"),
    table(["user", "resource", "actions", "decision", "source IPs", ""], acl.rules.map((r) => [r.user, r.resource,
      r.actions.join(", "), h("span", { class: r.decision === "Deny" ? "bad" : "ok" }, r.decision), r.sourceIps.join(", ") || "any",
      h("button", { class: "secondary", onclick: async () => {
        await api(`/api/acl/rules/${encodeURIComponent(r.user)}?${new URLSearchParams({ resource: r.resource })}`, undefined, "DELETE");
        await again();
      } }, "Delete")]), "acl-rules"),
    form("create-rule", [
      field("User", h("select", { name: "user" }, options(users))),
      field("Resources (Topic:name, Group:name, Topic:prefix-*, Cluster, *)", h("input", { name: "resources", required: true, size: 30 })),
      h("fieldset", {}, h("legend", {}, "Actions"), ["Pub", "Sub", "Create", "Update", "Delete", "Get", "List", "All"].map((a) =>
        h("label", {}, h("input", { type: "checkbox", name: "actions", value: a }), a))),
      field("Source IPs or CIDR ranges (empty: any)", h("input", { name: "sourceIps" })),
      field("Decision", h("select", { name: "decision" }, options(["Allow", "Deny"]))),
    ], "Add rule", async (v, node) => {
      const actions = [...node.querySelectorAll("input[name=actions]:checked")].map((c) => c.value);
      await api("/api/acl/rules", { ...v, actions });
      await again();
    }),
  ];
}

const PAGES = [
  [/^\/dashboard$/, dashboardPage], [/^\/cluster$/, clusterPage], [/^\/topics$/, topicsPage],
  [/^\/topics\/(.+)$/, topicPage], [/^\/groups$/, groupsPage], [/^\/groups\/(.+)$/, groupPage],
  [/^\/messages$/, messagesPage], [/^\/dlq$/, dlqPage], [/^\/amqp$/, amqpPage], [/^\/access$/, accessPage],
];

async function route() {
  clearInterval(timer);
  const [path, query] = (location.hash.slice(1) || "/dashboard").split("?");
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", path.startsWith(a.getAttribute("href").slice(1)));
  const found = PAGES.find(([pattern]) => pattern.test(path));
  if (!found) { location.hash = "#/dashboard"; return; }
  const arg = path.match(found[0])[1];
  // Each visit draws into its own element: a late answer for a page left behind changes nothing.
  const view = h("div", {}, h("p", {}, "Loading…"));
  page.replaceChildren(view);
  try {
    await found[1](view, arg === undefined ? new URLSearchParams(query) : decodeURIComponent(arg));
  } catch (e) {
    view.replaceChildren(h("p", { class: "bad" }, "This page could not be drawn: see the message above."));
  }
}

window.addEventListener("hashchange", route);
route();
