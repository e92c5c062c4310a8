// The console's own script: shows whether the live updates are connected.
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
})();
