// One stream for every tab of the console in a browser: a shared worker holds the one
// EventSource of the hub's pulse and passes its events to each tab (a browser allows
// six connections to a host over HTTP/1.1: a stream per tab locked the seventh out).
// A stream that stays silent past the stall time (no event, not even the server's beat)
// is dropped and opened again; the tabs hear "stalled" and say they are not live. A
// stream the server refused (401 before a sign-in: an EventSource does not retry that)
// is opened again by the next tab that says hello, and every few seconds while tabs wait.
"use strict";
var ports = [];
var source = null;
var state = "connecting";
var version = null;
var heard = 0;
var url = null;
var stallMs = 40000;
var opened = 0;
var RETRY_CLOSED_MS = 5000;

function post(message) {
  ports.forEach(function (port) { port.postMessage(message); });
}

function closed() {  // never opened, or refused: an EventSource retries neither
  return source === null || source.readyState === 2;
}

function connect() {
  if (source) { source.close(); }
  opened = Date.now();
  source = new EventSource(url);
  source.onopen = function () { state = "open"; heard = Date.now(); post({type: "open"}); };
  source.onerror = function () { state = "error"; post({type: "error"}); };
  source.addEventListener("hub", function (e) {
    heard = Date.now(); version = e.data; post({type: "hub", version: e.data});
  });
  source.addEventListener("beat", function () { heard = Date.now(); post({type: "beat"}); });
}

setInterval(function () {
  if (source && state === "open" && Date.now() - heard > stallMs) {
    state = "stalled";
    post({type: "stalled"});
    connect();
  } else if (url !== null && ports.length && closed() && Date.now() - opened > RETRY_CLOSED_MS) {
    connect();
  }
}, 1000);

self.onconnect = function (e) {
  var port = e.ports[0];
  ports.push(port);
  port.onmessage = function (m) {
    var data = m.data || {};
    if (data.type === "hello") {
      if (url === null || closed()) {
        url = data.url; stallMs = data.stallMs || stallMs; connect();
      } else if (state === "open") {  // the stream is up: this tab catches up at once
        port.postMessage({type: "open"});
        port.postMessage({type: "hub", version: version});
      } else {
        port.postMessage({type: state === "stalled" ? "stalled" : "error"});
      }
    } else if (data.type === "bye") {
      ports = ports.filter(function (p) { return p !== port; });
    }
  };
  port.start();
};
