// Quire console. One page, no dependencies: it follows the server's event
// stream of the deployment's view (/console/api/events) and renders the
// page the location's hash names. Journal content, specs and fragments
// come from the HTTP gateway (/v1/), with the operator's token if given.
'use strict';

const app = {
  view: null,        // the latest view
  selector: '',      // the journals' and shards' filter
  events: null,      // the EventSource
  page: null,        // the mounted page: {update(view), unmount()}
};

// el builds an element: attributes (on* are listeners), then children
// (strings become text, never markup).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.className = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function fill(parent, ...children) {
  parent.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

// Formatting.
function bytes(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + ' ' + units[i];
}
const rate = (n) => (n ? bytes(n) + '/s' : '0');
function seconds(s, atLeast) {
  if (s === null || s === undefined) return '–';
  const t = s < 1 ? '0 s' : s < 120 ? s.toFixed(0) + ' s' : (s / 60).toFixed(1) + ' min';
  return (atLeast ? '≥ ' : '') + t;
}
const badge = (text) => el('span', { class: 'badge ' + String(text).replace(/ /g, '-') }, text);
const kindTitle = (f) => (f.kind === 'brokers' ? 'Brokers' : f.kind === 'consumers' ? 'Consumer application' : 'Allocator fleet');

// The operator's token, for the gateway and actions.
function headers(extra) {
  const h = Object.assign({}, extra);
  const t = sessionStorage.getItem('quire-token');
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}

async function getJSON(url) {
  const resp = await fetch(url, { headers: headers() });
  const body = await resp.json().catch(() => ({ error: resp.statusText }));
  if (!resp.ok) throw new Error(body.error || resp.statusText);
  return body;
}

async function post(url, body, contentType) {
  const resp = await fetch(url, {
    method: 'POST', body,
    headers: headers(contentType ? { 'Content-Type': contentType } : {}),
  });
  const out = await resp.json().catch(() => ({ error: resp.statusText }));
  if (!resp.ok) throw new Error(out.error || resp.statusText);
  return out;
}

const journalPath = (name) => name.split('/').map(encodeURIComponent).join('/');

// chart draws a series of [unix ms, value] over the last five minutes.
function chart(series, format, label) {
  const W = 600, H = 120, pad = 22;
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('class', 'chart');
  const now = Date.now(), span = 5 * 60 * 1000;
  const max = Math.max(1, ...series.map((p) => p[1]));
  const x = (t) => pad + ((t - (now - span)) / span) * (W - pad);
  const y = (v) => H - pad - (v / max) * (H - 2 * pad);
  const pts = series.filter((p) => p[0] >= now - span);
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text) e.textContent = text;
    svg.append(e);
  };
  if (pts.length > 1) {
    const line = pts.map((p, i) => (i ? 'L' : 'M') + x(p[0]).toFixed(1) + ' ' + y(p[1]).toFixed(1)).join(' ');
    add('path', { class: 'area', d: `${line} L${x(pts[pts.length - 1][0]).toFixed(1)} ${H - pad} L${x(pts[0][0]).toFixed(1)} ${H - pad} Z` });
    add('path', { class: 'line', d: line });
  }
  add('text', { x: pad, y: 12 }, `${label}: max ${format(max)}, now ${format(pts.length ? pts[pts.length - 1][1] : 0)}`);
  add('text', { x: pad, y: H - 6 }, '5 min ago');
  add('text', { x: W - 30, y: H - 6 }, 'now');
  return svg;
}

// ---- Overview ----

function overviewPage(main) {
  const live = el('div');
  fill(main, live);
  return {
    update(v) {
      const fleets = v.fleets.map((f) => el('div', { class: 'card', 'data-fleet': f.root },
        el('h2', {}, `${kindTitle(f)} `, el('code', {}, f.root)),
        el('p', { class: 'muted' }, `${f.members.length} members, ${(f.journals || f.shards || []).length} ${f.kind === 'consumers' ? 'shards' : 'items'}, `,
          `leader ${f.leader || 'none'}, ${f.moving} moving, revision ${f.revision}`),
        membersByZone(f),
        f.kind === 'brokers' ? chart(f.series, rate, 'append rate') : f.kind === 'consumers' ? chart(f.series, bytes, 'lag') : null));
      fill(live,
        el('div', { class: 'grid' },
          el('div', { class: 'card' }, el('h2', {}, 'Alerts'), alertList(v.alerts)),
          el('div', { class: 'card' }, el('h2', {}, 'etcd'), etcdTable(v.etcd))),
        el('div', { class: 'grid' }, fleets),
        el('div', { class: 'card' }, el('h2', {}, 'Recent failovers'), failoverTable(v.failovers)));
    },
  };
}

