// Server (d) of the enclave benchmark: the official MCP TypeScript SDK
// (@modelcontextprotocol/sdk) on Express with the SDK's own bearer-auth
// middleware (requireBearerAuth) and one echo tool, one McpServer and
// transport per session, as in the SDK's streamable HTTP examples.
//
// Tokens: the harness passes a file of opaque tokens, one per user. The
// verifier keeps their SHA-256 in an in-memory Map (this peer has no
// database), so its bearer check costs a hash and a map lookup, no SQL.
//
// Usage: node server.mjs --tokens FILE [--max-lifetime-ms N]
// Prints "READY 127.0.0.1:PORT" when listening; exits on SIGTERM/SIGINT or
// after --max-lifetime-ms.
import { createHash, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

const { values } = parseArgs({
  options: {
    tokens: { type: 'string' },
    'max-lifetime-ms': { type: 'string', default: '600000' },
  },
});

const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const tokens = new Map(); // sha256(token) → { clientId, userId }
readFileSync(values.tokens, 'utf8').split(/\s+/).filter(Boolean).forEach((t, i) => {
  tokens.set(sha256(t), { clientId: `bench-client-${i}`, userId: `bench-user-${i}` });
});

let resource; // set once listening: http://127.0.0.1:PORT/mcp
const expiresAt = Math.floor(Date.now() / 1000) + 3600;
const verifier = {
  async verifyAccessToken(token) {
    const t = tokens.get(sha256(token));
    if (!t) {
      const { InvalidTokenError } = await import('@modelcontextprotocol/sdk/server/auth/errors.js');
      throw new InvalidTokenError('unknown token');
    }
    return { token, clientId: t.clientId, scopes: ['mcp'], expiresAt, resource: new URL(resource), extra: { userId: t.userId } };
  },
};

function newServer() {
  const server = new McpServer({ name: 'bench-ts', version: '1.0.0' });
  server.registerTool('echo', {
    title: 'Echo',
    description: 'Echoes its text.',
    inputSchema: { text: z.string().describe('text to echo') },
  }, async ({ text }) => ({ content: [{ type: 'text', text }] }));
  return server;
}

const app = createMcpExpressApp({ host: '127.0.0.1' });
const transports = new Map(); // session id → transport
let auth; // built once the port is known

app.all('/mcp', (req, res, next) => auth(req, res, next), async (req, res) => {
  const sid = req.headers['mcp-session-id'];
  let transport = sid ? transports.get(sid) : undefined;
  if (!transport) {
    if (sid || req.method !== 'POST' || !isInitializeRequest(req.body)) {
      res.status(sid ? 404 : 400).json({ jsonrpc: '2.0', error: { code: -32000, message: sid ? 'Session not found' : 'Bad Request: no valid session ID' }, id: null });
      return;
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      enableJsonResponse: true,
      onsessioninitialized: (id) => { transports.set(id, transport); },
    });
    transport.onclose = () => { if (transport.sessionId) transports.delete(transport.sessionId); };
    await newServer().connect(transport);
  }
  await transport.handleRequest(req, res, req.body);
});

const httpServer = app.listen(0, '127.0.0.1', () => {
  const { port } = httpServer.address();
  resource = `http://127.0.0.1:${port}/mcp`;
  auth = requireBearerAuth({
    verifier,
    requiredScopes: ['mcp'],
    resourceMetadataUrl: `http://127.0.0.1:${port}/.well-known/oauth-protected-resource/mcp`,
    expectedResource: new URL(resource),
  });
  console.log(`READY 127.0.0.1:${port}`);
});

const shutdown = () => {
  for (const t of transports.values()) t.close().catch(() => {});
  httpServer.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 3000).unref();
};
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
setTimeout(shutdown, Number(values['max-lifetime-ms']));
