import type { APIRequestContext } from "@playwright/test";
import { test, expect } from "./fixtures";
import { password, screenshotPath, signIn, sqliteExec, uniqueTag, waitForHydration } from "./helpers";
import { expectAccessible } from "./a11y";
import { SharedReceiver } from "./receiver";

test.describe.configure({ mode: "serial" });

// Prompts reach the shared receiver over the routes serve.sh configures from
// approvals.toml: e2e-approvers posts to /ok (200), e2e-flaky to /fail, which answers
// 503 with a Retry-After (a floor under any configured backoff), so a failed prompt
// waits that long for its retry. Definition ids carry this spec's own tag.
const receiver = new SharedReceiver();
const tag = uniqueTag("approvals");
const RETRY_AFTER_S = 30;

test.beforeAll(async () => {
  await receiver.steer("/ok", { status: 200 });
  await receiver.steer("/fail", { status: 503, retryAfter: RETRY_AFTER_S });
});

async function adminApi(request: APIRequestContext, baseURL: string) {
  const login = await request.post("/auth/login", {
    form: { username: "admin", password: password("admin"), next: "/runs" },
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

async function definition(post: (p: string, d: unknown) => Promise<any>, id: string, route: string) {
  await post("/api/v1/approval-definitions", {
    id,
    object: "Opportunity",
    steps: [{ name: "Manager", approver: { role: "admin" }, route }],
    actions: {
      recall: [{ type: "FieldUpdate", id: "acct", field_path: "Account.Status", value: "Prospect" }],
    },
  });
}

/** Prompts of `approvalId` that arrived at the receiver's `path`. */
async function prompts(path: string, approvalId: string) {
  return (await receiver.arrivals(path)).filter((a) => a.id === `approval_${approvalId}`);
}

/** The replay shelf's count for `status`: over every approval, so tests compare it with before. */
function shelfCount(text: string, status: string) {
  return Number(text.match(new RegExp(`(?:^|· )${status}: (\\d+)`))?.[1] ?? 0);
}

test("submit prompts a real receiver; Recall from the console replays the field update", async ({ page, playwright, baseURL }) => {
  const request = await playwright.request.newContext({ baseURL });
  const post = await adminApi(request, baseURL!);
  await definition(post, `${tag}-deal`, "e2e-approvers");
  const account = await post("/api/v1/records/Account", { fields: { Status: "Customer" } });
  const deal = await post("/api/v1/records/Opportunity", { fields: { AccountId: account.id } });
  const approval = await post("/api/v1/approvals", { definition_id: `${tag}-deal`, record_id: deal.id });
  await expect.poll(async () => (await receiver.arrivals("/ok")).map((a) => a.id)).toContain(`approval_${approval.id}`);

  await signIn(page, "admin", `/approvals?id=${approval.id}`);
  await expect(page).toHaveURL(new RegExp(`/approvals\\?id=${approval.id}$`));
  const detail = page.getByTestId("approval-detail");
  await expect(detail).toContainText("pending");
  await expect(page.locator('[data-testid=approval-event][data-kind=approval_prompt]')).toHaveAttribute("data-status", "completed");
  const shelf = page.getByTestId("replay-counts");
  await expect(shelf).toBeVisible();
  const completedBefore = shelfCount((await shelf.textContent())!, "completed");
  await page.getByTestId("recall-button").click();
  await expect(detail.getByTestId("status").first()).toHaveText("removed");
  await expect(page.getByTestId("recall-button")).toHaveCount(0);
  // The event list and the shelf are two reads of one page render: the replay can
  // commit between them, so each reload reads both and the poll waits for a render
  // taken after the commit. This recall's replay is one more completed on the shelf.
  await expect
    .poll(async () => {
      await page.reload();
      await waitForHydration(page);
      const status = await page
        .locator("[data-testid=approval-event][data-kind=field_update]")
        .getAttribute("data-status");
      return { status, completed: shelfCount((await shelf.textContent())!, "completed") };
    })
    .toEqual({ status: "completed", completed: completedBefore + 1 });
  const record = await (await request.get(`/api/v1/records/Account/${account.id}`)).json();
  expect(record.fields.Status).toBe("Prospect");
  await expect(page.getByTestId("approval-row").first()).toBeVisible();
  await request.dispose();
});

test("an approval decided before its prompt is delivered never sends it", async ({ page, playwright, baseURL }) => {
  // This test waits out the prompt's Retry-After (see below) on top of the usual.
  test.setTimeout(test.info().timeout + RETRY_AFTER_S * 1_000);
  const request = await playwright.request.newContext({ baseURL });
  const post = await adminApi(request, baseURL!);
  await definition(post, `${tag}-flaky-deal`, "e2e-flaky");
  // Signed in beforehand, so the decision follows the failed prompt closely.
  await signIn(page, "admin", "/approvals");
  const deal = await post("/api/v1/records/Opportunity", { fields: { Name: "flaky" } });
  const approval = await post("/api/v1/approvals", { definition_id: `${tag}-flaky-deal`, record_id: deal.id });
  // The first attempt fails (503 with Retry-After): the prompt waits, undelivered,
  // and would be retried no sooner than this.
  await expect.poll(async () => (await prompts("/fail", approval.id)).length).toBe(1);
  const retryDue = (await prompts("/fail", approval.id))[0].at + RETRY_AFTER_S * 1_000;

  await page.goto(`/approvals?id=${approval.id}`);
  await waitForHydration(page);
  await page.getByTestId("approve-button").click();
  await expect(page.getByTestId("approval-detail").getByTestId("status").first()).toHaveText("approved");
  expect(Date.now(), "the approval was decided while its prompt waited for the retry").toBeLessThan(retryDue);
  await page.reload();
  await waitForHydration(page);
  await expect(page.locator("[data-testid=approval-event][data-kind=approval_prompt]")).toHaveAttribute("data-status", "skipped");
  // A skipped prompt is never claimed again: wait until well past the moment its
  // retry would have been claimed (worker polls every 100 ms), then count.
  await page.waitForTimeout(Math.max(0, retryDue + 5_000 - Date.now()));
  expect(await prompts("/fail", approval.id)).toHaveLength(1);
  await request.dispose();
});

test("a reader sees approvals but no buttons", async ({ page, playwright, baseURL }) => {
  // An approval of this test's own, still pending: an admin would see buttons on it.
  const request = await playwright.request.newContext({ baseURL });
  const post = await adminApi(request, baseURL!);
  await definition(post, `${tag}-review`, "e2e-approvers");
  const deal = await post("/api/v1/records/Opportunity", { fields: { Name: "review" } });
  const approval = await post("/api/v1/approvals", { definition_id: `${tag}-review`, record_id: deal.id });
  await expect.poll(async () => (await receiver.arrivals("/ok")).map((a) => a.id)).toContain(`approval_${approval.id}`);

  await signIn(page, "reader", "/approvals");
  const row = page.locator(`[data-testid=approval-row][data-approval-id="${approval.id}"]`);
  await expect(row).toBeVisible();
  // The target links to its record (the Records page).
  await expect(row.getByTestId("approval-target")).toHaveAttribute("href", /^\/records\?object=Opportunity&id=/);
  await row.locator(`a[href="/approvals?id=${approval.id}"]`).click();
  const detail = page.getByTestId("approval-detail");
  await expect(detail).toHaveAttribute("data-approval-id", approval.id);
  await expect(detail).toContainText("pending");
  await expect(page.locator("[data-testid$=-button]")).toHaveCount(0);
  // The replay shelf: counts only for a reader, no rows and no retry (data:read).
  await expect(page.getByTestId("replay-counts")).toBeVisible();
  await expect(page.getByTestId("replay-rows-hidden")).toBeVisible();
  await expect(page.getByTestId("retry-replay")).toHaveCount(0);
  await page.screenshot({ path: screenshotPath("approvals-page.png"), fullPage: true });

  // The server function refuses the reader's forged decision, whatever the page shows.
  const forged = await page.request.post("/console-api/approval-action", {
    form: { id: approval.id, action: "approve", key: "forged-1" },
    headers: { origin: baseURL! },
  });
  expect(forged.status()).toBe(403);
  const after = await request.get(`/api/v1/approvals/${approval.id}`);
  expect(after.status()).toBe(200);
  expect((await after.json()).status).toBe("pending");
  await request.dispose();
});

test("field updates apply after the decision, one at a time per record: a blocked one says why and its retry lets the next go", async ({ page, playwright, baseURL }) => {
  const request = await playwright.request.newContext({ baseURL });
  const post = await adminApi(request, baseURL!);
  const id = `${tag}-ordered`;
  await post("/api/v1/approval-definitions", {
    id,
    object: "Opportunity",
    steps: [{ name: "Manager", approver: { role: "admin" } }],
    actions: {
      submit: [{ type: "FieldUpdate", id: "review", field_path: "Account.Status", value: "Reviewing" }],
      approve: [{ type: "FieldUpdate", id: "won", field_path: "Stage", value: "Won" }],
    },
  });
  const account = await post("/api/v1/records/Account", { fields: { Status: "Customer" } });
  const deal = await post("/api/v1/records/Opportunity", { fields: { AccountId: account.id, Stage: "Negotiation" } });
  // The account refuses every write (a trigger this test owns): the Submit update,
  // first in the deal's lane, fails and is shelved.
  const trigger = `e2e_hold_${account.id.replace(/-/g, "_")}`;
  sqliteExec(
    `CREATE TRIGGER ${trigger} BEFORE UPDATE ON records WHEN OLD.id = '${account.id}' ` +
      `BEGIN SELECT RAISE(ABORT, 'the account is held by the test'); END;`,
  );
  const approval = await post("/api/v1/approvals", { definition_id: id, record_id: deal.id });
  expect(approval.field_updates.state).toBe("applying");
  const submitUpdate = approval.field_updates.event_id;

  await signIn(page, "admin", `/approvals?id=${approval.id}`);
  const line = (eventId: string) => page.locator(`[data-testid=field-updates][data-event-id="${eventId}"]`);
  await expect
    .poll(async () => {
      await page.reload();
      await waitForHydration(page);
      return line(submitUpdate).getAttribute("data-state");
    })
    .toBe("blocked");
  await expect(line(submitUpdate)).toContainText("the account is held by the test");

  // The decision answers at once; its own update waits behind the blocked one.
  await page.getByTestId("approve-button").click();
  const detail = page.getByTestId("approval-detail");
  await expect(detail.getByTestId("status").first()).toHaveText("approved");
  const decided = await (await request.get(`/api/v1/approvals/${approval.id}`)).json();
  const approveUpdate = decided.events.find((e: any) => e.kind === "field_update" && e.event_id !== submitUpdate).event_id;
  await page.reload();
  await waitForHydration(page);
  await expect(line(approveUpdate)).toHaveAttribute("data-state", "applying");
  await expect(line(approveUpdate)).toContainText("Applying Approve field updates");
  expect((await (await request.get(`/api/v1/records/Opportunity/${deal.id}`)).json()).fields.Stage).toBe("Negotiation");
  await expectAccessible(page, "an approval whose field updates are blocked");
  await page.screenshot({ path: screenshotPath("field-updates-blocked.png"), fullPage: true });

  // Fixed and retried from the shelf: the Submit update applies, and only then the
  // Approve update that waited behind it.
  sqliteExec(`DROP TRIGGER ${trigger};`);
  await page.locator(`[data-testid=failed-replay][data-event-id="${submitUpdate}"]`).getByTestId("retry-replay").click();
  await expect
    .poll(async () => {
      await page.reload();
      await waitForHydration(page);
      return [await line(submitUpdate).getAttribute("data-state"), await line(approveUpdate).getAttribute("data-state")];
    })
    .toEqual(["applied", "applied"]);
  expect((await (await request.get(`/api/v1/records/Opportunity/${deal.id}`)).json()).fields.Stage).toBe("Won");
  expect((await (await request.get(`/api/v1/records/Account/${account.id}`)).json()).fields.Status).toBe("Reviewing");
  await request.dispose();
});
