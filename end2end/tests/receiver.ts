import http from "node:http";

/**
 * A real HTTP receiver on loopback for the browser tests: webhooks arrive on /hook,
 * chat messages on /chat. Each path answers from its plan (one status per request),
 * then with its default status.
 */
export class Receiver {
  private server?: http.Server;
  readonly defaults: Record<string, number> = { "/hook": 200, "/chat": 200 };
  readonly plans: Record<string, number[]> = { "/hook": [], "/chat": [] };
  readonly received: { path: string; at: number }[] = [];

  constructor(readonly port: number) {}

  url(path: string) {
    return `http://127.0.0.1:${this.port}${path}`;
  }

  async start() {
    this.server = http.createServer((req, res) => {
      const path = (req.url ?? "/").split("?")[0];
      req.resume();
      req.on("end", () => {
        this.received.push({ path, at: Date.now() });
        const status = this.plans[path]?.shift() ?? this.defaults[path] ?? 404;
        res.writeHead(status, { "content-type": "text/plain" });
        res.end(String(status));
      });
    });
    await new Promise<void>((resolve, reject) => {
      this.server!.once("error", reject);
      this.server!.listen(this.port, "127.0.0.1", () => resolve());
    });
  }

  async stop() {
    // Herald keeps idle keep-alive connections to its receivers: close() alone would
    // wait for them to time out (up to 90 s).
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }
}
