/* Runs before first paint: apply the saved theme (auto | light | dark) and mark JS on. */
(function () {
  var root = document.documentElement;
  root.classList.add("js");
  try {
    var saved = localStorage.getItem("cairn-theme");
    if (saved === "light" || saved === "dark" || saved === "auto") root.setAttribute("data-theme", saved);
  } catch (e) { /* storage blocked: follow the system */ }
})();
