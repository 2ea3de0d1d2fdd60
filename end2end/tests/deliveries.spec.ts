import type { APIRequestContext, Page } from "@playwright/test";
import { test, expect } from "./fixtures";
import { screenshotPath, signedInApi, signIn, uniqueTag, waitForHydration } from "./helpers";
import { SharedReceiver } from "./receiver";
import { expectAccessible } from "./a11y";

// Notifications end to end: the shared receiver on loopback (callbacks to its /hook,
// the ops-chat route to its /chat), runs and transitions through the JSON API, and the
// console's delivery summaries, run detail, retry (409, the uncertain acknowledgement,
// keyboard only), audit and error pages. Tenants carry this spec's own tag, and the
// bulk retry is narrowed to deliveries this spec made.

test.describe.configure({ mode: "serial" });

const receiver = new SharedReceiver();
const tag = uniqueTag("deliveries");
/** The longest a delivery may take to settle: a bound for a loaded machine, not a target. */
const SETTLE_MS = 30_000;
let api: APIRequestContext;
let origin: string;

test.beforeAll(async ({ playwright, baseURL }) => {
  await receiver.steer("/hook", { status: 200 });
  await receiver.steer("/chat", { status: 200 });
  origin = baseURL!;
  api = await signedInApi(playwright, origin, "operator");
});

test.afterAll(async () => {
  await api?.dispose();
});

/** Records a run and finishes it; returns its id. */
async function finishedRun(opts: { tenant: string; routes?: string[]; callback?: boolean; text?: string }) {
  const created = await api.post("/api/v1/runs", {
    data: {
      type: "invoice.sync",
      tenant: `${tag}-${opts.tenant}`,
      callback_url: opts.callback === false ? undefined : receiver.url("/hook") + "?token=e2e-secret-query",
      routes: opts.routes ?? [],
    },
  });
  expect(created.status()).toBe(201);
  const run = await created.json();
  const done = await api.post(`/api/v1/runs/${run.id}/transitions`, {
    data: { to: "succeeded", result: { synced: 12, note: opts.text ?? "private business text" } },
  });
  expect(done.status()).toBe(200);
  return run.id as string;
}

async function deliveries(runId: string) {
  const resp = await api.get(`/api/v1/runs/${runId}/deliveries`);
  expect(resp.status()).toBe(200);
  return (await resp.json()) as { event_id: string; kind: string; status: string; cycle: number }[];
}

async function waitForStatus(runId: string, kind: string, status: string) {
  await expect
    .poll(async () => (await deliveries(runId)).find((d) => d.kind === kind)?.status, { timeout: SETTLE_MS })
    .toBe(status);
  return (await deliveries(runId)).find((d) => d.kind === kind)!;
}

async function openRun(page: Page, runId: string) {
  await page.goto(`/runs/${runId}`);
  await waitForHydration(page);
  await expect(page.getByTestId("run-id")).toHaveText(runId);
}

let failedRun = "";
let uncertainRun = "";

test("a reader sees delivery summaries, no retry, and a forged retry is refused", async ({ page }) => {
  await receiver.steer("/hook", { status: 400 }); // a permanent failure
  failedRun = await finishedRun({ tenant: "failed" });
  const failed = await waitForStatus(failedRun, "callback", "failed");

  await signIn(page, "reader");
  await page.goto(`/runs?delivery=needs_attention&tenant=${tag}-failed`);
  await waitForHydration(page);
  const row = page.locator(`[data-run-id="${failedRun}"]`);
  await expect(row.getByTestId("delivery-worst")).toHaveText("Failed");
  await expect(row.getByTestId("count-failed")).toHaveText("1 failed");
  await expect(page.getByTestId("delivery-filter")).toHaveValue("needs_attention");
  await expectAccessible(page, "Runs");

  await row.getByTestId("run-link").click();
  await expect(page).toHaveURL(new RegExp(`/runs/${failedRun}$`));
  const card = page.getByTestId("delivery");
  await expect(card.getByTestId("delivery-status")).toHaveText("Failed");
  await expect(card.getByTestId("delivery-destination")).toHaveText(`http://127.0.0.1:${receiver.port}`);
  await expect(page.getByTestId("retry")).toHaveCount(0);
  await expect(page.getByTestId("result-hidden")).toBeVisible();
  await expect(page.locator("body")).not.toContainText("e2e-secret-query");
  await expect(page.locator("body")).not.toContainText("private business text");
  await card.getByText(/Attempt timeline/).click();
  await expect(card.getByTestId("attempt")).toHaveCount(1);
  await expect(card.getByTestId("attempt-outcome")).toHaveText(["failed"]);
  await expectAccessible(page, "run detail (reader)");

  // The server function itself refuses a reader, whatever the page shows.
  const forged = await page.request.post("/console-api/retry", {
    data: { command: { event_id: failed.event_id, kind: "callback", expected_status: "failed", expected_cycle: failed.cycle, allow_uncertain: false } },
    headers: { origin },
  });
  expect(forged.status()).toBe(403);
  expect((await deliveries(failedRun))[0].status).toBe("failed");
});

