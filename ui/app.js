// The /ui/ page: reads the metrics listener's /api/ and draws it. Every value from the cluster goes into
// the page as text (Node.append of a string, textContent), never as markup; the server's
// Content-Security-Policy forbids inline script besides. It polls /api/overview with the last ETag (the
// view's generation): the server answers 304 and nothing else is fetched while nothing changed.
'use strict';

const POLL_MS = 2000;
let etag = null;
let last = null;  // {overview, nodes, pods, quotas} as last drawn

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else e.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function table(target, head, rows, empty) {
  const t = document.getElementById(target);
  t.replaceChildren();
  if (rows.length === 0) {
    t.append(el('tr', {}, el('td', {class: 'empty'}, empty)));
    return;
  }
  t.append(el('thead', {}, el('tr', {}, head.map((h) => el('th', {}, h)))));
  t.append(el('tbody', {}, rows));
}

function meter(used, total) {
  const pct = total > 0 ? Math.min(100, Math.round((100 * used) / total)) : 0;
  const bar = el('span', {class: 'meter', title: pct + '%'}, el('span'));
  bar.firstChild.style.width = pct + '%';  // a style property, not an inline style attribute (CSP)
  return el('td', {class: 'num'}, bar, `${used} / ${total}`);
}

function num(v) { return el('td', {class: 'num'}, v); }

function age(created) {
  const t = Date.parse(created);
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 120) return s + 's';
  if (s < 7200) return Math.round(s / 60) + 'm';
  if (s < 172800) return Math.round(s / 3600) + 'h';
  return Math.round(s / 86400) + 'd';
}

function plural(n, one, many) { return n === 1 ? one : many; }

function drawOverview(o) {
  const totals = document.getElementById('totals');
  totals.replaceChildren(
      el('span', {id: 'total-nodes'}, o.nodes), plural(o.nodes, ' node, ', ' nodes, '),
      el('span', {id: 'total-pods'}, o.pods), plural(o.pods, ' pod holding', ' pods holding'), ' devices, ',
      el('span', {id: 'total-refused'}, o.podsRefused),
      plural(o.podsRefused, ' pod waiting', ' pods waiting'), ' for devices.');
  table('vendors',
      ['vendor', 'nodes', 'blocked', 'devices', 'unhealthy', 'memory MiB', 'cores %', 'shares', 'pods',
        'waiting', 'refused'],
      o.vendors.map((v) => el('tr', {'data-vendor': v.vendor},
          el('td', {}, v.vendor), num(v.nodes),
          el('td', {class: v.nodesBlocked ? 'num blocked' : 'num'}, v.nodesBlocked), num(v.devices),
          el('td', {class: v.devicesUnhealthy ? 'num unhealthy' : 'num'}, v.devicesUnhealthy),
          meter(v.memoryMiB.used, v.memoryMiB.total), meter(v.cores.used, v.cores.total),
          meter(v.tasks.used, v.tasks.total), num(v.pods), num(v.podsWaiting),
          el('td', {class: v.podsRefused ? 'num blocked' : 'num'}, v.podsRefused))),
      'No node publishes devices of a vendor this scheduler serves.');
}

function drawRefused(pods) {
  table('refused', ['pod', 'refused', 'nodes', 'last reasons', ''],
      pods.refused.map((p) => {
        const key = p.namespace + '/' + p.name;
        const reasons = el('ul', {class: 'reasons'},
            p.reasons.map((r) => el('li', {}, r.node + ': ' + r.reason)),
            p.nodes > p.reasons.length ? el('li', {}, `… and ${p.nodes - p.reasons.length} more`) : null);
        const why = el('button', {type: 'button'}, 'Why?');
        why.addEventListener('click', () => explain(p.namespace, p.name));
        return el('tr', {'data-pod': key}, el('td', {}, key), el('td', {}, age(p.at) + ' ago'),
            num(p.nodes), el('td', {}, reasons), el('td', {}, why));
      }),
      'No pod is waiting for devices.');
}

