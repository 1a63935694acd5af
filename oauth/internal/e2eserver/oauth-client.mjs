// End-to-end OAuth test with the official MCP TypeScript SDK as the client:
// 401 → protected resource metadata → authorization server metadata →
// dynamic registration → authorization with PKCE S256 and resource (the
// login and consent forms submitted headlessly) → token → MCP initialize,
// tools/list, tools/call → refresh → code mode (execute, packageSave, the
// saved export as a tool) → a second user, authorized the same way with its
// own client, cookies and tokens, who neither sees nor can call nor import
// the first user's package → storage and memories of the first user, which
// the second finds none of, and the export carrying them; mailSend,
// confirmed by the person through elicitation, reaching a capturing SMTP
// server (phase 1); then,
// after .ci/oauth-client.sh restarted the server on the same data directory
// and database (phase 2): the same tokens find them again, the first user
// deletes the account through the web form, their token is refused, the
// second user still finds nothing and the server holds nothing of theirs
// → revoke → 401.
//
// Usage: node oauth-client.mjs '<the server's ready line>' 1|2 <state file>
// The ready line is {"baseURL":…,"email":…,"password":…,"email2":…,
// "password2":…,"replicas":…,"userID":…,"stableID":…,"inspectURL":…}; phase
// 1 writes the state file (tokens, ids, the step count), phase 2 reads it.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { ElicitRequestSchema, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const [readyLine, phase, statePath] = process.argv.slice(2);
const { baseURL, email, password, email2, password2, replicas = 1, userID, stableID, inspectURL } = JSON.parse(readyLine);
assert.ok(email2 && password2, 'the server printed a second account');
assert.ok(userID && stableID && inspectURL, 'the server printed the first account\'s ids and its inspection endpoint');
assert.ok((phase === '1' || phase === '2') && statePath, 'usage: oauth-client.mjs <ready line> 1|2 <state file>');
const state = phase === '2' ? JSON.parse(readFileSync(statePath, 'utf8')) : {};
const mcpURL = new URL(baseURL + '/mcp');
let passed = state.passed ?? 0;
const step = (name) => { passed++; console.log(`ok ${passed} - ${name}`); };
const redirectUrl = 'http://127.0.0.1:9/callback';
const clientName = 'MCP TypeScript SDK end-to-end test';

