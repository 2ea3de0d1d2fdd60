import type { APIRequestContext } from "@playwright/test";
import { test, expect } from "./fixtures";
import { password, signIn, uniqueTag } from "./helpers";
import { SharedReceiver } from "./receiver";
import { expectAccessible } from "./a11y";

// Run approvals (DESIGN §9) in the console: a run that moves to awaiting_approval
// with an approval shows it on its page (state, step, approver, prompt delivery);
// the approver decides there, and the run continues. The prompt goes to the shared
// receiver's /ok over the e2e-approvers route (approvals.toml); the run calls back
// the shared receiver on a path of this spec's own.
test.describe.configure({ mode: "serial" });

const receiver = new SharedReceiver();
const tag = uniqueTag("run-approvals");
const callbackPath = `/${tag}-callback`;

async function api(request: APIRequestContext, baseURL: string, role: string) {
  const login = await request.post("/auth/login", {
    form: { username: role, password: password(role), next: "/runs" },
    headers: { origin: baseURL },
    maxRedirects: 0,
  });
  expect(login.status()).toBe(303);
  return async (path: string, data: unknown) => {
    const resp = await request.post(path, { data, headers: { origin: baseURL } });
    expect(resp.status(), `${path}: ${await resp.text()}`).toBeLessThan(300);
    return resp.json();
  };
}

/** A running run of this spec's type, moved to awaiting_approval on its definition. */
async function pausedRun(post: (p: string, d: unknown) => Promise<any>) {
  const run = await post("/api/v1/runs", { type: `${tag}-payout`, tenant: tag, callback_url: receiver.url(callbackPath) });
  await post(`/api/v1/runs/${run.id}/transitions`, { to: "running" });
  const moved = await post(`/api/v1/runs/${run.id}/transitions`, {
    to: "awaiting_approval",
    approval: { definition_id: `${tag}-payout` },
  });
  return { runId: run.id as string, approvalId: moved.run.approval_id as string };
}

test.beforeAll(async ({ playwright, baseURL }) => {
  await receiver.steer("/ok", { status: 200 });
  await receiver.steer(callbackPath, { status: 200 });
  const request = await playwright.request.newContext({ baseURL });
  const admin = await api(request, baseURL!, "admin");
  await admin("/api/v1/approval-definitions", {
    id: `${tag}-payout`,
    target: "run",
    run_types: [`${tag}-payout`],
    steps: [{ name: "Finance", approver: { role: "admin" }, route: "e2e-approvers" }],
  });
});

test("the run page shows its approval; Approve there continues the run", async ({ page, playwright, baseURL }) => {
  const request = await playwright.request.newContext({ baseURL });
  const operator = await api(request, baseURL!, "operator");
  const { runId, approvalId } = await pausedRun(operator);
  await expect.poll(async () => (await receiver.arrivals("/ok")).map((a) => a.id)).toContain(`approval_${approvalId}`);

  await signIn(page, "admin", `/runs/${runId}`);
  await expect(page.getByTestId("run-status")).toHaveText("Awaiting approval");
  const card = page.locator(`[data-testid=approval-detail][data-approval-id="${approvalId}"]`);
  await expect(card).toContainText("Finance");
  await expect(card).toContainText("Work item for role admin");
  await expect(card.locator("[data-testid=approval-event][data-kind=approval_prompt]")).toHaveAttribute("data-status", "completed");
  await expectAccessible(page, "a run awaiting approval");
  await card.getByTestId("approve-button").click();
  await expect(card.getByTestId("status").first()).toHaveText("approved");
  // The continuation moves the run in the jobs store; the page follows it.
  await expect(page.getByTestId("run-status")).toHaveText("Running", { timeout: 15_000 });
  // The approval id names the transition that paused the run; its continuation is the next.
  const pausedSeq = Number(approvalId.slice(`run-${runId}-`.length));
  await expect
    .poll(async () => (await receiver.arrivals(callbackPath)).map((a) => a.id))
    .toContain(`callback_${runId}_approved_${pausedSeq + 1}`);

  // The Approvals page lists it beside record approvals, its target linked to the run.
  await page.goto("/approvals");
  const row = page.locator(`[data-testid=approval-row][data-approval-id="${approvalId}"]`);
  await expect(row.getByTestId("approval-target")).toHaveAttribute("href", `/runs/${runId}`);
});

test("an operator who is not the approver sees no decision buttons, and a forged decision is refused", async ({ page, playwright, baseURL }) => {
  const request = await playwright.request.newContext({ baseURL });
  const operator = await api(request, baseURL!, "operator");
  const { runId, approvalId } = await pausedRun(operator);
  await signIn(page, "operator", `/runs/${runId}`);
  const card = page.locator(`[data-testid=approval-detail][data-approval-id="${approvalId}"]`);
  await expect(card).toContainText("pending");
  await expect(card.getByTestId("approve-button")).toHaveCount(0);
  await expect(card.getByTestId("reject-button")).toHaveCount(0);
  // The operator asked for it: it may recall it.
  await expect(card.getByTestId("recall-button")).toBeVisible();
  const forged = await page.request.post("/console-api/approval-action", {
    form: { id: approvalId, action: "approve", key: "forged-1" },
    headers: { origin: baseURL! },
  });
  expect(forged.status()).toBe(403);
  expect(await forged.text()).toContain("decided by role admin");
  await card.getByTestId("recall-button").click();
  await expect(page.getByTestId("run-status")).toHaveText("Running", { timeout: 15_000 });
  await expect(card.getByTestId("status").first()).toHaveText("removed");
});

test("a run that never asked for approval says so", async ({ page, playwright, baseURL }) => {
  const request = await playwright.request.newContext({ baseURL });
  const operator = await api(request, baseURL!, "operator");
  const run = await operator("/api/v1/runs", { type: `${tag}-plain`, tenant: tag });
  await signIn(page, "reader", `/runs/${run.id}`);
  await expect(page.getByTestId("no-approvals")).toContainText("has not asked for approval");
});
