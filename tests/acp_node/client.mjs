// An ACP v1 client built on the npm `@agentclientprotocol/sdk` (2.4.0: its `client()` app, the
// replacement of the removed `ClientSideConnection`, over `ndJsonStream`), driving an agent
// started as a child process. tests/test_acp_node.py runs it against `bantam acp`: a client
// nobody here wrote, with its own reading of the protocol's schema (the SDK checks the
// notifications and requests it receives against it; the answers to our requests it does not).
//
//   node tests/acp_node/client.mjs [options] -- AGENT_COMMAND [ARGS...]
//
//   --cwd DIR            session/new in DIR (absolute; default: this process's cwd)
//   --prompt TEXT        one session/prompt; repeat for several turns, sent one after another
//   --blocks JSON        one session/prompt of these content blocks (a JSON array)
//   --call METHOD JSON   one request of any method, its params the JSON object (the session's
//                        id added where it names none); prompts and calls run in the given order
//   --open METHOD ID     open the saved session ID with session/load or session/resume instead
//                        of making one with session/new
//   --terminal           offer terminal/*: each terminal runs its command as an editor would
//                        (a child process, its output kept up to outputByteLimit)
//   --terminal-output    advertise Zed's `_meta.terminal_output` (a terminal the agent feeds)
//   --permission ID      the optionId chosen for every session/request_permission (default
//                        reject_once); "cancelled" answers with the cancelled outcome
//   --fs                 offer fs/read_text_file and fs/write_text_file (off by default)
//   --sdk DIR            the npm prefix holding the SDK (default: tests/node beside this folder)
//
// Stdout: one JSON object a line, in the order things happened:
//   {"type":"response","method":M,"result":R}        an answer to a request this client sent
//   {"type":"error","method":M,"error":{code,message}} a request the agent answered with an error
//   {"type":"notification","method":"session/update","params":P}
//   {"type":"request","method":M,"params":P,"answer":A} a request from the agent, and our answer
//   {"type":"sdk_complaint","level":L,"text":T}       the SDK refused or dropped something it received
//   {"type":"exit","code":C,"signal":S}               the agent's exit, after its stdin was closed
// Every line also has "t", the milliseconds since this client started.
// Exit status 0 once the scenario has run (errors included: they are lines); 2 for bad usage;
// 1 when the connection itself failed (the reason on stderr).
import { spawn } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { Readable, Writable } from "node:stream";
import { fileURLToPath, pathToFileURL } from "node:url";

function usage(message) {
  process.stderr.write(`client.mjs: ${message}\n`);
  process.exit(2);
}

function parse(argv) {
  const opts = { cwd: process.cwd(), steps: [], permission: "reject_once", fs: false, terminal: false,
                 open: null, sdk: join(dirname(fileURLToPath(import.meta.url)), "..", "node"), agent: [] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => (i + 1 < argv.length ? argv[++i] : usage(`${arg} needs a value`));
    if (arg === "--") { opts.agent = argv.slice(i + 1); break; }
    else if (arg === "--cwd") opts.cwd = resolve(value());
    else if (arg === "--prompt") opts.steps.push({ prompt: [{ type: "text", text: value() }] });
    else if (arg === "--blocks") opts.steps.push({ prompt: JSON.parse(value()) });
    else if (arg === "--call") { const method = value(); opts.steps.push({ method, params: JSON.parse(value()) }); }
    else if (arg === "--open") { const method = value(); opts.open = { method, sessionId: value() }; }
    else if (arg === "--terminal") opts.terminal = true;
    else if (arg === "--terminal-output") opts.terminalOutput = true;
    else if (arg === "--permission") opts.permission = value();
    else if (arg === "--fs") opts.fs = true;
    else if (arg === "--sdk") opts.sdk = resolve(value());
    else usage(`unknown option ${arg}`);
  }
  if (opts.agent.length === 0) usage("no agent command: give it after --");
  return opts;
}

const opts = parse(process.argv.slice(2));
// The SDK lives in the test's npm prefix, not on this file's module path: resolve it through
// that prefix's package.json, honouring the package's exports map.
let acp;
try {
  const entry = createRequire(join(opts.sdk, "package.json")).resolve("@agentclientprotocol/sdk");
  acp = await import(pathToFileURL(entry).href);
} catch (e) {
  usage(`the SDK is not installed under ${opts.sdk} (npm install --prefix ${opts.sdk} @agentclientprotocol/sdk): ${String(e.message).split("\n")[0]}`);
}

const started = Date.now();
const emit = (line) => process.stdout.write(JSON.stringify({ ...line, t: Date.now() - started }) + "\n");
// The SDK drops a message that fails its schema with a console.error ("Error handling
// notification", "Invalid message") and goes on: each complaint becomes a line, so a caller sees it.
for (const level of ["error", "warn"]) {
  console[level] = (...args) => emit({ type: "sdk_complaint", level, text: args.map((a) =>
    typeof a === "string" ? a : JSON.stringify(a)).join(" ") });
}

