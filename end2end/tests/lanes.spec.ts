import type { APIRequestContext } from "@playwright/test";
import { test, expect } from "./fixtures";
import { screenshotPath, signedInApi, signIn, uniqueTag } from "./helpers";
import { SharedReceiver } from "./receiver";
import { expectAccessible } from "./a11y";

// Blocked ordered lanes on the Deliveries page (issue 22): the e2e-ordered route
// (serve.sh, ordered_by = "tenant") at the shared receiver's /ordered. A refusing
// receiver fails the lane's head; the reader sees the lane without actions; the
// operator's skip from a stale view is refused and says why; the skip with a reason
// lets the lane go on (its next delivery arrives), and is audited with the reason.

test.describe.configure({ mode: "serial" });

const receiver = new SharedReceiver();
const tag = uniqueTag("lanes");
const tenant = `${tag}-acme`;
const lane = `route:e2e-ordered:tenant:${tenant}`;
/** The longest a delivery may take to settle: a bound for a loaded machine, not a target. */
const SETTLE_MS = 30_000;
let api: APIRequestContext;

type Delivery = { event_id: string; kind: string; status: string; cycle: number };

test.beforeAll(async ({ playwright, baseURL }) => {
  api = await signedInApi(playwright, baseURL!, "operator");
});

test.afterAll(async () => {
  await receiver.steer("/ordered", { status: 200 });
  await api?.dispose();
});

/** Records a run of this spec's tenant routed to e2e-ordered and finishes it. */
async function orderedRun(note: string) {
  const created = await api.post("/api/v1/runs", {
    data: { type: "invoice.sync", tenant, routes: ["e2e-ordered"] },
  });
  expect(created.status()).toBe(201);
  const run = await created.json();
  const done = await api.post(`/api/v1/runs/${run.id}/transitions`, {
    data: { to: "succeeded", result: { note } },
  });
  expect(done.status()).toBe(200);
  return run.id as string;
}

async function delivery(runId: string): Promise<Delivery> {
  const resp = await api.get(`/api/v1/runs/${runId}/deliveries`);
  expect(resp.status()).toBe(200);
  return ((await resp.json()) as Delivery[]).find((d) => d.kind === "delivery")!;
}

async function waitForStatus(runId: string, status: string) {
  await expect.poll(async () => (await delivery(runId))?.status, { timeout: SETTLE_MS }).toBe(status);
  return delivery(runId);
}

let first = "";
let second = "";

test("a failed head blocks its lane; a reader sees it, with no action", async ({ page }) => {
  await receiver.steer("/ordered", { status: 500 });
  first = await orderedRun("first");
  second = await orderedRun("second");
  await waitForStatus(first, "failed");
  // Precondition: the second waits behind the first, never sent.
  expect((await delivery(second)).status).toBe("pending");
  const sent = (await receiver.arrivals("/ordered")).map((a) => a.id);
  expect(sent).not.toContain((await delivery(second)).event_id);

  await signIn(page, "reader", "/deliveries");
  const row = page.locator(`[data-testid="blocked-lane"][data-lane="${lane}"]`);
  await expect(row).toBeVisible({ timeout: SETTLE_MS });
  await expect(row.getByTestId("lane-head-status")).toHaveText("Failed");
  await expect(row.getByTestId("lane-waiting")).toHaveText("1");
  await expect(row.getByTestId("lane-skip")).toHaveCount(0);
  await expect(row.getByTestId("lane-retry")).toHaveCount(0);
  await expectAccessible(page, "Deliveries with a blocked lane (reader)");
});

test("an operator's skip from a stale view is refused; with a reason it lets the lane go on, audited", async ({ page }) => {
  const head = await delivery(first);
  await signIn(page, "operator", "/deliveries");
  const row = page.locator(`[data-testid="blocked-lane"][data-lane="${lane}"]`);
  await expect(row).toBeVisible({ timeout: SETTLE_MS });

  // The confirmation says what a skip does and needs a reason.
  await row.getByTestId("lane-skip").click();
  const confirm = page.getByTestId("lane-confirm");
  await expect(confirm).toContainText("gives this delivery up for good");
  await expect(confirm).toContainText("1 delivery waits behind it");
  await expect(page.getByTestId("lane-confirm-send")).toBeDisabled();
  await page.getByTestId("lane-skip-reason").fill("the receiver retired this endpoint");
  await expect(page.getByTestId("lane-confirm-send")).toBeEnabled();
  await expectAccessible(page, "the skip confirmation");
  await page.screenshot({ path: screenshotPath("blocked-lanes.png"), fullPage: false });

  // Meanwhile someone retries the head, and it fails again (a new cycle).
  const retried = await api.post(`/api/v1/deliveries/${head.event_id}/retry`, {
    data: { kind: "delivery", expected_status: "failed", expected_cycle: head.cycle },
  });
  expect(retried.status()).toBe(200);
  await expect.poll(async () => (await delivery(first)).cycle, { timeout: SETTLE_MS }).toBe(head.cycle + 1);
  await waitForStatus(first, "failed");

  // This view is stale: refused, saying why, and the lane still blocked.
  await page.getByTestId("lane-confirm-send").click();
  await expect(page.getByTestId("lane-action-error")).toContainText("retried since you looked");
  expect((await delivery(first)).status).toBe("failed");
  expect((await delivery(second)).status).toBe("pending");

  // From the fresh view, with the receiver accepting again: the skip.
  await receiver.steer("/ordered", { status: 200, delayMs: 4_000 });
  await expect(row.getByTestId("lane-head-status")).toHaveText("Failed");
  await row.getByTestId("lane-skip").click();
  await page.getByTestId("lane-skip-reason").fill("the receiver retired this endpoint");
  await page.getByTestId("lane-confirm-send").click();
  await expect(page.getByTestId("lane-action-result")).toContainText("Skipped");
  // Nothing is blocked while the next delivery is in flight (the receiver holds it).
  await expect(page.getByTestId("blocked-lanes-empty")).toContainText("No lane is blocked", { timeout: SETTLE_MS });
  await expectAccessible(page, "Deliveries with no blocked lane");

  expect((await delivery(first)).status).toBe("skipped");
  await waitForStatus(second, "completed");
  const arrived = (await receiver.arrivals("/ordered")).map((a) => a.id);
  expect(arrived).toContain((await delivery(second)).event_id);

  // Audited once, with the reason, by the operator.
  await page.goto("/audit");
  const audit = await api.get("/admin/api/audit");
  const entries = (await audit.json()).entries as { event_id: string; action: string; actor: string; reason: string | null }[];
  const skips = entries.filter((e) => e.action === "skip" && e.event_id === head.event_id);
  expect(skips).toHaveLength(1);
  expect(skips[0].reason).toBe("the receiver retired this endpoint");
  expect(skips[0].actor).toBe("operator");
  const auditRow = page.locator(`[data-testid="audit-row"][data-event-id="${head.event_id}"]`).first();
  await expect(auditRow.getByTestId("audit-reason")).toHaveText("the receiver retired this endpoint");
});
