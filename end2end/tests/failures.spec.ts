import type { APIRequestContext } from "@playwright/test";
import { test, expect } from "./fixtures";
import { screenshotPath, signIn, signedInApi, uniqueTag, waitForHydration } from "./helpers";
import { Receiver } from "./receiver";
import { expectAccessible } from "./a11y";

// Failures grouped by cause (issue 23, item 3): the Deliveries page groups what
// needs attention by kind, destination and the class of the last error, counts
// each group, and opens one as a view the bulk retry retries. Two receivers of
// this spec's own are two destinations no other spec's events name (asserted
// before anything is made), so their groups' counts are this spec's alone.

test.describe.configure({ mode: "serial" });

const tag = uniqueTag("failures");
const SETTLE_MS = 30_000;
const CAUSE = "the receiver answered with an error status";

const sick = new Receiver();
const other = new Receiver();
let api: APIRequestContext;
const sickRuns: string[] = [];

const origin = (receiver: Receiver) => `http://127.0.0.1:${receiver.port}`;

/** Whether any event names `receiver` as its destination already. */
async function destinationIsNew(receiver: Receiver) {
  const resp = await api.get(`/admin/api/notification-outbox?destination=${encodeURIComponent(origin(receiver))}`);
  expect(resp.status()).toBe(200);
  return (await resp.json()).events.length === 0;
}

/** A receiver on a port no earlier event names (an earlier spec's receiver may have had it). */
async function startFresh(receiver: Receiver) {
  await receiver.start();
  for (let tries = 0; tries < 5 && !(await destinationIsNew(receiver)); tries++) {
    await receiver.stop();
    await receiver.start();
  }
  expect(await destinationIsNew(receiver)).toBe(true);
}

async function failedRun(receiver: Receiver) {
  const created = await api.post("/api/v1/runs", {
    data: { type: "invoice.sync", tenant: tag, callback_url: receiver.url("/hook") },
  });
  expect(created.status()).toBe(201);
  const run = (await created.json()).id as string;
  expect((await api.post(`/api/v1/runs/${run}/transitions`, { data: { to: "succeeded" } })).status()).toBe(200);
  return run;
}

async function callbackStatus(run: string) {
  const resp = await api.get(`/api/v1/runs/${run}/deliveries`);
  return ((await resp.json()) as { kind: string; status: string }[]).find((d) => d.kind === "callback")?.status;
}

test.beforeAll(async ({ playwright, baseURL }) => {
  api = await signedInApi(playwright, baseURL!, "operator");
  sick.defaults["/hook"] = 400;
  other.defaults["/hook"] = 400;
  await startFresh(sick);
  await startFresh(other);
  for (let i = 0; i < 3; i++) sickRuns.push(await failedRun(sick));
  const otherRun = await failedRun(other);
  for (const run of [...sickRuns, otherRun]) {
    await expect.poll(() => callbackStatus(run), { timeout: SETTLE_MS }).toBe("failed");
  }
});

test.afterAll(async () => {
  await api?.dispose();
  await sick.stop();
  await other.stop();
});

const groupOf = (page: import("@playwright/test").Page, receiver: Receiver) =>
  page.locator(`[data-testid=failure-group][data-destination="${origin(receiver)}"]`);

test("a reader sees failures grouped by destination and cause, counted; a forged group retry is refused", async ({ page, playwright, baseURL }) => {
  await signIn(page, "reader", "/deliveries");
  const sickGroup = groupOf(page, sick);
  await expect(sickGroup).toHaveCount(1);
  await expect(sickGroup.getByTestId("group-count")).toHaveText("3");
  await expect(sickGroup).toContainText(CAUSE);
  await expect(sickGroup).toContainText("callback");
  await expect(groupOf(page, other).getByTestId("group-count")).toHaveText("1");
  await expectAccessible(page, "failure groups (reader)");

  const reader = await signedInApi(playwright, baseURL!, "reader");
  const forged = await reader.post("/console-api/bulk-retry", {
    data: { query: { kind: "callback", status: "needs_attention", destination: origin(sick), cause: CAUSE }, allow_uncertain: false },
  });
  expect(forged.status()).toBe(403);
  await reader.dispose();
  for (const run of sickRuns) expect(await callbackStatus(run)).toBe("failed");
});

test("an operator opens a group and retries exactly its deliveries", async ({ page }) => {
  await signIn(page, "operator", "/deliveries");
  await page.setViewportSize({ width: 1280, height: 900 });
  await expect(groupOf(page, sick)).toHaveCount(1);
  await page.screenshot({ path: screenshotPath("failure-groups.png") });
  await groupOf(page, sick).getByTestId("open-group").click();
  await expect(page).toHaveURL(/destination=http%3A%2F%2F127\.0\.0\.1%3A\d+&cause=/);
  await waitForHydration(page);
  await expect(page.getByTestId("group-filter")).toContainText(CAUSE);
  await expect(page.getByTestId("group-filter")).toContainText(origin(sick));
  await expect(page.getByTestId("failure-groups")).toHaveCount(0);
  const rows = page.getByTestId("delivery-row");
  await expect(rows).toHaveCount(3);
  const listed = await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-event-id")));
  for (const run of sickRuns) expect(listed.some((id) => id?.includes(run))).toBe(true);
  // The export holds the same group.
  await expect(page.getByTestId("export-csv")).toHaveAttribute("href", new RegExp(`destination=${encodeURIComponent(origin(sick)).replace(/\./g, "\\.")}&cause=`));

  sick.defaults["/hook"] = 200; // the destination recovered
  await page.getByTestId("bulk-preview").click();
  await expect(page.getByTestId("bulk-count")).toHaveText("3 retryable deliveries match.");
  await expectAccessible(page, "one failure group with its bulk retry");
  await page.getByTestId("bulk-run").click();
  await expect(page.getByTestId("bulk-result")).toHaveText("Retried 3.");
  for (const run of sickRuns) {
    await expect.poll(() => callbackStatus(run), { timeout: SETTLE_MS }).toBe("completed");
  }

  // The group is gone; the other destination's is untouched.
  await page.getByTestId("clear-group").click();
  await expect(page.getByTestId("failure-groups")).toBeVisible();
  await expect(groupOf(page, sick)).toHaveCount(0);
  await expect(groupOf(page, other).getByTestId("group-count")).toHaveText("1");
  await page.goto("/audit");
  const audit = page.getByTestId("audit-row").filter({ hasText: `destination=${origin(sick)}` });
  await expect(audit.getByTestId("audit-count")).toHaveText("3");
});

test("an unknown cause in the address is refused with the reason", async ({ page }) => {
  await signIn(page, "operator", "/deliveries?status=failed&cause=gremlins");
  await expect(page.getByTestId("error-state")).toContainText("is not a cause Herald names");
});