const unescape = (s) => s.replace(/&amp;/g, '&').replace(/&quot;|&#34;/g, '"').replace(/&#39;|&#x27;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>');
function attrs(tag) {
  const out = {};
  for (const m of tag.matchAll(/([\w-]+)(?:="([^"]*)")?/g)) out[m[1].toLowerCase()] = unescape(m[2] ?? '');
  return out;
}
// readForm reads the page's form whose action is path (by default the
// authorization form; a page may hold others, such as the sign-out button
// of the layout).
function readForm(html, path = '/oauth/authorize') {
  const forms = [...html.matchAll(/<form\b[^>]*>([\s\S]*?)<\/form>/gi)];
  const at = (f) => attrs(f[0].match(/<form\b[^>]*>/i)[0]).action ?? '';
  const form = forms.find((f) => path === '/oauth/authorize' ? at(f).includes(path) : new URL(at(f), baseURL).pathname === path);
  assert.ok(form, `the page has the form posting to ${path}`);
  const action = attrs(form[0].match(/<form\b[^>]*>/i)[0]).action;
  const fields = new URLSearchParams();
  for (const m of form[1].matchAll(/<input\b[^>]*>/gi)) {
    const a = attrs(m[0]);
    if (a.type === 'hidden' && a.name) fields.set(a.name, a.value ?? '');
  }
  const buttons = [...form[1].matchAll(/<button\b[^>]*>/gi)].map((m) => attrs(m[0]));
  return { action, fields, buttons };
}

const newClient = () => new Client({ name: 'enclave-e2e', version: '1.0.0' });

// authorize takes one user through steps 2 to 4 with a browser (cookie
// jar) and an SDK auth provider of its own, and returns what it needs to
// open more sessions. label (none for the first user) tells the steps
// apart.
// browser is a minimal headless browser: a cookie jar, browse (one
// request, redirects not followed) and submit (a page's form, its hidden
// fields and extra ones).
function browser() {
  const jar = new Map();
  function keepCookies(res) {
    for (const c of res.headers.getSetCookie?.() ?? []) {
      const [pair] = c.split(';');
      const i = pair.indexOf('=');
      jar.set(pair.slice(0, i).trim(), pair.slice(i + 1).trim());
    }
  }
  const cookieHeader = () => [...jar].map(([k, v]) => `${k}=${v}`).join('; ');
  async function browse(url, init = {}) {
    const res = await fetch(url, { ...init, redirect: 'manual', headers: { ...(init.headers ?? {}), cookie: cookieHeader() } });
    keepCookies(res);
    return res;
  }
  async function submit(pageURL, html, extra, path) {
    const { action, fields } = readForm(html, path);
    for (const [k, v] of Object.entries(extra)) fields.set(k, v);
    return browse(new URL(action, pageURL), {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: fields.toString(),
    });
  }
  return { browse, submit };
}

// makeProvider is the SDK's OAuth client provider over saved (in memory,
// written to the state file between the phases). Without a browser (a
// resumed user after the restart) it refuses to send the user to sign in
// again: their tokens must have survived.
function makeProvider(saved, { email, password, browse, submit } = {}) {
  return {
    get redirectUrl() { return redirectUrl; },
    get clientMetadata() {
      return {
        client_name: clientName,
        redirect_uris: [redirectUrl],
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
        scope: 'mcp',
      };
    },
    state: () => 'sdk-e2e-state-' + Math.random().toString(36).slice(2),
    clientInformation: () => saved.client,
    saveClientInformation: (info) => { saved.client = info; },
    tokens: () => saved.tokens,
    saveTokens: (tokens) => { saved.tokens = tokens; saved.tokenSaves++; },
    saveCodeVerifier: (v) => { saved.verifier = v; },
    codeVerifier: () => saved.verifier,
    async redirectToAuthorization(url) {
      assert.ok(browse, 'the server asked for a new authorization: the tokens from before the restart were refused');
      assert.equal(url.searchParams.get('code_challenge_method'), 'S256');
      assert.equal(url.searchParams.get('resource'), mcpURL.href);
      let res = await browse(url);
      assert.equal(res.status, 200, 'the authorization endpoint shows the login page');
      let html = await res.text();
      res = await submit(url, html, { email, password });
      if (res.status === 200) { // the consent page
        html = await res.text();
        const { buttons } = readForm(html);
        assert.ok(buttons.some((b) => b.name === 'decision' && b.value === 'approve'), 'consent offers approve');
        res = await submit(url, html, { decision: 'approve' });
      }
      assert.equal(res.status, 303, `the approval redirects to the client (got ${res.status})`);
      const back = new URL(res.headers.get('location'));
      assert.equal(back.origin + back.pathname, redirectUrl);
      assert.equal(back.searchParams.get('iss'), baseURL, 'RFC 9207 iss');
      assert.ok(back.searchParams.get('state'), 'state echoed');
      saved.code = back.searchParams.get('code');
      assert.ok(saved.code, 'an authorization code');
    },
  };
}

// sessions opens MCP sessions with provider.
const sessions = (provider) => async (client = newClient()) => {
  await client.connect(new StreamableHTTPClientTransport(mcpURL, { authProvider: provider }));
  return client;
};

// resume is a user of phase 1 again, from the state file.
function resume(saved, label) {
  const provider = makeProvider(saved);
  return { saved, provider, session: sessions(provider), suffix: label ? ` (${label})` : '' };
}

async function authorize({ email, password, label }) {
  const suffix = label ? ` (${label})` : '';
  const saved = { client: undefined, tokens: undefined, verifier: undefined, code: undefined, tokenSaves: 0 };
  const provider = makeProvider(saved, { email, password, ...browser() });

  // 2. The SDK discovers, registers, and sends the user to authorize.
  {
    const transport = new StreamableHTTPClientTransport(mcpURL, { authProvider: provider });
    await assert.rejects(newClient().connect(transport), UnauthorizedError);
    assert.ok(saved.client?.client_id, 'dynamic registration gave a client_id');
    assert.ok(saved.code, 'the authorization produced a code');
    step('discovery, dynamic registration and authorization with PKCE S256 and resource' + suffix);
    await transport.finishAuth(saved.code);
    assert.ok(saved.tokens?.access_token && saved.tokens?.refresh_token, 'tokens');
    step('code exchanged for an access and a refresh token' + suffix);
  }

  // 3. MCP with the token: initialize, tools/list, tools/call.
  const session = sessions(provider);
  {
    const client = await session();
    step('initialize' + suffix);
    const { tools } = await client.listTools();
    assert.ok(tools.some((t) => t.name === 'oauthGrantList'), 'oauthGrantList is listed');
    step('tools/list' + suffix);
    const result = await client.callTool({ name: 'oauthGrantList', arguments: {} });
    assert.ok(!result.isError, JSON.stringify(result));
    const grants = result.structuredContent?.grants ?? JSON.parse(result.content[0].text).grants;
    assert.ok(grants.some((g) => g.clientName === provider.clientMetadata.client_name), 'our grant is listed');
    step('tools/call' + suffix);
    await client.close();
  }

  // 4. Refresh: with a dead access token the SDK refreshes and retries.
  {
    const before = saved.tokens;
    saved.tokens = { ...before, access_token: 'ory_at_expired.expired' };
    const client = await session();
    assert.notEqual(saved.tokens.refresh_token, before.refresh_token, 'the refresh token rotated');
    assert.notEqual(saved.tokens.access_token, before.access_token);
    await client.listTools();
    step('refresh (rotated) and retry' + suffix);
    await client.close();
  }
  return { saved, provider, session, suffix };
}

// structured is a tool result's structured content (or its text as JSON).
const structured = (r) => r.structuredContent ?? JSON.parse(r.content?.[0]?.text ?? 'null');
const show = (r) => JSON.stringify(r).slice(0, 2000);

// outcome calls a tool and returns what came back, whether the SDK threw
// (a JSON-RPC error) or returned a result, with the tool's name replaced
// by <tool> so that two names' answers compare.
async function outcome(client, name, args) {
  let got;
  try {
    const r = await client.callTool({ name, arguments: args });
    got = { result: { isError: r.isError ?? false, content: r.content, structuredContent: r.structuredContent } };
  } catch (e) {
    got = { thrown: { class: e?.constructor?.name, code: e?.code, message: e?.message, data: e?.data } };
  }
  return JSON.parse(JSON.stringify(got).replaceAll(name, '<tool>'));
}

// 1. Without a token, /mcp answers 401 pointing at its resource metadata.
async function probe() {
  const res = await fetch(mcpURL, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'probe', version: '0' } } }),
  });
  assert.equal(res.status, 401);
  assert.match(res.headers.get('www-authenticate') ?? '', /resource_metadata="[^"]+"/);
  step('/mcp without a token is 401 with resource_metadata');
}

