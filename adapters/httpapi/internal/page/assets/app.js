// The Worker's live run page: agents and their runs, and one run followed
// live. Plain JavaScript, no framework and no build step; it talks only to
// the Worker's API beside it (docs/http-api.md).
'use strict';

(() => {
  // docs/spec.md#polling: a run's status every 5 s until it ends, lists every 30 s.
  const POLL_RUN_MS = 5000;
  const POLL_LIST_MS = 30000;
  const RECONNECT_MIN_MS = 1000;
  const RECONNECT_MAX_MS = 30000;
  const RUNS_SHOWN = 50;
  const SVGNS = 'http://www.w3.org/2000/svg';

  // ---- small DOM helpers (text only: nothing from the API is ever parsed as HTML)

  function h(tag, attrs, ...children) {
    return build(document.createElement(tag), attrs, children);
  }
  function s(tag, attrs, ...children) {
    return build(document.createElementNS(SVGNS, tag), attrs, children);
  }
  function build(el, attrs, children) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') el.textContent = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }
  const $ = (sel) => document.querySelector(sel);

  // keepRows draws a table body from items, one row each, and keeps the
  // row already shown for an item whose drawing is the same (sig): the
  // node stays, so a button a user is about to click, or holds the focus
  // of, survives a read that changed nothing. Rows are moved only where
  // the order changed. Returns the rows now shown, by key.
  function keepRows(tbody, shown, items, key, sig, draw) {
    const next = new Map();
    const rows = items.map((it) => {
      const k = key(it), sg = sig(it), old = shown.get(k);
      const row = old && old.sig === sg ? old.row : draw(it);
      next.set(k, { sig: sg, row });
      return row;
    });
    rows.forEach((row, i) => {
      if (tbody.children[i] !== row) tbody.insertBefore(row, tbody.children[i] || null);
    });
    while (tbody.children.length > rows.length) tbody.lastElementChild.remove();
    return next;
  }

  // reading marks el aria-busy while a read of it is under way (any read:
  // one overtaken by a later read included), so a reader, or a test, knows
  // when every answer asked for has come back and been drawn or dropped.
  const readsOf = new WeakMap(); // element → reads under way
  async function reading(el, read) {
    readsOf.set(el, (readsOf.get(el) || 0) + 1);
    el.setAttribute('aria-busy', 'true');
    try {
      return await read();
    } finally {
      const n = readsOf.get(el) - 1;
      readsOf.set(el, n);
      if (!n) el.removeAttribute('aria-busy');
    }
  }

  // pager keeps a paged list's place: path, the page shown ('' the first),
  // and following, the path of the page after it (null after the last).
  // Its two buttons move it, each hidden where it leads nowhere: toFirst
  // back to the first page, toNext on; either reads with load. shown(next)
  // records the answer to a read of path.
  function pager(toFirst, toNext, load) {
    const p = {
      path: '', following: null,
      shown(next) {
        p.following = next || null;
        toNext.hidden = !p.following;
        toFirst.hidden = !p.path;
      },
    };
    toFirst.addEventListener('click', () => { p.path = ''; load(); });
    toNext.addEventListener('click', () => { if (p.following) { p.path = p.following; load(); } });
    return p;
  }

  // burst runs fn once for a burst of events: ms after the first kick,
  // however many follow meanwhile; cancel drops one not yet run.
  function burst(fn, ms) {
    let timer = null;
    return {
      kick() { if (!timer) timer = setTimeout(() => { timer = null; fn(); }, ms); },
      cancel() { clearTimeout(timer); timer = null; },
    };
  }

  function fmtTime(iso) {
    if (!iso) return '—';
    const d = new Date(iso);
    return h('time', { datetime: iso, title: iso, text: isNaN(d) ? iso : d.toLocaleString() });
  }
  function fmtDuration(ms) {
    if (ms === undefined || ms === null) return '—';
    if (ms < 1000) return ms + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
    const m = Math.floor(ms / 60000);
    return m + ' min ' + Math.round((ms % 60000) / 1000) + ' s';
  }
  function badge(status, attrs) {
    return h('span', Object.assign({ class: 'badge', 'data-status': status || '', text: status || '—' }, attrs));
  }
  // A run whose runner stopped heartbeating: runner_lost_at (the lapsed
  // lease's expiry, computed by the Worker on read) until another runner
  // takes it over, then taken_over_at (docs/spec.md#run-status).
  function runnerBadge(r) {
    if (r.runner_lost_at) {
      return h('span', { class: 'badge', 'data-runner': 'lost', 'data-testid': 'runner-lost', title: 'lease lapsed ' + r.runner_lost_at },
        'runner lost ', fmtTime(r.runner_lost_at));
    }
    if (r.taken_over_at) {
      return h('span', { class: 'badge', 'data-runner': 'taken-over', 'data-testid': 'taken-over', title: 'taken over ' + r.taken_over_at },
        'taken over at ', fmtTime(r.taken_over_at));
    }
    return null;
  }
  // lapseWait is how long until the earliest lease among runs has lapsed
  // (a second past its expiry, at least POLL_RUN_MS as clocks differ), or
  // null when none holds one. A lease lapses without an event, so a view
  // reads again then to show a lost runner unasked.
  function lapseWait(runs) {
    const due = runs.filter((r) => r.lease && !r.runner_lost_at).map((r) => Date.parse(r.lease.expires_at)).filter((t) => !isNaN(t));
    return due.length ? Math.max(Math.min(...due) - Date.now() + 1000, POLL_RUN_MS) : null;
  }

  // ---- who the page acts as: a bearer token, or with none the actor header

  const auth = {
    get token() { return read('conveyor.token'); },
    get actor() { return read('conveyor.actor') || 'gateway'; },
    headers() {
      const t = this.token;
      return t ? { Authorization: 'Bearer ' + t } : { 'X-Conveyor-Actor': this.actor };
    },
  };
  // localStorage can throw (storage disabled); the page then keeps nothing.
  function read(k) { try { return localStorage.getItem(k) || ''; } catch (_) { return ''; } }
  function write(k, v) { try { v ? localStorage.setItem(k, v) : localStorage.removeItem(k); } catch (_) { /* not kept */ } }

  // ---- the API

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
    // What the user reads: the status and the code matter (a 403 FORBIDDEN
    // must be obvious), then the Worker's own message.
    describe() {
      return (this.status ? this.status + ' ' : '') + this.code + ': ' + this.message;
    }
  }

  // apiPage reads one page of a paged list: its items and the path of the
  // next page, from the answer's Link rel="next" (null on the last page).
  async function apiPage(path) {
    let next = null;
    const items = (await api('GET', path, undefined, undefined, (res) => {
      const m = (res.headers.get('Link') || '').match(/<([^>]*)>\s*;\s*rel="?next"?/);
      if (m) next = m[1];
    })) || [];
    return { items, next };
  }

  // listPage reads one page of a paged list (GET /runs, GET /jobs) whose
  // filters are in path's query, and copes with a Worker that does not
  // page: one that ignores limit, cursor and the filters answers every
  // item with no Link, so here the items are filtered by keep, ordered by
  // order and cut to limit, and the next page is a cursor of this page's
  // own ("local:OFFSET:PATH") that only listPage reads. A Worker that
  // pages answers at most limit items and a Link; keep then drops nothing.
  async function listPage(path, limit, keep, order) {
    let offset = 0;
    const local = path.match(/^local:(\d+):(.*)$/);
    if (local) { offset = Number(local[1]); path = local[2]; }
    const page = await apiPage(path);
    if (!local && (page.next || page.items.length <= limit)) return { items: page.items.filter(keep), next: page.next };
    const all = page.items.filter(keep);
    if (order) all.sort(order);
    const end = offset + limit;
    return { items: all.slice(offset, end), next: end < all.length ? 'local:' + end + ':' + path : null };
  }
  const newestFirst = (key) => (x, y) => String(y[key] || '').localeCompare(String(x[key] || ''));

  async function api(method, path, body, extraHeaders, onAnswer) {
    const headers = Object.assign({ Accept: 'application/json' }, auth.headers(), extraHeaders);
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, 'NETWORK', 'the Worker did not answer (' + e.message + ')');
    }
    if (onAnswer) onAnswer(res);
    noteTenant(res);
    const text = await res.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
    if (!res.ok) {
      const code = (data && data.code) || 'HTTP_' + res.status;
      const msg = (data && data.message) || text.trim() || res.statusText;
      throw new ApiError(res.status, code, msg);
    }
    return data;
  }
  const enc = encodeURIComponent;

  // The tenant the token acts for, as the Worker names it on every answer
  // (X-Conveyor-Tenant: absent for the default tenant, "*" for every
  // tenant), shown beside the token.
  let tenantShown = '';
  function noteTenant(res) {
    const t = res.headers.get('X-Conveyor-Tenant') || '';
    if (t === tenantShown) return;
    tenantShown = t;
    showAuth();
  }
  function showAuth() {
    const mode = $('#auth-mode');
    if (!mode) return;
    const tenant = tenantShown === '*' ? ' · every tenant' : tenantShown ? ' · tenant ' + tenantShown : '';
    mode.textContent = (auth.token ? 'using the token' : 'as ' + auth.actor + ' (no token)') + tenant;
    mode.dataset.tenant = tenantShown;
  }

  function requestID() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return Date.now().toString(36) + Math.random().toString(36).slice(2);
  }

  // ---- live updates: the event stream, polling while it is down

  // The stream is read with fetch rather than EventSource because
  // EventSource cannot send headers, and the Worker needs the bearer token
  // (or the actor header) on every request. The parsing follows the SSE
  // format: "field: value" lines, a blank line ends an event, ":" comments.
  class Live {
    constructor({ url, onEvent, poll, interval, onOpen }) {
      this.url = url;
      this.onEvent = onEvent;
      this.poll = poll;
      this.interval = interval;
      this.onOpen = onOpen;
      this.lastID = '';
      this.stopped = false;
      this.backoff = RECONNECT_MIN_MS;
      this.onVisibility = () => this.visibility();
    }
    start() {
      document.addEventListener('visibilitychange', this.onVisibility);
      this.visibility();
    }
    // stop ends everything for good: a view left, or a run that ended.
    stop(why) {
      this.stopped = true;
      document.removeEventListener('visibilitychange', this.onVisibility);
      this.halt();
      if (why) setLive('stopped', why);
    }
    halt() {
      if (this.abort) this.abort.abort();
      this.abort = null;
      clearTimeout(this.pollTimer);
      clearTimeout(this.retryTimer);
      this.pollTimer = this.retryTimer = null;
    }
    // docs/spec.md#polling: nothing runs while the tab is hidden; on return the
    // page reads the state once and goes live again.
    visibility() {
      if (this.stopped) return;
      if (document.hidden) {
        this.halt();
        setLive('paused', 'Paused while the tab is hidden.');
        return;
      }
      if (!this.abort) this.connect();
    }
    connect() {
      const ctl = new AbortController();
      this.abort = ctl;
      this.read(ctl.signal).catch((e) => {
        if (ctl.signal.aborted || this.stopped) return;
        this.down(e);
      });
    }
    down(e) {
      this.abort = null;
      const why = e instanceof ApiError ? e.describe() : String(e && e.message || e);
      setLive('polling', 'Live stream unavailable (' + why + '); polling every ' + this.interval / 1000 + ' s.');
      if (!this.pollTimer) this.schedulePoll(0);
      this.retryTimer = setTimeout(() => { this.retryTimer = null; if (!this.stopped && !document.hidden) this.connect(); }, this.backoff);
      this.backoff = Math.min(this.backoff * 2, RECONNECT_MAX_MS);
    }
    schedulePoll(delay) {
      this.pollTimer = setTimeout(async () => {
        if (this.stopped || document.hidden) { this.pollTimer = null; return; }
        try { await this.poll(); } catch (_) { /* the view shows its own errors */ }
        // The stream may have come back meanwhile; then polling ends.
        if (!this.stopped && this.pollTimer && !this.streaming) this.schedulePoll(this.interval);
        else this.pollTimer = null;
      }, delay);
    }
    async read(signal) {
      this.streaming = false;
      const headers = Object.assign({ Accept: 'text/event-stream' }, auth.headers());
      if (this.lastID) headers['Last-Event-ID'] = this.lastID;
      const res = await fetch(this.url, { headers, signal, cache: 'no-store' });
      if (!res.ok || !res.body) {
        let code = 'HTTP_' + res.status, msg = res.statusText;
        try { const d = await res.json(); code = d.code || code; msg = d.message || msg; } catch (_) { /* not JSON */ }
        throw new ApiError(res.status, code, msg);
      }
      this.streaming = true;
      clearTimeout(this.pollTimer);
      this.pollTimer = null;
      this.backoff = RECONNECT_MIN_MS;
      setLive('stream', 'Live: following the Worker\'s event stream.');
      // Anything that changed before the stream opened is read once now.
      if (this.onOpen) this.onOpen();
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '', type = '', data = [], id = null;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          let line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (line.endsWith('\r')) line = line.slice(0, -1);
          if (line === '') {
            if (id !== null) this.lastID = id;
            if (data.length) this.dispatch(type || 'message', data.join('\n'));
            type = ''; data = []; id = null;
            continue;
          }
          if (line.startsWith(':')) continue; // a keep-alive comment
          const colon = line.indexOf(':');
          const field = colon < 0 ? line : line.slice(0, colon);
          let val = colon < 0 ? '' : line.slice(colon + 1);
          if (val.startsWith(' ')) val = val.slice(1);
          if (field === 'event') type = val;
          else if (field === 'data') data.push(val);
          else if (field === 'id') id = val;
        }
      }
      this.streaming = false;
      throw new Error('the stream ended');
    }
    dispatch(type, raw) {
      let d;
      try { d = JSON.parse(raw); } catch (_) { return; }
      try { this.onEvent(d.type || type, d); } catch (e) { console.error(e); }
    }
  }

  function setLive(mode, text) {
    const el = $('#live');
    el.dataset.mode = mode;
    el.textContent = text;
  }

  // ---- the machine: layout, path and diagram

  function isTerminal(spec, state) {
    return !!spec && spec.terminal.includes(state);
  }

  // Breadth-first search from `from` over the spec's transitions; returns
  // the states of one shortest path (from and to included), or null.
  function shortestPath(spec, from, to) {
    if (from === to) return [from];
    const prev = new Map([[from, null]]);
    const queue = [from];
    while (queue.length) {
      const cur = queue.shift();
      for (const t of spec.transitions) {
        if (t.from !== cur || prev.has(t.to)) continue;
        prev.set(t.to, cur);
        if (t.to === to) {
          const out = [to];
          for (let p = cur; p !== null; p = prev.get(p)) out.unshift(p);
          return out;
        }
        queue.push(t.to);
      }
    }
    return null;
  }

  // RunPath is the run's path as far as this page can know it. The page
  // sees the states the run reaches while it is open (its events and reads);
  // what happened before it opened is not recorded anywhere it can read, so
  // that part is drawn as the shortest path in the spec from the initial
  // state to the first state seen, and likewise between two seen states
  // whose move the page missed. It is the likely path, not a log.
  class RunPath {
    constructor(spec) {
      this.spec = spec;
      this.seen = [];
    }
    see(state) {
      if (state && this.seen[this.seen.length - 1] !== state) this.seen.push(state);
    }
    get current() { return this.seen[this.seen.length - 1]; }
    states() {
      if (!this.spec || !this.seen.length) return this.seen.slice();
      const out = shortestPath(this.spec, this.spec.initial, this.seen[0]) || [this.seen[0]];
      for (let i = 1; i < this.seen.length; i++) {
        const gap = shortestPath(this.spec, this.seen[i - 1], this.seen[i]) || [this.seen[i - 1], this.seen[i]];
        out.push(...gap.slice(1));
      }
      return out;
    }
    // moves gives "from→to" keys of the path's moves (every event between
    // the two states is lit: the page cannot tell which one fired).
    moves() {
      const st = this.states(), out = new Set();
      for (let i = 1; i < st.length; i++) out.add(st[i - 1] + '→' + st[i]);
      return out;
    }
  }

  // Text widths for the layout, measured with the fonts app.css draws
  // with (a label on the path is bold, so labels are measured bold).
  const STATE_FONT = '13px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace';
  const LABEL_FONT = '600 11px system-ui, sans-serif';
  let measureCtx = null;
  function textWidth(text, font) {
    if (!measureCtx) measureCtx = document.createElement('canvas').getContext('2d');
    measureCtx.font = font;
    return Math.ceil(measureCtx.measureText(text).width);
  }

  // layout places the machine with dagre (assets/vendor, a layered
  // (Sugiyama) layout): states are nodes in ranks, every move is an edge of
  // a multigraph whose label is a box of its own, so dagre gives each label
  // a place that no state and no other label takes, parallel moves
  // included. A label's box has room beside its text for its edge's line
  // (a self-loop's, for the loop), so neither crosses the text. A small
  // start node leads into the initial state. rankdir is 'LR' (left to
  // right, like the SDK's Mermaid and DOT diagrams) or 'TB'; the same spec
  // and rankdir always give the same picture.
  const LINE_ROOM = 10; // beside a label: where its edge's line runs
  const LOOP_ROOM = 14; // beside a self-loop's label: where the loop runs
  function layout(spec, rankdir) {
    const lr = rankdir === 'LR';
    const g = new dagre.graphlib.Graph({ multigraph: true });
    g.setGraph({ rankdir, nodesep: 18, ranksep: 44, edgesep: 12, marginx: 12, marginy: 12 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const st of spec.states) g.setNode(st, { width: textWidth(st, STATE_FONT) + 28, height: 36 });
    g.setNode(START, { width: 12, height: 12 });
    g.setEdge(START, spec.initial, { width: 0, height: 0 }, 'start');
    spec.transitions.forEach((t, i) => {
      if (!g.hasNode(t.from) || !g.hasNode(t.to)) return;
      // The room is across the ranks (the order axis): below the text
      // left to right, beside it top to bottom.
      const w = textWidth(t.event, LABEL_FONT) + 8, h = 16, room = t.from === t.to ? LOOP_ROOM : LINE_ROOM;
      g.setEdge(t.from, t.to, { width: lr ? w : w + room, height: lr ? h + room : h, labelpos: 'c', t }, 'm' + i);
    });
    dagre.layout(g);
    g.graph().lr = lr;
    return g;
  }
  const START = '\u0000start'; // no state's name: names are identifiers

  // axes reads a layout in its own terms: u along the ranks, v across them.
  function axes(g) {
    const lr = g.graph().lr;
    return {
      u: (p) => (lr ? p.x : p.y), v: (p) => (lr ? p.y : p.x),
      du: (n) => (lr ? n.width : n.height), dv: (n) => (lr ? n.height : n.width),
      at: (u, v) => (lr ? { x: u, y: v } : { x: v, y: u }),
    };
  }

  // ranks maps each rank's place on the u axis to half its depth: the
  // largest state or label box in it. Ranks are apart by ranksep, so the
  // space between two ranks holds no box at all.
  function ranks(g) {
    const A = axes(g), out = new Map();
    const key = (u) => Math.round(u * 10);
    const add = (u, half) => out.set(key(u), Math.max(out.get(key(u)) || 0, half));
    for (const v of g.nodes()) { const n = g.node(v); add(A.u(n), A.du(n) / 2); }
    for (const e of g.edges()) {
      if (e.v === e.w) continue; // a self-loop stays in its state's rank
      const lab = g.edge(e);
      if (lab.x !== undefined) add(A.u(lab), A.du(lab) / 2);
      for (const p of lab.points.slice(1, -1)) add(A.u(p), 0);
    }
    return (u) => out.get(key(u)) || 0;
  }

  // edgePath draws an edge between two states through dagre's points (one per
  // rank it crosses), in channels: straight across each rank, at the point
  // dagre left free in it (no box of that rank lies on that line), and
  // curved only in the space between ranks, which holds no box. So an edge
  // meets no state but its own two. At a label the line runs in the room
  // beside the text.
  function edgePath(g, e, depth) {
    const A = axes(g), lab = g.edge(e), pts = lab.points;
    const from = g.node(e.v), to = g.node(e.w), mid = pts.slice(1, -1);
    const dir = Math.sign(A.u(mid[0] || pts[pts.length - 1]) - A.u(from)) || 1;
    const runs = [[A.u(from) + dir * A.du(from) / 2, A.u(from) + dir * depth(A.u(from)), A.v(from)]];
    for (const p of mid) {
      let v = A.v(p);
      if (lab.t && p.x === lab.x && p.y === lab.y) v += A.dv(lab) / 2 - LINE_ROOM / 2;
      runs.push([A.u(p) - dir * depth(A.u(p)), A.u(p) + dir * depth(A.u(p)), v]);
    }
    runs.push([A.u(to) - dir * depth(A.u(to)), A.u(to) - dir * A.du(to) / 2, A.v(to)]);
    const f = (n) => Math.round(n * 10) / 10;
    const pt = (u, v) => { const q = A.at(u, v); return `${f(q.x)},${f(q.y)}`; };
    let d = `M${pt(runs[0][0], runs[0][2])} L${pt(runs[0][1], runs[0][2])}`;
    for (let i = 1; i < runs.length; i++) {
      const [, u0, v0] = runs[i - 1], [u1, u2, v1] = runs[i], m = (u1 - u0) / 2;
      d += ` C${pt(u0 + m, v0)} ${pt(u1 - m, v1)} ${pt(u1, v1)} L${pt(u2, v1)}`;
    }
    return d;
  }

  // selfLoop draws a self-loop in the room dagre left beside its state (its
  // label's box, whose near part is the loop's and far part the text's);
  // it returns the path and where the label goes.
  function selfLoop(g, e) {
    const A = axes(g), lab = g.edge(e), n = g.node(e.v);
    const side = Math.sign(A.v(lab) - A.v(n)) || 1;
    const face = A.v(n) + side * A.dv(n) / 2;
    const near = A.v(lab) - side * A.dv(lab) / 2;
    const apex = near + side * (LOOP_ROOM - 3);
    const c = (apex - 0.25 * face) / 0.75; // a cubic's middle is ¼ ends + ¾ controls
    const f = (p) => `${Math.round(p.x * 10) / 10},${Math.round(p.y * 10) / 10}`;
    const u = A.u(n);
    const d = `M${f(A.at(u - 9, face))} C${f(A.at(u - 13, c))} ${f(A.at(u + 13, c))} ${f(A.at(u + 9, face))}`;
    return { d, text: A.at(u, A.v(lab) + side * LOOP_ROOM / 2) };
  }

  // fitLayout lays the machine out left to right, or top to bottom when
  // that is narrower and left to right would not fit avail pixels.
  function fitLayout(spec, avail) {
    const lr = layout(spec, 'LR');
    if (!avail || lr.graph().width <= avail) return lr;
    const tb = layout(spec, 'TB');
    return tb.graph().width < lr.graph().width ? tb : lr;
  }

  // Diagrams shrink to their box down to this much of their size (move
  // labels of 11 px stay 9 px or more); below it their box scrolls.
  const MIN_SCALE = 9 / 11;

  // drawMachine draws spec as an SVG, lighting path (a RunPath, or null
  // for the bare machine); id names the SVG (its title and description
  // take it as a prefix); avail is the width it is shown in, if known.
  function drawMachine(spec, path, id, avail) {
    id = id || 'machine';
    const g = fitLayout(spec, avail);
    const depth = ranks(g);
    const onPath = new Set(path ? path.states() : []);
    const moves = path ? path.moves() : new Set();
    const current = path ? path.current : null;
    const box = g.graph();
    const width = Math.ceil(box.width), height = Math.ceil(box.height);
    const svg = s('svg', {
      xmlns: SVGNS, role: 'img', 'aria-labelledby': id + '-title ' + id + '-desc', id, 'data-testid': 'machine',
      'data-machine': spec.name, 'data-rankdir': box.lr ? 'LR' : 'TB', width, height, viewBox: `0 0 ${width} ${height}`,
    });
    // Through the CSSOM: the page's CSP (style-src 'self') drops a style
    // attribute.
    svg.style.minWidth = Math.ceil(width * MIN_SCALE) + 'px';
    svg.append(
      s('title', { id: id + '-title', text: spec.name + ' machine' }),
      s('desc', { id: id + '-desc', text: path
        ? 'Current state: ' + (current || 'unknown') + '. Path: ' + path.states().join(' → ') + '.'
        : 'States: ' + spec.states.join(', ') + '. Initial: ' + spec.initial + '.' }),
      s('defs', {},
        s('marker', { id: id + '-arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
          s('path', { d: 'M0,0 L10,5 L0,10 z' })),
        s('marker', { id: id + '-arrow-path', class: 'path-arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
          s('path', { d: 'M0,0 L10,5 L0,10 z' }))),
    );

    const edges = s('g', { class: 'transitions' });
    const labels = s('g', { class: 'labels' }); // above every line
    for (const e of g.edges()) {
      const lab = g.edge(e);
      if (e.v === START) {
        const p = g.node(START);
        edges.append(s('circle', { class: 'start', cx: p.x, cy: p.y, r: 6 }),
          s('g', { class: 'transition' + (onPath.has(spec.initial) ? ' path' : ''), 'data-to': spec.initial },
            s('path', { d: edgePath(g, e, depth), 'marker-end': `url(#${id}-arrow)` })));
        continue;
      }
      const t = lab.t;
      const key = t.from + '→' + t.to;
      const lit = moves.has(key);
      const actors = (t.actors || []).join(', ');
      const attrs = { class: 'transition' + (lit ? ' path' : ''), 'data-from': t.from, 'data-to': t.to, 'data-event': t.event };
      const title = `${t.from} → ${t.to} on ${t.event}` + (actors ? ` (by ${actors})` : '');
      let d, at;
      if (e.v === e.w) ({ d, text: at } = selfLoop(g, e));
      else {
        d = edgePath(g, e, depth);
        // The text in the label's box, off the room its line runs in.
        at = box.lr ? { x: lab.x, y: lab.y - LINE_ROOM / 2 } : { x: lab.x - LINE_ROOM / 2, y: lab.y };
      }
      edges.append(s('g', attrs, s('title', { text: title }),
        s('path', { d, 'marker-end': lit ? `url(#${id}-arrow-path)` : `url(#${id}-arrow)` })));
      labels.append(s('g', attrs, s('title', { text: title }),
        s('text', { class: 'label', x: Math.round(at.x), y: Math.round(at.y + 4), 'text-anchor': 'middle', text: t.event })));
    }
    svg.append(edges);

    const nodes = s('g', { class: 'states' });
    for (const st of spec.states) {
      const p = g.node(st);
      const x = p.x - p.width / 2, y = p.y - p.height / 2, W = p.width, H = p.height;
      const terminal = spec.terminal.includes(st);
      const cls = ['state', terminal && 'terminal', st === spec.initial && 'initial', onPath.has(st) && 'path', st === current && 'current']
        .filter(Boolean).join(' ');
      const node = s('g', { class: cls, 'data-state': st, 'data-testid': 'state-' + st, 'aria-current': st === current ? 'true' : null },
        s('title', { text: st + (terminal ? ' (terminal)' : '') + (st === current ? ' — current' : onPath.has(st) ? ' — on the path' : '') }),
        s('rect', { class: 'outer', x, y, width: W, height: H, rx: 8 }));
      // Terminal states have a double border, as the SDK's DOT diagrams do.
      if (terminal) node.append(s('rect', { class: 'inner', x: x + 3, y: y + 3, width: W - 6, height: H - 6, rx: 6 }));
      node.append(s('text', { x: p.x, y: p.y + 4, 'text-anchor': 'middle', text: st }));
      nodes.append(node);
    }
    svg.append(nodes, labels);
    return svg;
  }

  // drawStepGraph draws a graph agent's steps (names in the agent's
  // order; after: by name, the steps each depends on) as an SVG, each
  // step in the state its step file says (records; current: the step the
  // status names while the run executes), and lights the path taken: the
  // edges from a completed step to the steps it let run (its next, or all).
  function drawStepGraph(names, after, records, current) {
    const rec = new Map((records || []).map((r) => [r.step_name, r]));
    const g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: 'LR', nodesep: 18, ranksep: 44, marginx: 12, marginy: 12 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const n of names) g.setNode(n, { width: textWidth(n, STATE_FONT) + 28, height: 36 });
    for (const n of names) for (const d of after[n] || []) if (g.hasNode(d)) g.setEdge(d, n, {});
    dagre.layout(g);
    g.graph().lr = true;
    const depth = ranks(g);
    const state = (n) => (rec.get(n) ? rec.get(n).status : n === current ? 'running' : 'pending');
    const taken = (from, to) => {
      const r = rec.get(from);
      return !!r && r.status === 'completed' && (!r.next || !r.next.length || r.next.includes(to));
    };
    const box = g.graph();
    const width = Math.ceil(box.width), height = Math.ceil(box.height);
    const svg = s('svg', { xmlns: SVGNS, role: 'img', 'aria-labelledby': 'step-graph-title', id: 'step-graph-svg', 'data-testid': 'step-graph',
      width, height, viewBox: `0 0 ${width} ${height}` });
    svg.style.minWidth = Math.ceil(width * MIN_SCALE) + 'px';
    svg.append(s('title', { id: 'step-graph-title', text: 'Steps: ' + names.map((n) => n + ' ' + state(n)).join(', ') }),
      s('defs', {},
        s('marker', { id: 'sg-arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
          s('path', { d: 'M0,0 L10,5 L0,10 z' })),
        s('marker', { id: 'sg-arrow-path', class: 'path-arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
          s('path', { d: 'M0,0 L10,5 L0,10 z' }))));
    const edges = s('g', { class: 'transitions' });
    for (const e of g.edges()) {
      const lit = taken(e.v, e.w);
      edges.append(s('g', { class: 'transition' + (lit ? ' path' : ' not-taken'), 'data-from': e.v, 'data-to': e.w, 'data-taken': String(lit) },
        s('title', { text: `${e.v} → ${e.w}` + (lit ? ' (taken)' : '') }),
        s('path', { d: edgePath(g, e, depth), 'marker-end': lit ? 'url(#sg-arrow-path)' : 'url(#sg-arrow)' })));
    }
    const nodes = s('g', { class: 'states' });
    for (const n of names) {
      const p = g.node(n), st = state(n);
      const cls = ['state', 'step-' + st, st === 'completed' && 'path', st === 'running' && 'current'].filter(Boolean).join(' ');
      nodes.append(s('g', { class: cls, 'data-step': n, 'data-status': st, 'data-testid': 'graph-step-' + n },
        s('title', { text: n + ': ' + st }),
        s('rect', { class: 'outer', x: p.x - p.width / 2, y: p.y - p.height / 2, width: p.width, height: p.height, rx: 8 }),
        s('text', { x: p.x, y: p.y + 4, 'text-anchor': 'middle', text: n })));
    }
    svg.append(edges, nodes);
    return svg;
  }

  function transitionTable(spec) {
    return h('details', { id: 'transition-table' },
      h('summary', { text: 'Transition table of ' + spec.name }),
      h('table', {},
        h('thead', {}, h('tr', {}, ['from', 'to', 'event', 'actors'].map((c) => h('th', { scope: 'col', text: c })))),
        h('tbody', {}, spec.transitions.map((t) => h('tr', {},
          h('td', {}, h('code', { text: t.from })), h('td', {}, h('code', { text: t.to })),
          h('td', { text: t.event }), h('td', { text: (t.actors || []).join(', ') }))))));
  }

  // ---- views

  let current = null; // the view on screen: { stop() }
  let agentsCache = null;

  async function loadAgents(fresh) {
    if (!agentsCache || fresh) agentsCache = await api('GET', '/agents');
    return agentsCache || [];
  }

  function route() {
    if (current) current.stop();
    current = null;
    const hash = location.hash.replace(/^#/, '') || '/';
    const view = $('#view');
    view.replaceChildren();
    let m;
    if (hash === '/') current = agentsView(view);
    else if ((m = hash.match(/^\/runs\/([^/]+)$/))) current = runView(view, decodeURIComponent(m[1]));
    else if ((m = hash.match(/^\/jobs\/([^/?]+)$/))) current = jobView(view, decodeURIComponent(m[1]));
    else if ((m = hash.match(/^\/jobs(?:\?(.*))?$/))) current = jobsView(view, new URLSearchParams(m[1] || ''));
    else if (hash === '/machines') current = machinesView(view);
    else if (hash === '/proposals') current = proposalsView(view);
    else if ((m = hash.match(/^\/proposals\/([^/]+)$/))) current = proposalView(view, decodeURIComponent(m[1]));
    else if ((m = hash.match(/^\/inbox(?:\?(.*))?$/))) current = inboxView(view, new URLSearchParams(m[1] || ''));
    else {
      view.append(h('h2', { text: 'Not found' }), h('p', {}, 'No page at ', h('code', { text: hash }), '. ', h('a', { href: '#/', text: 'Agents' })));
      setLive('idle', '');
    }
  }

  function agentsView(view) {
    const sections = new Map(); // slug → refresh()
    let stopped = false;
    view.append(h('h2', { text: 'Agents' }));
    const msg = h('div', { id: 'agents-error', class: 'notice error', role: 'alert' });
    const list = h('div', { id: 'agents', 'data-testid': 'agents', 'aria-busy': 'true' });
    // Schedules (GET /schedules): what each starts (an agent's run, or a
    // periodic job), when it fires next, its last run or job, and
    // pause/resume for an admin. A Worker without a scheduler answers 404:
    // the section stays hidden.
    const schedBody = h('tbody', {});
    const schedErr = h('div', { class: 'notice error', role: 'alert' });
    const sched = h('section', { id: 'schedules', hidden: '' },
      h('h2', { text: 'Schedules' }), schedErr,
      h('table', { 'aria-label': 'Schedules' },
        h('thead', {}, h('tr', {}, ['schedule', 'starts', 'when', 'next', 'last', 'state', ''].map((c) => h('th', { scope: 'col', text: c })))),
        schedBody));
    view.append(msg, list, sched);

    // A read overtaken by a later one (the one after a pause, while the
    // periodic read was under way) is dropped when it answers.
    let schedSeq = 0, shownScheds = new Map();
    async function loadSchedules() {
      const seq = ++schedSeq;
      let items;
      try {
        items = (await api('GET', '/schedules')) || [];
      } catch (e) {
        if (stopped || seq !== schedSeq) return;
        if (e.status !== 404) { sched.hidden = false; schedErr.textContent = 'Schedules could not be read: ' + e.describe(); }
        return;
      }
      if (stopped || seq !== schedSeq) return;
      sched.hidden = items.length === 0;
      shownScheds = keepRows(schedBody, shownScheds, items, (x) => x.id, (x) => JSON.stringify(x), (x) => {
        const btn = h('button', { type: 'button', 'data-schedule': x.id, text: x.paused ? 'Resume' : 'Pause' });
        btn.addEventListener('click', async () => {
          btn.disabled = true;
          schedErr.textContent = '';
          try {
            await api('POST', '/schedules/' + enc(x.id) + (x.paused ? '/resume' : '/pause'));
            loadSchedules();
          } catch (e) {
            schedErr.textContent = (x.paused ? 'Resume' : 'Pause') + ' refused: ' + e.describe();
            btn.disabled = false;
          }
        });
        // every is a Go duration ("20s"); a number (nanoseconds) from an
        // older server still reads.
        const every = typeof x.every === 'number' ? Math.round(x.every / 1e9) + 's' : x.every;
        const starts = (x.job ? 'job ' + x.job.job_type + (x.job.agent_slug ? ' in ' + x.job.agent_slug : '') : 'run of ' + x.agent) +
          (x.tenant ? ' for ' + x.tenant : '');
        const last = x.job
          ? (x.last_job_id ? h('span', { class: 'mono', 'data-job': x.last_job_id, text: x.last_job_id }) : '—')
          : (x.last_run_id ? h('a', { href: '#/runs/' + enc(x.last_run_id), class: 'mono', text: x.last_run_id }) : '—');
        return h('tr', { 'data-schedule': x.id },
          h('td', { class: 'mono', text: x.id }),
          h('td', { class: 'mono', text: starts }),
          h('td', { class: 'mono', text: x.cron || ('every ' + every) }),
          h('td', {}, fmtTime(x.next)),
          h('td', {}, last),
          h('td', { text: x.paused ? 'paused by ' + (x.paused_by || '?') : 'active' }),
          h('td', {}, btn));
      });
    }

    // loadRuns shows one page of an agent's runs, newest first (GET
    // /runs, paged by the server): pager.status filters them, pager.path
    // is the page shown ('' the newest), pager.next the older one.
    // A read overtaken by a later one of the same agent (a filter or page
    // picked while a refresh reads) is dropped when it answers.
    async function loadRuns(agent, tbody, note, pager) {
      const seq = ++pager.seq;
      return reading(tbody.parentNode, () => readRuns(agent, tbody, note, pager, seq));
    }
    const runRow = (r) => h('tr', { 'data-run': r.run_id },
      h('td', {}, h('a', { href: '#/runs/' + enc(r.run_id), class: 'mono', text: r.run_id })),
      h('td', {}, badge(r.status), ' ', runnerBadge(r)),
      h('td', { text: r.trigger || '' }),
      h('td', {}, fmtTime(r.started_at)),
      h('td', { class: 'num', text: `${r.steps_completed || 0} / ${r.steps_total || 0}` }),
      h('td', { class: 'error', text: r.error || '' }));
    async function readRuns(agent, tbody, note, pager, seq) {
      try {
        let path = pager.path;
        if (!path) {
          path = '/runs?agent=' + enc(agent.slug) + '&limit=' + RUNS_SHOWN;
          if (pager.status) path += '&status=' + enc(pager.status);
        }
        const page = await listPage(path, RUNS_SHOWN, (r) => !pager.status || r.status === pager.status, newestFirst('started_at'));
        if (stopped || seq !== pager.seq) return;
        const runs = page.items;
        pager.next = page.next;
        pager.older.hidden = !page.next;
        pager.newest.hidden = !pager.path;
        pager.shown = keepRows(tbody, pager.shown, runs, (r) => r.run_id, (r) => JSON.stringify(r), runRow);
        watchLapse(agent.slug, runs);
        note.textContent = runs.length ? '' : (pager.path ? 'No older runs.' : pager.status ? 'No runs ' + pager.status + '.' : 'No runs yet.');
        note.className = 'muted';
      } catch (e) {
        if (stopped || seq !== pager.seq) return;
        note.textContent = 'Runs could not be read: ' + e.describe();
        note.className = 'error';
      }
    }

    async function load() {
      let agents;
      try {
        agents = await loadAgents(true);
        msg.textContent = '';
      } catch (e) {
        msg.textContent = 'Agents could not be read: ' + e.describe();
        return;
      }
      if (stopped) return;
      list.removeAttribute('aria-busy');
      if (!agents.length) { list.replaceChildren(h('p', { class: 'muted', text: 'This Worker has no agents.' })); return; }
      for (const a of agents) {
        if (sections.has(a.slug)) { sections.get(a.slug)(); continue; }
        const tbody = h('tbody', {});
        const note = h('p', { class: 'muted' });
        const err = h('div', { class: 'notice error', role: 'alert' });
        const btn = h('button', { type: 'button', id: 'start-' + a.slug, 'data-testid': 'start-run', 'data-agent': a.slug, text: 'Start run' });
        btn.addEventListener('click', async () => {
          btn.disabled = true;
          err.textContent = '';
          try {
            // A fresh request id per click: a retried request is the same run.
            const res = await api('POST', '/agents/run', { agent_slug: a.slug, trigger: 'manual', source: 'ui' }, { 'X-Request-ID': requestID() });
            location.hash = '#/runs/' + enc(res.run_id);
          } catch (e) {
            err.textContent = 'The run was not started: ' + e.describe();
          } finally {
            btn.disabled = false;
          }
        });
        // The status filter and the pager of the agent's runs.
        const pager = { status: '', path: '', next: null, seq: 0, shown: new Map(),
          older: h('button', { type: 'button', 'data-testid': 'older-runs', 'data-agent': a.slug, text: 'Older', hidden: '' }),
          newest: h('button', { type: 'button', 'data-testid': 'newest-runs', 'data-agent': a.slug, text: 'Newest', hidden: '' }) };
        const states = (a.spec && a.spec.states) || [];
        const select = h('select', { 'data-testid': 'status-filter', 'data-agent': a.slug, 'aria-label': 'Status of the runs of ' + a.slug },
          h('option', { value: '', text: 'every status' }), ...states.map((st) => h('option', { value: st, text: st })));
        const filter = h('label', { class: 'muted' }, 'Show ', select);
        select.addEventListener('change', () => { pager.status = select.value; pager.path = ''; refresh(); });
        pager.older.addEventListener('click', () => { if (pager.next) { pager.path = pager.next; refresh(); } });
        pager.newest.addEventListener('click', () => { pager.path = ''; refresh(); });
        // A graph agent's steps say what each waits for; a linear one's run in order.
        const steps = a.after ? (a.steps || []).map((n) => (a.after[n] || []).length ? `${n} (after ${a.after[n].join(', ')})` : n).join('; ')
          : (a.steps || []).join(' → ');
        list.append(h('section', { class: 'agent', 'data-agent': a.slug, 'aria-labelledby': 'agent-' + a.slug },
          h('header', {},
            h('h2', { id: 'agent-' + a.slug, class: 'mono', text: a.slug }),
            h('span', { class: 'muted' }, 'machine ', h('code', { text: a.machine || (a.spec && a.spec.name) || '' })),
            a.concurrency ? h('span', { class: 'muted', text: 'concurrency ' + a.concurrency }) : null,
            btn),
          steps ? h('p', { class: 'muted' }, 'Steps: ', steps) : null,
          err,
          filter,
          h('table', { 'aria-label': 'Runs of ' + a.slug },
            h('thead', {}, h('tr', {}, ['run', 'status', 'trigger', 'started', 'steps', 'error'].map((c) => h('th', { scope: 'col', text: c })))),
            tbody),
          note, h('p', { class: 'pager' }, pager.newest, pager.older)));
        const refresh = () => loadRuns(a, tbody, note, pager);
        sections.set(a.slug, refresh);
        refresh();
      }
    }

    // An event names its agent: only that agent's runs are read again,
    // and a burst of events costs one read.
    const pending = new Map();
    function touched(slug) {
      const refresh = sections.get(slug);
      if (!refresh || pending.has(slug)) return;
      pending.set(slug, setTimeout(() => { pending.delete(slug); if (!stopped) refresh(); }, 300));
    }
    const lapses = new Map(); // slug → timer of watchLapse
    function watchLapse(slug, runs) {
      clearTimeout(lapses.get(slug));
      lapses.delete(slug);
      const wait = lapseWait(runs);
      if (wait !== null) lapses.set(slug, setTimeout(() => { lapses.delete(slug); if (!stopped) touched(slug); }, wait));
    }
    const live = new Live({
      url: '/events/stream',
      interval: POLL_LIST_MS,
      onEvent: (type, d) => { if (type.startsWith('run.') && d.agentSlug) touched(d.agentSlug); },
      poll: load,
      onOpen: () => { for (const r of sections.values()) r(); },
    });
    load().then(() => { if (!stopped) live.start(); });
    loadSchedules();
    const schedTimer = setInterval(() => { if (!stopped) loadSchedules(); }, POLL_LIST_MS);
    return { stop() { stopped = true; live.stop(); clearInterval(schedTimer); for (const t of [...pending.values(), ...lapses.values()]) clearTimeout(t); } };
  }

  function runView(view, runID) {
    let stopped = false;
    let spec = null;
    let status = null;
    let steps = [];
    let path = null;
    let live = null;
    let agentSteps = [];
    let agentAfter = null; // a graph agent's dependencies by step

    const title = h('h2', {}, 'Run ', h('span', { class: 'mono', id: 'run-id', text: runID }));
    const loadErr = h('div', { id: 'run-load-error', class: 'notice error', role: 'alert' });
    const facts = h('dl', { class: 'facts', id: 'run-facts' });
    const diagram = h('div', { class: 'diagram', id: 'diagram' });
    const table = h('div', { id: 'table-slot' });
    const stepsBody = h('tbody', { id: 'steps-body' });
    const stepsNote = h('p', { class: 'muted', id: 'steps-note' });
    const inputPre = h('pre', { class: 'json', id: 'run-input', 'data-testid': 'run-input' });
    const inputSection = h('section', { 'aria-labelledby': 'input-h' },
      h('h3', { id: 'input-h', text: 'Input' }),
      h('p', { class: 'muted', text: 'What every step is given; a step\'s output, under "output" in its row, reaches the steps after it by name.' }), inputPre);
    const graphBox = h('div', { class: 'diagram', id: 'step-graph' });
    const graphSection = h('section', { 'aria-labelledby': 'graph-h', id: 'graph-section', hidden: true },
      h('h3', { id: 'graph-h', text: 'Step graph' }),
      h('p', { class: 'muted', text: 'Lit: the path taken. Dashed: skipped steps and edges not taken.' }), graphBox);
    // The compensation section shows only for a run that is compensating
    // or compensated: its compensation_log, in the order the undos ran.
    const compBody = h('tbody', { id: 'compensation-body' });
    const compNote = h('p', { class: 'muted', id: 'compensation-note' });
    const compSection = h('section', { 'aria-labelledby': 'compensation-h', id: 'compensation', hidden: true },
      h('h3', { id: 'compensation-h', text: 'Compensation' }),
      h('table', { 'data-testid': 'compensation' },
        h('thead', {}, h('tr', {}, ['step', 'action', 'outcome', 'started', 'ended', 'attempts', 'error'].map((c) => h('th', { scope: 'col', text: c })))),
        compBody),
      compNote);
    const doneNotice = h('div', { id: 'run-done-notice', class: 'notice ok', role: 'status', 'aria-live': 'polite', hidden: true });
    const notifyBtn = h('button', { type: 'button', id: 'btn-notify', class: 'secondary', text: 'Notify me when it ends',
      hidden: !('Notification' in window) || Notification.permission !== 'default' });
    notifyBtn.addEventListener('click', async () => {
      try { await Notification.requestPermission(); } catch (_) { /* the in-page notice stays */ }
      notifyBtn.hidden = true;
    });
    const actionOK = h('div', { id: 'action-result', class: 'notice ok', role: 'status', 'aria-live': 'polite' });
    const actionErr = h('div', { id: 'action-error', class: 'notice error', role: 'alert', 'data-testid': 'action-error' });
    const reason = h('input', { id: 'reason', type: 'text', maxlength: 500, placeholder: 'reason (optional)' });
    const cancelNote = h('p', { class: 'muted', id: 'cancel-note', 'data-testid': 'cancel-note', hidden: true });
    const buttons = {
      cancel: h('button', { type: 'button', id: 'btn-cancel', class: 'danger', 'data-testid': 'cancel', text: 'Cancel run' }),
      approve: h('button', { type: 'button', id: 'btn-approve', 'data-testid': 'approve', text: 'Approve' }),
      reject: h('button', { type: 'button', id: 'btn-reject', class: 'secondary', 'data-testid': 'reject', text: 'Reject' }),
    };

    view.append(
      h('p', {}, h('a', { href: '#/', text: '← Agents' })),
      title, loadErr, doneNotice, facts, notifyBtn,
      h('section', { 'aria-labelledby': 'controls-h' },
        h('h3', { id: 'controls-h', text: 'Control' }),
        h('div', { class: 'controls' },
          h('label', { for: 'reason', text: 'Reason' }), reason, buttons.cancel, buttons.approve, buttons.reject),
        cancelNote,
        h('p', { class: 'muted' }, 'Jobs, and requeueing them: ', h('a', { href: '#/jobs', text: 'Jobs' }), '.'),
        actionOK, actionErr),
      h('section', { 'aria-labelledby': 'machine-h' },
        h('h3', { id: 'machine-h', text: 'Machine' }),
        h('p', { class: 'muted', text: 'Lit: the run\'s path. Moves before this page opened are the shortest path in the machine to the first state it saw.' }),
        diagram, table),
      graphSection,
      h('section', { 'aria-labelledby': 'steps-h' },
        h('h3', { id: 'steps-h', text: 'Steps' }),
        h('table', { id: 'steps', 'data-testid': 'steps' },
          h('thead', {}, h('tr', {}, ['#', 'step', 'status', 'started', 'finished', 'duration', 'summary', 'error'].map((c) => h('th', { scope: 'col', text: c })))),
          stepsBody),
        stepsNote),
      inputSection,
      compSection);
    // The run's input, read once: every step is given it, and each step's
    // output (in its row) is handed on to the steps after it by name.
    api('GET', '/runs/' + enc(runID) + '/input').then((a) => {
      inputPre.textContent = a && a.input !== null && a.input !== undefined ? pretty(a.input) : 'No input.';
    }, () => { inputPre.textContent = 'The input could not be read.'; });

    function fact(label, value, id) {
      return [h('dt', { text: label }), h('dd', { id }, value)];
    }

    function renderStatus() {
      const st = status;
      const dur = st.duration_ms || (st.finished_at ? new Date(st.finished_at) - new Date(st.started_at) : null);
      facts.replaceChildren(
        ...fact('Status', [badge(st.status, { id: 'run-status', 'data-testid': 'run-status' }),
          st.status === 'requested' ? h('span', { class: 'spinner', id: 'run-spinner', role: 'status', 'aria-label': 'waiting to be admitted', title: 'waiting to be admitted' }) : '',
          ' ', runnerBadge(st)]),
        ...(st.queue_position ? fact('Queue', queueText(st.queue_position), 'run-queue-position') : []),
        ...fact('Agent', h('code', { text: st.agent_slug }), 'run-agent'),
        ...fact('Machine', h('code', { text: (spec && spec.name) || st.machine || 'canonical-run' })),
        ...fact('Trigger', st.trigger || '—'),
        ...fact('Started', fmtTime(st.started_at)),
        ...fact('Finished', fmtTime(st.finished_at), 'run-finished'),
        ...fact('Duration', fmtDuration(dur)),
        ...fact('Current step', (inProgress() || {}).name || st.current_step || '—', 'run-current-step'),
        ...fact('Steps', [h('progress', { id: 'run-progress-bar', max: st.steps_total || 1, value: Math.min(st.steps_completed || 0, st.steps_total || 0),
          'aria-label': 'steps completed' }), ' ', h('span', { id: 'run-progress', text: `${st.steps_completed || 0} / ${st.steps_total || 0}` })]),
        ...(st.proposals_created && st.proposals_created.length ? fact('Proposals', proposalLinks(st.proposals_created), 'run-proposals') : []),
        ...(st.cancel_requested ? fact('Cancel', 'requested' + (st.cancel_reason ? ': ' + st.cancel_reason : '')) : []),
        ...(st.approval ? fact('Approval', approvalText(st.approval), 'run-approval') : []),
        ...(st.external ? fact(st.external.received_at ? 'External event' : 'Waiting for', externalText(st.external), 'run-external') : []),
        ...(st.resume_count ? fact('Resumed', st.resume_count + ' time(s)') : []),
        ...fact('Error', st.error ? h('span', { class: 'error', text: st.error }) : '—', 'run-error'),
      );
      document.title = `${st.status} · ${runID} · Conveyor`;
      // Buttons follow the machine: a move the current state has, any actor.
      // The actor is deliberately not checked here: the Worker decides, and
      // its 403 is shown as it is.
      const from = spec ? spec.transitions.filter((t) => t.from === st.status).map((t) => t.event) : null;
      const can = (events) => !from || events.some((e) => from.includes(e));
      // A machine without a cancel move (the canonical one) never offers
      // it: the button is hidden and the note says why, rather than a
      // red button that is always disabled.
      const cancellable = !spec || spec.transitions.some((t) => t.event === 'cancel' || t.event === 'request_cancel');
      buttons.cancel.hidden = !cancellable;
      cancelNote.hidden = cancellable;
      cancelNote.textContent = cancellable ? '' : `Runs of the ${(spec && spec.name) || 'canonical-run'} machine cannot be cancelled: it has no cancel move.`;
      setEnabled(buttons.cancel, can(['cancel', 'request_cancel']), 'The run cannot be canceled from ' + st.status);
      setEnabled(buttons.approve, can(['approve']), 'Nothing waits for approval in ' + st.status);
      setEnabled(buttons.reject, can(['reject']), 'Nothing waits for approval in ' + st.status);
    }
    // queueText says a queued run's place: the Worker counts its agent's
    // runs queued before it, oldest first, as its runners pick them.
    function queueText(n) {
      return n === 1 ? 'next to start' : `position ${n} (${n - 1} queued ahead)`;
    }
    // notifyEnd tells the user that the run they watched ended: a system
    // notification when the page may show one, else a notice on the page.
    function notifyEnd(st) {
      const text = `Run ${runID} ${st.status}.`;
      if ('Notification' in window && Notification.permission === 'granted') {
        try { new Notification('Conveyor', { body: text, tag: runID }); return; } catch (_) { /* fall back to the page */ }
      }
      doneNotice.textContent = text;
      doneNotice.dataset.status = st.status;
      doneNotice.hidden = false;
    }
    // approvalText is an approval gate's line: the action, the decision,
    // who decided and why, and the payload handed to the next steps.
    function approvalText(a) {
      return [a.action, a.decision || 'waiting', a.decided_by && 'by ' + a.decided_by, a.reason && '"' + a.reason + '"',
        a.payload_bytes && `payload ${a.payload_bytes} B (sha256 ${a.payload_sha256.slice(0, 12)}…)`].filter(Boolean).join(' · ');
    }
    // externalText is an external wait's line, and once the event came,
    // its id, source and payload.
    function externalText(x) {
      if (!x.received_at) return (x.event_type || 'an external event') + (x.deadline ? ' until ' + fmtTime(x.deadline) : '');
      return [x.event_type, 'received ' + fmtTime(x.received_at), x.event_id && 'id ' + x.event_id, x.source && 'from ' + x.source,
        x.payload_bytes && `payload ${x.payload_bytes} B (sha256 ${x.payload_sha256.slice(0, 12)}…)`].filter(Boolean).join(' · ');
    }
    function setEnabled(btn, on, why) {
      btn.disabled = !on;
      btn.title = on ? '' : why;
    }

    // A step under a millisecond has no duration_ms (omitted when zero):
    // its times still tell it.
    function stepDuration(r) {
      if (r.duration_ms) return r.duration_ms;
      if (r.started_at && r.finished_at) return new Date(r.finished_at) - new Date(r.started_at);
      return null;
    }

    // inProgress is the step the run is executing, or null: a run under
    // a runner's lease that has steps left is in step steps_completed+1
    // (current_step names it once a step was counted; during step 1 the
    // agent's list does). It started when its start marker says (a step
    // that is not idempotent has one), else when the step before ended,
    // else, for step 1 without a marker, no later than the run started.
    function inProgress() {
      const st = status;
      if (agentAfter) return null; // a graph's steps run side by side: their files say which
      if (!st || !st.lease || isTerminal(spec, st.status) || (st.steps_completed || 0) >= (st.steps_total || 0)) return null;
      const n = (st.steps_completed || 0) + 1;
      const marker = steps.find((r) => r.step_number === n);
      if (marker && ['completed', 'failed', 'skipped'].includes(marker.status)) return null;
      const prev = steps.find((r) => r.step_number === n - 1);
      const name = (marker && marker.step_name) || (n > 1 && st.current_step) || agentSteps[n - 1] || st.current_step || '';
      const [since, from] = marker && marker.started_at ? [marker.started_at, 'its start']
        : prev && prev.finished_at ? [prev.finished_at, 'the end of step ' + (n - 1)] : [st.started_at, 'the run\'s start'];
      return { n, name, since, from };
    }

    // renderSteps lists every step the agent declares (the Worker lists
    // the pending ones too), the one executing highlighted in its place.
    function renderSteps() {
      const cur = inProgress();
      const current = !cur && status && status.lease && !isTerminal(spec, status.status) ? status.current_step : null;
      const row = (r) => h('tr', { 'data-step': r.step_name, 'data-testid': 'step-row', 'data-status': r.status,
        class: r.status === 'running' && r.step_name === current ? 'current' : null },
        h('td', { class: 'num', text: r.step_number }),
        h('td', {}, h('code', { text: r.step_name })),
        h('td', {}, badge(r.status)),
        h('td', {}, fmtTime(r.started_at)),
        h('td', {}, fmtTime(r.finished_at)),
        h('td', { class: 'num', text: fmtDuration(stepDuration(r)) }),
        h('td', {}, r.output_summary || '', r.output !== undefined && r.output !== null
          ? h('details', { 'data-testid': 'step-output' }, h('summary', { text: 'output' }), h('pre', { class: 'json', text: pretty(r.output) })) : null),
        h('td', { class: 'error', text: r.error || '' }));
      const running = () => h('tr', { 'data-step': cur.name, 'data-testid': 'step-row', 'data-status': 'running', class: 'in-progress current' },
        h('td', { class: 'num', text: cur.n }),
        h('td', {}, h('code', { text: cur.name || '?' })),
        h('td', {}, badge('running')),
        h('td', {}, fmtTime(cur.since)),
        h('td', {}),
        h('td', { class: 'num', id: 'step-elapsed', 'data-since': cur.since, title: 'elapsed since ' + cur.from }),
        h('td', { class: 'muted', text: 'in progress' }),
        h('td', {}));
      const rows = steps.map((r) => (cur && r.step_number === cur.n ? running() : row(r)));
      if (cur && !steps.some((r) => r.step_number === cur.n)) rows.push(running());
      stepsBody.replaceChildren(...rows);
      renderGraph();
      tick();
      stepsNote.textContent = rows.length ? '' : 'No step has started yet.';
    }
    // renderGraph draws a graph agent's steps and the path its run took.
    function renderGraph() {
      graphSection.hidden = !agentAfter;
      if (!agentAfter || !status) return;
      const current = status.lease && !isTerminal(spec, status.status) ? status.current_step : null;
      graphBox.replaceChildren(drawStepGraph(agentSteps, agentAfter, steps, current));
    }
    function renderCompensation() {
      const st = status;
      const log = st.compensation_log || [];
      compSection.hidden = !log.length && st.status !== 'compensating';
      compBody.replaceChildren(...log.map((e) => h('tr', { 'data-step': e.step, 'data-testid': 'compensation-row', 'data-outcome': e.outcome },
        h('td', {}, h('code', { text: e.step })),
        h('td', { text: e.action }),
        h('td', {}, badge(e.outcome === 'compensated' ? 'completed' : 'failed', { text: e.outcome })),
        h('td', {}, fmtTime(e.started_at)),
        h('td', {}, fmtTime(e.ended_at)),
        h('td', { class: 'num', text: e.attempts || '' }),
        h('td', { class: 'error', text: e.error || '' }))));
      compNote.textContent = st.status === 'compensating' ? 'Undoing the completed steps, the last completed first; the run ends once every one has run.' : '';
    }
    // tick shows the running step's elapsed time, every second while shown.
    let ticker = null;
    function tick() {
      clearTimeout(ticker);
      const el = stepsBody.querySelector('#step-elapsed');
      if (!el || stopped) return;
      el.textContent = fmtDuration(Math.max(0, Math.floor((Date.now() - Date.parse(el.dataset.since)) / 1000) * 1000));
      ticker = setTimeout(tick, 1000);
    }

    function renderMachine() {
      if (!spec) {
        diagram.replaceChildren(h('p', { class: 'muted', text: 'The agent\'s machine is unknown to this Worker.' }));
        return;
      }
      diagram.replaceChildren(drawMachine(spec, path, 'machine', Math.max(0, diagram.clientWidth - 12)));
      if (!table.firstChild) table.append(transitionTable(spec));
    }

    // refresh reads status and steps; calls never overlap, and one asked
    // for while another runs is made once after it.
    let busy = false, again = false, lapseTimer = null;
    async function refresh() {
      if (busy) { again = true; return; }
      busy = true;
      try {
        do {
          again = false;
          const [st, sp] = await Promise.all([
            api('GET', '/runs/' + enc(runID) + '/status'),
            api('GET', '/runs/' + enc(runID) + '/steps'),
          ]);
          if (stopped) return;
          // A read older than what is shown (a slower parallel answer) is dropped.
          const wasLive = status && !ended(status);
          if (!status || !(st.version < status.version)) status = st;
          if (wasLive && ended(status)) notifyEnd(status);
          steps = sp || [];
          path.see(status.status);
          loadErr.textContent = '';
          renderStatus();
          renderSteps();
          renderCompensation();
          renderMachine();
          clearTimeout(lapseTimer);
          const wait = lapseWait([status]);
          lapseTimer = wait === null ? null : setTimeout(() => { if (!stopped) refresh(); }, wait);
        } while (again && !stopped);
        if (isTerminal(spec, status.status) || (!spec && ['completed', 'failed'].includes(status.status))) {
          live.stop('The run ended (' + status.status + '); nothing more to follow.');
        }
      } catch (e) {
        if (!stopped) loadErr.textContent = 'The run could not be read: ' + (e.describe ? e.describe() : e.message);
      } finally {
        busy = false;
      }
    }

    function ended(st) {
      return isTerminal(spec, st.status) || (!spec && ['completed', 'failed'].includes(st.status));
    }

    async function act(label, method, url, body) {
      actionOK.textContent = '';
      actionErr.textContent = '';
      const all = Object.values(buttons);
      const was = all.map((b) => b.disabled);
      all.forEach((b) => { b.disabled = true; });
      try {
        const res = await api(method, url, body);
        actionOK.textContent = label + ': done' + (res && res.status ? ' (' + res.status + ')' : '') + '.';
        if (url.startsWith('/runs/')) refresh();
      } catch (e) {
        actionErr.textContent = label + ' refused: ' + e.describe();
        actionErr.dataset.code = e.code;
        actionErr.dataset.status = String(e.status);
      } finally {
        all.forEach((b, i) => { b.disabled = was[i]; });
        if (status) renderStatus();
      }
    }
    const decision = () => ({ decided_by: auth.token ? 'owner' : auth.actor, reason: reason.value });
    buttons.cancel.addEventListener('click', () => act('Cancel', 'POST', '/runs/' + enc(runID) + '/cancel', { reason: reason.value }));
    buttons.approve.addEventListener('click', () => act('Approve', 'POST', '/runs/' + enc(runID) + '/approve', decision()));
    buttons.reject.addEventListener('click', () => act('Reject', 'POST', '/runs/' + enc(runID) + '/reject', decision()));

    (async () => {
      try {
        status = await api('GET', '/runs/' + enc(runID) + '/status');
      } catch (e) {
        loadErr.textContent = 'The run could not be read: ' + e.describe();
        setLive('idle', '');
        return;
      }
      try {
        const agent = (await loadAgents()).find((a) => a.slug === status.agent_slug);
        spec = agent ? agent.spec : null;
        agentSteps = (agent && agent.steps) || [];
        agentAfter = (agent && agent.after) || null;
      } catch (e) {
        loadErr.textContent = 'The agents could not be read: ' + e.describe();
      }
      if (stopped) return;
      path = new RunPath(spec);
      path.see(status.status);
      live = new Live({
        url: '/events/stream?run=' + enc(runID),
        interval: POLL_RUN_MS,
        onEvent: (type, d) => {
          if (d.runId && d.runId !== runID) return;
          // The event's state is drawn at once, so a state the run passes
          // through between two reads still lights the path.
          if (type === 'run.status.changed' && d.status) { path.see(d.status); renderMachine(); }
          if (type.startsWith('run.')) refresh();
        },
        poll: refresh,
        onOpen: refresh,
      });
      renderStatus();
      renderMachine();
      await refresh();
      if (!stopped && !live.stopped) live.start();
    })();

    const resize = onResize(() => { if (spec) renderMachine(); });
    return { stop() { stopped = true; resize.stop(); clearTimeout(lapseTimer); clearTimeout(ticker); if (live) live.stop(); } };
  }

  // ---- the machines (machines.json: the SDK's specs, served by the page)

  let machinesCache = null;
  async function loadMachines() {
    if (!machinesCache) {
      let res;
      try {
        res = await fetch('machines.json', { cache: 'no-cache' });
      } catch (e) {
        throw new ApiError(0, 'NETWORK', 'the Worker did not answer (' + e.message + ')');
      }
      if (!res.ok) throw new ApiError(res.status, 'HTTP_' + res.status, 'machines.json could not be read');
      machinesCache = await res.json();
    }
    return machinesCache;
  }

  // mayMove tells whether the page's actor may make the move on event
  // from state, by the machine's table. Under a token the page does not
  // know the actor: the button is offered and the Worker decides (its 403
  // is shown as it is).
  function mayMove(spec, from, event) {
    const t = spec && spec.transitions.find((x) => x.from === from && x.event === event);
    return !!t && (!!auth.token || (t.actors || []).includes(auth.actor));
  }

  // diagramWidth is the width a diagram has inside a .diagram box put in
  // el (its padding and border taken off).
  function diagramWidth(el) {
    return Math.max(0, el.clientWidth - 14);
  }

  // onResize calls redraw once a resize of the window has settled (a new
  // width can choose the other orientation); stop ends it.
  function onResize(redraw) {
    let timer = null, width = window.innerWidth;
    const listener = () => {
      clearTimeout(timer);
      timer = setTimeout(() => { if (window.innerWidth !== width) { width = window.innerWidth; redraw(); } }, 150);
    };
    window.addEventListener('resize', listener);
    return { stop() { clearTimeout(timer); window.removeEventListener('resize', listener); } };
  }

  function machinesView(view) {
    view.append(h('h2', { text: 'Machines' }),
      h('p', { class: 'muted', text: 'Every lifecycle the SDK drives, as its tables say: states, moves and who may make them.' }));
    const err = h('div', { class: 'notice error', role: 'alert' });
    const list = h('div', { id: 'machines' });
    view.append(err, list);
    setLive('idle', '');
    let specs = null;
    const draw = () => {
      if (!specs) return;
      const avail = diagramWidth(list);
      list.replaceChildren(...specs.map((spec) => h('section', { class: 'machine', 'data-machine': spec.name },
        h('h3', {}, h('code', { text: spec.name })),
        h('div', { class: 'diagram' }, drawMachine(spec, null, 'machine-' + spec.name, avail)),
        transitionTable(spec))));
    };
    const resize = onResize(draw);
    loadMachines().then((s) => { specs = s; draw(); },
      (e) => { err.textContent = 'The machines could not be read: ' + e.describe(); });
    return { stop() { resize.stop(); } };
  }

  // ---- jobs: counts by state per type and agent, a filtered list, actions

  const JOBS_SHOWN = 25;
  // The counts (GET /stats/jobs/counts) are the Worker's: the jobs in
  // flight read where they are, the rest from the audit log's rollups, so
  // a read costs the same however many jobs finished, and the view
  // recounts with every read of the list (every burst of job events).
  // The job moves an operator makes over the API: the button shows where
  // the job's machine (its record's machine field: the spec's "job" for
  // the NLM types and records without the field, "general-job" for the
  // user's types) has the move from the job's state for the page's actor.
  // Neither machine retries on an operator's word (a failed attempt is
  // retried by the queue); requeue is the operator's retry. Only the
  // general machine has cancel: a RUNNING job's is its worker's move, which
  // whoever may cancel a waiting job asks for.
  // is retried by the queue); requeue is the operator's retry.
  // A bulk action (POST /jobs/requeue, POST /jobs/cancel) moves at most
  // BULK_PER_CALL jobs a call (the Worker's bound); the page calls on until
  // the set is done, at most BULK_CALLS_MAX times (10,000 jobs), and says
  // when more remain. Each is offered for a filter on a state its machine
  // moves from, to an actor the machine gives the move.
  const BULK_ACTIONS = [
    { event: 'requeue', machine: 'job', label: 'Requeue', doing: 'requeue', done: 'Requeued',
      path: '/jobs/requeue', says: 'Each starts over with fresh attempts.' },
    { event: 'cancel', machine: 'general-job', label: 'Cancel', doing: 'cancel', done: 'Cancelled',
      path: '/jobs/cancel', says: 'Waiting jobs end CANCELLED at once, running ones when their worker reads the cancel; jobs of the NLM types cannot be cancelled.' },
  ];
  const BULK_PER_CALL = 100;
  const QUEUES_POLL_MS = 5000;
  const BULK_CALLS_MAX = 100;
  const JOB_ACTIONS = [
    { event: 'requeue', label: 'Requeue', path: (id) => '/jobs/' + enc(id) + '/requeue' },
    { event: 'cancel', label: 'Cancel', path: (id) => '/jobs/' + enc(id) + '/cancel' },
  ];
  const SPEC_JOB_MACHINE = 'job';
  const jobMachineName = (j) => j.machine || SPEC_JOB_MACHINE;
  // offeredMoves lists the JOB_ACTIONS spec (j's machine) has from j's
  // state for the page's actor; a RUNNING job's cancel is asked for by
  // whoever may cancel a waiting one, once.
  function offeredMoves(spec, j) {
    return JOB_ACTIONS.filter((a) => {
      if (a.event === 'cancel' && j.status === 'RUNNING') {
        return !j.cancel_requested_at && !!spec && spec.transitions.some((x) => x.from === 'RUNNING' && x.event === 'cancel') &&
          mayMove(spec, 'QUEUED', 'cancel');
      }
      return mayMove(spec, j.status, a.event);
    });
  }
  // jobSpecs reads the two job machines, by name.
  async function jobSpecs() {
    const out = {};
    for (const m of await loadMachines()) if (m.name === SPEC_JOB_MACHINE || m.name === 'general-job') out[m.name] = m;
    return out;
  }

  // agentName shows a job's agent_slug: a job enqueued without an agent
  // runs in its type's lane, whose name is written there ("_type.BRIEF",
  // docs/spec.md#job-record).
  const TYPE_LANE = '_type.';
  const JOB_DEFAULT_PRIORITY = 5;
  function agentName(slug) {
    if (!slug) return '—';
    return slug.startsWith(TYPE_LANE) ? 'none (' + slug.slice(TYPE_LANE.length) + ' lane)' : slug;
  }

  // ---- the last hour, minute by minute (GET /stats/jobs/activity): the
  // jobs completed, the attempts failed and the jobs cancelled, and the run
  // time and wait of the attempts that ended, drawn as inline SVG (no chart
  // library: the page vendors dagre alone). Bars for counts, lines with a
  // dot a minute for latencies (a gap where no attempt ended).
  const CHARTS_POLL_MS = 30000; // minutes pass without events too
  const CHART_HEIGHT = 130;
  const CHART_PAD = { left: 46, right: 8, top: 10, bottom: 20 };
  const CHARTS = [
    { id: 'throughput', title: 'Jobs completed', unit: '/min', bars: true,
      series: [{ key: 'completed', cls: 'ok', label: 'completed' }] },
    { id: 'failures', title: 'Attempts failed, jobs cancelled', unit: '/min', bars: true,
      series: [{ key: 'failed', cls: 'bad', label: 'failed' }, { key: 'cancelled', cls: 'cancelled', label: 'cancelled' }] },
    { id: 'latency', title: 'Run time and wait', unit: 'ms', bars: false,
      series: [{ key: 'run_p50_ms', cls: 'p50', label: 'run p50' }, { key: 'run_p95_ms', cls: 'p95', label: 'run p95' },
        { key: 'wait_p95_ms', cls: 'wait', label: 'wait p95' }] },
  ];
  function activityCharts() {
    const note = h('p', { class: 'muted', id: 'charts-note' });
    const figs = CHARTS.map((c) => h('figure', { class: 'chart', 'data-chart': c.id },
      h('figcaption', {}, h('span', { class: 'title', text: c.title }),
        ...c.series.map((x) => h('span', { class: 'key ' + x.cls, 'data-key': x.key, text: x.label })))));
    const el = h('section', { 'aria-labelledby': 'charts-h', id: 'charts' },
      h('h3', { id: 'charts-h', text: 'Last hour' }), h('div', { class: 'charts' }, figs), note);
    let last = null;
    function draw() {
      if (!last) return;
      CHARTS.forEach((c, i) => {
        const old = figs[i].querySelector('svg');
        const svg = drawChart(c, last.minutes || [], Math.max(220, figs[i].clientWidth - 2));
        if (old) old.replaceWith(svg); else figs[i].append(svg);
      });
      const n = (last.minutes || []).reduce((x, m) => x + m.completed + m.failed + m.cancelled, 0);
      note.textContent = (n ? '' : 'Nothing ended in the last hour. ') +
        (last.partial ? 'Partial: the Worker read its bound first. ' : '') +
        'From the audit log, a job counted when it comes to rest; latency percentiles are bucket bounds.';
      note.dataset.partial = String(!!last.partial);
    }
    async function load() {
      try {
        last = await api('GET', '/stats/jobs/activity');
        draw();
      } catch (e) {
        note.textContent = 'The last hour could not be read: ' + e.describe();
      }
    }
    return { el, load, draw };
  }
  // drawChart draws chart c of minutes at width w: y from 0 to the
  // largest value (a stack of bars counts whole), x the 60 minutes.
  function drawChart(c, minutes, w) {
    const P = CHART_PAD, ph = CHART_HEIGHT - P.top - P.bottom, pw = w - P.left - P.right;
    const n = Math.max(1, minutes.length), slot = pw / n;
    const val = (m, key) => (m[key] === undefined || m[key] === null ? null : m[key]);
    let top = 0;
    for (const m of minutes) {
      top = Math.max(top, c.bars ? c.series.reduce((x, sr) => x + (val(m, sr.key) || 0), 0)
        : Math.max(0, ...c.series.map((sr) => val(m, sr.key) || 0)));
    }
    const max = top > 0 ? niceCeil(top) : 1;
    const y = (v) => P.top + ph - (v / max) * ph;
    const svg = s('svg', { width: w, height: CHART_HEIGHT, viewBox: `0 0 ${w} ${CHART_HEIGHT}`, role: 'img',
      'aria-label': `${c.title}, last 60 minutes, up to ${max} ${c.unit}`, 'data-chart': c.id, 'data-max': max });
    svg.append(
      s('line', { class: 'axis', x1: P.left, x2: w - P.right, y1: y(0), y2: y(0) }),
      s('line', { class: 'grid', x1: P.left, x2: w - P.right, y1: y(max), y2: y(max) }),
      s('text', { class: 'tick', x: P.left - 4, y: y(max) + 4, 'text-anchor': 'end', text: fmtTick(max, c.unit) }),
      s('text', { class: 'tick', x: P.left - 4, y: y(0) + 4, 'text-anchor': 'end', text: '0' }),
      s('text', { class: 'tick', x: P.left, y: CHART_HEIGHT - 4, 'text-anchor': 'start', text: '−60 min' }),
      s('text', { class: 'tick', x: P.left + pw / 2, y: CHART_HEIGHT - 4, 'text-anchor': 'middle', text: '−30' }),
      s('text', { class: 'tick', x: w - P.right, y: CHART_HEIGHT - 4, 'text-anchor': 'end', text: 'now' }));
    minutes.forEach((m, i) => {
      const x = P.left + i * slot;
      if (c.bars) {
        let base = 0;
        for (const sr of c.series) {
          const v = val(m, sr.key) || 0;
          if (!v) continue;
          svg.append(s('rect', { class: 'bar ' + sr.cls, x: x + 0.5, width: Math.max(1, slot - 1), y: y(base + v), height: y(base) - y(base + v),
            'data-minute': i, 'data-key': sr.key, 'data-value': v }, s('title', { text: `${fmtMinute(m.at)}: ${v} ${sr.label}` })));
          base += v;
        }
        return;
      }
      for (const sr of c.series) {
        const v = val(m, sr.key);
        if (v === null) continue;
        svg.append(s('circle', { class: 'point ' + sr.cls, cx: x + slot / 2, cy: y(v), r: 2.5, 'data-minute': i, 'data-key': sr.key, 'data-value': v },
          s('title', { text: `${fmtMinute(m.at)}: ${sr.label} ${fmtTick(v, c.unit)}` })));
      }
    });
    if (!c.bars) {
      for (const sr of c.series) {
        let d = '', pen = 'M';
        minutes.forEach((m, i) => {
          const v = val(m, sr.key);
          if (v === null) { pen = 'M'; return; }
          d += `${pen}${(P.left + i * slot + slot / 2).toFixed(1)},${y(v).toFixed(1)} `;
          pen = 'L';
        });
        if (d) svg.insertBefore(s('path', { class: 'line ' + sr.cls, d: d.trim() }), svg.querySelector('circle'));
      }
    }
    return svg;
  }
  function fmtMinute(iso) {
    const d = new Date(iso);
    return isNaN(d) ? String(iso) : d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  }
  // niceCeil rounds v up to 1, 2 or 5 times a power of ten.
  function niceCeil(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const f of [1, 2, 5, 10]) if (f * p >= v) return f * p;
    return 10 * p;
  }
  function fmtTick(v, unit) {
    if (unit !== 'ms') return String(v);
    return v >= 1000 ? fmtDuration(v) : v + ' ms';
  }

  function jobsView(view, query) {
    let stopped = false;
    const filter = { status: query.get('status') || '', type: query.get('type') || '', agent: query.get('agent') || '' };
    let specs = {}; // the job machines, by name
    const specOf = (j) => specs[jobMachineName(j)] || null;

    const err = h('div', { id: 'jobs-error', class: 'notice error', role: 'alert' });
    const ok = h('div', { id: 'jobs-result', class: 'notice ok', role: 'status', 'aria-live': 'polite' });
    const quick = h('p', { class: 'quick', id: 'jobs-quick' });
    const countsHead = h('thead', {});
    const countsBody = h('tbody', {});
    const countsNote = h('p', { class: 'muted', id: 'counts-note' });
    const selects = {
      status: h('select', { id: 'jobs-status', 'data-testid': 'jobs-status' }),
      type: h('select', { id: 'jobs-type', 'data-testid': 'jobs-type' }),
      agent: h('select', { id: 'jobs-agent', 'data-testid': 'jobs-agent' }),
    };
    const listBody = h('tbody', { id: 'jobs-body' });
    const listTable = h('table', { id: 'jobs', 'data-testid': 'jobs' },
      h('thead', {}, h('tr', {}, ['job', 'type', 'agent', 'run', 'state', 'priority', 'attempt', 'updated', 'error', ''].map((c) => h('th', { scope: 'col', text: c })))),
      listBody);
    const listNote = h('p', { class: 'muted', id: 'jobs-note' });
    // The queues (GET /queues): each named queue, summed from its lanes,
    // with its pause state and a Pause or Resume button (the Worker lets
    // the admin alone); then each lane with its depth and the jobs of it
    // running, read from the lanes and their locks, never the jobs.
    const namedBody = h('tbody', { id: 'named-queues-body' });
    const namedTable = h('table', { id: 'named-queues', 'data-testid': 'named-queues' },
      h('thead', {}, h('tr', {}, ['queue', 'lanes', 'ready', 'waiting', 'running', 'state', ''].map((c, i) =>
        h('th', { scope: 'col', class: i > 0 && i < 5 ? 'num' : null, text: c })))),
      namedBody);
    const queuesBody = h('tbody', { id: 'queues-body' });
    const queuesNote = h('p', { class: 'muted', id: 'queues-note' });
    const queuesTable = h('table', { id: 'queues', 'data-testid': 'queues' },
      h('thead', {}, h('tr', {}, ['lane', 'queue', 'ready', 'waiting', 'oldest ready', 'running'].map((c, i) =>
        h('th', { scope: 'col', class: i > 1 && i < 5 ? 'num' : null, text: c })))),
      queuesBody);
    // A bulk requeue or cancel of the filter's jobs, asked for and then
    // confirmed.
    const bulkBtns = BULK_ACTIONS.map((a) => h('button', { type: 'button', class: 'secondary', 'data-testid': 'bulk-' + a.event, hidden: '' }));
    const bulkText = h('span', { id: 'bulk-text' });
    const bulkYes = h('button', { type: 'button', class: 'danger', 'data-testid': 'bulk-confirm' });
    let bulkAction = BULK_ACTIONS[0];
    const bulkNo = h('button', { type: 'button', class: 'secondary', 'data-testid': 'bulk-dismiss', text: 'Keep them' });
    const bulkAsk = h('div', { class: 'confirm', id: 'bulk-ask', role: 'alertdialog', 'aria-labelledby': 'bulk-text', hidden: '' },
      bulkText, bulkYes, bulkNo);
    const charts = activityCharts();
    const first = h('button', { type: 'button', class: 'secondary', 'data-testid': 'jobs-first', text: 'First page', hidden: '' });
    const next = h('button', { type: 'button', class: 'secondary', 'data-testid': 'jobs-next', text: 'Next page', hidden: '' });
    view.append(
      h('h2', { text: 'Jobs' }), err, ok, quick, charts.el,
      h('section', { 'aria-labelledby': 'counts-h' },
        h('h3', { id: 'counts-h', text: 'By state, per job type and agent' }),
        h('div', { class: 'scroll' }, h('table', { id: 'job-counts', 'data-testid': 'job-counts' }, countsHead, countsBody)),
        countsNote),
      h('section', { 'aria-labelledby': 'queues-h' },
        h('h3', { id: 'queues-h', text: 'Queues' }),
        h('div', { class: 'scroll' }, namedTable),
        h('div', { class: 'scroll' }, queuesTable), queuesNote),
      h('section', { 'aria-labelledby': 'list-h' },
        h('h3', { id: 'list-h', text: 'Jobs' }),
        h('div', { class: 'controls' },
          h('label', { for: 'jobs-status', text: 'State' }), selects.status,
          h('label', { for: 'jobs-type', text: 'Type' }), selects.type,
          h('label', { for: 'jobs-agent', text: 'Agent' }), selects.agent, ...bulkBtns),
        bulkAsk,
        h('div', { class: 'scroll' }, listTable),
        listNote, h('p', { class: 'pager' }, first, next)));

    function fillSelect(sel, values, value, none, name) {
      const opts = [h('option', { value: '', text: none })];
      for (const v of new Set([...values, value].filter(Boolean))) opts.push(h('option', { value: v, text: name ? name(v) : v }));
      sel.replaceChildren(...opts);
      sel.value = value;
    }
    // The filters live in the hash, so a filtered list can be linked to;
    // replaceState changes it without re-opening the view.
    function setFilter(f) {
      Object.assign(filter, f);
      const q = new URLSearchParams(Object.entries(filter).filter(([, v]) => v));
      history.replaceState(null, '', '#/jobs' + (q.toString() ? '?' + q : ''));
      for (const k of Object.keys(selects)) {
        if (selects[k].value !== filter[k]) fillSelect(selects[k], [...selects[k].options].map((o) => o.value), filter[k], selects[k].options[0].text, k === 'agent' ? agentName : null);
      }
      pages.path = '';
      showBulk();
      loadList();
    }
    for (const [k, sel] of Object.entries(selects)) sel.addEventListener('change', () => setFilter({ [k]: sel.value }));
    const pages = pager(first, next, () => loadList());

    // The counts are one read (GET /stats/jobs/counts): each row is one
    // job type and agent ("—" for jobs whose records are gone).
    async function loadCounts() {
      const seq = ++countSeq;
      const c = await api('GET', '/stats/jobs/counts');
      if (stopped || seq !== countSeq) return;
      const machinesSeen = new Set(), total = c.total || {};
      // A token of every tenant gets a row per tenant: added up by type
      // and agent, as the list the counts link to shows every tenant's.
      const merged = new Map();
      for (const r of c.rows || []) {
        machinesSeen.add(r.machine || SPEC_JOB_MACHINE);
        const key = r.job_type + '\u0000' + (r.agent_slug || '');
        const m = merged.get(key) || { type: r.job_type, agent: r.agent_slug || '', by: {}, total: 0 };
        for (const [st, k] of Object.entries(r.counts || {})) { m.by[st] = (m.by[st] || 0) + k; m.total += k; }
        merged.set(key, m);
      }
      const rows = [...merged.values()];
      const n = Object.values(total).reduce((x, y) => x + y, 0);
      // The columns are the states of the machines the counted jobs run
      // on, the spec's first: a queue of the user's types alone shows
      // RUNNING, not the NLM pipeline's stages.
      const states = [];
      for (const name of [SPEC_JOB_MACHINE, 'general-job']) {
        if (machinesSeen.has(name) && specs[name]) for (const st of specs[name].states) if (!states.includes(st)) states.push(st);
      }
      if (!states.length) states.push(...Object.keys(total));
      const link = (f, count) => {
        if (!count) return h('span', { class: 'muted', text: '·' });
        const a = h('a', { href: '#/jobs', 'data-count': count, text: count });
        a.addEventListener('click', (e) => { e.preventDefault(); setFilter(f); });
        return a;
      };
      countsHead.replaceChildren(h('tr', {}, h('th', { scope: 'col', text: 'type' }), h('th', { scope: 'col', text: 'agent' }),
        // A zero-width space after each "_" lets a long state name wrap there.
        ...states.map((st) => h('th', { scope: 'col', class: 'num', title: st, text: st.replace(/_/g, '_\u200b') })),
        h('th', { scope: 'col', class: 'num', text: 'total' })));
      const sorted = rows.sort((x, y) => x.type.localeCompare(y.type) || x.agent.localeCompare(y.agent));
      countsBody.replaceChildren(...sorted.map((r) => h('tr', { 'data-type': r.type, 'data-agent': r.agent },
        h('td', { class: 'mono', text: r.type }), h('td', { class: 'mono', text: agentName(r.agent) }),
        ...states.map((st) => h('td', { class: 'num', 'data-state': st }, link({ status: st, type: r.type, agent: r.agent }, r.by[st]))),
        h('td', { class: 'num' }, link({ status: '', type: r.type, agent: r.agent }, r.total)))),
      h('tr', { class: 'total', 'data-type': '' }, h('th', { scope: 'row', text: 'all' }), h('td', {}),
        ...states.map((st) => h('td', { class: 'num', 'data-state': st }, link({ status: st, type: '', agent: '' }, total[st]))),
        h('td', { class: 'num', text: n })));
      countsNote.replaceChildren((n ? '' : 'No jobs. ') +
        (c.partial ? 'Partial: the Worker read its bound first and goes on at the next read. ' : '') + 'Counted at ',
        fmtTime(c.as_of), ' from the jobs in flight and the audit log; recounted with every read of the list.');
      countsNote.dataset.partial = String(!!c.partial);
      // The states an operator looks for first.
      quick.replaceChildren(...['RETRY_BACKOFF', 'FAILED', 'DEAD'].map((st) => {
        const b = h('button', { type: 'button', class: 'secondary', 'data-testid': 'quick-' + st, 'data-count': total[st] || 0,
          text: `${st === 'RETRY_BACKOFF' ? 'Retrying' : st === 'FAILED' ? 'Failed' : 'Dead'}: ${total[st] || 0}` });
        b.addEventListener('click', () => setFilter({ status: st, type: '', agent: '' }));
        return b;
      }));
      fillSelect(selects.status, states, filter.status, 'every state');
      fillSelect(selects.type, sorted.map((r) => r.type).sort(), filter.type, 'every type');
      fillSelect(selects.agent, sorted.map((r) => r.agent).filter(Boolean).sort(), filter.agent, 'every agent', agentName);
    }

    // A bulk action is offered for a filter on a state its machine moves
    // from on its event (requeue: FAILED, DEAD, the same moves on both
    // machines; cancel: the general machine's QUEUED, RETRY_BACKOFF and
    // RUNNING), to an actor the machine gives the move (a RUNNING job's
    // cancel to whoever may cancel a QUEUED one).
    function bulkOffered(a) {
      const spec = specs[a.machine] || null;
      if (!spec || !filter.status) return false;
      const from = spec.transitions.filter((t) => t.event === a.event).map((t) => t.from);
      const as = a.event === 'cancel' && filter.status === 'RUNNING' ? 'QUEUED' : filter.status;
      return from.includes(filter.status) && mayMove(spec, as, a.event);
    }
    function showBulk() {
      let shown = false;
      BULK_ACTIONS.forEach((a, i) => {
        const on = bulkOffered(a);
        bulkBtns[i].hidden = !on;
        bulkBtns[i].textContent = `${a.label} every ${filter.status} job${filterWords(filter)}…`;
        shown = shown || (on && a === bulkAction);
      });
      if (!shown) bulkAsk.hidden = true;
    }
    const filterWords = (f) => (f.type ? ' of type ' + f.type : '') + (f.agent ? ' of agent ' + agentName(f.agent) : '');
    BULK_ACTIONS.forEach((a, i) => bulkBtns[i].addEventListener('click', () => {
      bulkAction = a;
      bulkText.textContent = `${a.label} every ${filter.status} job${filterWords(filter)}? ${a.says} ` +
        `The Worker acts on at most ${BULK_PER_CALL} a call; the page calls until all are done.`;
      bulkYes.textContent = a.label + ' them';
      bulkYes.dataset.action = a.event;
      bulkAsk.hidden = false;
      bulkYes.focus();
    }));
    bulkNo.addEventListener('click', () => { bulkAsk.hidden = true; bulkBtns[BULK_ACTIONS.indexOf(bulkAction)].focus(); });
    bulkYes.addEventListener('click', () => bulkAct(bulkAction));
    async function bulkAct(a) {
      bulkYes.disabled = bulkNo.disabled = true;
      ok.textContent = err.textContent = '';
      const f = Object.assign({}, filter);
      const body = {};
      for (const k of ['status', 'type', 'agent']) if (f[k]) body[k] = f[k];
      let done = 0, failed = [], more = false;
      try {
        for (let calls = 0; ; calls++) {
          const res = await api('POST', a.path, body);
          done += res.count;
          failed = failed.concat(res.failed || []);
          if (!res.next) break;
          if (calls + 1 >= BULK_CALLS_MAX) { more = true; break; }
          body.cursor = res.next;
        }
        ok.dataset.count = String(done);
        ok.textContent = `${a.done} ${done} ${f.status} job${done === 1 ? '' : 's'}${filterWords(f)}` +
          (failed.length ? `; ${failed.length} not ${a.done.toLowerCase()} (below).` : '.') + (more ? ` More remain: ${a.doing} again.` : '');
        if (failed.length) {
          err.replaceChildren(`Not ${a.done.toLowerCase()}: `, ...failed.slice(0, 20).flatMap((x, i) => [i ? '; ' : '',
            h('a', { href: '#/jobs/' + enc(x.job_id), class: 'mono', text: x.job_id }), ` ${x.code}: ${x.message}`]));
        }
      } catch (e) {
        err.textContent = `${a.label} of the ${f.status} jobs stopped after ${done}: ` + e.describe();
        err.dataset.code = e.code;
        err.dataset.status = String(e.status);
      }
      bulkYes.disabled = bulkNo.disabled = false;
      bulkAsk.hidden = true;
      if (!stopped) refresh(); // the counts follow the move
    }

    async function loadQueues() {
      let lanes;
      try {
        lanes = await api('GET', '/queues');
      } catch (e) {
        if (stopped) return;
        queuesNote.textContent = 'The queues could not be read: ' + e.describe();
        queuesNote.className = 'error';
        return;
      }
      if (stopped) return;
      const lane = (agent) => {
        const a = h('a', { href: '#/jobs?agent=' + enc(agent), class: 'mono', text: agentName(agent) });
        a.addEventListener('click', (e) => { e.preventDefault(); setFilter({ status: '', type: '', agent }); });
        return a;
      };
      namedBody.replaceChildren(...namedQueues(lanes || []).map(queueRow));
      queuesBody.replaceChildren(...(lanes || []).map((l) => h('tr', { 'data-lane': l.agent, 'data-running': String(!!l.running) },
        h('td', {}, lane(l.agent)),
        h('td', { class: 'mono', 'data-col': 'queue', text: l.queue || 'default' }),
        h('td', { class: 'num', 'data-col': 'ready', text: l.ready }),
        h('td', { class: 'num', 'data-col': 'waiting', text: l.waiting }),
        h('td', { class: 'num', text: l.ready ? fmtDuration(l.oldest_ready_ms) : '—' }),
        h('td', { class: l.running ? 'running' : 'muted', 'data-col': 'running' },
          l.running ? [(l.running_jobs > 1 ? l.running_jobs + ' running, first ' : 'running '),
            h('a', { href: '#/jobs/' + enc(l.job_id), class: 'mono id', text: l.job_id })] : 'idle'))));
      queuesNote.className = 'muted';
      queuesNote.textContent = lanes && lanes.length ? '' : 'No lanes: no job was ever enqueued.';
    }

    // namedQueues sums the lanes by queue, in name order.
    function namedQueues(lanes) {
      const by = new Map();
      for (const l of lanes) {
        const name = l.queue || 'default';
        const q = by.get(name) || { name, lanes: 0, ready: 0, waiting: 0, running: 0, paused: false };
        q.lanes++;
        q.ready += l.ready;
        q.waiting += l.waiting;
        q.running += l.running_jobs || (l.running ? 1 : 0);
        q.paused = q.paused || !!l.paused;
        by.set(name, q);
      }
      return [...by.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    }
    // A queue's pause is the admin's (the routes' actors, as a requeue's);
    // under a token the page does not know the actor: the button is
    // offered and the Worker decides.
    const mayPause = () => !!auth.token || auth.actor === 'admin';
    function queueRow(q) {
      const verb = q.paused ? 'resume' : 'pause';
      const btn = h('button', { type: 'button', class: q.paused ? 'secondary' : 'danger', 'data-testid': verb + '-queue',
        'data-queue': q.name, text: q.paused ? 'Resume' : 'Pause' });
      btn.hidden = !mayPause();
      btn.addEventListener('click', () => pauseQueue(q.name, verb, btn));
      return h('tr', { 'data-queue': q.name, 'data-paused': String(q.paused) },
        h('td', { class: 'mono', text: q.name }),
        h('td', { class: 'num', text: q.lanes }),
        h('td', { class: 'num', 'data-col': 'ready', text: q.ready }),
        h('td', { class: 'num', 'data-col': 'waiting', text: q.waiting }),
        h('td', { class: 'num', 'data-col': 'running', text: q.running }),
        h('td', { class: q.paused ? 'paused' : 'muted', 'data-col': 'state',
          text: q.paused ? 'paused: nothing starts' : 'active' }),
        h('td', {}, btn));
    }
    async function pauseQueue(name, verb, btn) {
      ok.textContent = '';
      err.textContent = '';
      btn.disabled = true;
      try {
        await api('POST', '/queues/' + enc(name) + '/' + verb);
        ok.textContent = `Queue ${name}: ${verb}d` + (verb === 'pause' ? ' (running jobs finish).' : '.');
        loadQueues();
      } catch (e) {
        err.textContent = `${verb === 'pause' ? 'Pause' : 'Resume'} of queue ${name} refused: ` + e.describe();
        err.dataset.code = e.code;
        err.dataset.status = String(e.status);
        btn.disabled = false;
      }
    }

    const jobActions = (j) => offeredMoves(specOf(j), j);
    function jobRow(j) {
      const actions = jobActions(j).map((a) => {
        const b = h('button', { type: 'button', class: 'secondary', 'data-testid': 'job-' + a.event, 'data-job': j.job_id, text: a.label });
        b.addEventListener('click', () => act(a, j, b));
        return b;
      });
      const error = j.error || j.error_code ? [
        j.error_code ? h('code', { class: 'code', 'data-testid': 'error-code', text: j.error_code }) : null,
        j.failed_step ? h('span', { class: 'muted', text: ' in ' + j.failed_step }) : null,
        j.error ? h('div', { class: 'error', 'data-testid': 'job-error', text: j.error }) : null] : '';
      // data-label names each cell's column for the narrow layout, where
      // a row is a card and its cells are lines (app.css).
      return h('tr', { 'data-job': j.job_id, 'data-status': j.status },
        h('td', { class: 'mono', 'data-label': 'job' }, h('a', { href: '#/jobs/' + enc(j.job_id), class: 'id', 'data-testid': 'job-link', text: j.job_id })),
        h('td', { class: 'mono', 'data-label': 'type', text: j.job_type }),
        h('td', { class: 'mono', 'data-label': 'agent', text: agentName(j.agent_slug) }),
        h('td', { 'data-label': 'run' }, j.run_id ? h('a', { href: '#/runs/' + enc(j.run_id), class: 'mono', text: j.run_id }) : '—'),
        h('td', { 'data-label': 'state' }, badge(j.status), j.status === 'RETRY_BACKOFF' && j.next_attempt_at ? h('div', { class: 'muted' }, 'next ', fmtTime(j.next_attempt_at)) : null,
          j.status === 'RUNNING' && j.cancel_requested_at ? h('div', { class: 'muted', 'data-testid': 'cancel-asked' }, 'cancel asked ', fmtTime(j.cancel_requested_at)) : null,
          // A job enqueued to run later is QUEUED until then, not started before.
          j.status === 'QUEUED' && j.scheduled_at ? h('div', { class: 'muted', 'data-testid': 'job-scheduled' }, 'not before ', fmtTime(j.scheduled_at)) : null),
        // A job stored without a priority has the default, 5 (docs/spec.md#delayed-jobs-and-priorities).
        h('td', { class: 'num', 'data-label': 'priority', 'data-testid': 'job-priority', text: String(j.priority || JOB_DEFAULT_PRIORITY) }),
        h('td', { class: 'num', 'data-label': 'attempt', text: `${j.attempt || 0} / ${j.max_attempts || 0}` }),
        h('td', { 'data-label': 'updated' }, fmtTime(j.updated_at)),
        h('td', { class: 'error-cell', 'data-label': 'error' }, error),
        h('td', { 'data-label': actions.length ? 'actions' : null }, actions));
    }

    // A read overtaken by a later one (a Next click while a refresh reads
    // the page before) is dropped when it answers.
    let listSeq = 0, countSeq = 0;
    let shownJobs = new Map(); // job id → the row shown (keepRows)
    const loadList = () => reading(listTable, readList);
    async function readList() {
      const seq = ++listSeq;
      const keep = (j) => (!filter.status || j.status === filter.status) && (!filter.type || j.job_type === filter.type) &&
        (!filter.agent || j.agent_slug === filter.agent);
      let path = pages.path;
      if (!path) {
        path = '/jobs?limit=' + JOBS_SHOWN;
        for (const k of ['status', 'type', 'agent']) if (filter[k]) path += '&' + k + '=' + enc(filter[k]);
      }
      try {
        // A rare filter may come back short with a next page: pages are
        // read on until the list is full, a few at most.
        let page = await listPage(path, JOBS_SHOWN, keep, newestFirst('updated_at'));
        let items = page.items;
        for (let i = 0; i < 8 && items.length < JOBS_SHOWN && page.next && !page.next.startsWith('local:'); i++) {
          page = await listPage(page.next, JOBS_SHOWN, keep, newestFirst('updated_at'));
          items = items.concat(page.items);
        }
        if (stopped || seq !== listSeq) return;
        pages.shown(page.next);
        shownJobs = keepRows(listBody, shownJobs, items, (j) => j.job_id,
          (j) => JSON.stringify([j, jobActions(j).map((a) => a.event)]), jobRow);
        listNote.textContent = items.length ? '' : pages.path ? 'No more jobs.' : 'No jobs match.';
        listNote.className = 'muted';
      } catch (e) {
        if (stopped || seq !== listSeq) return;
        listNote.textContent = 'Jobs could not be read: ' + e.describe();
        listNote.className = 'error';
      }
    }

    async function act(a, j, btn) {
      ok.textContent = '';
      err.textContent = '';
      btn.disabled = true;
      try {
        const res = await api('POST', a.path(j.job_id));
        ok.textContent = `${a.label} ${j.job_id}: done` + (res && res.status ? ' (' + res.status + ')' : '') + '.';
        refresh();
      } catch (e) {
        err.textContent = `${a.label} ${j.job_id} refused: ` + e.describe();
        err.dataset.code = e.code;
        err.dataset.status = String(e.status);
        btn.disabled = false;
      }
    }

    async function refresh() {
      try {
        await loadCounts();
        if (!stopped) err.textContent = '';
      } catch (e) {
        if (!stopped) err.textContent = 'Jobs could not be counted: ' + e.describe();
      }
      if (!stopped) await Promise.all([loadList(), loadQueues(), charts.load()]);
    }

    // A job's move is an event of the feed: a burst of them costs one read.
    const reread = burst(() => { if (!stopped) refresh(); }, 300);
    const live = new Live({
      url: '/events/stream',
      interval: POLL_LIST_MS,
      onEvent: (type) => { if (type.startsWith('job.')) reread.kick(); },
      poll: () => refresh(),
      onOpen: () => refresh(),
    });
    // A job picked up makes no event until it comes to rest (its audit is
    // written then), so the queues are also read every QUEUES_POLL_MS:
    // the lanes and their locks, cheap whatever the jobs.
    const queuesTimer = setInterval(() => { if (!stopped && !document.hidden) loadQueues(); }, QUEUES_POLL_MS);
    const chartsTimer = setInterval(() => { if (!stopped && !document.hidden) charts.load(); }, CHARTS_POLL_MS);
    const resize = onResize(() => charts.draw());
    (async () => {
      try {
        specs = await jobSpecs();
      } catch (e) {
        err.textContent = 'The job machine could not be read: ' + e.describe();
      }
      showBulk();
      await refresh();
      if (!stopped) live.start();
    })();
    return { stop() { stopped = true; reread.cancel(); clearInterval(queuesTimer); clearInterval(chartsTimer); resize.stop(); live.stop(); } };
  }

  // ---- one job: its arguments, its result, its attempts and its moves

  // copyButton copies text to the clipboard; where the page may not use it
  // (an origin that is not secure) it selects el's text for Ctrl+C.
  function copyButton(text, el) {
    const b = h('button', { type: 'button', class: 'secondary', 'data-testid': 'copy-id', title: 'Copy the id', text: 'Copy' });
    b.addEventListener('click', async () => {
      try {
        await navigator.clipboard.writeText(text);
        b.textContent = 'Copied';
      } catch (_) {
        const r = document.createRange();
        r.selectNodeContents(el);
        getSelection().removeAllRanges();
        getSelection().addRange(r);
        b.textContent = 'Selected: press Ctrl+C';
      }
      setTimeout(() => { b.textContent = 'Copy'; }, 2500);
    });
    return b;
  }

  const pretty = (v) => JSON.stringify(v, null, 2);
  // fmtClock shows a move's time to the millisecond (a job's moves are
  // often within one second), the whole timestamp in its title.
  function fmtClock(iso) {
    const d = new Date(iso);
    if (!iso || isNaN(d)) return fmtTime(iso);
    const p = (n, w) => String(n).padStart(w, '0');
    return h('time', { datetime: iso, title: d.toLocaleString() + ' (' + iso + ')',
      text: `${d.toLocaleDateString()} ${p(d.getHours(), 2)}:${p(d.getMinutes(), 2)}:${p(d.getSeconds(), 2)}.${p(d.getMilliseconds(), 3)}` });
  }

  function jobView(view, jobID) {
    let stopped = false, specs = {}, job = null;
    const idEl = h('code', { class: 'id', id: 'job-id', 'data-testid': 'job-id', text: jobID });
    const err = h('div', { id: 'job-error', class: 'notice error', role: 'alert' });
    const ok = h('div', { id: 'job-result-note', class: 'notice ok', role: 'status', 'aria-live': 'polite' });
    const facts = h('dl', { class: 'facts', id: 'job-facts' });
    const actions = h('div', { class: 'controls', id: 'job-actions' });
    const payload = h('pre', { class: 'json', id: 'job-payload', 'data-testid': 'job-payload' });
    const result = h('pre', { class: 'json', id: 'job-output', 'data-testid': 'job-output' });
    const attemptsBody = h('tbody', { id: 'job-attempts-body' });
    const timeline = h('ol', { class: 'timeline', id: 'job-timeline', 'data-testid': 'job-timeline' });
    const timelineNote = h('p', { class: 'muted', id: 'job-timeline-note' });
    const section = (id, title, ...body) => h('section', { 'aria-labelledby': id }, h('h3', { id, text: title }), ...body);
    view.append(
      h('p', {}, h('a', { href: '#/jobs', text: '← Jobs' })),
      h('h2', {}, 'Job ', idEl, ' ', copyButton(jobID, idEl)), err, ok, facts, actions,
      section('payload-h', 'Arguments (payload)', payload),
      section('output-h', 'Result', result),
      section('attempts-h', 'Attempts', h('div', { class: 'scroll' }, h('table', { id: 'job-attempts', 'data-testid': 'job-attempts' },
        h('thead', {}, h('tr', {}, ['attempt', 'started', 'duration', 'outcome', 'error'].map((c) => h('th', { scope: 'col', text: c })))),
        attemptsBody))),
      section('timeline-h', 'Timeline', h('p', { class: 'muted', text: 'Every move of the job, from the audit log and the job record, oldest first.' }),
        timeline, timelineNote));

    const fact = (label, value) => [h('dt', { text: label }), h('dd', {}, value)];
    const errorOf = (code, msg) => [code ? h('code', { class: 'code', text: code }) : null, msg ? h('div', { class: 'error', text: msg }) : null];
    function render(hist) {
      job = hist.job;
      facts.replaceChildren(
        ...fact('state', [badge(job.status, { id: 'job-status', 'data-testid': 'job-status' }),
          job.status === 'RETRY_BACKOFF' && job.next_attempt_at ? [' next attempt ', fmtTime(job.next_attempt_at)] : null,
          job.status === 'QUEUED' && job.scheduled_at ? [' not before ', fmtTime(job.scheduled_at)] : null]),
        ...fact('type', h('span', { class: 'mono', text: job.job_type })),
        ...fact('agent', h('span', { class: 'mono', text: agentName(job.agent_slug) })),
        ...fact('run', job.run_id ? h('a', { href: '#/runs/' + enc(job.run_id), class: 'mono id', text: job.run_id }) : '—'),
        // A job an inbox entry started names it in its payload (docs/spec.md#inbox-jobs).
        ...(job.payload && typeof job.payload.inbox_entry_id === 'string'
          ? fact('inbox entry', h('a', { href: '#/inbox', class: 'mono id', 'data-testid': 'job-inbox-entry', text: job.payload.inbox_entry_id })) : []),
        ...fact('attempt', `${job.attempt || 0} / ${job.max_attempts || 0}`),
        ...fact('created', fmtTime(job.created_at)),
        ...fact('updated', fmtTime(job.updated_at)),
        ...(job.error || job.error_code ? fact('last error', [errorOf(job.error_code, job.error), job.failed_step ? h('span', { class: 'muted', text: 'in ' + job.failed_step }) : null]) : []),
        ...(job.artifact_id ? fact('artifact', h('span', { class: 'mono id', text: job.artifact_id })) : []));
      payload.textContent = job.payload === undefined || job.payload === null ? 'No payload.' : pretty(job.payload);
      result.textContent = hist.result !== undefined && hist.result !== null ? pretty(hist.result)
        : job.artifact_id ? 'The artifact ' + job.artifact_id + ' could not be read.' : job.status === 'COMPLETE' ? 'No result.' : 'No result yet.';
      const attempts = hist.attempts || [];
      attemptsBody.replaceChildren(...attempts.map((a) => h('tr', { 'data-attempt': a.attempt, 'data-outcome': a.outcome || 'running' },
        h('td', { class: 'num', text: a.attempt }),
        h('td', {}, fmtClock(a.started_at)),
        h('td', { class: 'num', 'data-col': 'duration', text: a.duration_ms === undefined ? 'running' : fmtDuration(a.duration_ms) }),
        h('td', {}, a.outcome ? badge(a.outcome) : 'running'),
        h('td', { class: 'error-cell', 'data-col': 'error' }, errorOf(a.error_code, a.error)))));
      if (!attempts.length) attemptsBody.append(h('tr', {}, h('td', { colspan: 5, class: 'muted', text: 'No attempt yet.' })));
      timeline.replaceChildren(...(hist.moves || []).map((m) => h('li', { 'data-from': m.from, 'data-to': m.to },
        h('span', { class: 'when' }, fmtClock(m.at)), m.from ? [badge(m.from), ' → '] : 'created ', badge(m.to),
        h('span', { class: 'muted', text: ` ${m.event || ''} by ${m.actor}` }),
        m.error_code || m.error ? h('div', {}, errorOf(m.error_code, m.error)) : null)));
      timelineNote.textContent = hist.partial ? 'The audit log was read in part: older moves may be missing.' : '';
      actions.replaceChildren(...offeredMoves(specs[jobMachineName(job)] || null, job).map((a) => {
        const b = h('button', { type: 'button', class: 'secondary', 'data-testid': 'job-' + a.event, 'data-job': jobID, text: a.label });
        b.addEventListener('click', () => act(a, b));
        return b;
      }));
    }
    let seq = 0;
    async function load() {
      const mine = ++seq;
      try {
        const hist = await api('GET', '/jobs/' + enc(jobID) + '/history');
        if (stopped || mine !== seq) return;
        render(hist);
        err.textContent = '';
      } catch (e) {
        if (stopped || mine !== seq) return;
        err.textContent = (e.status === 404 ? 'No job ' + jobID + ': ' : 'The job could not be read: ') + e.describe();
        err.dataset.code = e.code;
      }
    }
    async function act(a, btn) {
      ok.textContent = err.textContent = '';
      btn.disabled = true;
      try {
        const j = await api('POST', a.path(jobID));
        ok.textContent = `${a.label}: done (${j.status}).`;
      } catch (e) {
        err.textContent = `${a.label} refused: ` + e.describe();
        btn.disabled = false;
      }
      load();
    }
    // The job's own events read it again, a burst of them once.
    const reread = burst(() => { if (!stopped) load(); }, 200);
    const live = new Live({
      url: '/events/stream',
      interval: POLL_RUN_MS,
      onEvent: (type, d) => { if (type.startsWith('job.') && d.jobId === jobID) reread.kick(); },
      poll: load,
      onOpen: load,
    });
    (async () => {
      try {
        specs = await jobSpecs();
      } catch (_) { /* no actions offered without the machines */ }
      await load();
      if (!stopped) live.start();
    })();
    return { stop() { stopped = true; reread.cancel(); live.stop(); } };
  }

  // ---- proposals: the pending ones, one proposal, the gateway's decision

  // proposalLinks links each proposal a run created to its page.
  function proposalLinks(ids) {
    const out = [];
    ids.forEach((id, i) => {
      if (i) out.push(', ');
      out.push(h('a', { href: '#/proposals/' + enc(id), class: 'mono', 'data-testid': 'proposal-link', text: id }));
    });
    return out;
  }

  // decideButtons are Apply and Reject for a pending proposal (POST
  // /proposals/{id}/decision: the gateway only; another actor reads the
  // refusal in err). done runs after a decision.
  function decideButtons(p, err, done) {
    return [['applied', 'Apply', ''], ['rejected', 'Reject', 'secondary']].map(([status, label, cls]) => {
      const b = h('button', { type: 'button', class: cls, 'data-decide': status, text: label });
      b.addEventListener('click', async () => {
        b.disabled = true;
        err.textContent = '';
        try {
          await api('POST', '/proposals/' + enc(p.id) + '/decision', { status });
          done();
        } catch (e) {
          err.textContent = label + ' refused: ' + e.describe();
          b.disabled = false;
        }
      });
      return b;
    });
  }

  // proposalsView lists the pending proposals, newest first (GET
  // /proposals/pending, a page at a time), read again on each proposal
  // event of the stream, and every POLL_LIST_MS while the stream is down.
  function proposalsView(view) {
    let stopped = false, shown = new Map();
    const err = h('div', { id: 'proposals-error', class: 'notice error', role: 'alert' });
    const body = h('tbody', { id: 'proposals-body' });
    const note = h('p', { class: 'muted', id: 'proposals-note' });
    const older = h('button', { type: 'button', class: 'secondary', id: 'proposals-older', hidden: '', text: 'Older' });
    const newest = h('button', { type: 'button', class: 'secondary', id: 'proposals-newest', hidden: '', text: 'Newest' });
    const table = h('table', { id: 'proposals', 'data-testid': 'proposals', 'aria-label': 'Pending proposals' },
      h('thead', {}, h('tr', {}, ['proposal', 'run', 'agent', 'step', 'created', 'content', ''].map((c) => h('th', { scope: 'col', text: c })))), body);
    view.append(h('h2', { text: 'Proposals' }),
      h('p', { class: 'muted', text: 'Pending proposals, newest first. The gateway applies or rejects them.' }),
      err, h('div', { class: 'scroll' }, table), note, h('p', {}, newest, ' ', older));
    const pages = pager(newest, older, () => load());
    async function load() {
      return reading(table, async () => {
        let page;
        try {
          page = await apiPage(pages.path || '/proposals/pending?limit=50');
        } catch (e) {
          if (!stopped) err.textContent = 'Proposals could not be read: ' + e.describe();
          return;
        }
        if (stopped) return;
        pages.shown(page.next);
        // A page reads a bounded part of the index, every tenant's: one may
        // hold none of this token's and still have older ones after it.
        note.textContent = page.items.length ? '' : page.next ? 'None on this page; older ones follow.' : 'No proposal is pending.';
        shown = keepRows(body, shown, page.items, (p) => p.id, (p) => JSON.stringify(p), (p) => h('tr', { 'data-proposal': p.id },
          h('td', {}, h('a', { href: '#/proposals/' + enc(p.id), class: 'mono', text: p.id })),
          h('td', {}, h('a', { href: '#/runs/' + enc(p.run_id), class: 'mono', text: p.run_id })),
          h('td', { class: 'mono', text: p.agent_slug }),
          h('td', { text: p.step || '—' }),
          h('td', {}, fmtTime(p.created_at)),
          h('td', { class: 'mono', title: p.content_key, text: (p.content_key || '').split('/output/').pop() }),
          h('td', { class: 'nowrap' }, ...decideButtons(p, err, load))));
      });
    }
    const reread = burst(() => { if (!stopped) load(); }, 200);
    const live = new Live({
      url: '/events/stream',
      interval: POLL_LIST_MS,
      onEvent: (type) => { if (type.startsWith('proposal.')) reread.kick(); },
      poll: load,
      onOpen: load,
    });
    load().then(() => { if (!stopped) live.start(); });
    return { stop() { stopped = true; reread.cancel(); live.stop(); } };
  }

  // proposalView shows one proposal, and Apply and Reject while pending.
  function proposalView(view, id) {
    let stopped = false;
    const err = h('div', { id: 'proposal-error', class: 'notice error', role: 'alert' });
    const facts = h('dl', { class: 'facts', id: 'proposal-facts' });
    const actions = h('div', { class: 'controls', id: 'proposal-actions' });
    view.append(h('p', {}, h('a', { href: '#/proposals', text: '← Proposals' })),
      h('h2', {}, 'Proposal ', h('code', { class: 'id', text: id })), err, facts, actions);
    const fact = (label, value, fid) => [h('dt', { text: label }), h('dd', { id: fid }, value)];
    async function load() {
      let p;
      try {
        p = await api('GET', '/proposals/' + enc(id));
      } catch (e) {
        if (!stopped) err.textContent = 'The proposal could not be read: ' + e.describe();
        return;
      }
      if (stopped) return;
      facts.replaceChildren(
        ...fact('Status', badge(p.status, { id: 'proposal-status', 'data-testid': 'proposal-status' })),
        ...fact('Run', h('a', { href: '#/runs/' + enc(p.run_id), class: 'mono', text: p.run_id })),
        ...fact('Agent', h('code', { text: p.agent_slug })),
        ...fact('Step', p.step || '—'),
        ...fact('Created', fmtTime(p.created_at)),
        ...fact('Content', h('code', { text: p.content_key })),
        ...(p.decided_at ? fact('Decided', [fmtTime(p.decided_at), ' by ', p.decided_by || '?']) : []),
        ...(p.reason ? fact('Reason', p.reason) : []));
      actions.replaceChildren(...(p.status === 'pending' ? decideButtons(p, err, load) : []));
    }
    const live = new Live({
      url: '/events/stream',
      interval: POLL_LIST_MS,
      onEvent: (type, d) => { if (type.startsWith('proposal.') && d.proposalId === id) load(); },
      poll: load,
      onOpen: load,
    });
    load().then(() => { if (!stopped) live.start(); });
    return { stop() { stopped = true; live.stop(); } };
  }

  // ---- the inbox (docs/spec.md#the-inbox-page): its entries with their
  // badges, a page at a time, live from the event stream (inbox.*) with the
  // counts (GET /inbox/stats) read every 30 s while the stream is down.

  const INBOX_SHOWN = 50;
  // clockIcon is the expired badge's clock.
  function clockIcon() {
    return s('svg', { class: 'clock', viewBox: '0 0 16 16', width: 12, height: 12, 'aria-hidden': 'true' },
      s('circle', { cx: 8, cy: 8, r: 6.5 }), s('path', { d: 'M8 4v4l2.5 2' }));
  }
  function inboxBadge(e) {
    const b = h('span', { class: 'badge inbox', 'data-status': e.status, 'data-testid': 'inbox-badge' });
    if (e.status === 'expired') b.append(clockIcon(), ' ');
    b.append(e.status);
    return b;
  }
  // What became of an entry: its proposal (processed), the gate's reason
  // (rejected), when it expires (pending) or expired.
  function inboxOutcome(e) {
    if (e.status === 'processed' && e.proposal_id) {
      return h('span', {}, 'proposal ', h('a', { href: '#/proposals/' + enc(e.proposal_id), class: 'mono id', 'data-testid': 'inbox-proposal', text: e.proposal_id }));
    }
    if (e.status === 'rejected') return h('span', { class: 'error', 'data-testid': 'inbox-reason', text: e.rejection_reason || '' });
    const end = Date.parse(e.created_at) + (e.metadata && e.metadata.ttl_hours || 0) * 3600e3;
    if (isNaN(end)) return '';
    return h('span', { class: 'muted' }, e.status === 'expired' ? 'expired ' : 'expires ', fmtTime(new Date(end).toISOString()));
  }

  // toasts shows a short note at the bottom of the page, once per entry.
  const toasted = new Set();
  function toast(text, id) {
    if (id) { if (toasted.has(id)) return; toasted.add(id); }
    let box = $('#toasts');
    if (!box) { box = h('div', { id: 'toasts', class: 'toasts', role: 'status', 'aria-live': 'polite' }); document.body.append(box); }
    const t = h('div', { class: 'toast', 'data-testid': 'toast', 'data-entry': id || '', text });
    box.append(t);
    setTimeout(() => t.remove(), 6000);
  }

  function inboxView(view, query) {
    let stopped = false, seq = 0, shown = new Map(), lastStats = '';
    const filter = { status: query.get('status') || '', expired: query.get('expired') === 'show' };
    const err = h('div', { class: 'notice error', role: 'alert', 'data-testid': 'inbox-error' });
    const stats = h('p', { class: 'muted', id: 'inbox-stats', 'data-testid': 'inbox-stats' });
    // The quick add: a new entry from the page, as the owner.
    const action = h('input', { id: 'inbox-action', name: 'action', value: 'propose-edit', required: true, spellcheck: 'false', 'data-testid': 'inbox-action' });
    const target = h('input', { id: 'inbox-target', name: 'target', required: true, spellcheck: 'false', placeholder: 'notes/…', 'data-testid': 'inbox-target' });
    const priority = h('select', { id: 'inbox-priority', 'data-testid': 'inbox-priority' }, h('option', { text: 'normal' }), h('option', { text: 'high' }));
    const add = h('form', { class: 'controls', id: 'inbox-add', 'aria-label': 'Quick add' },
      h('label', { for: 'inbox-action', text: 'Action' }), action,
      h('label', { for: 'inbox-target', text: 'Target' }), target,
      h('label', { for: 'inbox-priority', text: 'Priority' }), priority,
      h('button', { type: 'submit', 'data-testid': 'inbox-add', text: 'Add' }));
    const status = h('select', { id: 'inbox-status', 'data-testid': 'inbox-status' },
      h('option', { value: '', text: 'every status' }), ...['pending', 'processed', 'rejected', 'expired'].map((st) => h('option', { value: st, text: st })));
    status.value = filter.status;
    const expired = h('input', { type: 'checkbox', id: 'inbox-show-expired', 'data-testid': 'inbox-show-expired' });
    expired.checked = filter.expired;
    const body = h('tbody', { id: 'inbox-body' });
    const table = h('table', { id: 'inbox', 'aria-label': 'Inbox entries' },
      h('thead', {}, h('tr', {}, ['entry', 'status', 'action', 'target', 'source', 'created', 'outcome', ''].map((c) => h('th', { scope: 'col', text: c })))),
      body);
    const note = h('p', { class: 'muted', 'data-testid': 'inbox-note' });
    const first = h('button', { type: 'button', class: 'secondary', 'data-testid': 'inbox-first', text: 'First page', hidden: '' });
    const next = h('button', { type: 'button', class: 'secondary', 'data-testid': 'inbox-next', text: 'Next page', hidden: '' });
    view.append(h('h2', { text: 'Inbox' }), stats, err,
      h('section', { 'aria-labelledby': 'inbox-add-h' }, h('h3', { id: 'inbox-add-h', text: 'Quick add' }), add),
      h('section', { 'aria-labelledby': 'inbox-list-h' },
        h('h3', { id: 'inbox-list-h', text: 'Entries' }),
        h('div', { class: 'controls' }, h('label', { for: 'inbox-status', text: 'Status' }), status,
          h('label', { class: 'check' }, expired, ' show expired')),
        h('div', { class: 'scroll' }, table), note, h('p', { class: 'pager' }, first, next)));

    function setFilter(f) {
      Object.assign(filter, f);
      const q = new URLSearchParams();
      if (filter.status) q.set('status', filter.status);
      if (filter.expired) q.set('expired', 'show');
      history.replaceState(null, '', '#/inbox' + (q.toString() ? '?' + q : ''));
      pages.path = '';
      load();
    }
    status.addEventListener('change', () => setFilter({ status: status.value }));
    expired.addEventListener('change', () => setFilter({ expired: expired.checked }));
    const pages = pager(first, next, () => load());

    // submit sends an entry to POST /inbox/submit; the toast says it was
    // accepted (→ pending).
    async function submit(sub, btn) {
      err.textContent = '';
      btn.disabled = true;
      try {
        const res = await api('POST', '/inbox/submit', sub);
        toast('Accepted for processing: ' + res.inbox_id, res.inbox_id);
        load();
        return res;
      } catch (e) {
        err.textContent = 'The entry was not accepted: ' + e.describe();
        return null;
      } finally {
        btn.disabled = false;
      }
    }
    add.addEventListener('submit', async (e) => {
      e.preventDefault();
      const btn = add.querySelector('button');
      const res = await submit({ source: { type: 'ui', identity: 'owner' },
        intent: { action: action.value.trim(), target: target.value.trim() }, metadata: { priority: priority.value } }, btn);
      if (res) target.value = '';
    });
    // Re-create: a new entry with an old one's content (an expired or
    // rejected one), under a fresh id.
    const again = (x) => {
      const m = x.metadata || {};
      return { source: x.source, intent: x.intent, metadata: { priority: m.priority || 'normal', ttl_hours: m.ttl_hours || 0, correlation_id: m.correlation_id || undefined } };
    };
    const row = (x) => {
      const redo = x.status === 'expired' || x.status === 'rejected'
        ? h('button', { type: 'button', class: 'secondary', 'data-testid': 'inbox-recreate', text: 'Re-create' }) : null;
      if (redo) redo.addEventListener('click', () => submit(again(x), redo));
      const src = x.source || {}, intent = x.intent || {};
      return h('tr', { 'data-entry': x.id, 'data-status': x.status },
        // The entry and, below it, the job its action started (job_id).
        h('td', { class: 'mono', 'data-label': 'entry' }, h('span', { class: 'id', text: x.id }),
          x.job_id ? h('div', { class: 'job' }, 'job ', h('a', { href: '#/jobs/' + enc(x.job_id), class: 'id', 'data-testid': 'inbox-job', text: x.job_id })) : null),
        h('td', { 'data-label': 'status' }, inboxBadge(x), x.metadata && x.metadata.priority === 'high' ? h('span', { class: 'badge', 'data-priority': 'high', text: 'high' }) : null),
        h('td', { class: 'mono action', 'data-label': 'action', text: intent.action || '' }),
        h('td', { class: 'mono target', 'data-label': 'target', text: intent.target || '' }),
        h('td', { 'data-label': 'source', text: (src.type || '') + (src.identity ? ' · ' + src.identity : '') }),
        h('td', { 'data-label': 'created' }, fmtTime(x.created_at)),
        h('td', { 'data-label': 'outcome' }, inboxOutcome(x)),
        h('td', {}, redo));
    };

    async function load() {
      const mine = ++seq;
      return reading(table, async () => {
        let path = pages.path;
        if (!path) {
          const q = new URLSearchParams({ limit: INBOX_SHOWN });
          if (filter.status) q.set('status', filter.status);
          else if (filter.expired) q.set('include_expired', 'true');
          path = '/inbox/entries?' + q;
        }
        const keep = (x) => (filter.status ? x.status === filter.status : filter.expired || x.status !== 'expired');
        try {
          const [page, st] = await Promise.all([listPage(path, INBOX_SHOWN, keep), api('GET', '/inbox/stats')]);
          if (stopped || mine !== seq) return;
          showStats(st);
          pages.shown(page.next);
          shown = keepRows(body, shown, page.items, (x) => x.id, (x) => JSON.stringify(x), row);
          note.textContent = page.items.length ? '' : (filter.status ? 'No entries ' + filter.status + '.' : 'No entries.');
          err.textContent = '';
        } catch (e) {
          if (stopped || mine !== seq) return;
          err.textContent = 'The inbox could not be read: ' + e.describe();
        }
      });
    }
    function showStats(st) {
      lastStats = JSON.stringify(st || {});
      const c = st || {};
      stats.replaceChildren(...['pending', 'processed', 'rejected', 'expired'].flatMap((k, i) =>
        [i ? ' · ' : '', h('span', { 'data-count': k, text: (c[k] || 0) + ' ' + k })]));
    }
    // The fallback: the counts every 30 s; the entries are read again
    // only when they changed.
    async function poll() {
      const st = await api('GET', '/inbox/stats');
      if (!stopped && JSON.stringify(st || {}) !== lastStats) await load();
    }
    const reread = burst(() => { if (!stopped) load(); }, 200);
    const live = new Live({
      url: '/events/stream',
      interval: POLL_LIST_MS,
      onEvent: (type, d) => {
        if (!type.startsWith('inbox.')) return;
        if (type === 'inbox.new' && d.entryId) toast('Accepted for processing: ' + d.entryId, d.entryId);
        reread.kick();
      },
      poll,
      onOpen: load,
    });
    load().then(() => { if (!stopped) live.start(); });
    return { stop() { stopped = true; reread.cancel(); live.stop(); } };
  }

  // ---- search by id, from the header: a job's id, else a run's

  async function findID(id) {
    const tries = [['/jobs/' + enc(id), '#/jobs/' + enc(id)], ['/runs/' + enc(id) + '/status', '#/runs/' + enc(id)]];
    for (const [path, hash] of tries) {
      try {
        await api('GET', path);
        return hash;
      } catch (e) {
        // Not this kind of id (a Worker without a job queue answers 404
        // too, an id of another shape 400): try the next.
        if (e.status !== 404 && e.status !== 400) throw e;
      }
    }
    return null;
  }

  function initSearch() {
    const form = $('#search'), input = $('#search-id'), msg = $('#search-msg');
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const id = input.value.trim();
      msg.textContent = '';
      if (!id) return;
      try {
        const hash = await findID(id);
        if (!hash) {
          msg.textContent = 'No job or run has the id ' + id + '.';
          return;
        }
        if (location.hash === hash) route();
        else location.hash = hash;
      } catch (err) {
        msg.textContent = 'The search failed: ' + err.describe();
      }
    });
  }

  // ---- start

  function initAuth() {
    const token = $('#token'), actor = $('#actor');
    token.value = auth.token;
    actor.value = auth.actor;
    const show = () => {
      actor.disabled = !!auth.token;
      tenantShown = ''; // the next answer names the new token's
      showAuth();
    };
    show();
    // A change of identity re-opens the view, so the stream and every read
    // use it.
    token.addEventListener('change', () => { write('conveyor.token', token.value.trim()); show(); route(); });
    actor.addEventListener('change', () => { write('conveyor.actor', actor.value); show(); route(); });
    $('#auth').addEventListener('submit', (e) => e.preventDefault());
  }

  // A route change moves focus to the new view, so keyboard and screen
  // reader users land on it.
  window.addEventListener('hashchange', () => { route(); $('#view').focus(); });
  // The skip link must not change the hash: the hash is the route.
  document.querySelector('.skip').addEventListener('click', (e) => { e.preventDefault(); $('#view').focus(); });
  initAuth();
  initSearch();
  route();
})();
