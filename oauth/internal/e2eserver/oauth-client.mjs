// End-to-end OAuth test with the official MCP TypeScript SDK as the client:
// 401 → protected resource metadata → authorization server metadata →
// dynamic registration → authorization with PKCE S256 and resource (the
// login and consent forms submitted headlessly) → token → MCP initialize,
// tools/list, tools/call → refresh → revoke → 401.
//
// Usage: node oauth-client.mjs '{"baseURL":…,"email":…,"password":…}'
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const { baseURL, email, password } = JSON.parse(process.argv[2]);
const mcpURL = new URL(baseURL + '/mcp');
let passed = 0;
const step = (name) => { passed++; console.log(`ok ${passed} - ${name}`); };

// --- a minimal cookie jar and form reader for the headless browser ---
const jar = new Map();
function keepCookies(res) {
  for (const c of res.headers.getSetCookie?.() ?? []) {
    const [pair] = c.split(';');
    const i = pair.indexOf('=');
    jar.set(pair.slice(0, i).trim(), pair.slice(i + 1).trim());
  }
}
const cookieHeader = () => [...jar].map(([k, v]) => `${k}=${v}`).join('; ');
const unescape = (s) => s.replace(/&amp;/g, '&').replace(/&quot;|&#34;/g, '"').replace(/&#39;|&#x27;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>');
function attrs(tag) {
  const out = {};
  for (const m of tag.matchAll(/([\w-]+)(?:="([^"]*)")?/g)) out[m[1].toLowerCase()] = unescape(m[2] ?? '');
  return out;
}
// readForm reads the page's authorization form (a page may hold others,
// such as the sign-out button of the layout).
function readForm(html) {
  const forms = [...html.matchAll(/<form\b[^>]*>([\s\S]*?)<\/form>/gi)];
  const form = forms.find((f) => (attrs(f[0].match(/<form\b[^>]*>/i)[0]).action ?? '').includes('/oauth/authorize'));
  assert.ok(form, 'the page has the authorization form');
  const action = attrs(form[0].match(/<form\b[^>]*>/i)[0]).action;
  const fields = new URLSearchParams();
  for (const m of form[1].matchAll(/<input\b[^>]*>/gi)) {
    const a = attrs(m[0]);
    if (a.type === 'hidden' && a.name) fields.set(a.name, a.value ?? '');
  }
  const buttons = [...form[1].matchAll(/<button\b[^>]*>/gi)].map((m) => attrs(m[0]));
  return { action, fields, buttons };
}
async function browse(url, init = {}) {
  const res = await fetch(url, { ...init, redirect: 'manual', headers: { ...(init.headers ?? {}), cookie: cookieHeader() } });
  keepCookies(res);
  return res;
}
async function submit(pageURL, html, extra) {
  const { action, fields } = readForm(html);
  for (const [k, v] of Object.entries(extra)) fields.set(k, v);
  return browse(new URL(action, pageURL), {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: fields.toString(),
  });
}

// --- the SDK's OAuth client provider, in memory ---
const redirectUrl = 'http://127.0.0.1:9/callback';
const saved = { client: undefined, tokens: undefined, verifier: undefined, code: undefined, tokenSaves: 0 };
const provider = {
  get redirectUrl() { return redirectUrl; },
  get clientMetadata() {
    return {
      client_name: 'MCP TypeScript SDK end-to-end test',
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

// 1. Without a token, /mcp answers 401 pointing at its resource metadata.
{
  const res = await fetch(mcpURL, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'probe', version: '0' } } }),
  });
  assert.equal(res.status, 401);
  assert.match(res.headers.get('www-authenticate') ?? '', /resource_metadata="[^"]+"/);
  step('/mcp without a token is 401 with resource_metadata');
}

// 2. The SDK discovers, registers, and sends the user to authorize.
const newClient = () => new Client({ name: 'enclave-e2e', version: '1.0.0' });
{
  const transport = new StreamableHTTPClientTransport(mcpURL, { authProvider: provider });
  await assert.rejects(newClient().connect(transport), UnauthorizedError);
  assert.ok(saved.client?.client_id, 'dynamic registration gave a client_id');
  assert.ok(saved.code, 'the authorization produced a code');
  step('discovery, dynamic registration and authorization with PKCE S256 and resource');
  await transport.finishAuth(saved.code);
  assert.ok(saved.tokens?.access_token && saved.tokens?.refresh_token, 'tokens');
  step('code exchanged for an access and a refresh token');
}

// 3. MCP with the token: initialize, tools/list, tools/call.
async function session() {
  const client = newClient();
  await client.connect(new StreamableHTTPClientTransport(mcpURL, { authProvider: provider }));
  return client;
}
{
  const client = await session();
  step('initialize');
  const { tools } = await client.listTools();
  assert.ok(tools.some((t) => t.name === 'oauthGrantList'), 'oauthGrantList is listed');
  step('tools/list');
  const result = await client.callTool({ name: 'oauthGrantList', arguments: {} });
  assert.ok(!result.isError, JSON.stringify(result));
  const grants = result.structuredContent?.grants ?? JSON.parse(result.content[0].text).grants;
  assert.ok(grants.some((g) => g.clientName === provider.clientMetadata.client_name), 'our grant is listed');
  step('tools/call');
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
  step('refresh (rotated) and retry');
  await client.close();
}

// 5. Revoke the refresh token; the grant's access token stops working.
{
  const meta = await (await fetch(baseURL + '/.well-known/oauth-authorization-server')).json();
  const res = await fetch(meta.revocation_endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ token: saved.tokens.refresh_token, token_type_hint: 'refresh_token', client_id: saved.client.client_id }).toString(),
  });
  assert.equal(res.status, 200);
  step('revoke');
  const after = await fetch(mcpURL, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${saved.tokens.access_token}` },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
  });
  assert.equal(after.status, 401);
  assert.match(after.headers.get('www-authenticate') ?? '', /invalid_token/);
  step('/mcp after revocation is 401 invalid_token');
}

console.log(`${passed} passed, 0 failed`);
