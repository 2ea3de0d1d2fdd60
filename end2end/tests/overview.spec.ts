import type { APIRequestContext, Page } from "@playwright/test";
import path from "node:path";
import { test, expect } from "./fixtures";
import { password, screenshotPath, signedInApi, waitForHydration } from "./helpers";
import { expectAccessible } from "./a11y";
import { ownStoreWithUsers, startOwnServer, target, type OwnServer, type OwnStore } from "./own-server";
import { Receiver } from "./receiver";

// The overview (issue 23, item 1), the page after sign-in. Its figures count every
// delivery of a store, so this spec runs a Herald of its own (the shared server's
// figures include every spec's): what it shows is exactly what the spec made
// happen — four callbacks delivered to one receiver, two refused (400) by another.

test.describe.configure({ mode: "serial" });

let server: OwnServer | undefined;
let base = "";
let store: OwnStore | undefined;
let operator: APIRequestContext;
const healthy = new Receiver();
const refusing = new Receiver();

test.use({ baseURL: async ({}, use) => use(base) });

test.beforeAll(async ({ playwright }) => {
  await healthy.start();
  refusing.defaults["/hook"] = 400;
  await refusing.start();
  store = ownStoreWithUsers("overview", ["operator", "reader"]);
  server = await startOwnServer(["--site-root", path.join(target, "site")], {
    HERALD_DATABASE_URL: store.database,
    HERALD_DESTINATION_ALLOWLIST: "127.0.0.0/8",
    HERALD_WEBHOOK_SECRET: "whsec_b3ZlcnZpZXctZTJlLXNlY3JldC1mb3ItdGVzdHM=",
    HERALD_WORKER_POLL_INTERVAL_MS: "100",
    HERALD_MAINTENANCE_INTERVAL_MS: "200",
    HERALD_ROLLUP_INTERVAL_MS: "200",
  });
  base = server.base;
  operator = await signedInApi(playwright, base, "operator");
});

test.afterAll(async () => {
  await operator?.dispose();
  await server?.stop();
  await healthy.stop();
  await refusing.stop();
  store?.remove();
});

async function finishedRun(callback: string) {
  const created = await operator.post("/api/v1/runs", { data: { type: "overview.job", tenant: "acme", callback_url: callback } });
  expect(created.status()).toBe(201);
  const { id } = await created.json();
  const done = await operator.post(`/api/v1/runs/${id}/transitions`, { data: { to: "succeeded", result: { ok: true } } });
  expect(done.status()).toBe(200);
}

/** The sum of a chart's table column `column` (1: the first series). */
async function columnSum(page: Page, chart: string, column: number) {
  return page
    .getByTestId(chart)
    .locator("tbody tr")
    .evaluateAll(
      (rows, at) => rows.reduce((sum, row) => sum + Number((row.children[at]?.textContent ?? "0").replace(/,/g, "") || 0), 0),
      column,
    );
}

test("a reader lands on the overview, and its figures are the deliveries made", async ({ page }) => {
  // Signing in without a destination lands on the overview.
  await page.goto("/");
  await expect(page).toHaveURL(/\/login\?next=%2Foverview$/);
  await waitForHydration(page);
  await page.getByLabel("Username").fill("reader");
  await page.getByLabel("Password").fill(password("reader"));
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(/\/overview$/);
  await waitForHydration(page);
  await expect(page).toHaveTitle("Overview · Herald");
  await expect(page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Overview" })).toHaveAttribute("aria-current", "page");

  // Nothing yet: a designed state, not empty charts.
  await expect(page.getByTestId("overview-empty")).toContainText("Nothing to show for the last hour");
  await expectAccessible(page, "the overview with nothing to show");

  for (let i = 0; i < 4; i++) await finishedRun(healthy.url("/hook"));
  for (let i = 0; i < 2; i++) await finishedRun(refusing.url("/hook"));

  // The open page catches up by itself (live updates), with the exact figures.
  await expect(page.getByTestId("stat-completed")).toContainText("4");
  await expect(page.getByTestId("stat-failed")).toContainText("2");
  await expect(page.getByTestId("stat-uncertain")).toContainText("0");
  await expect(page.getByTestId("stat-backlog")).toContainText("0");
  await expect(page.getByTestId("stat-p50")).not.toContainText("—");
  await expect(page.getByTestId("overview-as-of")).toContainText("Counted at");
  // The bars say the same as the totals (their tables are the bars' figures).
  expect(await columnSum(page, "chart-deliveries", 1)).toBe(4);
  expect(await columnSum(page, "chart-deliveries", 2)).toBe(2);
  await expect(page.getByTestId("chart-deliveries").locator("svg rect.series-ok").first()).toBeVisible();
  // The refusing receiver is named, with its failures; the healthy one is not.
  const rows = page.getByTestId("destination-row");
  await expect(rows).toHaveCount(1);
  await expect(rows.first()).toContainText(`127.0.0.1:${refusing.port}`);
  await expect(rows.first().locator("td").nth(2)).toHaveText("2");

  await page.setViewportSize({ width: 1280, height: 1000 });
  await page.screenshot({ path: screenshotPath("overview-page.png"), fullPage: true });
  // A chart's table is there for whoever asks (and for screen readers).
  await page.getByTestId("chart-deliveries").getByText("Show as table").click();
  await expect(page.getByTestId("chart-deliveries").locator("table")).toBeVisible();
  await expectAccessible(page, "the overview with figures");

  // The day, and one kind: the same deliveries.
  await page.getByTestId("window-day").click();
  await expect(page).toHaveURL(/window=day/);
  await expect(page.getByTestId("window-day")).toHaveAttribute("aria-current", "page");
  await expect(page.getByTestId("stat-completed")).toContainText("4");
  await page.getByTestId("overview-kind").selectOption("callback");
  await page.getByRole("button", { name: "Show", exact: true }).click();
  await expect(page).toHaveURL(/kind=callback/);
  await expect(page.getByTestId("stat-failed")).toContainText("2");
  await expectAccessible(page, "the overview of a day, one kind");
});

test("signed out, the overview sends to sign-in and its data is refused", async ({ page, playwright }) => {
  await page.goto("/overview?window=day");
  await expect(page).toHaveURL(/\/login\?next=%2Foverview%3Fwindow%3Dday$/);
  const anonymous = await playwright.request.newContext({ baseURL: base, extraHTTPHeaders: { origin: base } });
  const forged = await anonymous.post("/console-api/overview", { data: { query: { window: "hour", source: null, kind: null } } });
  expect(forged.status()).toBe(401);
  await anonymous.dispose();
});
