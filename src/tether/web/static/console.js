// Live updates: the server says when runs change (server-sent events at /api/events), and the
// page fetches its own main part again (the same URL, rendered without the frame) and swaps it
// in. Nothing is built from data here: the HTML comes from the server's escaping templates.
(function () {
  "use strict";
  var body = document.body;
  if (!body || !body.dataset.live || !window.EventSource) return;
  var base = body.dataset.base || "";
  var badge = document.getElementById("live-state");
  var busy = false, again = false;

  function editing() {
    // Keep what a person is typing: no swap while a field of the page has focus or text.
    var main = document.getElementById("live");
    var active = document.activeElement;
    if (active && main.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) return true;
    var fields = main.querySelectorAll("input[type=text], textarea");
    for (var i = 0; i < fields.length; i++) if (fields[i].value) return true;
    return false;
  }

  function refresh() {
    if (busy) { again = true; return; }
    if (editing()) { again = true; return; }
    busy = true;
    fetch(window.location.href, { headers: { "X-Tether-Fragment": "1" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null && !editing()) {
          // Each <details> keeps what the person made of it (opened or closed), found again by
          // its data-key (a record's seq, a call's id), not by its place: an approval adds rows.
          var main = document.getElementById("live");
          var open = {};
          main.querySelectorAll("details[data-key]").forEach(function (d) { open[d.dataset.key] = d.open; });
          main.innerHTML = html;
          main.querySelectorAll("details[data-key]").forEach(function (d) {
            if (Object.prototype.hasOwnProperty.call(open, d.dataset.key)) d.open = open[d.dataset.key];
          });
        }
      })
      .catch(function () {})
      .then(function () {
        busy = false;
        if (again) { again = false; setTimeout(refresh, 250); }
      });
  }

  var source = new EventSource(base + "/api/events");
  source.addEventListener("change", refresh);
  source.addEventListener("open", function () { if (badge) badge.hidden = false; });
  source.addEventListener("error", function () { if (badge) badge.hidden = true; });
  document.addEventListener("focusout", function () { if (again) setTimeout(refresh, 400); });
})();