const child = spawn(opts.agent[0], opts.agent.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((done) => child.on("exit", (code, signal) => done({ code, signal })));
child.on("error", (e) => { process.stderr.write(`client.mjs: cannot start ${opts.agent[0]}: ${e.message}\n`); process.exit(1); });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

const app = acp.client({ name: "bantam-tests" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    emit({ type: "notification", method: "session/update", params });
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    const answer = opts.permission === "cancelled"
      ? { outcome: { outcome: "cancelled" } }
      : { outcome: { outcome: "selected", optionId: opts.permission } };
    emit({ type: "request", method: "session/request_permission", params, answer });
    return answer;
  });
if (opts.fs) {
  app.onRequest(acp.methods.client.fs.readTextFile, async ({ params }) => {
    const text = await readFile(params.path, "utf8");
    const lines = text.split("\n");
    const start = Math.max(0, (params.line ?? 1) - 1);
    const answer = { content: lines.slice(start, params.limit ? start + params.limit : undefined).join("\n") };
    emit({ type: "request", method: "fs/read_text_file", params, answer });
    return answer;
  });
  app.onRequest(acp.methods.client.fs.writeTextFile, async ({ params }) => {
    await writeFile(params.path, params.content);
    emit({ type: "request", method: "fs/write_text_file", params, answer: {} });
    return {};
  });
}

if (opts.terminal) {
  // Each terminal is a child process of this client, as in an editor: its output (stdout and
  // stderr together) is kept, the oldest bytes dropped past outputByteLimit.
  const terminals = new Map();
  let next = 0;
  app.onRequest(acp.methods.client.terminal.create, ({ params }) => {
    const id = `term-${++next}`;
    const proc = spawn(params.command, params.args ?? [], {
      cwd: params.cwd ?? opts.cwd, stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, ...Object.fromEntries((params.env ?? []).map((v) => [v.name, v.value])) } });
    const term = { output: "", truncated: false, exit: null, limit: params.outputByteLimit ?? null };
    term.exited = new Promise((done) => proc.on("close", (code, signal) => {
      term.exit = { exitCode: code, signal }; done(term.exit); }));
    const keep = (data) => {
      term.output += data.toString("utf8");
      if (term.limit !== null && Buffer.byteLength(term.output) > term.limit) {
        term.output = Buffer.from(term.output).subarray(-term.limit).toString("utf8");
        term.truncated = true;
      }
    };
    proc.stdout.on("data", keep);
    proc.stderr.on("data", keep);
    term.proc = proc;
    terminals.set(id, term);
    emit({ type: "request", method: "terminal/create", params, answer: { terminalId: id } });
    return { terminalId: id };
  });
  const find = (params) => terminals.get(params.terminalId) ?? (() => { throw new Error(`no terminal ${params.terminalId}`); })();
  app.onRequest(acp.methods.client.terminal.output, ({ params }) => {
    const term = find(params);
    const answer = { output: term.output, truncated: term.truncated, exitStatus: term.exit };
    emit({ type: "request", method: "terminal/output", params, answer });
    return answer;
  });
  app.onRequest(acp.methods.client.terminal.waitForExit, async ({ params }) => {
    const answer = await find(params).exited;
    emit({ type: "request", method: "terminal/wait_for_exit", params, answer });
    return answer;
  });
  app.onRequest(acp.methods.client.terminal.kill, ({ params }) => {
    find(params).proc.kill("SIGKILL");
    emit({ type: "request", method: "terminal/kill", params, answer: {} });
    return {};
  });
  app.onRequest(acp.methods.client.terminal.release, ({ params }) => {
    const term = find(params);
    if (term.exit === null) term.proc.kill("SIGKILL");
    terminals.delete(params.terminalId);
    emit({ type: "request", method: "terminal/release", params, answer: {}, output: term.output });
    return {};
  });
}

// One request, its outcome as a line; an error answer does not end the scenario.
async function ask(ctx, method, params) {
  try {
    const result = await ctx.request(method, params);
    emit({ type: "response", method, result });
    return result;
  } catch (e) {
    emit({ type: "error", method, error: { code: e.code ?? null, message: String(e.message ?? e) } });
    return null;
  }
}

try {
  await app.connectWith(stream, async (ctx) => {
    const init = await ask(ctx, acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: opts.fs, writeTextFile: opts.fs }, terminal: opts.terminal,
                           ...(opts.terminalOutput ? { _meta: { terminal_output: true } } : {}) },
      clientInfo: { name: "bantam-tests", version: "0" },
    });
    if (!init) return;
    let sessionId = opts.open?.sessionId;
    if (opts.open) {
      if (!await ask(ctx, opts.open.method, { sessionId, cwd: opts.cwd, mcpServers: [] })) return;
    } else {
      const session = await ask(ctx, acp.methods.agent.session.new, { cwd: opts.cwd, mcpServers: [] });
      if (!session) return;
      sessionId = session.sessionId;
    }
    for (const step of opts.steps) {
      if (step.prompt) await ask(ctx, acp.methods.agent.session.prompt, { sessionId, prompt: step.prompt });
      else await ask(ctx, step.method, { sessionId, ...step.params });
    }
  });
} catch (e) {
  const gone = child.exitCode !== null ? ` (the agent exited with ${child.exitCode})` : "";
  process.stderr.write(`client.mjs: the connection failed: ${e.message ?? e}${gone}\n`);
  child.kill();
  process.exit(1);
}
// The client leaves as an editor does, by closing the agent's stdin (connectWith closes the
// connection but not the pipe beneath it): an agent that serves ACP ends at end of input.
child.stdin.end();
const { code, signal } = await exited;
emit({ type: "exit", code, signal });
