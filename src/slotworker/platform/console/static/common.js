// Helpers shared by the console and the API reference pages.
// Every piece of data reaches the page through textContent or an attribute
// value, never as markup: a job's output is text, whatever it holds.
"use strict";

const SW = (() => {
  /** Build an element: el("td", {className: "x", title: "t"}, "text", child, ...). */
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null) continue;
      if (key === "className") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  /** Set textContent only when it changed (keeps selections and avoids layout work). */
  function setText(node, text) {
    const value = text === null || text === undefined ? "" : String(text);
    if (node.textContent !== value) node.textContent = value;
  }

  /** GET a JSON route; rejects with an Error carrying the answer's error text. */
  async function getJSON(url) {
    const response = await fetch(url, {headers: {Accept: "application/json"}, cache: "no-store"});
    const body = await response.json().catch(() => null);
    if (!response.ok) {
      const message = body && body.error ? body.error : response.status + " " + response.statusText;
      throw new Error(message);
    }
    return body;
  }

  /** "850 ms", "1.25 s", "2 min 5 s"; "" for null. */
  function duration(ms) {
    if (ms === null || ms === undefined) return "";
    if (ms < 1000) return Math.round(ms) + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
    const s = Math.round(ms / 1000);
    return Math.floor(s / 60) + " min " + (s % 60) + " s";
  }

  /** "3 s ago" from seconds. */
  function ago(seconds) {
    if (seconds === null || seconds === undefined) return "";
    if (seconds < 1) return "just now";
    if (seconds < 90) return Math.round(seconds) + " s ago";
    if (seconds < 5400) return Math.round(seconds / 60) + " min ago";
    return Math.round(seconds / 3600) + " h ago";
  }

  /** JSON text of a fetch answer, pretty when it parses, else as it came. */
  function prettyText(text) {
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch (e) {
      return text;
    }
  }

  return {el, setText, getJSON, duration, ago, prettyText};
})();
