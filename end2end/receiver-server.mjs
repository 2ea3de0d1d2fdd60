// @ts-check
/**
 * The browser tests' shared receiver on loopback: serve.sh starts it before Herald,
 * whose configured routes (approvals.toml, the chat route) point at it. It binds
 * port 0 and prints `Herald e2e receiver: http://127.0.0.1:<port>` once listening.
 *
 * Every request outside /_e2e/ is a delivery: it is recorded, then answered from
 * its path's plan (one status per request), then with the path's status (200
 * unless steered), with the path's `Retry-After` if one is set. Specs steer it and
 * read what arrived over a small control API (client: tests/receiver.ts):
 *
 *   POST /_e2e/steer     {"path", "status"?, "plan"?, "retryAfter"?, "delayMs"?}  replaces how a path answers
 *                        (delayMs: the answer waits that long, so a delivery stays in flight)
 *   GET  /_e2e/arrivals?path=/hook                                   what arrived (all paths without ?path)
 */
import http from "node:http";

/** @typedef {{ status: number, plan: number[], retryAfter?: string, delayMs: number }} Behaviour */
/** @typedef {{ path: string, id: string, at: number, status: number, headers: http.IncomingHttpHeaders }} Arrival */

/** @type {Map<string, Behaviour>} */
const behaviours = new Map();
/** @type {Arrival[]} */
const arrivals = [];

/** @param {http.ServerResponse} res @param {number} status @param {unknown} [body] */
function reply(res, status, body) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body ?? { status }));
}

/** @param {string} method @param {URL} url @param {string} body @param {http.ServerResponse} res */
function control(method, url, body, res) {
  if (method === "POST" && url.pathname === "/_e2e/steer") {
    const { path, status = 200, plan = [], retryAfter, delayMs = 0 } = JSON.parse(body || "{}");
    if (typeof path !== "string" || !path.startsWith("/")) return reply(res, 400, { error: "path must start with /" });
    behaviours.set(path, { status, plan: [...plan], retryAfter: retryAfter == null ? undefined : String(retryAfter), delayMs });
    return reply(res, 200, { path, status, plan, retryAfter, delayMs });
  }
  if (method === "GET" && url.pathname === "/_e2e/arrivals") {
    const path = url.searchParams.get("path");
    return reply(res, 200, path === null ? arrivals : arrivals.filter((a) => a.path === path));
  }
  return reply(res, 404, { error: `no control endpoint ${method} ${url.pathname}` });
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url ?? "/", "http://receiver");
  const chunks = /** @type {Buffer[]} */ ([]);
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    const body = Buffer.concat(chunks).toString();
    if (url.pathname.startsWith("/_e2e/")) {
      try {
        control(req.method ?? "GET", url, body, res);
      } catch (err) {
        reply(res, 400, { error: String(err) });
      }
      return;
    }
    const how = behaviours.get(url.pathname) ?? { status: 200, plan: [], delayMs: 0 };
    const status = how.plan.shift() ?? how.status;
    arrivals.push({ path: url.pathname, id: String(req.headers["webhook-id"] ?? ""), at: Date.now(), status, headers: req.headers });
    setTimeout(() => {
      res.writeHead(status, { "content-type": "text/plain", ...(how.retryAfter ? { "retry-after": how.retryAfter } : {}) });
      res.end(String(status));
    }, how.delayMs);
  });
});

server.listen(0, "127.0.0.1", () => {
  const address = /** @type {import("node:net").AddressInfo} */ (server.address());
  console.log(`Herald e2e receiver: http://127.0.0.1:${address.port}`);
});

for (const signal of /** @type {const} */ (["SIGTERM", "SIGINT"])) {
  process.on(signal, () => {
    // Herald keeps idle keep-alive connections open: close() alone would wait for them.
    server.closeAllConnections();
    server.close(() => process.exit(0));
  });
}
