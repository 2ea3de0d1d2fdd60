import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { expect } from "./fixtures";
import { password } from "./helpers";

// A `herald serve` of a spec's own, on a port it picks itself, for a spec that
// must own the whole store (the shared server's figures include every spec's).

/** Bounds for a loaded machine: how long the server may take to listen and be ready. */
export const START_MS = 60_000;
export const target = path.resolve(__dirname, "..", "..", "target");
/** The herald binary the suite was built as. */
export const heraldBin = () => path.join(target, process.env.PROFILE ?? "debug", "herald");

/** A SQLite store of a spec's own, in a temporary directory. */
export interface OwnStore {
  /** The `sqlite://` URL to hand the server as HERALD_DATABASE_URL. */
  database: string;
  /** Removes the directory (after the server stopped). */
  remove: () => void;
}

/**
 * A fresh SQLite store in a temporary directory named after `tag`, with one user
 * per role in `roles` (username = role, password `password(role)`), added
 * through `herald user add` before any server opens it.
 */
export function ownStoreWithUsers(tag: string, roles: string[]): OwnStore {
  const dir = mkdtempSync(path.join(os.tmpdir(), `herald-${tag}-`));
  const database = `sqlite://${dir}/herald.db`;
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("HERALD_")));
  for (const role of roles) {
    execFileSync(heraldBin(), ["user", "add", role, "--role", role, "--password-stdin", "--database-url", database], {
      input: password(role),
      env,
    });
  }
  return { database, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

export interface OwnServer {
  base: string;
  /** SIGTERM, then SIGKILL if it does not stop within 15 s. */
  stop: () => Promise<void>;
}

/**
 * Starts `herald serve` with `args` and `env` (none of the caller's HERALD_*
 * variables), an admin whose password is `password("admin")`, and resolves once it
 * answers /readyz.
 */
export async function startOwnServer(args: string[], env: Record<string, string> = {}): Promise<OwnServer> {
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("HERALD_")));
  const child = spawn(heraldBin(), ["serve", "--listen", "127.0.0.1:0", ...args], {
    env: { ...inherited, HERALD_ADMIN_PASSWORD: password("admin"), HERALD_DRAIN_DEADLINE_SECS: "2", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const stop = () => stopChild(child);
  const base = await new Promise<string>((resolve, reject) => {
    let stdout = "";
    let stderr = "";
    const fail = (why: string) => {
      clearTimeout(timer);
      reject(new Error(`herald ${why}:\n${stderr}`));
    };
    const timer = setTimeout(() => fail(`printed no URL within ${START_MS} ms`), START_MS);
    const onStdout = (chunk: Buffer) => {
      stdout += chunk;
      const url = stdout.match(/Herald console: (http:\/\/127\.0\.0\.1:\d+)\/overview\n/)?.[1];
      if (url) {
        clearTimeout(timer);
        // Still drained, so the child never blocks writing to a full pipe.
        child.stdout!.off("data", onStdout).resume();
        resolve(url);
      }
    };
    child.stdout!.on("data", onStdout);
    child.stderr!.on("data", (chunk) => (stderr = (stderr + chunk).slice(-4_000)));
    child.once("error", (err) => fail(`did not start: ${err.message}`));
    child.once("exit", (code, signal) => fail(`exited (${code ?? signal}) before listening`));
  });
  // Listening is not yet ready.
  const readyz = async () => {
    const resp = await fetch(`${base}/readyz`).catch(() => undefined);
    await resp?.arrayBuffer();
    return resp?.status;
  };
  await expect.poll(readyz, { timeout: START_MS }).toBe(200);
  return { base, stop };
}

async function stopChild(child: ChildProcess) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
  await exited;
  clearTimeout(timer);
}
