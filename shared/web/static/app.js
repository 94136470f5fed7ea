// Live refresh: an element with data-refresh is reloaded from that URL (an HTML fragment of
// the same page) every data-every milliseconds, without reloading the page. Paused while
// the tab is hidden, while a folded section in it is open (a traceback being read), and
// while the page's "Pause live updates" button says so. A fragment holding [data-final]
// (a job that has finished) ends the refreshing. A redirect (the session ended: to the
// login page) is not followed into the box; the box is marked stale instead.
"use strict";
(function () {
  var paused = false;

  function follow(box) {
    var every = parseInt(box.getAttribute("data-every"), 10) || 5000;
    var timer = null;
    function tick() {
      if (paused || document.hidden || box.querySelector("details[open]")) { return; }
      fetch(box.getAttribute("data-refresh"), { credentials: "same-origin", redirect: "error", headers: { "Accept": "text/html" } })
        .then(function (response) {
          if (!response.ok) { throw new Error(String(response.status)); }
          return response.text();
        })
        .then(function (html) {
          box.innerHTML = html;
          box.setAttribute("data-refreshed", new Date().toISOString());
          box.classList.remove("stale");
          if (box.querySelector("[data-final]")) { clearInterval(timer); }
        })
        .catch(function () { box.classList.add("stale"); });
    }
    timer = setInterval(tick, every);
  }

  function toggle(button) {
    button.hidden = false;  // shown only where script runs: without it there is nothing to pause
    button.addEventListener("click", function () {
      paused = !paused;
      button.textContent = paused ? "Resume live updates" : "Pause live updates";
      button.setAttribute("aria-pressed", paused ? "true" : "false");
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var boxes = document.querySelectorAll("[data-refresh]");
    boxes.forEach(follow);
    if (boxes.length) { document.querySelectorAll("[data-live-toggle]").forEach(toggle); }
  });
})();
