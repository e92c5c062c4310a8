// The console's own script: the live updates (one stream per browser, shared by its tabs
// through hub-worker.js), whether they are live, the jobs list held still under the
// pointer, and the confirmation of destructive actions.
(function () {
  "use strict";
  var state = "connecting";
  var heard = Date.now();
  var stallMs = 40000;

  function show(next, text) {
    state = next;
    var el = document.getElementById("live-state");
    if (el) { el.textContent = text; }
    document.body.dataset.live = next;
  }

  // A live part that must not move while it is used (data-hold: the jobs list) waits
  // while the pointer is on it or the focus in it, and refreshes when left.
  function held(part) {
    return part.hasAttribute("data-hold") &&
      (part.matches(":hover") || part.contains(document.activeElement));
  }

  function hold(part) {
    part.dataset.waiting = "1";
    var note = part.parentNode.querySelector(".held-note");
    if (note) { note.hidden = false; }
  }

  function refresh() {
    document.querySelectorAll(".live-part").forEach(function (part) {
      if (held(part)) { hold(part); } else { htmx.trigger(part, "hub"); }
    });
  }

  // A refresh asked for before the pointer came is not swapped in either.
  document.addEventListener("htmx:beforeSwap", function (e) {
    var part = e.detail.target;
    if (part && part.classList.contains("live-part") && held(part)) {
      e.detail.shouldSwap = false;
      hold(part);
    }
  });

  function release(e) {
    var part = e.currentTarget;
    if (part.dataset.waiting && !held(part)) {
      delete part.dataset.waiting;
      var note = part.parentNode.querySelector(".held-note");
      if (note) { note.hidden = true; }
      htmx.trigger(part, "hub");
    }
  }

  // "open" alone is not live: the server's first event comes at once on a live stream.
  function hear(message) {
    var type = message.type;
    if (type === "open") { heard = Date.now(); }
    else if (type === "hub") { heard = Date.now(); show("open", "live"); refresh(); }
    else if (type === "beat") { heard = Date.now(); if (state !== "open") { show("open", "live"); } }
    else if (type === "stalled") { show("stalled", "not live"); }
    else if (type === "error") { show("error", "not live: reconnecting…"); }
  }

  function own(url) {  // a browser without shared workers: a stream of the tab's own
    var source = new EventSource(url);
    source.onopen = function () { hear({type: "open"}); };
    source.onerror = function () { hear({type: "error"}); };
    source.addEventListener("hub", function (e) { hear({type: "hub", version: e.data}); });
    source.addEventListener("beat", function () { hear({type: "beat"}); });
  }

  function start() {
    var meta = document.querySelector("meta[name=hubstore-live]");
    if (!meta) { return; }
    stallMs = Number(meta.dataset.stallMs) || stallMs;
    document.querySelectorAll(".live-part[data-hold]").forEach(function (part) {
      part.addEventListener("mouseleave", release);
      part.addEventListener("focusout", function (e) { setTimeout(function () { release(e); }, 0); });
    });
    var url = meta.dataset.events;
    if (window.SharedWorker) {
      var worker = new SharedWorker(meta.dataset.worker, {name: "hubstore-console"});
      worker.port.onmessage = function (m) { hear(m.data || {}); };
      worker.port.start();
      worker.port.postMessage({type: "hello", url: url, stallMs: stallMs});
      window.addEventListener("pagehide", function () { worker.port.postMessage({type: "bye"}); });
    } else {
      own(url);
    }
    setInterval(function () {  // nothing heard, not even a beat: say so
      if (state !== "stalled" && state !== "error" && Date.now() - heard > stallMs) {
        show("stalled", "not live");
      }
    }, 1000);
  }

  // A live part counts its refreshes (data-refreshed): the first comes with the event
  // that every page hears when it connects, so a page has settled once each part has one.
  document.addEventListener("htmx:afterSettle", function (e) {
    var part = e.target;
    if (part && part.classList && part.classList.contains("live-part")) {
      part.dataset.refreshed = String(Number(part.dataset.refreshed || "0") + 1);
    }
  });

  // A button with data-confirm asks first (the page's policy forbids inline scripts).
  document.addEventListener("submit", function (e) {
    var button = e.submitter;
    var ask = button && button.getAttribute("data-confirm");
    if (ask && !window.confirm(ask)) { e.preventDefault(); }
  });

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
