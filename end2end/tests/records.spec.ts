import type { APIRequestContext } from "@playwright/test";
import { test, expect } from "./fixtures";
import { screenshotPath, signedInApi, signIn, uniqueTag, waitForHydration } from "./helpers";
import { expectAccessible } from "./a11y";
import { SharedReceiver } from "./receiver";

// Records (issue 23, item 7): the business data approvals act on, by object,
// newest first; a record's fields and its approval history; read-only. The
// objects are this spec's own (their names carry its tag), each with an
// approval definition so the page offers it.

test.describe.configure({ mode: "serial" });

const receiver = new SharedReceiver();
const tag = uniqueTag("records").replace(/-/g, "_");
const object = `Deal_${tag}`;
const emptyObject = `Quiet_${tag}`;
let admin: APIRequestContext;
const created: string[] = [];
let approvalId = "";

test.beforeAll(async ({ playwright, baseURL }) => {
  await receiver.steer("/ok", { status: 200 });
  admin = await signedInApi(playwright, baseURL!, "admin");
  for (const [id, target] of [[`${tag}_deal`, object], [`${tag}_quiet`, emptyObject]]) {
    const defined = await admin.post("/api/v1/approval-definitions", {
      data: { id, object: target, steps: [{ name: "Manager", approver: { role: "admin" }, route: "e2e-approvers" }] },
    });
    expect(defined.status(), await defined.text()).toBeLessThan(300);
  }
  for (const name of ["Acme renewal", "Globex upsell", "Initech pilot"]) {
    const record = await admin.post(`/api/v1/records/${object}`, { data: { fields: { Name: name, Amount: 1200 } } });
    expect(record.status()).toBe(201);
    created.push((await record.json()).id);
  }
  const submitted = await admin.post("/api/v1/approvals", { data: { definition_id: `${tag}_deal`, record_id: created[2] } });
  expect(submitted.status(), await submitted.text()).toBe(201);
  approvalId = (await submitted.json()).id;
});

test.afterAll(async () => {
  await admin?.dispose();
});

test("a reader lists an object's records newest first and opens one with its approval", async ({ page }) => {
  await signIn(page, "reader", "/runs");
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Records" }).click();
  await expect(page).toHaveURL(/\/records$/);
  await waitForHydration(page);
  await page.getByRole("navigation", { name: "Objects" }).getByRole("link", { name: object }).click();
  await expect(page).toHaveURL(new RegExp(`object=${object}$`));
  const rows = page.getByTestId("record-row");
  await expect(rows).toHaveCount(3);
  await expect(rows.first()).toHaveAttribute("data-record-id", created[2]);
  await expect(rows.last()).toHaveAttribute("data-record-id", created[0]);
  await expect(rows.first().getByTestId("record-preview")).toContainText('Name: "Initech pilot"');
  await expectAccessible(page, "the Records listing");

  await rows.first().getByRole("link").click();
  const detail = page.getByTestId("record-detail");
  await expect(detail).toContainText(created[2]);
  await expect(detail.getByTestId("record-fields")).toContainText('"Initech pilot"');
  await expect(page).toHaveTitle(/^Record …/);
  // Its approval, as the Approvals page shows it: a reader gets no buttons.
  const approval = page.locator(`[data-testid=approval-detail][data-approval-id="${approvalId}"]`);
  await expect(approval).toBeVisible();
  await expect(approval.getByTestId("approval-events")).toContainText(`approval_${approvalId}`);
  await expect(approval.getByRole("button", { name: "Approve" })).toHaveCount(0);
  await expectAccessible(page, "a record with its approval");
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.screenshot({ path: screenshotPath("records-page.png"), fullPage: true });

  // A record never submitted says so.
  await page.goto(`/records?object=${object}&id=${created[0]}`);
  await waitForHydration(page);
  await expect(page.getByTestId("record-no-approvals")).toBeVisible();
});

test("a record found by id opens, a missing one is a designed 404, an empty object says so", async ({ page }) => {
  await signIn(page, "operator", "/runs");
  await page.getByRole("searchbox", { name: "Find by id" }).fill(created[1]);
  await page.getByRole("searchbox", { name: "Find by id" }).press("Enter");
  await expect(page).toHaveURL(new RegExp(`/records\\?object=${object}&id=${created[1]}$`));
  await expect(page.getByTestId("record-fields")).toContainText('"Globex upsell"');

  const missing = await page.goto(`/records?object=${object}&id=no-such-record`);
  expect(missing?.status()).toBe(404);
  await waitForHydration(page);
  await expect(page.getByTestId("record-not-found")).toBeVisible();
  await expect(page).toHaveTitle("Record not found · Herald");
  await expectAccessible(page, "a missing record");

  await page.goto(`/records?object=${emptyObject}`);
  await waitForHydration(page);
  await expect(page.getByTestId("records-empty")).toContainText(`No ${emptyObject} records yet`);
  await expectAccessible(page, "an object without records");
});
