// deploycoord web console: keeps server-rendered pages current without
// reloading them. The server renders everything (pages work with scripts
// off); this script only follows the event feed and swaps in the parts the
// server renders again. No framework, no build step.
(function () {
  "use strict";
  var body = document.body;
  var kind = body.dataset.live;
  if (!kind) return;
  var root = body.dataset.root;
  var fragmentURL = body.dataset.fragment;
  var cursor = body.dataset.cursor || "";
  var statusEl = document.getElementById("live-status");
  var pendingTenants = new Set();
  var dirty = false, inFlight = false, timer = null, lastFetch = 0;
  var MIN_GAP = 500, POLL_EVERY = 3000;

  function say(text) { if (statusEl) statusEl.textContent = text; }

  // rowsOnPage reports whether a tenant has a row on this page.
  function onPage(tenant) {
    return document.getElementById("row-" + tenant) !== null;
  }

  // note takes one batch of changes from the feed.
  function note(ch) {
    if (ch.cursor) cursor = ch.cursor;
    if (!ch.events) return;
    if (kind === "plan") {
      (ch.tenants || []).forEach(function (t) { if (onPage(t)) pendingTenants.add(t); });
    }
    dirty = true;
    schedule();
  }

  function schedule() {
    if (timer || inFlight) return;
    var wait = Math.max(100, MIN_GAP - (Date.now() - lastFetch));
    timer = setTimeout(function () { timer = null; refresh(); }, wait);
  }

  // refresh asks the server for the page's live parts and swaps them in.
  function refresh() {
    if (!dirty) return;
    dirty = false;
    inFlight = true;
    lastFetch = Date.now();
    var url = fragmentURL;
    var tenants = Array.from(pendingTenants).slice(0, 100);
    tenants.forEach(function (t) { pendingTenants.delete(t); });
    tenants.forEach(function (t) { url += "&tenant=" + encodeURIComponent(t); });
    if (pendingTenants.size > 0) dirty = true;
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (res) {
        if (res.redirected || res.status === 401) { throw new Error("signed out"); }
        if (!res.ok) { throw new Error("HTTP " + res.status); }
        return res.text();
      })
      .then(swap)
      .catch(function (err) {
        say(err.message === "signed out" ? "Your session has ended: reload the page to sign in." : "Could not refresh (" + err.message + "); retrying.");
        if (err.message !== "signed out") { dirty = true; }
      })
      .finally(function () { inFlight = false; if (dirty) schedule(); });
  }

  // swap replaces each element of the fragment marked data-swap with the
  // element of the same id on the page, keeping what the user set there
  // (ticked boxes, opened details).
  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    doc.querySelectorAll("[data-swap][id]").forEach(function (fresh) {
      var old = document.getElementById(fresh.id);
      if (!old) return;
      old.querySelectorAll("input[type=checkbox]:checked").forEach(function (box) {
        var same = fresh.querySelector('input[type=checkbox][name="' + box.name + '"][value="' + CSS.escape(box.value) + '"]');
        if (same) same.checked = true;
      });
      var opened = old.querySelectorAll("details[open]").length;
      if (opened) fresh.querySelectorAll("details").forEach(function (d) { d.open = true; });
      var changed = old.textContent !== fresh.textContent;
      var node = document.importNode(fresh, true);
      if (changed && node.tagName === "TR") node.classList.add("changed");
      old.replaceWith(node);
    });
    say("Live: updated " + new Date().toLocaleTimeString() + ".");
  }

  function feedQuery() {
    var q = "after=" + encodeURIComponent(cursor);
    if (body.dataset.plan) q += "&planId=" + encodeURIComponent(body.dataset.plan);
    if (body.dataset.tenant) q += "&tenantId=" + encodeURIComponent(body.dataset.tenant);
    return q;
  }

  // poll is the fallback when event streams do not work (an old browser,
  // a proxy that buffers, the server's stream limit): the same answer as
  // JSON every few seconds.
  function poll() {
    say("Live: checking for changes every " + POLL_EVERY / 1000 + "s.");
    var tick = function () {
      fetch(root + "events?" + feedQuery(), { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (res) { return res.ok ? res.json() : null; })
        .then(function (ch) { if (ch) note(ch); })
        .catch(function () { say("Live: the server does not answer; retrying."); })
        .finally(function () { setTimeout(tick, POLL_EVERY); });
    };
    tick();
  }

  function follow() {
    if (kind === "instances") {
      // Instances do not publish events: their page is read again.
      say("Live: refreshed every 5s.");
      setInterval(function () { dirty = true; schedule(); }, 5000);
      return;
    }
    if (!window.EventSource) { poll(); return; }
    // A browser opens at most six connections to a server over HTTP/1.1
    // and each stream holds one: with a stream per tab, the sixth console
    // tab would not even load. A page nobody sees gives its stream back,
    // and follows on from its cursor when it is seen again (the first
    // message then says what changed meanwhile).
    var es = null, polling = false;
    function open() {
      var opened = false, failures = 0;
      es = new EventSource(root + "events?" + feedQuery());
      es.addEventListener("open", function () { opened = true; failures = 0; say("Live: following the event feed."); });
      es.addEventListener("changes", function (e) { note(JSON.parse(e.data)); });
      es.addEventListener("error", function () {
        failures++;
        if (!opened || failures >= 3) {
          es.close();
          es = null;
          polling = true;
          poll();
        } else {
          say("Live: reconnecting…");
        }
      });
    }
    document.addEventListener("visibilitychange", function () {
      if (polling) return;
      if (document.visibilityState === "hidden") {
        if (es) { es.close(); es = null; }
        say("Live: paused while the page is hidden.");
      } else if (!es) {
        open();
      }
    });
    if (document.visibilityState === "hidden") {
      say("Live: paused while the page is hidden.");
    } else {
      open();
    }
  }

  // The retry mode "from stage" needs its stage; the stage list means
  // nothing otherwise.
  document.querySelectorAll("form").forEach(function (form) {
    var stage = form.querySelector("select[name=stage]");
    if (!stage) return;
    var update = function () {
      var mode = form.querySelector("[name=mode]:checked, select[name=mode]");
      stage.disabled = !mode || mode.value !== "stage";
    };
    form.addEventListener("change", update);
    update();
  });

  follow();
})();