function alertList(alerts) {
  if (!alerts.length) return el('p', { class: 'ok', id: 'alerts-none' }, 'No alerts: every journal has its primary and replicas, every shard is served.');
  return el('ul', { class: 'alerts', id: 'alerts' }, alerts.map((a) =>
    el('li', { class: a.level, 'data-subject': a.subject }, badge(a.level), ' ', el('strong', {}, a.subject), ' ', a.text,
      a.root ? el('span', { class: 'muted' }, ' (', a.root, ')') : null)));
}

function etcdTable(members) {
  if (!members.length) return el('p', { class: 'muted' }, 'Checking…');
  return el('table', { id: 'etcd' },
    el('tr', {}, el('th', {}, 'member'), el('th', {}, 'endpoint'), el('th', {}, 'health'), el('th', { class: 'num' }, 'db size'), el('th', { class: 'num' }, 'revision')),
    members.map((m) => el('tr', {},
      el('td', {}, m.name, m.leader ? ' ★' : ''), el('td', {}, m.endpoint),
      el('td', { class: 'wrap' }, m.healthy ? badge('ok') : badge('error'), m.error ? ' ' + m.error : ''),
      el('td', { class: 'num' }, bytes(m.dbSize)), el('td', { class: 'num' }, m.revision))));
}

function membersByZone(f) {
  const zones = {};
  for (const m of f.members) (zones[m.zone] = zones[m.zone] || []).push(m);
  return el('table', { class: 'members' },
    el('tr', {}, el('th', {}, 'zone'), el('th', {}, 'member'), el('th', {}, 'endpoint'), el('th', { class: 'num' }, 'load')),
    Object.keys(zones).sort().map((z) => zones[z].map((m, i) => el('tr', { 'data-member': m.name },
      el('td', {}, i ? '' : z), el('td', {}, m.suffix, m.leader ? ' ★ leader' : '', m.exiting ? ' (draining)' : ''),
      el('td', {}, m.endpoint || ''), el('td', { class: 'num' }, `${m.load} / ${m.limit}`)))));
}

function failoverTable(failovers) {
  if (!failovers.length) return el('p', { class: 'muted' }, 'None since the console started.');
  return el('table', { id: 'failovers' },
    el('tr', {}, el('th', {}, 'when'), el('th', {}, 'item'), el('th', {}, 'from'), el('th', {}, 'to')),
    failovers.map((f) => el('tr', { 'data-item': f.item },
      el('td', {}, new Date(f.time).toLocaleTimeString()), el('td', {}, (f.shard ? 'shard ' : 'journal ') + f.item),
      el('td', {}, f.from), el('td', {}, f.to))));
}

// ---- Journals ----

function selectorBox(what) {
  const input = el('input', { type: 'text', class: 'selector', id: 'selector', value: app.selector,
    placeholder: 'label selector, e.g. app=clicks or prefix=examples/' });
  const err = el('span', { class: 'error', id: 'selector-error' });
  const apply = () => { app.selector = input.value.trim(); connect(); };
  input.addEventListener('keydown', (e) => { if (e.key === 'Enter') apply(); });
  return el('p', {}, `Filter ${what}: `, input, ' ', el('button', { onclick: apply }, 'Filter'), ' ', err);
}

