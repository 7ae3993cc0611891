// Live updates for Baton's pages: when anything changes (Server-Sent Events from
// /api/v1/stream), the page's <main> is fetched again and swapped in, unless the user is
// in the middle of a form: once any field was touched (typed in, a radio or box chosen) or
// has focus, updates pause until the form is submitted or the page reloaded, so a half-made
// decision is never reset. Pages work without this script.
(function () {
  "use strict";
  if (document.body.dataset.live !== "on" || !window.EventSource) return;
  var busy = false, again = false, dirty = false;
  function markDirty(e) {
    if (e.target && e.target.form && e.target.type !== "hidden") dirty = true;
  }
  document.addEventListener("input", markDirty, true);
  document.addEventListener("change", markDirty, true);
  function typing() {
    if (dirty) return true;
    var el = document.activeElement;
    return !!(el && el.form && el.type !== "submit" && el.type !== "hidden");
  }
  function refresh() {
    if (busy) { again = true; return; }
    if (typing()) return;
    busy = true;
    fetch(window.location.href, { headers: { "Accept": "text/html" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("main"), cur = document.getElementById("main");
        if (fresh && cur && !typing()) cur.replaceWith(fresh);
        var badgeNew = doc.querySelector("header.top nav"), badgeCur = document.querySelector("header.top nav");
        if (badgeNew && badgeCur) badgeCur.replaceWith(badgeNew);
      })
      .catch(function () {})
      .then(function () { busy = false; if (again) { again = false; refresh(); } });
  }
  var source = new EventSource("/api/v1/stream");
  source.addEventListener("changed", refresh);
})();
