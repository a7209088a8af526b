// Both clips loop in sync: the left one is the clock, the right one follows it.
(function () {
  var left = document.getElementById("left"), right = document.getElementById("right");
  if (left && right) {
    var sync = function () {
      if (Math.abs(right.currentTime - left.currentTime) > 0.05) { right.currentTime = left.currentTime; }
    };
    left.addEventListener("timeupdate", sync);
    left.addEventListener("play", function () { sync(); right.play().catch(function () {}); });
    left.addEventListener("pause", function () { right.pause(); });
  }
  // One submit per page: a second click while the first is on its way sends nothing.
  var form = document.getElementById("answer");
  if (form) {
    form.addEventListener("submit", function (e) {
      if (form.dataset.sent) { e.preventDefault(); return; }
      form.dataset.sent = "1";
    });
  }
  // The start page remembers the last id typed in this browser, so coming back is one click.
  var input = document.getElementById("rater");
  if (input) {
    try { if (!input.value) { input.value = localStorage.getItem("grpo-bench-rater") || ""; } } catch (e) {}
    document.getElementById("start").addEventListener("submit", function () {
      try { localStorage.setItem("grpo-bench-rater", input.value.trim()); } catch (e) {}
    });
  }
})();
