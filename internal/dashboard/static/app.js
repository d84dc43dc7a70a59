// The dashboard's own script: follows a job's log live and copies tokens and
// commands. It is a file, not inline, because the Content-Security-Policy
// allows scripts from this origin only. Pages work without it.
(function () {
  "use strict";

  // maxChunks bounds how many log events the page keeps (each is one or more lines).
  var maxChunks = 5000;

  // followLog streams a job's log into its <pre>. The stream always starts at
  // the beginning of the log, so the text rendered with the page is replaced
  // by the first line that arrives (also after a reconnect).
  function followLog(pre) {
    if (!window.EventSource) {
      return;
    }
    var state = document.getElementById("log-state");
    var source = new EventSource(pre.getAttribute("data-log-src"));
    var fresh = true;
    source.addEventListener("open", function () {
      fresh = true;
      if (state) {
        state.textContent = "Following the log live.";
      }
    });
    source.addEventListener("log", function (ev) {
      if (fresh) {
        pre.textContent = "";
        fresh = false;
      }
      var atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.appendChild(document.createTextNode(ev.data + "\n"));
      // Keep the page light on a long log: only the latest chunks stay.
      while (pre.childNodes.length > maxChunks) {
        pre.removeChild(pre.firstChild);
      }
      if (atBottom) {
        pre.scrollTop = pre.scrollHeight;
      }
    });
    source.addEventListener("end", function () {
      source.close();
      pre.setAttribute("data-log-ended", "true");
      if (state) {
        state.textContent = "The job has ended; this is its whole log.";
      }
    });
    source.addEventListener("error", function () {
      if (source.readyState === EventSource.CLOSED && state) {
        state.textContent = "The live log stopped. Reload the page to follow it again.";
      }
    });
  }

  function copyText(button) {
    var el = document.getElementById(button.getAttribute("data-copy"));
    if (!el) {
      return;
    }
    var text = el.tagName === "INPUT" ? el.value : el.textContent;
    var label = button.textContent;
    var done = function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = label; }, 2000);
    };
    // The clipboard API needs a secure context (HTTPS or localhost); over
    // plain HTTP fall back to selecting the text and the copy command.
    var fallback = function () {
      if (el.tagName === "INPUT") {
        el.select();
      } else {
        var range = document.createRange();
        range.selectNodeContents(el);
        var sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
      }
      if (document.execCommand && document.execCommand("copy")) {
        done();
      } else {
        button.textContent = "Selected: press Ctrl+C";
      }
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, fallback);
    } else {
      fallback();
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var pre = document.querySelector("pre[data-log-src]");
    if (pre) {
      followLog(pre);
    }
    document.querySelectorAll("button[data-copy]").forEach(function (b) {
      b.hidden = false;
    });
  });
  document.addEventListener("click", function (ev) {
    var b = ev.target.closest && ev.target.closest("button[data-copy]");
    if (b) {
      copyText(b);
    }
  });
})();
