/* Filter and search for the operator x dtype grid: vanilla JS, no dependencies, works from file://.
   Reads only data attributes and text written by the report; never writes HTML (textContent only). */
(function () {
  "use strict";
  var table = document.getElementById("grid");
  var form = document.getElementById("filters");
  if (!table || !form) { return; }
  var q = document.getElementById("f-op");
  var pathSel = document.getElementById("f-path");
  var dtypeSel = document.getElementById("f-dtype");
  var fallbackBox = document.getElementById("f-fallback");
  var wrongBox = document.getElementById("f-wrong");
  var count = document.getElementById("f-count");
  var empty = document.getElementById("f-empty");
  var headCells = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var columns = headCells.map(function (th) { return th.getAttribute("data-dtype") || ""; });
  var rows = Array.prototype.slice.call(table.tBodies[0].rows);
  var names = rows.map(function (tr) { return (tr.getAttribute("data-op") || "").toLowerCase(); });

  function cellMatches(td, path, fallbackOnly, wrongOnly) {
    if (path && (" " + (td.getAttribute("data-p") || "") + " ").indexOf(" " + path + " ") < 0) { return false; }
    if (fallbackOnly && !td.hasAttribute("data-f")) { return false; }
    if (wrongOnly && !td.hasAttribute("data-w")) { return false; }
    return true;
  }

  function apply() {
    var text = q.value.trim().toLowerCase();
    var path = pathSel.value;
    var dtype = dtypeSel.value;
    var fallbackOnly = fallbackBox.checked;
    var wrongOnly = wrongBox.checked;
    var needCell = Boolean(path || fallbackOnly || wrongOnly);
    var shown = 0;
    for (var c = 1; c < headCells.length; c++) { headCells[c].hidden = Boolean(dtype) && columns[c] !== dtype; }
    for (var r = 0; r < rows.length; r++) {
      var cells = rows[r].cells;
      var visible = !text || names[r].indexOf(text) >= 0;
      var matched = !needCell;
      for (var i = 1; i < cells.length; i++) {
        var off = Boolean(dtype) && columns[i] !== dtype;
        cells[i].hidden = off;
        if (visible && !matched && !off && cells[i].hasAttribute("data-p")) {
          matched = cellMatches(cells[i], path, fallbackOnly, wrongOnly);
        }
      }
      rows[r].hidden = !(visible && matched);
      if (!rows[r].hidden) { shown++; }
    }
    count.textContent = shown + " of " + rows.length + " operators";
    empty.hidden = shown !== 0;
  }

  form.addEventListener("input", apply);
  form.addEventListener("change", apply);
  form.addEventListener("submit", function (event) { event.preventDefault(); });
  // index.html#op=softmax opens the grid filtered by that name, on load and whenever the hash
  // changes (a link to #op=NAME on this page, the back button, an edited address bar)
  function fromHash(scroll) {
    var hash = window.location.hash;
    if (hash.indexOf("#op=") !== 0) { return; }
    try { q.value = decodeURIComponent(hash.slice(4)); } catch (e) { q.value = hash.slice(4); }
    apply();
    if (scroll) { document.getElementById("operators").scrollIntoView(); }
  }
  window.addEventListener("hashchange", function () { fromHash(true); });
  form.hidden = false;
  fromHash(false);
  apply();
}());