// Phase 1: sign in, code mode, the second user, storage and memories.
async function phase1() {
  await probe();
  const first = await authorize({ email, password });

  // 5. Code mode as the first user: one program calling two capabilities,
  // a saved package whose exports become the user's own tools.
  const pkg = 'sdk-e2e';
  const ownerTool = `pkg_${pkg}_owner`;
  const greetTool = `pkg_${pkg}_greet`;
  {
    const client = newClient();
    let listChanged = 0;
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => { listChanged++; });
    await first.session(client);
    const { tools } = await client.listTools();
    assert.ok(tools.some((t) => t.name === 'execute') && tools.some((t) => t.name === 'packageSave'), 'execute and packageSave are listed');
    assert.ok(!tools.some((t) => t.name.startsWith('pkg_')), 'no package exports yet');

    const clientId = first.saved.client.client_id;
    let r = await client.callTool({ name: 'execute', arguments: { code: `
      const me = await codemode.whoami({});
      const { grants } = await codemode.oauthGrantList({});
      const ours = grants.filter((g) => g.clientId === ${JSON.stringify(clientId)});
      console.log("grants", grants.length);
      return { user: me.username, clients: ours.map((g) => g.clientName) };` } });
    assert.ok(!r.isError, show(r));
    let out = structured(r);
    assert.deepEqual(out.result, { user: 'agentowner', clients: [clientName] }, show(r));
    assert.ok(out.runId, 'a run id');
    assert.equal(out.logs.length, 1, show(r));
    assert.match(out.logs[0].message, /^grants \d+$/);
    step('execute: a program calls whoami and oauthGrantList and returns a filtered result');

    r = await client.callTool({ name: 'packageSave', arguments: {
      name: pkg,
      files: {
        'main.js': `import { shout } from "./lib/text.js";
  export async function owner() {
    const me = await codemode.whoami({});
    const { grants } = await codemode.oauthGrantList({});
    return { username: me.username, connectedApps: grants.length > 0 };
  }
  export async function greet({ name, times = 1 }) {
    return shout("hello " + name) + "!".repeat(times);
  }`,
        'lib/text.js': 'export const shout = (s) => s.toUpperCase();',
      },
      manifest: {
        description: 'End-to-end test tools',
        exports: {
          owner: { description: 'Who runs this, through whoami.', readOnly: true },
          greet: {
            description: 'Greets name, loudly.',
            inputSchema: { type: 'object', properties: { name: { type: 'string' }, times: { type: 'integer', minimum: 1, maximum: 5 } }, required: ['name'] },
            readOnly: true,
          },
        },
      },
    } });
    assert.ok(!r.isError, show(r));
    const version = structured(r);
    assert.equal(version.package, pkg, show(r));
    assert.equal(version.version, 1, show(r));
    step('packageSave: a package with two exports (version 1)');

    // The server works out a session's tool set again at its next request
    // (any but tools/list) and, the set having changed, notifies the
    // session's stream. Behind the round-robin proxy only the replica that
    // saved the package sees the change (a provider's generation is per
    // process), so one ping per replica.
    for (let n = 0; n < replicas && listChanged === 0; n++) {
      await client.ping();
      for (let i = 0; i < 20 && listChanged === 0; i++) await new Promise((ok) => setTimeout(ok, 50));
    }
    assert.ok(listChanged > 0, 'notifications/tools/list_changed arrived');
    const after = (await client.listTools()).tools;
    const owner = after.find((t) => t.name === ownerTool);
    const greet = after.find((t) => t.name === greetTool);
    assert.ok(owner && greet, `tools/list has ${ownerTool} and ${greetTool}: ${after.map((t) => t.name).filter((n) => n.startsWith('pkg_'))}`);
    assert.deepEqual(greet.inputSchema.required, ['name'], JSON.stringify(greet.inputSchema));
    assert.equal(greet.inputSchema.properties.name.type, 'string');
    step('notifications/tools/list_changed, then tools/list lists the exports');

    r = await client.callTool({ name: ownerTool, arguments: {} });
    assert.ok(!r.isError, show(r));
    assert.deepEqual(structured(r).result, { username: 'agentowner', connectedApps: true }, show(r));
    r = await client.callTool({ name: greetTool, arguments: { name: 'world', times: 3 } });
    assert.ok(!r.isError, show(r));
    assert.equal(structured(r).result, 'HELLO WORLD!!!', show(r));
    const bad = await outcome(client, greetTool, { times: 2 });
    assert.ok(bad.thrown || bad.result.isError, `the input schema refuses a call without name: ${JSON.stringify(bad)}`);
    assert.match(JSON.stringify(bad), /name/);
    step('tools/call on the exports returns their results; the input schema applies');

    r = await client.callTool({ name: 'execute', arguments: { code: `import { owner } from "pkg:${pkg}"; return (await owner()).username;` } });
    assert.ok(!r.isError, show(r));
    assert.equal(structured(r).result, 'agentowner', show(r));
    step('execute imports the package as pkg:' + pkg);
    await client.close();
  }

  // 6. A second user, through the same real flow with its own client: the
  // first user's package is not theirs in any way.
  const second = await authorize({ email: email2, password: password2, label: 'second user' });
  {
    const client = await second.session();
    const { tools } = await client.listTools();
    assert.ok(tools.some((t) => t.name === 'execute'), 'execute is listed for the second user');
    assert.ok(!tools.some((t) => t.name.startsWith('pkg_')), `the second user lists no exports: ${tools.map((t) => t.name).filter((n) => n.startsWith('pkg_'))}`);
    step(`tools/list of the second user lacks ${ownerTool}`);

    for (const tool of [ownerTool, greetTool]) {
      const theirs = await outcome(client, tool, { name: 'world' });
      assert.ok(theirs.thrown || theirs.result.isError, `the second user ran ${tool}: ${JSON.stringify(theirs)}`);
      for (const unknown of [`pkg_${pkg}_nothing`, 'pkg_nosuchpackage_owner', 'noSuchTool']) {
        const none = await outcome(client, unknown, { name: 'world' });
        assert.deepEqual(theirs, none, `${tool} is refused as ${unknown} is`);
      }
    }
    step(`calling ${ownerTool} as the second user fails exactly as an unknown tool does`);

    const r = await client.callTool({ name: 'execute', arguments: { code: `import { owner } from "pkg:${pkg}"; return await owner();` } });
    assert.ok(r.isError, show(r));
    const out = structured(r);
    assert.ok(out.error, show(r));
    assert.match(out.error.message, /not found/i, show(r));
    assert.match(out.error.message, new RegExp(`module not found: pkg:${pkg}`), show(r));
    assert.equal(out.result, null, show(r));
    step(`execute importing pkg:${pkg} as the second user fails: module not found`);
    await client.close();
  }

  // 7. Agent state: the first user's storage bucket and memories; the
  // second user, with the same bucket id and the same words, finds nothing
  // of them; the first user's export carries both.
  const words = 'the quarterly atlas review moved to thursday';
  let memId;
  {
    const alice = await first.session();
    let r = await alice.callTool({ name: 'storageSet', arguments: { storageId: 'notes', key: 'review/day', value: { day: 'thursday', n: 3 } } });
    assert.ok(!r.isError, show(r));
    const rev = structured(r).revision;
    assert.ok(rev > 0, show(r));
    r = await alice.callTool({ name: 'storageSet', arguments: { storageId: 'notes', key: 'review/day', value: 'stale', ifRevision: 0 } });
    assert.ok(r.isError, `a compare-and-set on an existing key must fail: ${show(r)}`);
    r = await alice.callTool({ name: 'storageGet', arguments: { storageId: 'notes', key: 'review/day' } });
    assert.deepEqual(structured(r).value, { day: 'thursday', n: 3 }, show(r));
    r = await alice.callTool({ name: 'storageList', arguments: { storageId: 'notes', prefix: 'review/' } });
    assert.deepEqual(structured(r).keys.map((k) => k.key), ['review/day'], show(r));
    step('storageSet, compare-and-set, storageGet and storageList on a bucket of the first user');

    r = await alice.callTool({ name: 'memorySave', arguments: { text: words, tags: ['work'], source: 'e2e' } });
    assert.ok(!r.isError, show(r));
    const mem = structured(r);
    memId = mem.id;
    assert.match(mem.id, /^mem_/, show(r));
    r = await alice.callTool({ name: 'memorySearch', arguments: { query: 'atlas review thursday' } });
    const found = structured(r).memories;
    assert.equal(found.length, 1, show(r));
    assert.equal(found[0].id, mem.id, show(r));
    assert.equal(found[0].text, words, show(r));
    step('memorySave, then memorySearch finds the memory by its words');

    // The export: the bucket's entries and the memory are in it.
    const manifest = structured(await alice.callTool({ name: 'accountExportManifest', arguments: {} }));
    const sections = JSON.stringify(manifest);
    const dump = async (section) => {
      let all = '';
      for (let cursor; ;) {
        const page = structured(await alice.callTool({ name: 'accountExportSection', arguments: { section, cursor, limit: 1000 } }));
        all += JSON.stringify(page.rows ?? page.items ?? []);
        if (!page.nextCursor) return all;
        cursor = page.nextCursor;
      }
    };
    assert.ok(sections.includes('sql:storage_entries') && sections.includes('sql:memories'), sections.slice(0, 2000));
    assert.ok((await dump('sql:storage_entries')).includes('thursday'), 'the export has the bucket entry');
    assert.ok((await dump('sql:memories')).includes(words), 'the export has the memory');
    step('the first user\'s export has the bucket entry and the memory');
    await alice.close();

    const bob = await second.session();
    r = await bob.callTool({ name: 'storageGet', arguments: { storageId: 'notes', key: 'review/day' } });
    assert.ok(!r.isError && structured(r).found === false, `the second user reads the first user's bucket: ${show(r)}`);
    r = await bob.callTool({ name: 'storageList', arguments: { storageId: 'notes' } });
    assert.deepEqual(structured(r).keys, [], show(r));
    r = await bob.callTool({ name: 'memorySearch', arguments: { query: 'atlas review thursday' } });
    assert.deepEqual(structured(r).memories, [], show(r));
    r = await bob.callTool({ name: 'memoryGet', arguments: { id: mem.id } });
    assert.ok(r.isError, `the second user reads the first user's memory by id: ${show(r)}`);
    step('the second user finds none of it: same bucket id, same words, the memory\'s id');
    await bob.close();
  }

  // 8. mailSend: the server asks the person (elicitation) to confirm the
  // exact message; a decline sends nothing; on accept the message leaves
  // from the user's own address to the outside world's SMTP server.
  {
    const mailURL = inspectURL.replace(/\/owned$/, '/mail');
    const outsideMail = async () => (await (await fetch(mailURL)).json()).messages.filter((m) => m.from.startsWith('bounces+'));
    const asked = [];
    let answer = 'decline';
    const client = new Client({ name: 'enclave-e2e-mail', version: '1.0.0' }, { capabilities: { elicitation: {} } });
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push(req.params.message);
      return answer === 'accept' ? { action: 'accept', content: { send: true } } : { action: answer };
    });
    await first.session(client);
    const message = { to: ['carol@outside.test'], subject: 'Atlas review moved', text: 'The atlas review moves to Thursday at ten.' };
    let r = await client.callTool({ name: 'mailSend', arguments: message });
    assert.ok(!r.isError && structured(r).status === 'declined', `a declined send: ${show(r)}`);
    assert.equal(asked.length, 1, 'the person was asked once');
    for (const part of ['To: carol@outside.test', 'Subject: Atlas review moved', 'The atlas review moves to Thursday at ten.', 'agentowner@' ]) {
      assert.ok(asked[0].includes(part), `the confirmation shows ${part}: ${asked[0]}`);
    }
    answer = 'accept';
    r = await client.callTool({ name: 'mailSend', arguments: message });
    assert.ok(!r.isError && structured(r).status === 'queued', `an accepted send: ${show(r)}`);
    assert.equal(asked.length, 2, 'the person was asked again');
    let got = [];
    for (let i = 0; i < 300 && got.length === 0; i++) {
      got = await outsideMail();
      if (got.length === 0) await new Promise((res) => setTimeout(res, 100));
    }
    assert.equal(got.length, 1, `exactly the accepted message left: ${JSON.stringify(got).slice(0, 2000)}`);
    assert.deepEqual(got[0].to, ['carol@outside.test']);
    assert.match(got[0].raw, /^From: agentowner@mail\.e2e\.test\r?$/m, got[0].raw);
    assert.match(got[0].raw, /Subject: Atlas review moved/);
    r = await client.callTool({ name: 'mailSendStatus', arguments: { outboundId: structured(r).outboundId } });
    assert.ok(!r.isError, show(r));
    step('mailSend: the person confirms the exact message (elicitation); declined sends nothing, accepted leaves from the user\'s address to the outside SMTP server');
    await client.close();
  }

  writeFileSync(statePath, JSON.stringify({ passed, first: first.saved, second: second.saved, words, memId }));
}