function drawHolders(pods) {
  table('holders', ['pod', 'node', 'devices', 'phase', 'age'],
      pods.holders.map((p) => el('tr', {'data-pod': p.namespace + '/' + p.name},
          el('td', {}, p.namespace + '/' + p.name), el('td', {}, p.node),
          el('td', {}, p.devices.map((d) => el('div', {},
              `container ${d.container}: ${d.vendor} ${d.id}, ${d.memoryMiB} MiB, ${d.cores}% cores`))),
          el('td', {}, p.phase), el('td', {}, age(p.created)))),
      'No pod holds devices.');
}

// card ID on node -> pods holding it, from the holders' devices.
function podsByCard(pods) {
  const by = new Map();
  for (const p of pods.holders) {
    for (const d of p.devices) {
      const k = p.node + '\u0000' + d.id;
      if (!by.has(k)) by.set(k, []);
      by.get(k).push(`${p.namespace}/${p.name} (${d.memoryMiB} MiB, ${d.cores}%)`);
    }
  }
  return by;
}

function drawNodes(nodes, pods) {
  const filter = document.getElementById('node-filter').value.trim().toLowerCase();
  const byCard = podsByCard(pods);
  const list = document.getElementById('node-list');
  list.replaceChildren();
  for (const n of nodes.nodes) {
    const cards = n.cards.map((c) => ({c, holders: byCard.get(n.node + '\u0000' + c.id) || []}));
    const text =
        [n.node, ...cards.flatMap(({c, holders}) => [c.id, c.type, ...holders])].join(' ').toLowerCase();
    if (filter && !text.includes(filter)) continue;
    const facts = [];
    for (const [vendor, mib] of Object.entries(n.largestFreeMiB)) {
      facts.push(`largest free ${vendor}: ${mib} MiB`);
    }
    if (n.allocationsInFlight) facts.push(`${n.allocationsInFlight} allocations in flight`);
    for (const l of n.locks) {
      const holder = l.holder || '(no owner)';
      facts.push(l.holder === null ? `lock ${l.annotation} unreadable: ${l.value}`
                                   : `lock ${l.annotation} held by ${holder} since ${l.since}`);
    }
    const blocked =
        Object.entries(n.blocked).map(([v, why]) => el('div', {class: 'blocked'}, `${v} blocked: ${why}`));
    const rows = cards.map(({c, holders}) => el('tr', {},
        el('td', {}, c.id), el('td', {}, c.vendor), el('td', {}, c.type), num(c.numa),
        el('td', {class: c.health ? '' : 'unhealthy'}, c.health ? 'healthy' : 'unhealthy'),
        meter(c.memoryMiB.used, c.memoryMiB.total), meter(c.cores.used, c.cores.total),
        meter(c.tasks.used, c.tasks.total), el('td', {}, holders.map((h) => el('div', {}, h)))));
    list.append(el('div', {class: 'node', 'data-node': n.node},
        el('h3', {}, n.node), el('div', {class: 'facts'}, facts.join(' · ')), blocked,
        el('table', {}, el('thead', {}, el('tr', {},
            ['card', 'vendor', 'type', 'NUMA', 'health', 'memory MiB', 'cores %', 'shares', 'pods']
                .map((h) => el('th', {}, h)))), el('tbody', {}, rows))));
  }
  if (!list.firstChild) list.append(el('p', {class: 'empty'}, filter ? 'No node matches.' : 'No node.'));
}

// The configured shapes (--capacity-shape): how many such pods still fit, in all; hidden when none.
function drawCapacity(c) {
  const section = document.getElementById('capacity');
  section.hidden = c.shapes.length === 0;
  table('capacity-table', ['shape', 'vendor', 'each pod', 'still fit'],
      c.shapes.map((s) => el('tr', {'data-shape': s.shape}, el('td', {}, s.shape), el('td', {}, s.vendor),
          el('td', {}, `${s.count} × ${s.memoryMiB} MiB` + (s.cores ? `, ${s.cores}% cores` : '')),
          num(s.fits))),
      'No shape configured.');
}

function drawQuotas(q) {
  table('quota-table', ['namespace', 'resource', 'used / limit'],
      q.quotas.map((e) => el('tr', {}, el('td', {}, e.namespace), el('td', {}, e.resource),
          e.limit === null ? el('td', {class: 'num'}, `${e.used} (no limit)`) : meter(e.used, e.limit))),
      'No namespace uses devices under a ResourceQuota.');
}

