// The host bridge inside the QuickJS VM (tools/program/vm_child.py evaluates this before any script).
//
// The VM never calls Python: `quickjs` refuses Python callbacks while a time limit is set. Instead a
// script's request is queued in an outbox and answered later (DEPENDENCIES §4, "outbox bridge"):
// the child drains the outbox, the host runs each request as a nested kernel call, and the child
// settles the promises with the results. Everything crosses as JSON text; nothing here is trusted
// by the host, which checks every request itself. The bridge lives in a closure and is reachable
// only through the non-writable `__a3s` global, so a script can break only its own run.
(function () {
  "use strict";
  const outbox = [];
  const pending = new Map();
  let nextId = 1;
  let job = null;
  let outcome = null;
  const logs = [];
  let logBytes = 0;
  const MAX_LOG_BYTES = 16384;
  const GLOB_PAGE_LIMIT = 1000; // search's largest page (tools/search/grep.py MAX_PAGE_LIMIT)
  // Built now, while there is memory: what to report when the VM's 64 MiB run out. QuickJS throws
  // `null` when it cannot even allocate its "out of memory" error, and the bridge's own last
  // allocations (the result's JSON, the done line) may be the ones that fail; without these the
  // run ended as a "deadlock" or as "failed: null". (A script that throws `null` itself is
  // reported as out of memory too: it cannot be told apart, and it only misleads itself.)
  const OOM_OUTCOME = '{"ok":false,"error":"InternalError: out of memory"}';
  const OOM_DONE = '{"t":"done","result":' + OOM_OUTCOME + ',"logs":[]}';

  for (const name of ["fetch", "WebSocket", "Worker", "XMLHttpRequest", "require", "process", "std", "os", "eval"]) {
    Object.defineProperty(globalThis, name, { value: undefined, writable: false, configurable: false, enumerable: false });
  }

  const VmInternalError = globalThis.InternalError; // taken before a script can replace it
  function outOfMemory(e) {
    if (e === null) return true;
    try {
      return typeof VmInternalError === "function" && e instanceof VmInternalError && String(e.message).startsWith("out of memory");
    } catch (_) {
      return false; // a script's own error object with a throwing getter
    }
  }

  function request(kind, payload) {
    const id = nextId++;
    outbox.push({ id: id, kind: kind, payload: payload === undefined ? null : payload });
    return new Promise(function (resolve, reject) {
      pending.set(id, { resolve: resolve, reject: reject });
    });
  }

  function toolResult(value) {
    let parsed = value.text;
    try {
      parsed = JSON.parse(value.text);
    } catch (_) {
      parsed = value.text;
    }
    return { name: value.name, output: parsed, text: value.text, exitCode: value.exitCode, metadata: value.metadata };
  }

  function hostError(value) {
    const err = new Error(value.message);
    if (value.stepId !== undefined) err.stepId = value.stepId;
    if (value.exitCode !== undefined) err.exitCode = value.exitCode;
    if (value.errorKind !== undefined) err.errorKind = value.errorKind;
    return err;
  }

  function text(v) {
    if (typeof v === "string") return v;
    try {
      return JSON.stringify(v);
    } catch (_) {
      return String(v);
    }
  }

  function record(level) {
    return function () {
      const line = level + ": " + Array.prototype.map.call(arguments, text).join(" ");
      if (logBytes + line.length > MAX_LOG_BYTES) return;
      logBytes += line.length + 1;
      logs.push(line);
    };
  }
  globalThis.console = Object.freeze({ log: record("log"), info: record("info"), warn: record("warn"), error: record("error"), debug: record("debug") });

  function asObject(v, key) {
    if (v === undefined || v === null) return {};
    if (typeof v === "string") {
      const o = {};
      o[key] = v;
      return o;
    }
    return v;
  }

  // Every match, page by page (each page one `search` call); an explicit limit or cursor asks for
  // that one page only. A script counting `(await ctx.glob('**/*.py')).length` must not get 200.
  function globAll(pattern, opts) {
    const given = opts || {};
    const onePage = given.limit !== undefined || given.cursor !== undefined;
    const paths = [];
    const page = function (cursor) {
      const args = Object.assign({}, given, onePage ? {} : { limit: GLOB_PAGE_LIMIT });
      if (cursor) args.cursor = cursor;
      return request("glob", { pattern: pattern, opts: args }).then(function (v) {
        for (const p of v.paths) paths.push(p);
        return v.more && !onePage ? page(v.more) : paths;
      });
    };
    return page(null);
  }

  function programContext() {
    const call = function (name, args) {
      return request("tool", { name: name, args: args === undefined ? {} : args }).then(toolResult);
    };
    const tools = new Proxy({}, {
      get: function (_target, name) {
        if (typeof name !== "string") return undefined;
        return function (args) { return call(name, args); };
      },
    });
    return Object.freeze({
      tool: call,
      tools: tools,
      readFile: function (path, opts) { return request("readFile", { path: path, opts: opts || {} }); },
      read: function (args) { return call("read", asObject(args, "file_path")); },
      search: function (args) { return call("search", args); },
      grep: function (query, opts) { return request("grep", { query: query, opts: opts || {} }).then(toolResult); },
      bm25: function (query, opts) { return request("bm25", { query: query, opts: opts || {} }).then(toolResult); },
      glob: globAll,
      ls: function (path) { return call("ls", asObject(path, "path")); },
      bash: function (command, opts) { return call("bash", Object.assign({}, opts || {}, asObject(command, "command"))); },
      git: function (args) { return call("git", asObject(args, "command")); },
      webSearch: function (params) { return call("web_search", asObject(params, "query")); },
      verify: function (args) { return call("bash", asObject(args, "command")); },
    });
  }

  function workflowContext() {
    return Object.freeze({
      runId: job.runId,
      step: function (stepId, toolName, args) {
        return request("step", { stepId: stepId, tool: toolName, args: args === undefined ? {} : args }).then(function (v) {
          return { output: v.output, exitCode: v.exitCode, metadata: v.metadata };
        });
      },
    });
  }

  const bridge = {
    // The job: {profile: "program"|"workflow", source, inputs, timeoutMs, runId?}; returns the source.
    job: function (text) {
      job = JSON.parse(text);
      const source = job.source;
      delete job.source;
      return source;
    },
    timeoutMs: function () {
      return job.timeoutMs;
    },
    sliceMs: function () {
      return typeof job.sliceMs === "number" && job.sliceMs > 0 ? job.sliceMs : 0;
    },
    // After the script was evaluated: call its entry point with the context and the inputs.
    start: function () {
      let entry = globalThis.__a3s_default;
      if (typeof entry !== "function" && typeof globalThis.run === "function") entry = globalThis.run;
      if (typeof entry !== "function") return "no_entry";
      const context = job.profile === "workflow" ? workflowContext() : programContext();
      let promise;
      try {
        promise = Promise.resolve(entry(context, job.inputs));
      } catch (e) {
        promise = Promise.reject(e);
      }
      promise.then(
        function (value) {
          let json;
          try {
            json = JSON.stringify(value === undefined ? null : value);
          } catch (e) {
            try {
              outcome = outOfMemory(e)
                ? OOM_OUTCOME
                : JSON.stringify({ ok: false, error: "script result is not JSON-serializable: " + String(e) });
            } catch (_) {
              outcome = OOM_OUTCOME;
            }
            return;
          }
          try {
            outcome = '{"ok":true,"value":' + json + "}";
          } catch (_) {
            json = null;
            outcome = OOM_OUTCOME;
          }
        },
        function (e) {
          if (outOfMemory(e)) {
            outcome = OOM_OUTCOME;
            return;
          }
          try {
            const message = e && e.stack ? String(e) + "\n" + e.stack : String(e);
            const out = { ok: false, error: message.slice(0, 8192) };
            if (e && e.errorKind !== undefined) out.errorKind = e.errorKind;
            if (e && e.stepId !== undefined) out.stepId = e.stepId;
            outcome = JSON.stringify(out);
          } catch (_) {
            outcome = OOM_OUTCOME;
          }
        }
      );
      return "";
    },
    // The child's next line: the outcome once the entry promise settled, else the queued requests,
    // else "" (nothing new to ask: wait for replies, or — with none pending — a deadlock).
    next: function () {
      if (outcome !== null) {
        try {
          return '{"t":"done","result":' + outcome + ',"logs":' + JSON.stringify(logs) + "}";
        } catch (_) {
          outcome = null; // its memory back first
          return OOM_DONE;
        }
      }
      if (outbox.length === 0) return "";
      return '{"t":"calls","calls":' + JSON.stringify(outbox.splice(0, outbox.length)) + "}";
    },
    settle: function (text) {
      const replies = JSON.parse(text);
      for (const r of replies) {
        const p = pending.get(r.id);
        if (p === undefined) continue;
        pending.delete(r.id);
        if (r.ok) p.resolve(r.value);
        else p.reject(hostError(r.value));
      }
      return "";
    },
    waiting: function () {
      return pending.size;
    },
    logs: function () {
      return JSON.stringify(logs);
    },
  };
  Object.defineProperty(globalThis, "__a3s", { value: Object.freeze(bridge), writable: false, configurable: false, enumerable: false });
})();