function journalsPage(main) {
  const live = el('div');
  fill(main, el('h2', {}, 'Journals'), selectorBox('journals'), live);
  return {
    update(v) {
      fill(live, v.fleets.filter((f) => f.kind === 'brokers').map((f) => el('div', { class: 'card' },
        el('h3', {}, 'Brokers ', el('code', {}, f.root)),
        el('table', { id: 'journals' },
          el('tr', {}, ['journal', 'status', 'replication', 'route', 'write head', 'persisted', 'spooled', 'append rate', 'labels'].map((t, i) =>
            el('th', { class: i >= 4 && i <= 7 ? 'num' : '' }, t))),
          (f.journals || []).map((j) => el('tr', { 'data-journal': j.name },
            el('td', {}, el('a', { href: '#/journal/' + journalPath(j.name) }, j.name)),
            el('td', { class: 'status' }, badge(j.status)),
            el('td', { class: 'num' }, j.replication),
            el('td', { class: 'route' }, j.replicas.map((r, i) => el(i ? 'span' : 'strong', { class: r.gone ? 'error' : '' }, (i ? ', ' : '') + r.member))),
            el('td', { class: 'num head' }, j.writeHead === null ? '–' : j.writeHead),
            el('td', { class: 'num persisted' }, j.persisted === null ? '–' : j.persisted),
            el('td', { class: 'num spooled' }, bytes(j.spooled)),
            el('td', { class: 'num rate' }, rate(j.rate)),
            el('td', { class: 'wrap muted' }, j.labels)))))));
    },
  };
}

function findJournal(v, name) {
  for (const f of v.fleets) for (const j of f.journals || []) if (f.kind === 'brokers' && j.name === name) return j;
  return null;
}

function journalPage(main, name) {
  const summary = el('div', { class: 'card', id: 'journal-summary' });
  const rateChart = el('div');
  const specBox = el('div', { class: 'card' }, el('p', { class: 'muted' }, 'Loading the spec…'));
  const frags = el('div', { class: 'card' }, el('p', { class: 'muted' }, 'Loading fragments…'));
  const tail = el('pre', { class: 'tail', id: 'tail' });
  const tailNote = el('p', { class: 'muted', id: 'tail-note' }, 'Connecting…');
  fill(main, el('h2', {}, 'Journal ', el('code', {}, name)), summary,
    el('div', { class: 'card' }, el('h3', {}, 'Append rate'), rateChart),
    el('div', { class: 'card' }, el('h3', {}, 'Live tail'), tailNote, tail),
    el('div', { class: 'grid' }, specBox, frags));
  const abort = new AbortController();
  let tailing = false, lastSeries = 0;

  loadSpec(name, specBox);
  loadFragments(name, frags);

  return {
    update(v) {
      const j = findJournal(v, name);
      if (!j) { fill(summary, el('p', { class: 'muted' }, 'No such journal in the view (yet).')); return; }
      fill(summary, el('table', {},
        el('tr', {}, el('th', {}, 'status'), el('th', { class: 'num' }, 'write head'), el('th', { class: 'num' }, 'append rate'),
          el('th', {}, 'replication'), el('th', {}, 'route (primary first)'), el('th', {}, 'labels')),
        el('tr', {}, el('td', {}, badge(j.status)), el('td', { class: 'num', id: 'journal-head' }, j.writeHead === null ? '–' : j.writeHead),
          el('td', { class: 'num' }, rate(j.rate)), el('td', {}, j.replication),
          el('td', {}, j.replicas.map((r) => r.member + (r.zone ? '' : '')).join(', ')), el('td', { class: 'wrap' }, j.labels))));
      if (!tailing && j.writeHead !== null) {
        tailing = true;
        follow(name, Math.max(0, j.writeHead - 4096), tail, tailNote, abort.signal);
      }
      if (Date.now() - lastSeries > 2000) {
        lastSeries = Date.now();
        getJSON('/console/api/series?journal=' + encodeURIComponent(name))
          .then((s) => fill(rateChart, chart(s.rate, rate, 'append rate'))).catch(() => {});
      }
    },
    unmount() { abort.abort(); },
  };
}

async function loadSpec(name, box) {
  try {
    const spec = await getJSON('/v1/specs/' + journalPath(name));
    const text = el('textarea', { id: 'spec', readonly: !app.view || !app.view.actions }, JSON.stringify(spec, null, 2));
    const out = el('p', { class: 'error-box', id: 'spec-result' });
    const apply = async () => {
      const j = findJournal(app.view, name);
      try {
        const r = await post('/console/api/apply?revision=' + (j ? j.modRevision : 0), text.value, 'application/json');
        out.className = 'ok';
        out.textContent = `Applied at revision ${r.revision}.`;
      } catch (e) { out.className = 'error-box'; out.textContent = e.message; }
    };
    fill(box, el('h3', {}, 'Spec'), text,
      app.view && app.view.actions ? el('p', {}, el('button', { onclick: apply, id: 'spec-apply' }, 'Apply')) : el('p', { class: 'muted' }, 'Read-only: the console\'s actions are disabled.'),
      out);
  } catch (e) {
    fill(box, el('h3', {}, 'Spec'), el('p', { class: 'error' }, e.message));
  }
}

