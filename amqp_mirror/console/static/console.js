// The console's only script: refresh the page every few seconds, and ask before a destructive action.
// A page that shows live figures says how often in its <main data-refresh="seconds">. The refresh waits
// while the operator is in a form field or has ticked "pause refresh", so nothing typed is lost.
"use strict";

document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.getAttribute("data-confirm"))) {
        event.preventDefault();
      }
    });
  });

  var main = document.querySelector("main[data-refresh]");
  if (!main) {
    return;
  }
  var seconds = Number(main.getAttribute("data-refresh")) || 5;
  var pause = document.createElement("label");
  pause.className = "pause";
  pause.innerHTML = '<input type="checkbox" id="pause-refresh"> pause refresh';
  main.insertBefore(pause, main.firstChild);
  window.setInterval(function () {
    var active = document.activeElement;
    var typing = active && ["INPUT", "SELECT", "TEXTAREA"].indexOf(active.tagName) >= 0 &&
      active.id !== "pause-refresh";
    if (!typing && !document.getElementById("pause-refresh").checked) {
      window.location.reload();
    }
  }, seconds * 1000);
});
