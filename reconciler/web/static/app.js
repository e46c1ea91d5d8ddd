// reconciler dashboard: the reader's local time beside each UTC instant, and the page's auto-refresh.
"use strict";
document.querySelectorAll("time[datetime]").forEach(function (el) {
  var at = new Date(el.getAttribute("datetime"));
  if (!isNaN(at)) { el.setAttribute("data-local", at.toLocaleString() + " local"); }
});
(function () {
  var box = document.getElementById("autorefresh");
  var seconds = Number(document.body.getAttribute("data-refresh")) || 0;
  var off = sessionStorage.getItem("reconciler-refresh") === "off" || location.search.indexOf("at=") >= 0;
  if (box) {
    box.checked = !off;
    box.addEventListener("change", function () { sessionStorage.setItem("reconciler-refresh", box.checked ? "on" : "off"); });
  }
  if (seconds > 0) {
    setInterval(function () { if (box && box.checked && !document.hidden) { location.reload(); } }, seconds * 1000);
  }
})();
