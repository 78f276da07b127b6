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
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }
  const $ = (sel) => document.querySelector(sel);

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

  // layout places states in columns, so the same spec always draws the same
  // picture: non-terminal states by BFS rank from the initial state (states
  // it cannot reach in one more column), terminal states together in the
  // last column, each column in the spec's order of states. Most moves then
  // point right; the rest are routed around the states (edgeGeometry).
  function layout(spec) {
    const terminal = new Set(spec.terminal);
    const rank = new Map([[spec.initial, 0]]);
    const queue = [spec.initial];
    while (queue.length) {
      const cur = queue.shift();
      for (const t of spec.transitions) {
        if (t.from === cur && !rank.has(t.to) && !terminal.has(t.to)) { rank.set(t.to, rank.get(cur) + 1); queue.push(t.to); }
      }
    }
    let last = Math.max(0, ...rank.values());
    const unreached = spec.states.filter((st) => !rank.has(st) && !terminal.has(st));
    if (unreached.length) { last++; for (const st of unreached) rank.set(st, last); }
    if (spec.states.some((st) => terminal.has(st) && st !== spec.initial)) last++;
    for (const st of spec.states) if (!rank.has(st)) rank.set(st, last);
    const cols = [];
    for (const st of spec.states) (cols[rank.get(st)] = cols[rank.get(st)] || []).push(st);
    const longest = Math.max(...spec.states.map((st) => st.length));
    const W = Math.max(110, longest * 8 + 28), H = 36, COLGAP = 120, ROWGAP = 40, PAD = 56, TOP = 56;
    const tallest = Math.max(...cols.map((c) => (c || []).length));
    const pos = new Map();
    const colBottom = [];
    cols.forEach((col, i) => {
      const offset = ((tallest - col.length) * (H + ROWGAP)) / 2;
      col.forEach((st, j) => pos.set(st, { x: PAD + i * (W + COLGAP), y: TOP + offset + j * (H + ROWGAP), col: i }));
      colBottom[i] = TOP + offset + col.length * (H + ROWGAP) - ROWGAP;
    });
    return { pos, W, H, colBottom, width: PAD + cols.length * (W + COLGAP) - COLGAP + 90, height: TOP + tallest * (H + ROWGAP) - ROWGAP + 24 };
  }

  function drawMachine(spec, path) {
    const L = layout(spec);
    const { pos, W, H } = L;
    const onPath = new Set(path.states());
    const moves = path.moves();
    const current = path.current;
    const svg = s('svg', {
      xmlns: SVGNS, role: 'img', 'aria-labelledby': 'machine-title machine-desc', id: 'machine', 'data-testid': 'machine',
      'data-machine': spec.name,
    });
    svg.append(
      s('title', { id: 'machine-title', text: spec.name + ' machine' }),
      s('desc', { id: 'machine-desc', text: 'Current state: ' + (current || 'unknown') + '. Path: ' + path.states().join(' → ') + '.' }),
      s('defs', {},
        s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
          s('path', { d: 'M0,0 L10,5 L0,10 z' })),
        s('marker', { id: 'arrow-path', class: 'path-arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
          s('path', { d: 'M0,0 L10,5 L0,10 z' }))),
    );

    // Parallel moves between one pair of states are fanned apart, and so
    // are the moves that share a lane below the states.
    const pairCount = new Map();
    const lanes = { below: 0 };
    let bottom = L.height;
    const edges = s('g', { class: 'transitions' });
    for (const t of spec.transitions) {
      const key = t.from + '→' + t.to;
      const k = pairCount.get(key) || 0;
      pairCount.set(key, k + 1);
      const a = pos.get(t.from), b = pos.get(t.to);
      if (!a || !b) continue;
      const g = edgeGeometry(L, a, b, k, lanes);
      bottom = Math.max(bottom, g.maxY + 20);
      const lit = moves.has(key);
      const actors = (t.actors || []).join(', ');
      edges.append(s('g', {
        class: 'transition' + (lit ? ' path' : ''), 'data-from': t.from, 'data-to': t.to, 'data-event': t.event,
      },
      s('title', { text: `${t.from} → ${t.to} on ${t.event}` + (actors ? ` (by ${actors})` : '') }),
      s('path', { d: g.d, 'marker-end': lit ? 'url(#arrow-path)' : 'url(#arrow)' }),
      s('text', { x: g.lx, y: g.ly, 'text-anchor': 'middle', text: t.event })));
    }
    svg.append(edges);
    svg.setAttribute('width', L.width);
    svg.setAttribute('height', bottom);
    svg.setAttribute('viewBox', `0 0 ${L.width} ${bottom}`);

    // The initial state's entry arrow, as in the SDK's Mermaid/DOT diagrams.
    const ini = pos.get(spec.initial);
    if (ini) {
      svg.append(s('circle', { class: 'start', cx: ini.x - 34, cy: ini.y + H / 2, r: 6 }),
        s('g', { class: 'transition' + (onPath.has(spec.initial) ? ' path' : '') },
          s('path', { d: `M${ini.x - 28},${ini.y + H / 2} L${ini.x - 2},${ini.y + H / 2}`, 'marker-end': 'url(#arrow)' })));
    }

    const nodes = s('g', { class: 'states' });
    for (const st of spec.states) {
      const p = pos.get(st);
      const terminal = spec.terminal.includes(st);
      const cls = ['state', terminal && 'terminal', st === spec.initial && 'initial', onPath.has(st) && 'path', st === current && 'current']
        .filter(Boolean).join(' ');
      const g = s('g', { class: cls, 'data-state': st, 'data-testid': 'state-' + st, 'aria-current': st === current ? 'true' : null },
        s('title', { text: st + (terminal ? ' (terminal)' : '') + (st === current ? ' — current' : onPath.has(st) ? ' — on the path' : '') }),
        s('rect', { class: 'outer', x: p.x, y: p.y, width: W, height: H, rx: 8 }));
      // Terminal states have a double border, as the SDK's DOT diagrams do.
      if (terminal) g.append(s('rect', { class: 'inner', x: p.x + 3, y: p.y + 3, width: W - 6, height: H - 6, rx: 6 }));
      g.append(s('text', { x: p.x + W / 2, y: p.y + H / 2 + 4, 'text-anchor': 'middle', text: st }));
      nodes.append(g);
    }
    svg.append(nodes);
    return svg;
  }

  // edgeGeometry draws one move as cubic curves: to the next column from
  // the right side to the left side; further right through a lane below all
  // the columns; backward from the left side into the target's
  // bottom; within a column as a bulge to the right; a self-move as a loop
  // on top. It returns the path, the label's place and the lowest point.
  function edgeGeometry(L, a, b, k, lanes) {
    const { W, H } = L;
    const fan = k * 16;
    const mid = (p0, p1, p2, p3) => [(p0[0] + 3 * p1[0] + 3 * p2[0] + p3[0]) / 8, (p0[1] + 3 * p1[1] + 3 * p2[1] + p3[1]) / 8];
    const curve = (p0, p1, p2, p3) => `M${p0[0]},${p0[1]} C${p1[0]},${p1[1]} ${p2[0]},${p2[1]} ${p3[0]},${p3[1]}`;
    if (a === b) {
      const x1 = a.x + W * 0.3, x2 = a.x + W * 0.7, y = a.y;
      return { d: `M${x1},${y} C${x1 - 10},${y - 40 - fan} ${x2 + 10},${y - 40 - fan} ${x2},${y}`, lx: a.x + W / 2, ly: y - 34 - fan, maxY: y + H };
    }
    if (b.col === a.col + 1) {
      const p0 = [a.x + W, a.y + H / 2], p3 = [b.x, b.y + H / 2];
      const dx = (p3[0] - p0[0]) / 2;
      const p1 = [p0[0] + dx, p0[1] + fan], p2 = [p3[0] - dx, p3[1] + fan];
      const [lx, ly] = mid(p0, p1, p2, p3);
      return { d: curve(p0, p1, p2, p3), lx, ly: ly - 4, maxY: Math.max(p0[1], p3[1]) };
    }
    if (b.col > a.col + 1) {
      // Lanes run below every column and below the backward moves' dips.
      const lane = Math.max(...L.colBottom) + 52 + 18 * lanes.below++;
      const p0 = [a.x + W * 0.3, a.y + H], p3 = [b.x, b.y + H / 2];
      const m = [(p0[0] + p3[0]) / 2, lane];
      const d = `M${p0[0]},${p0[1]} C${p0[0]},${lane} ${p0[0]},${lane} ${p0[0] + 40},${lane} L${p3[0] - 70},${lane} ` +
        `C${p3[0] - 30},${lane} ${p3[0] - 40},${p3[1]} ${p3[0]},${p3[1]}`;
      return { d, lx: m[0], ly: lane - 4, maxY: lane };
    }
    if (b.col === a.col) {
      const down = b.y > a.y;
      const p0 = [a.x + W, a.y + H / 2 + (down ? 6 : -6)], p3 = [b.x + W, b.y + H / 2 + (down ? -6 : 6)];
      const bulge = 50 + Math.abs(b.y - a.y) / 5 + fan;
      const p1 = [p0[0] + bulge, p0[1]], p2 = [p3[0] + bulge, p3[1]];
      const [lx, ly] = mid(p0, p1, p2, p3);
      return { d: curve(p0, p1, p2, p3), lx: lx + 16, ly, maxY: Math.max(p0[1], p3[1]) };
    }
    const p0 = [a.x, a.y + H / 2 + 8], p3 = [b.x + W / 2 + 14 + fan, b.y + H];
    const p1 = [p0[0] - 50, p0[1] + 30], p2 = [p3[0], p3[1] + 50];
    const [lx, ly] = mid(p0, p1, p2, p3);
    return { d: curve(p0, p1, p2, p3), lx, ly: ly + 12, maxY: Math.max(p0[1] + 30, p3[1] + 40) };
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
    // Schedules (GET /schedules): when each fires next, its last run, and
    // pause/resume for an admin. A Worker without a scheduler answers 404:
    // the section stays hidden.
    const schedBody = h('tbody', {});
    const schedErr = h('div', { class: 'notice error', role: 'alert' });
    const sched = h('section', { id: 'schedules', hidden: '' },
      h('h2', { text: 'Schedules' }), schedErr,
      h('table', { 'aria-label': 'Schedules' },
        h('thead', {}, h('tr', {}, ['schedule', 'agent', 'when', 'next', 'last run', 'state', ''].map((c) => h('th', { scope: 'col', text: c })))),
        schedBody));
    view.append(msg, list, sched);

    async function loadSchedules() {
      let items;
      try {
        items = (await api('GET', '/schedules')) || [];
      } catch (e) {
        if (e.status !== 404) { sched.hidden = false; schedErr.textContent = 'Schedules could not be read: ' + e.describe(); }
        return;
      }
      if (stopped) return;
      sched.hidden = items.length === 0;
      schedBody.replaceChildren(...items.map((x) => {
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
        return h('tr', { 'data-schedule': x.id },
          h('td', { class: 'mono', text: x.id }),
          h('td', { class: 'mono', text: x.agent }),
          h('td', { class: 'mono', text: x.cron || ('every ' + Math.round((x.every || 0) / 1e9) + ' s') }),
          h('td', {}, fmtTime(x.next)),
          h('td', {}, x.last_run_id ? h('a', { href: '#/runs/' + enc(x.last_run_id), class: 'mono', text: x.last_run_id }) : '—'),
          h('td', { text: x.paused ? 'paused by ' + (x.paused_by || '?') : 'active' }),
          h('td', {}, btn));
      }));
    }

    // loadRuns shows one page of an agent's runs, newest first (GET
    // /runs, paged by the server): pager.status filters them, pager.path
    // is the page shown ('' the newest), pager.next the older one.
    async function loadRuns(agent, tbody, note, pager) {
      try {
        let path = pager.path;
        if (!path) {
          path = '/runs?agent=' + enc(agent.slug) + '&limit=' + RUNS_SHOWN;
          if (pager.status) path += '&status=' + enc(pager.status);
        }
        const page = await apiPage(path);
        if (stopped) return;
        const runs = page.items;
        pager.next = page.next;
        pager.older.hidden = !page.next;
        pager.newest.hidden = !pager.path;
        tbody.replaceChildren(...runs.map((r) => h('tr', { 'data-run': r.run_id },
          h('td', {}, h('a', { href: '#/runs/' + enc(r.run_id), class: 'mono', text: r.run_id })),
          h('td', {}, badge(r.status), ' ', runnerBadge(r)),
          h('td', { text: r.trigger || '' }),
          h('td', {}, fmtTime(r.started_at)),
          h('td', { class: 'num', text: `${r.steps_completed || 0} / ${r.steps_total || 0}` }),
          h('td', { class: 'error', text: r.error || '' }))));
        watchLapse(agent.slug, runs);
        note.textContent = runs.length ? '' : (pager.path ? 'No older runs.' : pager.status ? 'No runs ' + pager.status + '.' : 'No runs yet.');
        note.className = 'muted';
      } catch (e) {
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
            const res = await api('POST', '/agents/run', { agent_slug: a.slug, trigger: 'manual' }, { 'X-Request-ID': requestID() });
            location.hash = '#/runs/' + enc(res.run_id);
          } catch (e) {
            err.textContent = 'The run was not started: ' + e.describe();
          } finally {
            btn.disabled = false;
          }
        });
        // The status filter and the pager of the agent's runs.
        const pager = { status: '', path: '', next: null,
          older: h('button', { type: 'button', 'data-testid': 'older-runs', 'data-agent': a.slug, text: 'Older', hidden: '' }),
          newest: h('button', { type: 'button', 'data-testid': 'newest-runs', 'data-agent': a.slug, text: 'Newest', hidden: '' }) };
        const states = (a.spec && a.spec.states) || [];
        const select = h('select', { 'data-testid': 'status-filter', 'data-agent': a.slug, 'aria-label': 'Status of the runs of ' + a.slug },
          h('option', { value: '', text: 'every status' }), ...states.map((st) => h('option', { value: st, text: st })));
        const filter = h('label', { class: 'muted' }, 'Show ', select);
        select.addEventListener('change', () => { pager.status = select.value; pager.path = ''; refresh(); });
        pager.older.addEventListener('click', () => { if (pager.next) { pager.path = pager.next; refresh(); } });
        pager.newest.addEventListener('click', () => { pager.path = ''; refresh(); });
        const steps = (a.steps || []).join(' → ');
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

    const title = h('h2', {}, 'Run ', h('span', { class: 'mono', id: 'run-id', text: runID }));
    const loadErr = h('div', { id: 'run-load-error', class: 'notice error', role: 'alert' });
    const facts = h('dl', { class: 'facts', id: 'run-facts' });
    const diagram = h('div', { class: 'diagram', id: 'diagram' });
    const table = h('div', { id: 'table-slot' });
    const stepsBody = h('tbody', { id: 'steps-body' });
    const stepsNote = h('p', { class: 'muted', id: 'steps-note' });
    const actionOK = h('div', { id: 'action-result', class: 'notice ok', role: 'status', 'aria-live': 'polite' });
    const actionErr = h('div', { id: 'action-error', class: 'notice error', role: 'alert', 'data-testid': 'action-error' });
    const reason = h('input', { id: 'reason', type: 'text', maxlength: 500, placeholder: 'reason (optional)' });
    const jobID = h('input', { id: 'job-id', type: 'text', spellcheck: 'false', placeholder: 'job id' });
    const buttons = {
      cancel: h('button', { type: 'button', id: 'btn-cancel', class: 'danger', 'data-testid': 'cancel', text: 'Cancel run' }),
      approve: h('button', { type: 'button', id: 'btn-approve', 'data-testid': 'approve', text: 'Approve' }),
      reject: h('button', { type: 'button', id: 'btn-reject', class: 'secondary', 'data-testid': 'reject', text: 'Reject' }),
      requeue: h('button', { type: 'button', id: 'btn-requeue', class: 'secondary', 'data-testid': 'requeue', text: 'Requeue job' }),
    };

    view.append(
      h('p', {}, h('a', { href: '#/', text: '← Agents' })),
      title, loadErr, facts,
      h('section', { 'aria-labelledby': 'controls-h' },
        h('h3', { id: 'controls-h', text: 'Control' }),
        h('div', { class: 'controls' },
          h('label', { for: 'reason', text: 'Reason' }), reason, buttons.cancel, buttons.approve, buttons.reject),
        h('div', { class: 'controls' },
          h('label', { for: 'job-id', text: 'Job' }), jobID, buttons.requeue),
        actionOK, actionErr),
      h('section', { 'aria-labelledby': 'machine-h' },
        h('h3', { id: 'machine-h', text: 'Machine' }),
        h('p', { class: 'muted', text: 'Lit: the run\'s path. Moves before this page opened are the shortest path in the machine to the first state it saw.' }),
        diagram, table),
      h('section', { 'aria-labelledby': 'steps-h' },
        h('h3', { id: 'steps-h', text: 'Steps' }),
        h('table', { id: 'steps', 'data-testid': 'steps' },
          h('thead', {}, h('tr', {}, ['#', 'step', 'status', 'started', 'duration', 'summary', 'error'].map((c) => h('th', { scope: 'col', text: c })))),
          stepsBody),
        stepsNote));

    function fact(label, value, id) {
      return [h('dt', { text: label }), h('dd', { id }, value)];
    }

    function renderStatus() {
      const st = status;
      const dur = st.duration_ms || (st.finished_at ? new Date(st.finished_at) - new Date(st.started_at) : null);
      facts.replaceChildren(
        ...fact('Status', [badge(st.status, { id: 'run-status', 'data-testid': 'run-status' }), ' ', runnerBadge(st)]),
        ...fact('Agent', h('code', { text: st.agent_slug }), 'run-agent'),
        ...fact('Machine', h('code', { text: (spec && spec.name) || st.machine || 'canonical-run' })),
        ...fact('Trigger', st.trigger || '—'),
        ...fact('Started', fmtTime(st.started_at)),
        ...fact('Finished', fmtTime(st.finished_at), 'run-finished'),
        ...fact('Duration', fmtDuration(dur)),
        ...fact('Current step', st.current_step || '—', 'run-current-step'),
        ...fact('Steps', `${st.steps_completed || 0} / ${st.steps_total || 0}`, 'run-progress'),
        ...(st.proposals_created && st.proposals_created.length ? fact('Proposals', st.proposals_created.join(', ')) : []),
        ...(st.cancel_requested ? fact('Cancel', 'requested' + (st.cancel_reason ? ': ' + st.cancel_reason : '')) : []),
        ...(st.approval ? fact('Approval', [st.approval.action, st.approval.decision].filter(Boolean).join(' · ') || 'waiting') : []),
        ...(st.external ? fact('Waiting for', st.external.event_type || st.external.type || 'an external event') : []),
        ...(st.resume_count ? fact('Resumed', st.resume_count + ' time(s)') : []),
        ...fact('Error', st.error ? h('span', { class: 'error', text: st.error }) : '—', 'run-error'),
      );
      document.title = `${st.status} · ${runID} · Conveyor`;
      // Buttons follow the machine: a move the current state has, any actor.
      // The actor is deliberately not checked here: the Worker decides, and
      // its 403 is shown as it is.
      const from = spec ? spec.transitions.filter((t) => t.from === st.status).map((t) => t.event) : null;
      const can = (events) => !from || events.some((e) => from.includes(e));
      setEnabled(buttons.cancel, can(['cancel', 'request_cancel']), 'The run cannot be canceled from ' + st.status);
      setEnabled(buttons.approve, can(['approve']), 'Nothing waits for approval in ' + st.status);
      setEnabled(buttons.reject, can(['reject']), 'Nothing waits for approval in ' + st.status);
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

    function renderSteps() {
      stepsBody.replaceChildren(...steps.map((r) => h('tr', { 'data-step': r.step_name, 'data-testid': 'step-row', 'data-status': r.status },
        h('td', { class: 'num', text: r.step_number }),
        h('td', {}, h('code', { text: r.step_name })),
        h('td', {}, badge(r.status)),
        h('td', {}, fmtTime(r.started_at)),
        h('td', { class: 'num', text: fmtDuration(stepDuration(r)) }),
        h('td', { text: r.output_summary || '' }),
        h('td', { class: 'error', text: r.error || '' }))));
      stepsNote.textContent = steps.length ? '' : 'No step has finished yet.';
    }

    function renderMachine() {
      if (!spec) {
        diagram.replaceChildren(h('p', { class: 'muted', text: 'The agent\'s machine is unknown to this Worker.' }));
        return;
      }
      diagram.replaceChildren(drawMachine(spec, path));
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
          if (!status || !(st.version < status.version)) status = st;
          steps = sp || [];
          path.see(status.status);
          loadErr.textContent = '';
          renderStatus();
          renderSteps();
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
    buttons.requeue.addEventListener('click', () => {
      const id = jobID.value.trim();
      if (!id) { actionErr.textContent = 'Requeue: enter a job id.'; return; }
      act('Requeue ' + id, 'POST', '/jobs/' + enc(id) + '/requeue');
    });

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

    return { stop() { stopped = true; clearTimeout(lapseTimer); if (live) live.stop(); } };
  }

  // ---- start

  function initAuth() {
    const token = $('#token'), actor = $('#actor'), mode = $('#auth-mode');
    token.value = auth.token;
    actor.value = auth.actor;
    const show = () => {
      actor.disabled = !!auth.token;
      mode.textContent = auth.token ? 'using the token' : 'as ' + auth.actor + ' (no token)';
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
  route();
})();
