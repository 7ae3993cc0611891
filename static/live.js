// Live updates for Baton's pages: when anything changes (Server-Sent Events from
// /api/v1/stream), the page's <main> is fetched again and swapped in, unless the user is
// in the middle of a form: once any field was touched (typed in, a radio or box chosen) or
// has focus, updates pause until the form is submitted or the page reloaded, so a half-made
// decision is never reset. Pages work without this script.
//
// Times: every <time datetime=…> (rendered on the server as "4 min ago" with the exact UTC
// time in its title) is shown relative to the browser's clock, with the exact time on hover
// in the browser's time zone, and kept current every 30 s.
(function () {
  "use strict";
  function relative(ms) {
    var s = Math.round(ms / 1000), n = Math.abs(s), amount;
    if (n < 45) return "just now";
    if (n < 5400) amount = Math.max(1, Math.ceil(n / 60)) + " min";
    else if (n < 172800) amount = Math.round(n / 3600) + " h";
    else amount = Math.round(n / 86400) + " days";
    return s < 0 ? "in " + amount : amount + " ago";
  }
  function times() {
    var now = Date.now();
    document.querySelectorAll("time[datetime]").forEach(function (t) {
      var at = new Date(t.getAttribute("datetime"));
      if (isNaN(at.getTime())) return;
      t.textContent = relative(now - at.getTime());
      try { t.title = at.toLocaleString(undefined, { timeZoneName: "short" }); } catch (e) { t.title = at.toString(); }
    });
  }
  times();
  setInterval(times, 30000);
  window.batonTimes = times;
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
        if (fresh && cur && !typing()) { cur.replaceWith(fresh); times(); }
        var badgeNew = doc.querySelector("header.top nav"), badgeCur = document.querySelector("header.top nav");
        if (badgeNew && badgeCur) badgeCur.replaceWith(badgeNew);
      })
      .catch(function () {})
      .then(function () { busy = false; if (again) { again = false; refresh(); } });
  }
  var source = new EventSource("/api/v1/stream");
  source.addEventListener("changed", refresh);
})();
