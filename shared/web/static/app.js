// Live refresh: an element with data-refresh is reloaded from that URL (an HTML fragment of
// the same page) every data-every milliseconds, without reloading the page. The next fetch
// is scheduled once the last has answered, so a slow server never has two of a tab's fetches
// at once. It holds still while the tab is hidden, while a folded section in it is open (a
// traceback being read), while the pointer is pressed inside it (a button being clicked), and
// while the page's "Pause live updates" button says so. A fragment holding [data-final] (a
// job that has finished) ends the refreshing, and so does a 4xx answer (the job was purged,
// the session ended); a failed fetch (a redirect to the login page is one, the server
// restarting another) marks the box stale and tries again less often.
"use strict";
(function () {
  var paused = false;

  function follow(box) {
    var every = parseInt(box.getAttribute("data-every"), 10) || 5000;
    var wait = every;
    var pressed = false;
    box.addEventListener("pointerdown", function () { pressed = true; });
    document.addEventListener("pointerup", function () { pressed = false; });
    function later() { setTimeout(tick, wait); }
    function tick() {
      if (paused || pressed || document.hidden || box.querySelector("details[open]")) { later(); return; }
      fetch(box.getAttribute("data-refresh"), { credentials: "same-origin", redirect: "error", headers: { "Accept": "text/html" } })
        .then(function (response) {
          if (response.status >= 400 && response.status < 500) {
            box.classList.add("stale");
            return;  // not coming back by asking again
          }
          if (!response.ok) { throw new Error(String(response.status)); }
          return response.text().then(function (html) {
            box.innerHTML = html;
            box.setAttribute("data-refreshed", new Date().toISOString());
            box.classList.remove("stale");
            wait = every;
            if (!box.querySelector("[data-final]")) { later(); }
          });
        })
        .catch(function () {
          box.classList.add("stale");
          wait = Math.min(wait * 2, 60000);
          later();
        });
    }
    later();
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
