import type { APIRequestContext } from "@playwright/test";
import path from "node:path";
import { test, expect } from "./fixtures";
import { password, signIn } from "./helpers";
import { expectAccessible } from "./a11y";
import { startOwnServer, target, type OwnServer } from "./own-server";

// The ephemeral store: its own `herald serve --database-url memory://` (the shared
// test server runs on SQLite), on a port it picks itself. Runs work; the pages that
// need the durable outbox show a designed "unavailable on this store" notice,
// accessible, not an error.

test.describe.configure({ mode: "serial" });

let server: OwnServer | undefined;
let base = "";
let api: APIRequestContext;

test.use({ baseURL: async ({}, use) => use(base) });

test.beforeAll(async ({ playwright }) => {
  server = await startOwnServer(["--database-url", "memory://", "--site-root", path.join(target, "site")]);
  base = server.base;
  api = await playwright.request.newContext({ baseURL: base, extraHTTPHeaders: { origin: base } });
  const login = await api.post("/auth/login", {
    form: { username: "admin", password: password("admin"), next: "/runs" },
    maxRedirects: 0,
  });
  expect(login.status()).toBe(303);
});

test.afterAll(async () => {
  await api?.dispose();
  await server?.stop();
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

  for (const path of ["/overview", "/deliveries", "/audit"]) {
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