// ping sends a JSON-RPC ping to /mcp with a bearer token, without the SDK
// (which would refresh or re-authorize on a 401).
const ping = (token) => fetch(mcpURL, {
  method: 'POST',
  headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${token}` },
  body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
});

// refused expects /mcp to refuse token with 401 invalid_token. Behind the
// round-robin proxy the other replicas drop the token from their caller
// caches when the change (a revocation, a deletion) reaches them on the
// cluster bus, a few milliseconds after it was answered: it gives them two
// seconds.
async function refused(token, what) {
  let after = await ping(token);
  if (replicas > 1 && after.status !== 401) {
    const start = Date.now();
    const first = `${after.status} ${(await after.text()).trim().slice(0, 200)}`;
    for (;;) {
      await new Promise((ok) => setTimeout(ok, 20));
      after = await ping(token);
      if (after.status === 401 || Date.now() - start > 2000) break;
      await after.body?.cancel();
    }
    console.log(`# a replica took the token at first after ${what} (${first}); ${after.status} after ${Date.now() - start} ms`);
  }
  assert.equal(after.status, 401, `${after.status} ${after.status === 401 ? '' : await after.text()}`);
  assert.match(after.headers.get('www-authenticate') ?? '', /invalid_token/);
}

const authServerMeta = async () => (await fetch(baseURL + '/.well-known/oauth-authorization-server')).json();

