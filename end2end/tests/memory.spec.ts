import { test, expect, type APIRequestContext } from "@playwright/test";
import { spawn, type ChildProcess } from "node:child_process";
import { password, signIn } from "./helpers";
import { expectAccessible } from "./a11y";

// The ephemeral store: its own `herald serve --database-url memory://` (the shared
// test server runs on SQLite). Runs work; the pages that need the durable outbox
// show a designed "unavailable on this store" notice, accessible, not an error.

test.describe.configure({ mode: "serial" });

const port = Number(process.env.HERALD_E2E_MEMORY_PORT ?? 3927);
const base = `http://127.0.0.1:${port}`;
let server: ChildProcess;
let api: APIRequestContext;

test.use({ baseURL: base });

test.beforeAll(async ({ playwright }) => {
  server = spawn(
    `../target/${process.env.PROFILE ?? "debug"}/herald`,
    ["serve", "--database-url", "memory://", "--listen", `127.0.0.1:${port}`, "--site-root", "../target/site"],
    { env: { ...process.env, HERALD_ADMIN_PASSWORD: password("admin") }, stdio: "ignore" },
  );
  for (let i = 0; i < 200; i++) {
    try {
      if ((await fetch(`${base}/readyz`)).ok) break;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  api = await playwright.request.newContext({ baseURL: base, extraHTTPHeaders: { origin: base } });
  const login = await api.post("/auth/login", {
    form: { username: "admin", password: password("admin"), next: "/runs" },
    maxRedirects: 0,
  });
  expect(login.status()).toBe(303);
});

test.afterAll(async () => {
  await api?.dispose();
  server?.kill("SIGTERM");
});

test("pages that need the outbox say durable delivery is unavailable on this store", async ({ page }) => {
  const created = await api.post("/api/v1/runs", { data: { type: "demo.memory", tenant: "acme" } });
  expect(created.status()).toBe(201);
  const run = await created.json();

  await signIn(page, "admin");
  await expect(page.getByTestId("run-link")).toHaveCount(1);
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
