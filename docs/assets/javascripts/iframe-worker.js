/* A Worker for pages opened from disk (file://), where browsers refuse `new Worker(file URL)`: the
 * site's search runs in a web worker, so without this the search box stays at "Initializing search".
 * The worker script runs in a hidden same-origin iframe (srcdoc inherits the page's origin); messages
 * go both ways as "message" events. Enough for MkDocs Material's search worker (addEventListener /
 * postMessage; importScripts only for non-English stemmers, not used here). Served pages keep the
 * browser's own Worker. The offline plugin adds nothing from the network when a polyfill with
 * "iframe-worker" in its path is configured (mkdocs.yml, extra.polyfills). */
(function () {
  "use strict";
  if (location.protocol !== "file:" || typeof EventTarget !== "function") return;

  class IframeWorker extends EventTarget {
    constructor(url) {
      super();
      this.onmessage = null;
      this._pending = [];
      this._window = null;
      const frame = document.createElement("iframe");
      frame.hidden = true;
      frame.setAttribute("aria-hidden", "true");
      frame.srcdoc = "<!DOCTYPE html><title>worker</title>";
      frame.addEventListener("load", () => {
        const win = frame.contentWindow;
        win.postMessage = (data) => setTimeout(() => this._emit(data), 0);  // the worker's postMessage
        win.importScripts = () => { throw new Error("importScripts is not available under file://"); };
        const script = win.document.createElement("script");
        script.src = new URL(url, document.baseURI).href;
        script.addEventListener("load", () => {
          this._window = win;
          this._pending.splice(0).forEach((data) => this._deliver(data));
        });
        script.addEventListener("error", () => this.dispatchEvent(new Event("error")));
        win.document.head.appendChild(script);
      }, { once: true });
      (document.body || document.documentElement).appendChild(frame);
      this._frame = frame;
    }

    postMessage(data) {
      if (this._window) this._deliver(data);
      else this._pending.push(data);
    }

    terminate() {
      this._frame.remove();
      this._window = null;
    }

    _deliver(data) {
      const win = this._window;
      setTimeout(() => win.dispatchEvent(new win.MessageEvent("message", { data: data })), 0);
    }

    _emit(data) {
      const event = new MessageEvent("message", { data: data });
      if (typeof this.onmessage === "function") this.onmessage(event);
      this.dispatchEvent(event);
    }
  }

  window.Worker = IframeWorker;
})();
