// The console's own script: shows whether the live updates are connected, and marks
// the live parts' refreshes.
(function () {
  "use strict";
  function show(state, text) {
    var el = document.getElementById("live-state");
    if (el) { el.textContent = text; }
    document.body.dataset.live = state;
  }
  document.addEventListener("htmx:sseOpen", function (e) {
    if (e.target === document.body) { show("open", "live"); }
  });
  document.addEventListener("htmx:sseError", function (e) {
    if (e.target === document.body) { show("error", "reconnecting…"); }
  });
  document.addEventListener("htmx:sseClose", function (e) {
    if (e.target === document.body) { show("closed", "not live"); }
  });
  // A live part counts its refreshes (data-refreshed): the first comes with the event
  // that every page hears when it connects, so a page has settled once each part has one.
  document.addEventListener("htmx:afterSettle", function (e) {
    var part = e.target;
    if (part && part.classList && part.classList.contains("live-part")) {
      part.dataset.refreshed = String(Number(part.dataset.refreshed || "0") + 1);
    }
  });
})();