async function loadFragments(name, box) {
  try {
    const r = await getJSON('/v1/fragments/' + journalPath(name));
    const fs = r.fragments || [];
    // The listing ends with the spool being written: what it shows beyond
    // the persisted fragments is on the brokers alone.
    const persisted = Math.max(0, ...fs.filter((i) => i.fragment.store).map((i) => Number(i.fragment.end)));
    const listed = Math.max(persisted, ...fs.map((i) => Number(i.fragment.end)));
    fill(box, el('h3', {}, `Fragments (${fs.length})`),
      el('p', { id: 'persisted' }, `Persisted through offset ${persisted}; ${bytes(listed - persisted)} only spooled on the brokers, not yet in the store.`),
      el('table', { id: 'fragments' },
      el('tr', {}, el('th', { class: 'num' }, 'begin'), el('th', { class: 'num' }, 'end'), el('th', {}, 'codec'), el('th', {}, 'store'), el('th', {}, 'persisted')),
      fs.map((i) => {
        const f = i.fragment;
        return el('tr', {}, el('td', { class: 'num' }, f.begin), el('td', { class: 'num' }, f.end), el('td', {}, f.codec),
          el('td', {}, f.store || el('span', { class: 'muted' }, 'spooled')),
          el('td', {}, Number(f.modTime) ? new Date(Number(f.modTime) * 1000).toLocaleString() : '–'));
      })),
    el('p', {}, el('button', { class: 'secondary', onclick: () => loadFragments(name, box) }, 'Refresh')));
  } catch (e) {
    fill(box, el('h3', {}, 'Fragments'), el('p', { class: 'error' }, e.message));
  }
}

// follow streams a journal's content from offset into pre, as text, or
// as hex once a byte is not text, keeping the last 64 KiB shown.
async function follow(name, offset, pre, note, signal) {
  const keep = 64 * 1024;
  let hex = false, shown = '';
  try {
    const resp = await fetch(`/v1/journals/${journalPath(name)}?offset=${offset}&block=true`, { headers: headers(), signal });
    if (!resp.ok) {
      const body = await resp.json().catch(() => ({}));
      note.textContent = body.error || resp.statusText;
      return;
    }
    note.textContent = `From offset ${resp.headers.get('Quire-Offset')}; new content appears as it is appended.`;
    const reader = resp.body.getReader();
    const text = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (!hex && value.some((b) => b < 9 || (b > 13 && b < 32))) hex = true;
      shown += hex ? Array.from(value, (b) => b.toString(16).padStart(2, '0')).join(' ') + ' ' : text.decode(value, { stream: true });
      if (shown.length > keep) shown = shown.slice(shown.length - keep);
      pre.textContent = shown;
      pre.scrollTop = pre.scrollHeight;
    }
  } catch (e) {
    if (!signal.aborted) note.textContent = 'The tail stopped: ' + e.message;
  }
}

// ---- Shards ----