test("an operator retries a failed delivery once the receiver recovers and sees it complete", async ({ page }) => {
  await receiver.steer("/hook", { status: 200 });
  await signIn(page, "operator");
  await openRun(page, failedRun);
  const card = page.getByTestId("delivery");
  await expect(card.getByTestId("delivery-status")).toHaveText("Failed");
  await card.getByTestId("retry").click();
  await expect(page.getByTestId("retry-notice")).toBeVisible();
  // The page refreshes itself while the delivery is in flight.
  await expect(card.getByTestId("delivery-status")).toHaveText("Completed", { timeout: SETTLE_MS });
  await expect(card.getByTestId("retry")).toHaveCount(0);
  await expect(card.getByTestId("delivery-attempts")).toContainText("2 in all");
  await card.getByText(/Attempt timeline/).click();
  await expect(card.getByTestId("attempt-outcome")).toHaveText(["failed", "completed"]);
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.screenshot({ path: screenshotPath("run-detail.png"), fullPage: true });
  await expectAccessible(page, "run detail (operator)");
});

test("a retry that lost the race to another tab says so and shows the current state", async ({ page }) => {
  await receiver.steer("/hook", { status: 400 });
  const runId = await finishedRun({ tenant: "race" });
  const failed = await waitForStatus(runId, "callback", "failed");
  await signIn(page, "operator");
  await openRun(page, runId);
  const card = page.getByTestId("delivery");
  await expect(card.getByTestId("delivery-status")).toHaveText("Failed");

  // Another tab (here: the admin API) retries first, and that retry succeeds.
  await receiver.steer("/hook", { status: 200 });
  const first = await api.post(`/admin/api/notification-outbox/${failed.event_id}/retry`, {
    data: { kind: "callback", expected_status: "failed" },
  });
  expect(first.status()).toBe(200);
  await waitForStatus(runId, "callback", "completed");

  await card.getByTestId("retry").click();
  await expect(page.getByTestId("retry-conflict")).toContainText("changed meanwhile");
  await expect(card.getByTestId("delivery-status")).toHaveText("Completed");
  await expectAccessible(page, "run detail after a conflict");
});

test("an uncertain delivery is retried only with the acknowledgement, by keyboard alone", async ({ page }) => {
  // The chat route splits the text; the second part fails after the first was
  // posted, so the outcome is uncertain.
  await receiver.steer("/chat", { plan: [200, 500] });
  uncertainRun = await finishedRun({
    tenant: "uncertain",
    routes: ["ops-chat"],
    callback: false,
    text: "a long message that the chat route has to split into several parts",
  });
  const unsure = await waitForStatus(uncertainRun, "delivery", "uncertain");

  // Without the acknowledgement the server refuses.
  const refused = await api.post(`/admin/api/notification-outbox/${unsure.event_id}/retry`, {
    data: { kind: "delivery", expected_status: "uncertain" },
  });
  expect(refused.status()).toBe(400);
  expect((await refused.json()).field).toBe("allow_uncertain");

  await signIn(page, "operator");
  await openRun(page, uncertainRun);
  const card = page.getByTestId("delivery");
  await expect(card.getByTestId("delivery-status")).toHaveText("Uncertain");

  // Reach the Retry button with Tab alone.
  const retry = card.getByTestId("retry");
  for (let i = 0; i < 40; i++) {
    if (await retry.evaluate((el) => el === document.activeElement)) break;
    await page.keyboard.press("Tab");
  }
  await expect(retry).toBeFocused();
  await page.keyboard.press("Enter");
  const dialog = page.getByRole("dialog", { name: "Retry an uncertain delivery?" });
  await expect(dialog).toBeVisible();
  await expect(dialog).toContainText("cannot recognise a second copy");
  const ack = dialog.getByTestId("acknowledge");
  await expect(ack).toBeFocused();
  await expect(dialog.getByTestId("dialog-confirm")).toBeDisabled();
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.screenshot({ path: screenshotPath("retry-dialog.png") });
  await expectAccessible(page, "the acknowledgement dialog");

  // Focus stays inside the dialog both ways.
  for (let i = 0; i < 5; i++) {
    await page.keyboard.press("Tab");
    expect(await dialog.evaluate((el) => el.contains(document.activeElement))).toBe(true);
  }
  await ack.focus();
  await page.keyboard.press("Shift+Tab");
  await expect(dialog.getByTestId("dialog-cancel")).toBeFocused();

  // Escape closes without retrying and gives the focus back.
  await page.keyboard.press("Escape");
  await expect(dialog).toHaveCount(0);
  await expect(retry).toBeFocused();
  expect((await deliveries(uncertainRun))[0].status).toBe("uncertain");

  // Open again, acknowledge with Space, Tab to the confirm button, Enter.
  await page.keyboard.press("Enter");
  await expect(ack).toBeFocused();
  await page.keyboard.press("Space");
  await expect(ack).toBeChecked();
  await page.keyboard.press("Tab");
  await expect(dialog.getByTestId("dialog-cancel")).toBeFocused();
  await page.keyboard.press("Tab");
  await expect(dialog.getByTestId("dialog-confirm")).toBeFocused();
  await page.keyboard.press("Enter");
  await expect(dialog).toHaveCount(0);
  await expect(page.getByTestId("retry-notice")).toBeVisible();
  await expect(card.getByTestId("delivery-status")).toHaveText("Completed", { timeout: SETTLE_MS });
});