// Revoke the refresh token; the grant's access token stops working.
async function revoke({ saved, suffix }) {
  const meta = await authServerMeta();
  const res = await fetch(meta.revocation_endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ token: saved.tokens.refresh_token, token_type_hint: 'refresh_token', client_id: saved.client.client_id }).toString(),
  });
  assert.equal(res.status, 200);
  step('revoke' + suffix);
  await refused(saved.tokens.access_token, 'the revocation');
  step('/mcp after revocation is 401 invalid_token' + suffix);
}

// owned is what the server itself holds of the first user, per surface of
// its ownership inventory (the e2e server's inspection endpoint).
async function owned() {
  const res = await fetch(`${inspectURL}?id=${userID}&stableID=${encodeURIComponent(stableID)}`);
  assert.equal(res.status, 200, await res.clone().text());
  const { total, surfaces } = await res.json();
  const held = Object.entries(surfaces).filter(([, n]) => n > 0).map(([k, n]) => `${k} ${n}`).join(', ');
  return { total, surfaces, held, count: Object.keys(surfaces).length };
}

// signIn submits the web sign-in form with a fresh browser.
async function signIn(email, password) {
  const br = browser();
  const page = new URL('/login', baseURL);
  let res = await br.browse(page);
  assert.equal(res.status, 200, 'the sign-in page');
  res = await br.submit(page, await res.text(), { email, password }, '/login');
  return { ...br, res };
}

