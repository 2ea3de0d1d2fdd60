import http from "node:http";
import type { AddressInfo } from "node:net";
import { serverUrl } from "./fixtures";

/** How a receiver path answers: its plan first (one status per request), then `status`. */
export type Steering = { status?: number; plan?: number[]; retryAfter?: number; delayMs?: number };
export type Arrival = { path: string; id: string; at: number; status: number; headers: Record<string, string> };

/**
 * The shared receiver serve.sh started before Herald (../receiver-server.mjs), which
 * Herald's configured routes point at: steered, and read, over its control API.
 * Each spec steers only the paths it uses.
 */
export class SharedReceiver {
  // Read when used, not when a spec is loaded (`playwright test --list` starts no server).
  get base() {
    return serverUrl("HERALD_E2E_RECEIVER_URL");
  }

  get port() {
    return Number(new URL(this.base).port);
  }

  url(path: string) {
    return `${this.base}${path}`;
  }

  /** Replaces how `path` answers (unset fields: 200, no plan, no Retry-After). */
  async steer(path: string, how: Steering) {
    const resp = await fetch(this.url("/_e2e/steer"), { method: "POST", body: JSON.stringify({ path, ...how }) });
    if (!resp.ok) throw new Error(`steering ${path}: ${resp.status} ${await resp.text()}`);
  }

  /** Requests that arrived at `path`, oldest first. */
  async arrivals(path: string): Promise<Arrival[]> {
    const resp = await fetch(this.url(`/_e2e/arrivals?path=${encodeURIComponent(path)}`));
    if (!resp.ok) throw new Error(`arrivals at ${path}: ${resp.status}`);
    return resp.json();
  }
}

/**
 * A receiver of a spec's own, in this process, on a port the OS picks: for callback
 * URLs a spec names per run, so no route in Herald's config needs to know the port,
 * and a destination of its own (its breaker is not the shared receiver's). Each
 * path answers with its default status (404 for a path without one).
 */
export class Receiver {
  private server?: http.Server;
  readonly defaults: Record<string, number> = { "/hook": 200 };

  get port(): number {
    const address = this.server?.address() as AddressInfo | null | undefined;
    if (!address) throw new Error("the receiver is not listening");
    return address.port;
  }

  url(path: string) {
    return `http://127.0.0.1:${this.port}${path}`;
  }

  async start() {
    this.server = http.createServer((req, res) => {
      const path = (req.url ?? "/").split("?")[0];
      req.resume();
      req.on("end", () => {
        const status = this.defaults[path] ?? 404;
        res.writeHead(status, { "content-type": "text/plain" });
        res.end(String(status));
      });
    });
    await new Promise<void>((resolve, reject) => {
      this.server!.once("error", reject);
      this.server!.listen(0, "127.0.0.1", () => resolve());
    });
  }

  async stop() {
    // Herald keeps idle keep-alive connections to its receivers: close() alone would
    // wait for them to time out (up to 90 s).
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }
}