test("the audit page shows who retried what, from which state, with or without acknowledgement", async ({ page }) => {
  await signIn(page, "operator");
  await page.goto("/audit");
  await waitForHydration(page);
  const rows = page.getByTestId("audit-row");
  await expect(rows.first()).toBeVisible();
  const uncertain = rows.filter({ hasText: uncertainRun });
  await expect(uncertain.getByTestId("audit-from")).toHaveText("uncertain");
  await expect(uncertain.getByTestId("audit-ack")).toHaveText("acknowledged");
  await expect(uncertain.getByTestId("audit-actor")).toHaveText("operator");
  const failed = rows.filter({ hasText: failedRun });
  await expect(failed.getByTestId("audit-from")).toHaveText("failed");
  await expect(failed.getByTestId("audit-ack")).toHaveText("—");
  await expectAccessible(page, "Audit");
  await page.screenshot({ path: screenshotPath("audit-page.png") });

  await page.getByTestId("logout").click();
  await signIn(page, "reader");
  const resp = await page.goto("/audit");
  expect(resp?.status()).toBe(403);
  await expect(page.getByTestId("error-state")).toContainText("You do not have access to this page");
  await expectAccessible(page, "Audit refused");
});

test("unknown pages and missing runs are designed pages with a way back", async ({ page }) => {
  await page.goto("/login");
  await expectAccessible(page, "Sign in");
  const resp = await page.goto("/no/such/page");
  expect(resp?.status()).toBe(404);
  await waitForHydration(page);
  await expect(page.getByTestId("not-found")).toContainText("Page not found");
  await expectAccessible(page, "404");

  await signIn(page, "reader");
  const missing = await page.goto("/runs/no-such-run");
  expect(missing?.status()).toBe(404);
  await waitForHydration(page);
  await expect(page.getByTestId("run-not-found")).toContainText("Run not found");
  await expect(page).toHaveTitle("Run not found · Herald");
  await expectAccessible(page, "run not found");
  await page.getByRole("link", { name: "Back to Runs" }).click();
  await expect(page).toHaveURL(/\/runs$/);
});

test("screenshot of the Runs page with delivery summaries", async ({ page }) => {
  await receiver.steer("/hook", { status: 503 });
  const pending = await finishedRun({ tenant: "retrying" });
  await receiver.steer("/hook", { status: 400 });
  const failed = await finishedRun({ tenant: "failing" });
  await waitForStatus(failed, "callback", "failed");
  await waitForStatus(pending, "callback", "failed");
  await page.setViewportSize({ width: 1280, height: 760 });
  await signIn(page, "operator");
  await page.goto("/runs?type=invoice.sync");
  await waitForHydration(page);
  await expect(page.getByTestId("delivery-summary").first()).toBeVisible();
  await page.screenshot({ path: screenshotPath("runs-deliveries.png") });
});

