// agent-journal web UI: a read-only view of the journal's JSON documents.
//
// Everything the journal holds is untrusted (agents write it): this script builds
// every element with createElement and puts every value in a text node or a
// property (never innerHTML), and the server's Content-Security-Policy allows no
// other script. Routes live in the address's fragment: #/, #/thread?...,
// #/state?..., #/diff?..., #/verify?...
"use strict";

(() => {
  const THREAD_PARAMS = ["namespace", "agent_id", "user_id", "session_id", "thread_id"];
  const app = document.getElementById("app");
  const liveBadge = document.getElementById("live");
  let live = null; // the EventSource of the current view
  let liveKey = "";
  let renderSeq = 0; // a newer render makes an older one's result stale

  // --- building blocks ----------------------------------------------------------

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "dataset") Object.assign(node.dataset, value);
      else if (name === "on") {
        for (const [type, fn] of Object.entries(value)) node.addEventListener(type, fn);
      } else if (name === "testid") node.dataset.testid = value;
      else node[name] = value;
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function json(value) {
    return JSON.stringify(value, null, 2) ?? "null";
  }

  function compact(value) {
    const text = JSON.stringify(value) ?? "null";
    return text.length > 160 ? text.slice(0, 157) + "…" : text;
  }

  function pre(value) {
    return el("pre", { className: "json" }, json(value));
  }

  function details(summary, ...body) {
    return el("details", {}, el("summary", {}, summary), ...body);
  }

  function badge(text, kind, testid) {
    return el("span", { className: `badge ${kind}`, testid }, text);
  }

  function link(href, text, props) {
    return el("a", { href, ...(props || {}) }, text);
  }

  function route(path, params) {
    const query = new URLSearchParams(params).toString();
    return `#/${path}${query ? "?" + query : ""}`;
  }

  function threadParams(search) {
    const out = {};
    for (const name of THREAD_PARAMS) if (search.has(name)) out[name] = search.get(name);
    return out;
  }

  async function fetchJson(path, params) {
    const query = new URLSearchParams(params).toString();
    const reply = await fetch(`/api/${path}${query ? "?" + query : ""}`, {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    });
    let body = null;
    try {
      body = await reply.json();
    } catch (_) {
      body = { error: `${reply.status} ${reply.statusText}` };
    }
    if (!reply.ok) throw new Error(body && body.error ? body.error : `HTTP ${reply.status}`);
    return body;
  }

  function statusBadge(status) {
    const kinds = {
      completed: "ok", running: "info", failed: "bad", interrupted: "warn",
      unfinished: "warn", uncertain: "bad", reconciled: "info",
    };
    return badge(status, kinds[status] || "muted", "status");
  }

  function attentionBadges(attention, thread) {
    const out = [];
    if (!attention) return out;
    const n = (list) => list.length;
    if (n(attention.interrupted_runs))
      out.push(badge(`interrupted run ×${n(attention.interrupted_runs)}`, "warn", "badge-interrupted"));
    if (n(attention.uncertain_calls))
      out.push(badge(`uncertain call ×${n(attention.uncertain_calls)}`, "bad", "badge-uncertain"));
    if (n(attention.problems))
      out.push(badge(`verify: ${n(attention.problems)} problem(s)`, "bad", "badge-problems"));
    if (!out.length) out.push(badge("ok", "ok", "badge-ok"));
    if (thread && thread.error) out.push(badge("unreadable", "bad", "badge-error"));
    return out;
  }

  function threadNav(thread, active) {
    const p = thread.params;
    const item = (path, label) =>
      path === active
        ? el("span", { className: "tab active" }, label)
        : link(route(path, p), label, { className: "tab", testid: `nav-${path}` });
    return el("nav", { className: "tabs" },
      item("thread", "Timeline"), item("state", "State"),
      item("diff", "Diff"), item("verify", "Verify"));
  }

  function threadHeader(doc, active) {
    return [
      el("p", { className: "crumbs" }, link("#/", "← threads")),
      el("h1", { className: "thread-label", testid: "thread-label" }, doc.thread.label),
      el("p", { className: "meta" },
        `head v${doc.head}`,
        doc.attention ? " · " : "",
        doc.attention ? attentionBadges(doc.attention) : []),
      threadNav(doc.thread, active),
    ];
  }

  // --- events and records -------------------------------------------------------

  function eventView(event) {
    const role = event.role ? el("span", { className: `role role-${event.role}` }, event.role) : null;
    return el("li", { className: "event", testid: "event" },
      el("span", { className: "etype" }, event.type), " ", role, role ? " " : "",
      el("span", { className: "esummary" }, event.summary),
      details("fields", pre(event.data)));
  }

  function recordView(record) {
    return el("li", { className: "record", id: `v${record.version}`, testid: "record",
      dataset: { version: String(record.version) } },
      el("div", { className: "rhead" },
        el("span", { className: "version" }, `v${record.version}`),
        el("span", { className: "muted" },
          ` ${record.time} · epoch ${record.epoch} · ${record.writer}`)),
      el("ul", { className: "events" }, record.events.map(eventView)));
  }

  // --- pages --------------------------------------------------------------------

  async function threadsPage(search) {
    const filters = {
      text: search.get("text") || "", agent: search.get("agent") || "",
      user: search.get("user") || "", session: search.get("session") || "",
      attention: search.get("attention") || "",
    };
    const doc = await fetchJson("threads", Object.fromEntries(
      Object.entries(filters).filter(([, v]) => v)));
    const input = (name, label) =>
      el("label", {}, label, el("input", {
        type: "search", name, value: filters[name], placeholder: "any",
        testid: `filter-${name}`,
      }));
    const form = el("form", { className: "filters", testid: "filters",
      on: {
        submit: (e) => { e.preventDefault(); applyFilters(form); },
        change: () => applyFilters(form),
      } },
      input("text", "thread"), input("agent", "agent"), input("user", "user"),
      input("session", "session"),
      el("label", { className: "check" },
        el("input", { type: "checkbox", name: "attention", checked: !!filters.attention,
          testid: "filter-attention" }),
        " needs attention"),
      el("button", { type: "submit" }, "Filter"));
    const rows = doc.threads.map((t) =>
      el("tr", { testid: "thread-row" },
        el("td", {}, link(route("thread", t.params), t.label, { testid: "thread-link" })),
        el("td", { className: "num" }, String(t.head)),
        el("td", { className: "num" }, String(t.records)),
        el("td", {}, t.last_activity_text),
        el("td", {}, attentionBadges(t.attention, t), t.error ? el("div", { className: "error" }, t.error) : null)));
    return [
      el("h1", {}, "Threads"),
      form,
      el("p", { className: "muted", testid: "thread-count" },
        `${doc.count} thread${doc.count === 1 ? "" : "s"}`),
      doc.count
        ? el("table", { className: "grid" },
            el("thead", {}, el("tr", {}, ["thread", "head", "records", "last activity", "attention"]
              .map((h) => el("th", {}, h)))),
            el("tbody", {}, rows))
        : el("p", {}, "No thread matches."),
    ];
  }

  function applyFilters(form) {
    const data = new FormData(form);
    const params = {};
    for (const [name, value] of data.entries()) if (value) params[name] = value;
    if (params.attention) params.attention = "1";
    location.hash = route("", params);
  }

  function runLabel(run) {
    return run.run_id === null ? "(outside any run)" : run.run_id;
  }

  function findRun(runs, id) {
    for (const run of runs) {
      if ((run.run_id ?? "") === id) return run;
      const found = findRun(run.children, id);
      if (found) return found;
    }
    return null;
  }

  function runTree(doc, runs, selected) {
    return el("ul", { className: "tree" }, runs.map((run) => {
      const id = run.run_id ?? "";
      const uncertain = run.tool_calls.filter((c) => c.status === "uncertain").length;
      return el("li", { className: id === selected ? "selected" : "" },
        link(route("thread", { ...doc.thread.params, run: id }), runLabel(run),
          { testid: "run-link", dataset: { run: id } }),
        " ", statusBadge(run.status),
        el("span", { className: "muted" },
          ` v${run.started_at}${run.ended_at ? "–v" + run.ended_at : "…"}`,
          ` · ${run.tool_calls.length} tool call${run.tool_calls.length === 1 ? "" : "s"}`),
        uncertain ? [" ", badge(`${uncertain} uncertain`, "bad")] : null,
        run.parent_thread ? el("span", { className: "muted" }, ` · parent ${run.parent_run_id} in ${run.parent_thread}`) : null,
        run.children.length ? runTree(doc, run.children, selected) : null);
    }));
  }

  function callRow(doc, run, call, selectedCall) {
    return el("tr", { testid: "call-row", className: call.call_id === selectedCall ? "selected" : "" },
      el("td", {}, link(route("thread", { ...doc.thread.params, run: run.run_id ?? "", call: call.call_id }),
        call.call_id, { testid: "call-link", dataset: { call: call.call_id } })),
      el("td", {}, call.name),
      el("td", {}, statusBadge(call.status)),
      el("td", { className: "code" }, compact(call.input)),
      el("td", {}, `v${call.requested_at}`, call.resolved_at ? ` → v${call.resolved_at}` : ""));
  }

  const CALL_HELP = {
    uncertain: "No result was recorded and its run ended: the tool may or may not have run. " +
      "Nothing re-runs it, and the thread refuses new runs until an operator or the " +
      "application reconciles it with the real outcome (agent-journal reconcile, or " +
      "Agent.reconcile_tool_calls); this page follows when it does.",
    reconciled: "Its outcome was unknown; the verdict below was recorded by reconciliation.",
    completed: "The tool ran and its result was recorded.",
    failed: "The tool ran and returned an error.",
    running: "Requested by a run that is still open.",
  };

  function callPanel(run, call) {
    return el("section", { className: "panel call", testid: "call-detail" },
      el("h3", {}, `Tool call ${call.call_id}`),
      el("p", {}, el("strong", {}, call.name), " ", statusBadge(call.status),
        el("span", { className: "muted" }, ` in run ${runLabel(run)}`)),
      el("p", { className: "help", testid: "call-help" }, CALL_HELP[call.status] || ""),
      el("dl", {},
        el("dt", {}, "requested at"), el("dd", {}, `v${call.requested_at}`),
        el("dt", {}, "resolved at"), el("dd", {}, call.resolved_at ? `v${call.resolved_at}` : "never"),
        el("dt", {}, "ledger outcome"), el("dd", {}, call.outcome)),
      el("h4", {}, "input"), pre(call.input),
      el("h4", {}, call.status === "reconciled" ? "verdict" : "output"),
      call.resolved_at ? pre(call.output) : el("p", { className: "muted" }, "none recorded"));
  }

  function runPanel(doc, run, selectedCall) {
    const p = doc.thread.params;
    const before = Math.max(run.started_at - 1, 0);
    const end = run.ended_at || doc.head;
    const call = run.tool_calls.find((c) => c.call_id === selectedCall);
    return el("section", { className: "panel run", testid: "run-detail" },
      el("h2", {}, `Run ${runLabel(run)} `, statusBadge(run.status)),
      el("dl", {},
        el("dt", {}, "versions"), el("dd", {}, `v${run.started_at} – ${run.ended_at ? "v" + run.ended_at : "no end record"}`),
        run.reason ? [el("dt", {}, "reason"), el("dd", {}, run.reason)] : null,
        run.turn_id ? [el("dt", {}, "turn"), el("dd", {}, run.turn_id)] : null,
        run.parent_run_id ? [el("dt", {}, "parent run"), el("dd", {}, run.parent_run_id +
          (run.parent_thread ? ` (thread ${run.parent_thread})` : ""))] : null),
      el("p", { className: "actions" },
        link(route("state", { ...p, at: before }), `State before this run (v${before})`,
          { className: "button", testid: "state-before-run" }), " ",
        link(route("diff", { ...p, from: before, to: end }), `Diff over this run (v${before} → v${end})`,
          { className: "button", testid: "diff-run" })),
      run.tool_calls.length
        ? el("table", { className: "grid" },
            el("thead", {}, el("tr", {}, ["call", "tool", "status", "input", "versions"].map((h) => el("th", {}, h)))),
            el("tbody", {}, run.tool_calls.map((c) => callRow(doc, run, c, selectedCall))))
        : el("p", { className: "muted" }, "No tool calls."),
      call ? callPanel(run, call) : null);
  }

  // A page of the records: the newest by default, those ending with the selected
  // run, or those before a version (`before`); the server says what lies outside.
  function pager(doc, params, selected) {
    const w = doc.window;
    const keep = selected === null ? {} : { run: selected };
    const later = Math.min(w.last + 1 + w.limit, doc.head + 1);
    return el("p", { className: "pager", testid: "pager" },
      el("span", { className: "muted", testid: "window" },
        `records v${w.first}–v${w.last} of v${doc.first_version}–v${doc.head}`),
      w.earlier ? [" ", link(route("thread", { ...params, ...keep, before: w.first }), "← earlier",
        { className: "button", testid: "earlier-records" })] : null,
      w.later ? [" ", link(route("thread", { ...params, ...keep, before: later }), "later →",
        { className: "button", testid: "later-records" }), " ",
        link(route("thread", { ...params, ...keep, before: doc.head + 1 }), "newest",
          { className: "button", testid: "newest-records" })] : null);
  }

  async function timelinePage(search) {
    const params = threadParams(search);
    const query = { ...params };
    for (const name of ["run", "before"]) if (search.has(name)) query[name] = search.get(name);
    const doc = await fetchJson("timeline", query);
    const selected = search.has("run") ? search.get("run") : null;
    const run = selected === null ? null : findRun(doc.runs, selected);
    const segments = doc.segments.map((segment) => {
      const id = segment.run_id ?? "";
      const own = segment.run_id === null ? null : findRun(doc.runs, id);
      const mine = selected !== null && segment.run_id !== null && id === selected;
      return el("li", { className: `segment${mine ? " selected" : ""}${segment.run_id === null ? " outside" : ""}`,
        testid: "segment", dataset: { run: id } },
        el("div", { className: "shead" },
          segment.run_id === null
            ? el("span", { className: "muted" }, "outside any run")
            : [link(route("thread", { ...params, run: id }), `run ${segment.run_id}`),
               own ? [" ", statusBadge(own.status)] : null]),
        el("ol", { className: "records" }, segment.records.map(recordView)));
    });
    return [
      threadHeader(doc, "thread"),
      el("div", { className: "columns" },
        el("section", { className: "side" },
          el("h2", {}, "Runs"),
          doc.runs_total > doc.runs.length
            ? el("p", { className: "muted", testid: "runs-shown" },
                `${doc.runs_total.toLocaleString("en")} runs in this thread; those of these records shown`)
            : null,
          doc.runs.length ? runTree(doc, doc.runs, selected) : el("p", { className: "muted" }, "No runs."),
          run ? runPanel(doc, run, search.get("call")) :
            selected !== null ? el("p", { className: "error" }, `No run ${selected} in this thread.`) : null),
        el("section", { className: "main" },
          el("h2", {}, "Timeline"),
          pager(doc, params, selected),
          el("ol", { className: "timeline", testid: "timeline" }, segments))),
    ];
  }

  function messagesList(messages) {
    if (!messages.length) return el("p", { className: "muted" }, "none");
    return el("ol", { className: "messages" }, messages.map((m) =>
      el("li", { testid: "message" }, el("span", { className: `role role-${m.role}` }, m.role), " ",
        el("span", { className: "text" }, m.summary))));
  }

  function lastShown(list, total) {
    return total > list.length
      ? el("p", { className: "muted", testid: "last-shown" }, `the last ${list.length} shown`)
      : null;
  }

  async function statePage(search) {
    const params = threadParams(search);
    const at = search.get("at");
    const all = search.get("messages") === "all";
    const query = { ...params };
    if (at !== null) query.at = at;
    if (all) query.messages = "all";
    const doc = await fetchJson("state", query);
    const cut = doc.messages_total > doc.messages.length;
    const slider = el("input", {
      type: "range", min: "0", max: String(doc.head), value: String(doc.version),
      testid: "version-slider", ariaLabel: "version",
    });
    const number = el("input", {
      type: "number", min: "0", max: String(doc.head), value: String(doc.version),
      testid: "version-input", ariaLabel: "version number",
    });
    const go = (value) => { location.hash = route("state", { ...params, at: value }); };
    slider.addEventListener("input", () => { number.value = slider.value; });
    slider.addEventListener("change", () => go(slider.value));
    number.addEventListener("change", () => go(number.value));
    const state = doc.state || {};
    const rest = Object.entries(state).filter(([name]) => name !== "context");
    return [
      threadHeader(doc, "state"),
      el("section", { className: "panel" },
        el("h2", { testid: "state-title" }, `State as of v${doc.version}`,
          el("span", { className: "muted" }, ` of ${doc.head}`)),
        el("div", { className: "picker" }, el("label", {}, "version ", slider), " ", number),
        el("p", { className: "actions" },
          doc.version < doc.head
            ? link(route("diff", { ...params, from: doc.version, to: doc.head }),
                `Diff v${doc.version} → head`, { className: "button", testid: "diff-to-head" })
            : null),
        el("dl", { className: "state-flags" },
          el("dt", {}, "active run"), el("dd", { testid: "active-run" }, state.active_run_id ?? "none"),
          el("dt", {}, "interrupted"), el("dd", {}, state.shutdown_interrupted ? "yes" : "no"),
          el("dt", {}, "pending tool calls"),
          el("dd", {}, Object.keys((state.tool_context || {}).pending_calls || {}).join(", ") || "none")),
        el("h3", {}, `Context (${doc.messages_total} messages)`),
        cut
          ? el("p", { className: "muted", testid: "messages-shown" },
              `the last ${doc.messages.length} shown; `,
              link(route("state", { ...params, at: doc.version, messages: "all" }),
                `show all ${doc.messages_total}`, { testid: "all-messages" }))
          : null,
        messagesList(doc.messages),
        rest.map(([name, value]) => details(name, pre(value))),
        details(cut ? `the state (JSON), its context cut to the last ${doc.messages.length} messages`
          : "the whole state (JSON)", pre(state))),
    ];
  }

  function valueText(value) {
    return value === null || value === undefined ? "" : compact(value);
  }

  async function diffPage(search) {
    const params = threadParams(search);
    const query = { ...params };
    if (search.get("from")) query.from = search.get("from");
    if (search.get("to")) query.to = search.get("to");
    const doc = await fetchJson("diff", query);
    const from = el("input", { type: "number", min: "0", max: String(doc.head), value: String(doc.from), name: "from", testid: "diff-from" });
    const to = el("input", { type: "number", min: "0", max: String(doc.head), value: String(doc.to), name: "to", testid: "diff-to" });
    const form = el("form", { className: "picker", on: { submit: (e) => {
      e.preventDefault();
      location.hash = route("diff", { ...params, from: from.value, to: to.value });
    } } }, el("label", {}, "from v", from), " ", el("label", {}, "to v", to), " ",
      el("button", { type: "submit", testid: "diff-show" }, "Show"));
    return [
      threadHeader(doc, "diff"),
      el("section", { className: "panel" },
        el("h2", { testid: "diff-title" }, `Diff v${doc.from} → v${doc.to}`),
        form,
        el("h3", {}, "State fields"),
        doc.changes.length
          ? el("table", { className: "grid", testid: "diff-changes" },
              el("thead", {}, el("tr", {}, ["field", "change", "before", "after"].map((h) => el("th", {}, h)))),
              el("tbody", {}, doc.changes.map((c) => el("tr", { className: `change-${c.kind}` },
                el("td", { className: "code" }, c.field), el("td", {}, c.kind),
                el("td", { className: "code" }, valueText(c.old)), el("td", { className: "code" }, valueText(c.new))))))
          : el("p", { className: "muted" }, "No state field changed."),
        el("h3", {}, `Messages added (${doc.added_total})`), lastShown(doc.added, doc.added_total),
        messagesList(doc.added),
        el("h3", {}, `Messages removed (${doc.removed_total})`), lastShown(doc.removed, doc.removed_total),
        messagesList(doc.removed),
        el("h3", {}, `Records in between (${doc.records_total})`),
        doc.records_total > doc.records.length
          ? el("p", { className: "muted", testid: "diff-records-shown" },
              `the last ${doc.records.length} shown; `,
              link(route("thread", { ...params, before: doc.records[0].version }),
                "the earlier ones in the timeline", { testid: "diff-earlier-records" }))
          : null,
        el("ol", { className: "records" }, doc.records.map(recordView))),
    ];
  }

  async function verifyPage(search) {
    const params = threadParams(search);
    const doc = await fetchJson("verify", params);
    const findings = (list) => list.length
      ? el("ul", {}, list.map((f) => el("li", {}, f.version === null ? "" : `v${f.version}: `, f.message)))
      : el("p", { className: "muted" }, "none");
    return [
      threadHeader({ ...doc, head: doc.head }, "verify"),
      el("section", { className: "panel" },
        el("h2", {}, "Verify ", doc.ok ? badge("ok", "ok", "verify-status") : badge("PROBLEMS FOUND", "bad", "verify-status")),
        el("p", {}, "Checksums, the hash chain, contiguous versions, increasing epochs, blobs, " +
          "and every checkpoint against a fresh replay."),
        el("dl", {},
          el("dt", {}, "records"), el("dd", { testid: "verify-records" }, String(doc.records)),
          el("dt", {}, "checkpoints"), el("dd", {}, String(doc.checkpoints)),
          el("dt", {}, "bytes"), el("dd", {}, String(doc.bytes))),
        el("h3", {}, `Problems (${doc.problems.length})`), findings(doc.problems),
        el("h3", {}, `Warnings (${doc.warnings.length})`), findings(doc.warnings)),
    ];
  }

  // --- routing and live updates ---------------------------------------------------

  const PAGES = { "": threadsPage, thread: timelinePage, state: statePage, diff: diffPage, verify: verifyPage };

  function parseHash() {
    const raw = location.hash.replace(/^#\/?/, "");
    const [path, query] = raw.split("?", 2);
    return { path: path || "", search: new URLSearchParams(query || "") };
  }

  function follow(path, search) {
    const thread = path === "" ? {} : threadParams(search);
    const key = JSON.stringify(thread);
    if (live && key === liveKey) return;
    if (live) live.close();
    liveKey = key;
    const query = new URLSearchParams(thread).toString();
    live = new EventSource(`/api/live${query ? "?" + query : ""}`);
    live.addEventListener("ready", () => { liveBadge.textContent = "live"; liveBadge.className = "live on"; });
    live.addEventListener("changed", () => render({ quiet: true }));
    live.onerror = () => { liveBadge.textContent = "reconnecting"; liveBadge.className = "live off"; };
  }

  async function render(options) {
    const seq = ++renderSeq;
    const { path, search } = parseHash();
    const page = PAGES[path];
    if (!options || !options.quiet) {
      document.body.dataset.loading = "1";
    }
    let content;
    try {
      content = page ? await page(search) : [el("h1", {}, "Not found"), link("#/", "back to the threads")];
    } catch (err) {
      content = [el("p", { className: "crumbs" }, link("#/", "← threads")),
        el("p", { className: "error", testid: "error" }, String(err.message || err))];
    }
    if (seq !== renderSeq) return; // a later navigation won
    const y = window.scrollY;
    app.replaceChildren(...[content].flat(Infinity).filter(Boolean));
    delete document.body.dataset.loading;
    document.body.dataset.rendered = String(seq);
    if (options && options.quiet) window.scrollTo(0, y);
    else if (path === "thread" && search.has("run")) {
      const target = app.querySelector(".segment.selected");
      if (target) target.scrollIntoView({ block: "nearest" });
    }
    follow(path, search);
  }

  async function start() {
    try {
      const info = await fetchJson("info", {});
      document.getElementById("root").textContent = info.root;
    } catch (_) { /* the page below says what failed */ }
    window.addEventListener("hashchange", () => render());
    render();
  }

  start();
})();
