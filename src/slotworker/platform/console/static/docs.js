// The API reference at /docs: the platform's /openapi.json rendered as a list
// of operations, each with a form that sends the request and shows the answer.
"use strict";

(() => {
  const {el, setText, getJSON} = SW;
  const $ = (id) => document.getElementById(id);
  const SHOWN_CHARS = 200000; // an answer longer than this is cut in the page

  function schemaName(ref) {
    return ref ? ref.split("/").pop() : "";
  }

  function bodySchema(op) {
    const content = op.requestBody && op.requestBody.content;
    const json = content && content["application/json"];
    return json && json.schema ? schemaName(json.schema.$ref) || "object" : null;
  }

  function exampleBody(op, doc) {
    const name = bodySchema(op);
    const schema = name && doc.components && doc.components.schemas[name];
    // A body with required keys starts with each of them empty.
    const example = {};
    for (const key of (schema && schema.required) || []) example[key] = {};
    return JSON.stringify(example, null, 2);
  }

  function paramRows(params) {
    if (!params.length) return null;
    return el("table", {className: "params"},
              el("thead", {}, el("tr", {}, el("th", {}, "parameter"), el("th", {}, "in"), el("th", {}, "type"),
                                 el("th", {}, "required"), el("th", {}, "description"))),
              el("tbody", {}, ...params.map((p) => el("tr", {},
                el("td", {}, el("code", {}, p.name)), el("td", {}, p.in),
                el("td", {}, (p.schema && (p.schema.type || (p.schema.enum && "enum"))) || ""),
                el("td", {}, p.required ? "yes" : ""),
                el("td", {className: "muted"}, p.description || (p.schema && p.schema.enum ? p.schema.enum.join(", ") : ""))))));
  }

  function responseList(responses) {
    return el("p", {className: "muted small"}, "Answers: " + Object.entries(responses || {}).map(
      ([code, r]) => code + " " + (r.description || "")).join(" · "));
  }

  function tryForm(path, method, op, doc) {
    const params = op.parameters || [];
    const inputs = new Map();
    const form = el("form", {className: "try"});
    for (const p of params) {
      const input = el("input", {type: "text", name: p.name, placeholder: p.in + (p.required ? ", required" : ", optional"),
                                 "aria-label": p.name});
      if (p.name === "job_id") input.value = lastJobId || "";
      inputs.set(p, input);
      form.append(el("label", {}, el("code", {}, p.name)), input);
    }
    let body = null;
    if (op.requestBody) {
      body = el("textarea", {rows: "4", spellcheck: "false", "aria-label": "request body"});
      body.value = exampleBody(op, doc);
      form.append(el("label", {}, "body (JSON)"), body);
    }
    const status = el("span", {className: "muted status"});
    form.append(el("span", {}), el("div", {className: "send"}, el("button", {type: "submit"}, "Send " + method.toUpperCase()), status));
    const out = el("pre", {className: "answer-text"});
    const response = el("div", {className: "response", hidden: ""}, out);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      let url = path;
      const query = new URLSearchParams();
      for (const [p, input] of inputs) {
        const value = input.value;
        if (p.in === "path") url = url.replace("{" + p.name + "}", encodeURIComponent(value));
        else if (p.in === "query" && value !== "") query.set(p.name, value);
      }
      if (String(query)) url += "?" + query;
      const init = {method: method.toUpperCase()};
      if (body) {
        init.body = body.value;
        init.headers = {"Content-Type": "application/json"};
      }
      setText(status, "sending " + init.method + " " + url + "…");
      const started = performance.now();
      try {
        const answer = await fetch(url, init);
        const text = await answer.text();
        const shown = SW.prettyText(text);
        setText(status, `${init.method} ${url} → ${answer.status} ${answer.statusText} · ` +
                        `${Math.round(performance.now() - started)} ms · ${answer.headers.get("Content-Type") || ""}`);
        setText(out, shown.length > SHOWN_CHARS ? shown.slice(0, SHOWN_CHARS) + "\n… (cut)" : shown);
        rememberJobId(text);
      } catch (e) {
        setText(status, "no answer: " + e.message);
        setText(out, "");
      }
      response.hidden = false;
    });
    return [form, response];
  }

  // The id of the last job a "try" created fills the job_id fields.
  let lastJobId = null;
  function rememberJobId(text) {
    try {
      const value = JSON.parse(text);
      if (value && typeof value.id === "string") {
        lastJobId = value.id;
        for (const input of document.querySelectorAll("input[name=job_id]")) if (!input.value) input.value = lastJobId;
      }
    } catch (e) {
      // Not JSON: nothing to remember.
    }
  }

  function operation(path, method, op, doc) {
    const details = el("details", {className: "op", dataset: {method, path}},
      el("summary", {},
         el("span", {className: "method " + method}, method.toUpperCase()),
         el("span", {className: "path"}, path),
         el("span", {className: "summary"}, op.summary || "")));
    const bodyName = bodySchema(op);
    details.append(el("div", {className: "op-body"},
      op.description ? el("p", {}, op.description) : null,
      paramRows(op.parameters || []),
      bodyName ? el("p", {className: "small"}, "Body: ", el("code", {}, bodyName), " (JSON)") : null,
      responseList(op.responses),
      ...tryForm(path, method, op, doc)));
    return details;
  }

  function render(doc) {
    setText($("title"), doc.info.title);
    setText($("description"), doc.info.description || "");
    setText($("version"), "version " + doc.info.version + " · OpenAPI " + doc.openapi);
    document.title = doc.info.title + " · API reference";
    const groups = new Map();
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        if (!["get", "post", "put", "delete"].includes(method)) continue;
        const tag = (op.tags && op.tags[0]) || "other";
        if (!groups.has(tag)) groups.set(tag, []);
        groups.get(tag).push(operation(path, method, op, doc));
      }
    }
    const tagInfo = new Map((doc.tags || []).map((t) => [t.name, t.description || ""]));
    const parts = [];
    for (const [tag, ops] of groups) {
      parts.push(el("h3", {className: "tag-title"}, tag), tagInfo.get(tag) ? el("p", {className: "muted small"}, tagInfo.get(tag)) : null, ...ops);
    }
    $("operations").replaceChildren(...parts.filter(Boolean));
    const schemas = (doc.components && doc.components.schemas) || {};
    $("schemas").replaceChildren(...Object.entries(schemas).map(([name, schema]) =>
      el("details", {className: "op schema"},
         el("summary", {}, el("span", {className: "path"}, name)),
         el("div", {className: "op-body"}, el("pre", {}, JSON.stringify(schema, null, 2))))));
  }

  getJSON("/openapi.json").then(render).catch((e) => {
    setText($("title"), "Could not load /openapi.json: " + e.message);
  });
})();
