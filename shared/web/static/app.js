// Live refresh: an element with data-refresh is reloaded from that URL (an HTML fragment of
// the same page) every data-every milliseconds, without reloading the page. Paused while
// the tab is hidden. A redirect (the session ended: to the login page) is not followed into
// the box; the box is marked stale instead.
"use strict";
(function () {
  function follow(box) {
    var every = parseInt(box.getAttribute("data-every"), 10) || 5000;
    function tick() {
      if (document.hidden) { return; }
      fetch(box.getAttribute("data-refresh"), { credentials: "same-origin", redirect: "error", headers: { "Accept": "text/html" } })
        .then(function (response) {
          if (!response.ok) { throw new Error(String(response.status)); }
          return response.text();
        })
        .then(function (html) {
          box.innerHTML = html;
          box.setAttribute("data-refreshed", new Date().toISOString());
          box.classList.remove("stale");
        })
        .catch(function () { box.classList.add("stale"); });
    }
    setInterval(tick, every);
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-refresh]").forEach(follow);
  });
})();