// Phase 2, against a new server process on the same data directory and
// database: the tokens of phase 1 find everything again; then the first
// user deletes the account.
async function phase2() {
  const { words, memId } = state;
  const first = resume(state.first);
  const second = resume(state.second, 'second user');

  // 9. After the restart.
  {
    // initialize with the bare token: the SDK would refresh on a 401.
    const res = await fetch(mcpURL, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${first.saved.tokens.access_token}` },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'probe', version: '0' } } }),
    });
    const text = await res.text();
    assert.equal(res.status, 200, `the access token from before the restart: ${res.status} ${text}`);
    const alice = await first.session();
    let r = await alice.callTool({ name: 'storageGet', arguments: { storageId: 'notes', key: 'review/day' } });
    assert.ok(!r.isError, show(r));
    assert.deepEqual(structured(r).value, { day: 'thursday', n: 3 }, show(r));
    r = await alice.callTool({ name: 'memorySearch', arguments: { query: 'atlas review thursday' } });
    const found = structured(r).memories;
    assert.equal(found.length, 1, show(r));
    assert.equal(found[0].id, memId, show(r));
    assert.equal(found[0].text, words, show(r));
    step('after a restart: the access token from before it still works; storageGet and memorySearch find the bucket entry and the memory');
    await alice.close();

    const before = first.saved.tokens;
    first.saved.tokens = { ...before, access_token: 'ory_at_expired.expired' };
    const again = await first.session();
    assert.notEqual(first.saved.tokens.refresh_token, before.refresh_token, 'the refresh token rotated');
    assert.notEqual(first.saved.tokens.access_token, before.access_token);
    r = await again.callTool({ name: 'memorySearch', arguments: { query: 'atlas review thursday' } });
    assert.equal(structured(r).memories[0]?.id, memId, show(r));
    step('after a restart: the refresh token from before it refreshes (rotated) and the new access token finds the memory');
    await again.close();

    const bob = await second.session();
    r = await bob.callTool({ name: 'storageGet', arguments: { storageId: 'notes', key: 'review/day' } });
    assert.ok(!r.isError && structured(r).found === false, `the second user reads the first user's bucket: ${show(r)}`);
    r = await bob.callTool({ name: 'memorySearch', arguments: { query: 'atlas review thursday' } });
    assert.deepEqual(structured(r).memories, [], show(r));
    step('after a restart: the second user, with his own tokens from before it, still finds none of it');
    await bob.close();
  }

  // 10. The first user deletes the account as a person does: signed in on
  // the web, the form at /account/delete.
  {
    const held = await owned();
    assert.ok(held.surfaces.storage_entries > 0 && held.surfaces.memories > 0, `the server holds the first user's entry and memory: ${JSON.stringify(held.surfaces)}`);
    step(`the server holds ${held.total} items of the first user before the deletion (${held.held})`);

    const br = await signIn(email, password);
    assert.equal(br.res.status, 303, `signing in redirects (got ${br.res.status})`);
    const page = new URL('/account/delete', baseURL);
    let res = await br.browse(page);
    assert.equal(res.status, 200, `the deletion page (got ${res.status})`);
    let html = await res.text();
    res = await br.submit(page, html, { confirm: 'wrongname', password }, '/account/delete');
    assert.equal(res.status, 422, `a mistyped username deletes nothing (got ${res.status})`);
    html = await res.text();
    assert.ok((await owned()).total === held.total, 'a mistyped confirmation removed something');
    res = await br.submit(page, html, { confirm: 'agentowner', password }, '/account/delete');
    html = await res.text();
    assert.equal(res.status, 200, `the deletion (got ${res.status}): ${html.slice(0, 500)}`);
    assert.match(html, /Your account is deleted/);
    step('the first user deletes the account through the web form at /account/delete (signed in at /login)');

    await refused(first.saved.tokens.access_token, 'the deletion');
    const meta = await authServerMeta();
    res = await fetch(meta.token_endpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: first.saved.tokens.refresh_token, client_id: first.saved.client.client_id }).toString(),
    });
    const body = await res.json().catch(() => ({}));
    assert.ok(res.status >= 400 && res.status < 500 && !body.access_token, `the refresh token after the deletion: ${res.status} ${JSON.stringify(body)}`);
    step(`after the deletion her access token is refused at /mcp (401) and her refresh token at the token endpoint (${res.status} ${body.error})`);

    const bob = await second.session();
    let r = await bob.callTool({ name: 'storageGet', arguments: { storageId: 'notes', key: 'review/day' } });
    assert.ok(!r.isError && structured(r).found === false, show(r));
    r = await bob.callTool({ name: 'memorySearch', arguments: { query: 'atlas review thursday' } });
    assert.deepEqual(structured(r).memories, [], show(r));
    r = await bob.callTool({ name: 'memoryGet', arguments: { id: memId } });
    assert.ok(r.isError, show(r));
    step('after the deletion the second user still finds nothing: same bucket id, same words, the memory\'s id');
    await bob.close();

    const left = await owned();
    assert.equal(left.total, 0, `the server still holds items of the deleted user: ${left.held}`);
    step(`the server holds nothing of the first user in its ${left.count} inventoried surfaces`);

    const again = await signIn(email, password);
    assert.notEqual(again.res.status, 303, 'signing in as the deleted user succeeded');
    assert.match(await again.res.text(), /not correct|incorrect|invalid|wrong/i);
    step(`signing in as the deleted user fails (${again.res.status})`);
  }

  // 11. Revocation, with the second user's tokens from before the restart.
  await revoke(second);
}


if (phase === '1') {
  await phase1();
  console.log(`# phase 1: ${passed} passed; the server restarts`);
} else {
  await phase2();
  console.log(`${passed} passed, 0 failed`);
}