function shardsPage(main) {
  const live = el('div');
  fill(main, el('h2', {}, 'Shards'), selectorBox('shards'), live);
  return {
    update(v) {
      const apps = v.fleets.filter((f) => f.kind === 'consumers');
      if (!apps.length) { fill(live, el('p', { class: 'muted' }, 'No consumer application under ' + v.prefix)); return; }
      fill(live, apps.map((f) => el('div', { class: 'card', 'data-fleet': f.root },
        el('h3', {}, 'Application ', el('code', {}, f.root)),
        chart(f.series, bytes, 'total lag'),
        el('table', { class: 'shards' },
          el('tr', {}, ['shard', 'status', 'primary', 'replicas', 'lag', 'lag time', 'read rate', 'txn/s', 'error', ''].map((t, i) =>
            el('th', { class: i >= 4 && i <= 7 ? 'num' : '' }, t))),
          (f.shards || []).map((s) => el('tr', { 'data-shard': s.id },
            el('td', {}, s.id),
            el('td', { class: 'status' }, badge(s.status)),
            el('td', { class: 'primary' }, s.primary || '–'),
            el('td', { class: 'replicas' }, s.replicas.map((r, i) => el('span', {}, i ? ', ' : '', r.member, ' ', badge(r.status || 'IDLE')))),
            el('td', { class: 'num lag' }, bytes(s.lagBytes)),
            el('td', { class: 'num lagtime' }, seconds(s.lagSeconds, s.lagAtLeast)),
            el('td', { class: 'num' }, rate(s.rate)),
            el('td', { class: 'num txns' }, s.txnRate ? s.txnRate.toFixed(1) : '0'),
            el('td', { class: 'wrap error' }, s.error || s.statError || ''),
            el('td', {}, v.actions && s.status === 'FAILED' ? el('button', { class: 'unassign', onclick: () => unassign(f.root, s.id) }, 'Unassign') : null)))))),
      el('div', { class: 'card' }, el('h3', {}, 'Recent failovers'), failoverTable(v.failovers.filter((x) => x.shard))));
    },
  };
}

async function unassign(root, shard) {
  if (!confirm(`Unassign the FAILED shard ${shard}? The allocator assigns it afresh.`)) return;
  try {
    await post('/console/api/unassign', new URLSearchParams({ root, shard }));
  } catch (e) { alert(e.message); }
}

// ---- Allocation ----

function allocationPage(main) {
  const live = el('div');
  const whatifs = {}; // by root: the what-if section, kept across updates
  fill(main, el('h2', {}, 'Allocation'), live);
  return {
    update(v) {
      fill(live, v.fleets.map((f) => {
        if (!whatifs[f.root]) whatifs[f.root] = whatIf(f);
        return el('div', { class: 'card', 'data-fleet': f.root },
          el('h3', {}, `${kindTitle(f)} `, el('code', {}, f.root), el('span', { class: 'muted' }, ` — ${f.moving} items moving, leader ${f.leader || 'none'}`)),
          matrix(f), whatifs[f.root].section);
      }));
      for (const f of v.fleets) whatifs[f.root].members(f.members);
    },
  };
}

const matrixRows = 200;

function matrix(f) {
  const items = (f.journals || f.shards || []).map((i) => ({ id: i.name || i.id, replicas: i.replicas }));
  const members = f.members.map((m) => m.name);
  for (const it of items) for (const r of it.replicas) if (!members.includes(r.member)) members.push(r.member);
  return el('div', {},
    el('table', { class: 'matrix', id: 'matrix-' + f.root },
      el('tr', {}, el('th', { class: 'item' }, 'item'), members.map((m) => el('th', { class: 'member' }, m))),
      items.slice(0, matrixRows).map((it) => el('tr', { 'data-item': it.id }, el('th', { class: 'item' }, it.id),
        members.map((m) => {
          const r = it.replicas.find((x) => x.member === m);
          if (!r) return el('td', {});
          return el('td', { class: (r.slot === 0 ? 'P' : 'R') + (r.gone ? ' gone' : ''), title: `slot ${r.slot}${r.status ? ' ' + r.status : ''}` }, r.slot === 0 ? 'P' : r.slot);
        })))),
    items.length > matrixRows ? el('p', { class: 'muted' }, `The first ${matrixRows} of ${items.length} items.`) : null,
    el('p', { class: 'muted' }, 'P: primary (slot 0); a number: the slot of another replica.'));
}

