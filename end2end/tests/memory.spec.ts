import type { APIRequestContext } from "@playwright/test";
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { test, expect } from "./fixtures";
import { password, signIn } from "./helpers";
import { expectAccessible } from "./a11y";

// The ephemeral store: its own `herald serve --database-url memory://` (the shared
// test server runs on SQLite), on a port it picks itself. Runs work; the pages that
// need the durable outbox show a designed "unavailable on this store" notice,
// accessible, not an error.

test.describe.configure({ mode: "serial" });

/** Bounds for a loaded machine: how long the server may take to listen and be ready. */
const START_MS = 60_000;
const target = path.resolve(__dirname, "..", "..", "target");
let server: ChildProcess | undefined;
let base = "";
let api: APIRequestContext;

test.use({ baseURL: async ({}, use) => use(base) });

/** Starts `herald serve` on port 0 and resolves to its URL once it prints it. */
function serve(args: string[]): Promise<string> {
  // Only the settings given here: none of the caller's HERALD_* variables.
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("HERALD_")));
  const child = spawn(path.join(target, process.env.PROFILE ?? "debug", "herald"), ["serve", "--listen", "127.0.0.1:0", ...args], {
    env: { ...env, HERALD_ADMIN_PASSWORD: password("admin"), HERALD_DRAIN_DEADLINE_SECS: "2" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  server = child;
  return new Promise((resolve, reject) => {
    let stdout = "";
    let stderr = "";
    const fail = (why: string) => {
      clearTimeout(timer);
      reject(new Error(`herald ${why}:\n${stderr}`));
    };
    const timer = setTimeout(() => fail(`printed no URL within ${START_MS} ms`), START_MS);
    const onStdout = (chunk: Buffer) => {
      stdout += chunk;
      const url = stdout.match(/Herald console: (http:\/\/127\.0\.0\.1:\d+)\/runs\n/)?.[1];
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
}

test.beforeAll(async ({ playwright }) => {
  base = await serve(["--database-url", "memory://", "--site-root", path.join(target, "site")]);
  // Listening is not yet ready.
  const readyz = async () => {
    const resp = await fetch(`${base}/readyz`).catch(() => undefined);
    await resp?.arrayBuffer();
    return resp?.status;
  };
  await expect.poll(readyz, { timeout: START_MS }).toBe(200);
  api = await playwright.request.newContext({ baseURL: base, extraHTTPHeaders: { origin: base } });
  const login = await api.post("/auth/login", {
    form: { username: "admin", password: password("admin"), next: "/runs" },
    maxRedirects: 0,
  });
  expect(login.status()).toBe(303);
});

test.afterAll(async () => {
  await api?.dispose();
  const child = server;
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  // Bounded: a server that does not stop is killed outright.
  const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
  await exited;
  clearTimeout(timer);
});

test("pages that need the outbox say durable delivery is unavailable on this store", async ({ page }) => {
  const created = await api.post("/api/v1/runs", { data: { type: "demo.memory", tenant: "acme" } });
  expect(created.status()).toBe(201);
  const run = await created.json();

  await signIn(page, "admin");
  await expect(page.getByTestId("run-link")).toHaveCount(1);
  // This server was given no callback signing secret: the Runs page says so, by
  // setting, above the runs (which still work), and never shows the value.
  const notices = page.getByTestId("config-notices");
  await expect(notices).toBeVisible();
  await expect(notices.getByTestId("config-notice")).toHaveAttribute("data-setting", "callback_secret_ref");
  await expect(notices).toContainText("run callbacks wait, unsent");
  await expectAccessible(page, "/runs with a configuration notice");
  // Client-side navigation (a server function answering 501) shows the same notice.
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Deliveries" }).click();
  await expect(page).toHaveURL(/\/deliveries$/);
  await expect(page.getByTestId("capability-unavailable")).toBeVisible();

  for (const path of ["/deliveries", "/audit"]) {
    await page.goto(path);
    const notice = page.getByTestId("capability-unavailable");
    await expect(notice).toBeVisible();
    await expect(notice.getByRole("heading", { name: "Durable delivery unavailable on this store" })).toBeVisible();
    await expect(page.getByTestId("error-state")).toHaveCount(0);
    await expectAccessible(page, path);
  }

  // Approvals: no outbox, so no replay shelf — said plainly, not as a failure.
  await page.goto("/approvals");
  await expect(page.getByTestId("capability-unavailable")).toBeVisible();
  await expect(page.getByTestId("error-state")).toHaveCount(0);
  await expectAccessible(page, "/approvals on memory://");

  await page.goto(`/runs/${run.id}`);
  await expect(page.getByTestId("run-id")).toHaveText(run.id);
  await expect(page.getByTestId("capability-unavailable")).toBeVisible();
  await expectAccessible(page, "run detail on memory://");
});
