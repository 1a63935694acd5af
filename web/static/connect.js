// Copy buttons of the enclave web shell's connect page. A first-party
// file loaded with <script src> (the content security policy allows
// scripts from this origin only, never inline). Each button names, in
// data-copy, the element whose text it copies; buttons stay hidden without
// script, and the text can still be selected by hand.
"use strict";
(function () {
  function selectText(el) {
    var range = document.createRange();
    range.selectNodeContents(el);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }
  function legacyCopy(el) {
    selectText(el);
    try {
      return document.execCommand("copy");
    } catch (e) {
      return false;
    }
  }
  function report(button, status, text, ok) {
    status.textContent = text;
    button.classList.toggle("copied", ok);
    if (ok) {
      button.dataset.copied = "true";
      var label = button.dataset.label;
      button.textContent = "Copied";
      window.setTimeout(function () { button.textContent = label; }, 2000);
    }
  }
  function copy(button) {
    var el = document.getElementById(button.dataset.copy);
    var status = document.getElementById(button.dataset.copy + "-status");
    if (!el || !status) return;
    var text = el.textContent;
    var done = function () { report(button, status, "Copied to the clipboard.", true); };
    var failed = function () {
      if (legacyCopy(el)) {
        done();
      } else {
        report(button, status, "Copying is not allowed here: the text is selected, press Ctrl+C (⌘C on a Mac).", false);
      }
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, failed);
    } else {
      failed();
    }
  }
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    button.dataset.label = button.textContent;
    button.hidden = false;
    button.addEventListener("click", function () { copy(button); });
  });
})();