// whatIf is a fleet's what-if form and its plan, which live updates
// leave alone but for the list of members to drain.
function whatIf(f) {
  const drains = el('span');
  const add = el('input', { type: 'text', class: 'add', placeholder: 'ZONE#SUFFIX:LIMIT' });
  const repl = el('input', { type: 'text', class: 'replication', placeholder: 'ITEM=N' });
  const result = el('div', { class: 'plan' });
  let known = '';
  const plan = async () => {
    const q = new URLSearchParams({ root: f.root });
    for (const c of drains.querySelectorAll('input:checked')) q.append('drain', c.value);
    for (const a of add.value.split(/[\s,]+/).filter(Boolean)) q.append('add', a);
    for (const r of repl.value.split(/[\s,]+/).filter(Boolean)) q.append('replication', r);
    try {
      showPlan(result, await getJSON('/console/api/plan?' + q));
    } catch (e) { fill(result, el('p', { class: 'error-box' }, e.message)); }
  };
  return {
    section: el('div', { class: 'whatif' }, el('h3', {}, 'What if'),
      el('p', {}, 'Drain: ', drains), el('p', {}, 'Add members: ', add, ' Replication: ', repl, ' ', el('button', { class: 'plan-button', onclick: plan }, 'Plan')),
      result),
    members(ms) {
      const key = ms.map((m) => m.name).join(' ');
      if (key === known) return;
      known = key;
      const checked = new Set(Array.from(drains.querySelectorAll('input:checked'), (c) => c.value));
      fill(drains, ms.map((m) => el('label', {}, el('input', { type: 'checkbox', value: m.name, checked: checked.has(m.name) }), ' ', m.name)));
    },
  };
}

function showPlan(box, r) {
  const p = r.plan, moves = [];
  for (const a of p.removed || []) moves.push(['remove', a]);
  for (const a of p.added || []) moves.push(['add', a]);
  fill(box, el('p', {}, `At revision ${r.revision}: ${(p.added || []).length} replicas added, ${(p.removed || []).length} removed; `,
    `${p.assignments.length} assignments in the plan.`),
  moves.length ? el('table', { class: 'moves' },
    el('tr', {}, el('th', {}, 'move'), el('th', {}, 'item'), el('th', { class: 'num' }, 'slot'), el('th', {}, 'member')),
    moves.map(([kind, a]) => el('tr', { class: 'move', 'data-move': `${kind} ${a.item} ${a.slot} ${a.zone}#${a.suffix}` },
      el('td', {}, kind), el('td', {}, a.item), el('td', { class: 'num' }, a.slot), el('td', {}, `${a.zone}#${a.suffix}`))))
    : el('p', { class: 'muted' }, 'Nothing would move.'));
}

// ---- Routing and the event stream ----

function route() {
  const hash = location.hash.replace(/^#\/?/, '');
  const [page, ...rest] = hash.split('/');
  const arg = rest.map(decodeURIComponent).join('/');
  for (const a of document.querySelectorAll('nav a')) {
    a.classList.toggle('active', a.dataset.page === (page === 'journal' ? 'journals' : page || 'overview'));
  }
  if (app.page && app.page.unmount) app.page.unmount();
  const main = document.getElementById('main');
  switch (page) {
    case 'journals': app.page = journalsPage(main); break;
    case 'journal': app.page = journalPage(main, arg); break;
    case 'shards': app.page = shardsPage(main); break;
    case 'allocation': app.page = allocationPage(main); break;
    default: app.page = overviewPage(main);
  }
  if (app.view) app.page.update(app.view);
}

function connect() {
  if (app.events) app.events.close();
  const status = document.getElementById('status');
  const url = '/console/api/events' + (app.selector ? '?selector=' + encodeURIComponent(app.selector) : '');
  app.events = new EventSource(url);
  app.events.addEventListener('view', (e) => {
    app.view = JSON.parse(e.data);
    status.textContent = 'live · ' + new Date(app.view.time).toLocaleTimeString();
    status.className = 'status';
    const err = document.getElementById('selector-error');
    if (err) err.textContent = '';
    app.page.update(app.view);
  });
  app.events.onerror = async () => {
    status.textContent = 'reconnecting…';
    if (app.selector) {
      // A bad selector is refused with a 400 before the stream begins.
      const r = await fetch('/console/api/view?selector=' + encodeURIComponent(app.selector));
      if (r.status === 400) {
        const err = document.getElementById('selector-error');
        if (err) err.textContent = (await r.json()).error;
        app.selector = '';
        connect();
      }
    }
  };
}

const token = document.getElementById('token');
token.value = sessionStorage.getItem('quire-token') || '';
token.addEventListener('change', () => sessionStorage.setItem('quire-token', token.value.trim()));
window.addEventListener('hashchange', route);
route();
connect();