// A Kubernetes name: what may be asked of /api/explain (a link's hash is anyone's to write).
const NAME = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;
let asking = 0;  // the newest explanation asked: a late answer of an older one is not drawn

async function explain(ns, name) {
  const box = document.getElementById('explanation');
  const ask = ++asking;
  box.hidden = false;
  box.replaceChildren(el('p', {}, `Asking why ${ns}/${name} is pending…`));
  location.hash = 'explain=' + encodeURIComponent(ns) + '/' + encodeURIComponent(name);
  let r;
  let e;
  try {
    const path = `/api/explain/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`;
    r = await fetch(path, {cache: 'no-store'});
    e = r.ok ? await r.json() : await r.text();
  } catch (err) {
    r = {ok: false};
    e = 'cannot ask the scheduler: ' + err.message;
  }
  if (ask !== asking) return;
  if (!r.ok) {
    box.replaceChildren(el('p', {class: 'unhealthy'}, e));
    return;
  }
  // replaceChildren would show a null as the text "null": the parts go through el(), which skips it.
  box.replaceChildren(el('div', {},
      el('h3', {}, 'Why ' + e.pod + ' is pending'),
      e.error ? el('p', {class: 'unhealthy'}, e.error) : null,
      el('p', {}, 'Requests: ', e.requests.join('; ')),
      el('pre', {id: 'explain-nodes'}, e.nodes.map((n) => `${n.node}  ${n.summary}`).join('\n')),
      el('ul', {id: 'explain-hints'}, e.hints.map((h) => el('li', {}, h)))));
  box.dataset.pod = e.pod;
}

function status(text, error) {
  const s = document.getElementById('status');
  s.textContent = text;
  s.className = error ? 'error' : '';
}

// The body of `path` and the generation it was computed at (its ETag).
async function json(path) {
  const r = await fetch(path, {cache: 'no-store'});
  if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`);
  return {tag: r.headers.get('ETag'), body: await r.json()};
}

function draw() {
  drawOverview(last.overview);
  drawRefused(last.pods);
  drawHolders(last.pods);
  drawNodes(last.nodes, last.pods);
  drawQuotas(last.quotas);
  drawCapacity(last.capacity);
}

async function poll() {
  try {
    const r = await fetch('/api/overview', {cache: 'no-store', headers: etag ? {'If-None-Match': etag} : {}});
    if (r.status === 304) {
      status('up to date at ' + new Date().toLocaleTimeString());
    } else if (!r.ok) {
      status(`the scheduler answers ${r.status}: ${await r.text()}`, true);
    } else {
      const tag = r.headers.get('ETag');
      const overview = await r.json();
      const parts = await Promise.all(
          [json('/api/nodes'), json('/api/pods'), json('/api/quotas'), json('/api/capacity')]);
      const [nodes, pods, quotas, capacity] = parts.map((p) => p.body);
      last = {overview, nodes, pods, quotas, capacity};
      // The server computes each answer at most once a second: one of an older generation than the overview's
      // is read again at the next poll rather than kept until something else changes.
      etag = parts.every((p) => p.tag === tag) ? tag : null;
      draw();
      document.body.dataset.generation = tag || '';
      document.body.dataset.state = 'ready';
      status('updated at ' + new Date().toLocaleTimeString());
    }
  } catch (e) {
    status('cannot read the scheduler: ' + e.message, true);
  }
  setTimeout(poll, POLL_MS);
}

document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('node-filter').addEventListener('input', () => {
    if (last) drawNodes(last.nodes, last.pods);
  });
  poll();
  const m = /^#explain=([^/]+)\/(.+)$/.exec(location.hash);
  let ns = '';
  let name = '';
  try {
    if (m) [ns, name] = [decodeURIComponent(m[1]), decodeURIComponent(m[2])];
  } catch (err) {
    status('the link names no pod: ' + err.message, true);
  }
  if (NAME.test(ns) && NAME.test(name)) explain(ns, name);
});