test("the Deliveries page lists every source's events and retries all matching after counting", async ({ page }) => {
  // The bulk retry is narrowed to deliveries created from here on: this test's two.
  const since = new Date().toISOString();
  await receiver.steer("/hook", { status: 400 });
  const a = await finishedRun({ tenant: "bulk" });
  const b = await finishedRun({ tenant: "bulk" });
  await waitForStatus(a, "callback", "failed");
  await waitForStatus(b, "callback", "failed");

  await signIn(page, "reader");
  await page.goto("/deliveries");
  await waitForHydration(page);
  await expect(page.getByTestId("state-attention")).toHaveAttribute("aria-current", "true");
  await expect(page.getByTestId("delivery-row").first()).toBeVisible();
  for (const status of await page.getByTestId("row-status").allTextContents()) {
    expect(["Failed", "Uncertain"]).toContain(status);
  }
  await expect(page.getByTestId("bulk")).toHaveCount(0);
  await expectAccessible(page, "Deliveries (reader)");
  await page.getByTestId("logout").click();

  await receiver.steer("/hook", { status: 200 });
  await signIn(page, "operator");
  await page.goto(`/deliveries?kind=callback&from=${encodeURIComponent(since)}`);
  await waitForHydration(page);
  await expect(page.getByTestId("delivery-row")).toHaveCount(2);
  await page.getByTestId("bulk-preview").click();
  await expect(page.getByTestId("bulk-count")).toHaveText("2 retryable deliveries match.");
  await expectAccessible(page, "Deliveries bulk confirmation");
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.screenshot({ path: screenshotPath("deliveries-page.png") });
  await page.getByTestId("bulk-run").click();
  await expect(page.getByTestId("bulk-result")).toHaveText("Retried 2.");
  await waitForStatus(a, "callback", "completed");
  await waitForStatus(b, "callback", "completed");

  await page.goto("/audit");
  await waitForHydration(page);
  const bulk = page.getByTestId("audit-row").filter({ hasText: `bulk: kind=callback status=needs_attention from=${since}` });
  await expect(bulk.getByTestId("audit-count")).toHaveText("2");
});

// A property, not a speed: the page refreshes itself (every 2 s) until the change shows.
test("the Deliveries table keeps its columns apart from 1,280 to 1,920 px and copies a whole id", async ({ page, context }) => {
  await context.grantPermissions(["clipboard-read", "clipboard-write"]);
  // The precondition, the widest row: a delivery whose id is longer than its
  // column and whose last error fills its own (the receiver refuses it for good).
  await receiver.steer("/hook", { status: 400 });
  const run = await finishedRun({ tenant: "layout" });
  await expect
    .poll(async () => (await deliveries(run))[0]?.status, { timeout: SETTLE_MS })
    .toBe("failed");
  await receiver.steer("/hook", { status: 200 });
  const [delivery] = await deliveries(run);
  expect(delivery.event_id.length).toBeGreaterThan(40);
  await signIn(page, "operator");
  const row = page.locator(`[data-testid="delivery-row"][data-event-id="${delivery.event_id}"]`);
  for (const width of [1280, 1400, 1920]) {
    await page.setViewportSize({ width, height: 900 });
    await page.goto(`/deliveries?status=all&parent=run:${run}`);
    await waitForHydration(page);
    await expect(row).toBeVisible();
    // No cell's content runs into its neighbour, and no column is cut off.
    const spilling = await row
      .locator("td")
      .evaluateAll((cells) => cells.filter((c) => c.scrollWidth > c.clientWidth + 1).length);
    expect(spilling, `cells spilling at ${width} px`).toBe(0);
    const cutOff = await page
      .getByTestId("deliveries-table")
      .evaluate((table) => table.parentElement!.scrollWidth > table.parentElement!.clientWidth + 1);
    expect(cutOff, `table cut off at ${width} px`).toBe(false);
    await expect(row.getByTestId("long-id")).toHaveAttribute("title", delivery.event_id);
  }
  await row.getByTestId("copy-id").click();
  await expect(row.getByTestId("copy-id")).toHaveText("Copied");
  expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(delivery.event_id);
  await expectAccessible(page, "Deliveries with a copied id");
});

test("the Runs page shows new runs and delivery changes without a reload", async ({ page }) => {
  await signIn(page, "reader");
  await page.goto(`/runs?tenant=${tag}-live`);
  await waitForHydration(page);
  await expect(page.getByTestId("empty-state")).toBeVisible();
  await page.evaluate(() => ((window as any).__noReload = true));
  await receiver.steer("/hook", { status: 400 });
  const runId = await finishedRun({ tenant: "live" });
  const row = page.locator(`[data-run-id="${runId}"]`);
  await expect(row.getByTestId("delivery-worst")).toHaveText("Failed", { timeout: SETTLE_MS });
  expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
});
