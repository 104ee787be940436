// anvil console: the little JavaScript it has. Every page works without it;
// this only keeps pages live (fragments re-fetched, operation logs streamed
// over Server-Sent Events), copies to the clipboard, and stops double
// submits.
(function () {
  'use strict';

  // ---- live fragments --------------------------------------------------
  // An element with data-live="<name>" and an id is re-fetched from the
  // page's own URL with the header X-Console-Fragment: <name> every
  // data-live-interval ms, and replaced. A fragment that comes back without
  // data-live (a rollout that finished) stops the polling.
  function schedule(el) {
    var ms = parseInt(el.dataset.liveInterval || '3000', 10);
    el._liveTimer = setTimeout(function () { refresh(el.id); }, ms);
  }

  function refresh(id) {
    var el = document.getElementById(id);
    if (!el || !el.dataset.live) { return Promise.resolve(); }
    clearTimeout(el._liveTimer);
    if (document.hidden) { schedule(el); return Promise.resolve(); }
    // Leave the element alone while the keyboard focus is inside it.
    if (el.contains(document.activeElement) && document.activeElement !== document.body) {
      schedule(el);
      return Promise.resolve();
    }
    return fetch(location.href, {
      headers: { 'X-Console-Fragment': el.dataset.live },
      credentials: 'same-origin', cache: 'no-store', redirect: 'manual'
    }).then(function (res) {
      if (res.type === 'opaqueredirect') { // signed out: stop, the next click signs in again
        return null;
      }
      if (!res.ok) { throw new Error('the console answered ' + res.status); }
      return res.text();
    }).then(function (html) {
      if (html === null) { return; }
      var tpl = document.createElement('template');
      tpl.innerHTML = html.trim();
      var fresh = tpl.content.getElementById ? tpl.content.getElementById(id) : tpl.content.querySelector('#' + id);
      var cur = document.getElementById(id);
      if (!fresh || !cur) { return; }
      cur.replaceWith(fresh);
      document.dispatchEvent(new CustomEvent('console:refreshed', { detail: { id: id } }));
      if (fresh.dataset.live) { schedule(fresh); }
    }).catch(function (err) {
      var again = document.getElementById(id);
      if (again) {
        again.setAttribute('data-live-error', String(err));
        schedule(again);
      }
    });
  }

  function startLive() {
    document.querySelectorAll('[data-live][id]').forEach(schedule);
    document.addEventListener('visibilitychange', function () {
      if (!document.hidden) {
        document.querySelectorAll('[data-live][id]').forEach(function (el) { refresh(el.id); });
      }
    });
  }

  // ---- operation logs over Server-Sent Events --------------------------
  function pad(n) { return (n < 10 ? '0' : '') + n; }
  function ts(iso) {
    var d = new Date(iso);
    if (isNaN(d)) { return iso; }
    return d.getUTCFullYear() + '-' + pad(d.getUTCMonth() + 1) + '-' + pad(d.getUTCDate()) + ' ' +
      pad(d.getUTCHours()) + ':' + pad(d.getUTCMinutes()) + ':' + pad(d.getUTCSeconds()) + 'Z';
  }

  function span(cls, text) {
    var s = document.createElement('span');
    s.className = cls;
    s.textContent = text;
    return s;
  }

  // entry builds a list item like the server's "logentry" template.
  function entry(e) {
    var li = document.createElement('li');
    var t = document.createElement('time');
    t.dateTime = e.at;
    t.textContent = ts(e.at);
    li.appendChild(t);
    if (e.node) { li.append(' '); li.appendChild(span('node', e.node)); }
    if (e.step) { li.append(' '); li.appendChild(span('step', e.step)); }
    li.append(' ');
    li.appendChild(span('outcome o-' + e.outcome, e.outcome));
    if (e.message) { li.append(': ' + e.message); }
    return li;
  }

  function stream(ol) {
    var state = document.getElementById('oplog-state');
    var target = ol.dataset.refresh;
    var pending = null;
    function refreshSoon() {
      if (!target || pending) { return; }
      pending = setTimeout(function () { pending = null; refresh(target); }, 400);
    }
    function say(text) { if (state) { state.textContent = text; } }
    var es = new EventSource(ol.dataset.sse + '?after=' + encodeURIComponent(ol.dataset.after || '0'));
    es.onmessage = function (ev) {
      var atBottom = ol.scrollTop + ol.clientHeight >= ol.scrollHeight - 24;
      try { ol.appendChild(entry(JSON.parse(ev.data))); } catch (err) { return; }
      ol.dataset.after = String(parseInt(ev.lastEventId || '0', 10) + 1);
      if (atBottom) { ol.scrollTop = ol.scrollHeight; }
      refreshSoon();
    };
    es.addEventListener('status', function (ev) {
      try { say('Status: ' + JSON.parse(ev.data).status + ' (live)'); } catch (err) { /* keep the last */ }
      refreshSoon();
    });
    es.addEventListener('end', function (ev) {
      es.close();
      var st = '';
      try { st = JSON.parse(ev.data).status; } catch (err) { /* none */ }
      say('Finished: ' + st + '. The log is complete.');
      document.querySelectorAll('.live-badge').forEach(function (d) { d.remove(); });
      ol.setAttribute('data-ended', st);
      if (target) { refresh(target); }
    });
    es.addEventListener('error', function (ev) {
      if (ev.data) { // the API's problem: the stream ended
        es.close();
        var p = {};
        try { p = JSON.parse(ev.data); } catch (err) { /* none */ }
        say('The live log stopped: ' + (p.detail || p.title || 'an error') + '. Reload the page to resume it.');
      } else if (es.readyState === EventSource.CONNECTING) {
        say('Connection lost; reconnecting…');
      } else {
        say('The live log stopped (the console refused the stream). Reload the page to resume it.');
      }
    });
  }

  // ---- copy buttons and double submits ----------------------------------
  document.addEventListener('click', function (ev) {
    var b = ev.target.closest ? ev.target.closest('[data-copy]') : null;
    if (!b) { return; }
    var input = document.querySelector(b.dataset.copy);
    if (!input) { return; }
    input.select();
    var done = function () {
      b.textContent = 'Copied';
      setTimeout(function () { b.textContent = 'Copy'; }, 2000);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(input.value).then(done, function () { document.execCommand('copy'); done(); });
    } else {
      document.execCommand('copy');
      done();
    }
  });

  document.addEventListener('submit', function (ev) {
    var f = ev.target;
    if ((f.method || '').toLowerCase() !== 'post') { return; }
    if (f.dataset.submitting) { ev.preventDefault(); return; }
    f.dataset.submitting = '1';
  });

  document.addEventListener('DOMContentLoaded', function () {
    startLive();
    document.querySelectorAll('ol[data-sse]').forEach(stream);
  });
}());
