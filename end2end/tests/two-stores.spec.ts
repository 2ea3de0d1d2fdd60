import type { APIRequestContext } from "@playwright/test";
import { test as shared, expect } from "./fixtures";
import { serverUrl } from "./fixtures";
import { password, signIn, uniqueTag, waitForHydration } from "./helpers";
import { SharedReceiver } from "./receiver";
import { expectAccessible } from "./a11y";

// One console over two databases (issue 20): the second Herald serve.sh starts
// keeps approvals in a database apart from its jobs store. A failed prompt of
// the approvals database shows on its Deliveries page, is retried from there
// (its retry committed, audited, in the approvals database) and its audit row
// shows on the Audit page beside the jobs store's. Its prompt goes to the shared
// receiver's /fail over the e2e-flaky route (approvals.toml), steered here.
const test = shared.extend({
  baseURL: async ({}, use) => use(serverUrl("HERALD_E2E_TWO_URL")),
});
test.describe.configure({ mode: "serial" });

const receiver = new SharedReceiver();
const tag = uniqueTag("two-stores");

async function api(request: APIRequestContext, baseURL: string, role: string) {
  const login = await request.post("/auth/login", {
    form: { username: role, password: password(role), next: "/runs" },
    headers: { origin: baseURL },
    maxRedirects: 0,
  });
  expect(login.status()).toBe(303);
  return {
    post: async (path: string, data: unknown) => {
      const resp = await request.post(path, { data, headers: { origin: baseURL } });
      expect(resp.status(), `${path}: ${await resp.text()}`).toBeLessThan(300);
      return resp.json();
    },
    get: async (path: string) => (await request.get(path)).json(),
  };
}

test("a failed approvals-database event is listed, retried and audited from the console", async ({ page, playwright, baseURL }) => {
  // A prompt the receiver refuses for good: it fails at its first attempt.
  await receiver.steer("/fail", { status: 400 });
  const request = await playwright.request.newContext({ baseURL });
  const admin = await api(request, baseURL!, "admin");
  await admin.post("/api/v1/approval-definitions", {
    id: `${tag}-deal`,
    object: "Opportunity",
    steps: [{ name: "Manager", approver: { role: "admin" }, route: "e2e-flaky" }],
  });
  const deal = await admin.post("/api/v1/records/Opportunity", { fields: { Name: tag } });
  const approval = await admin.post("/api/v1/approvals", { definition_id: `${tag}-deal`, record_id: deal.id });
  const prompt = `approval_${approval.id}`;
  await expect
    .poll(async () => {
      const page = await admin.get(`/admin/api/notification-outbox?source=approvals&status=failed`);
      return page.events.map((e: { event_id: string }) => e.event_id);
    })
    .toContain(prompt);

  await receiver.steer("/fail", { status: 200 });
  await signIn(page, "operator", "/deliveries?source=approvals");
  const row = page.locator(`[data-testid=delivery-row]`).filter({ hasText: prompt });
  await expect(row.getByTestId("row-status")).toHaveText("Failed");
  await expect(page.getByTestId("store-unavailable")).toHaveCount(0);
  await expectAccessible(page, "Deliveries over two databases");
  await page.getByTestId("bulk-preview").click();
  await expect(page.getByTestId("bulk-count")).toHaveText("1 retryable delivery matches.");
  await page.getByTestId("bulk-run").click();
  await expect(page.getByTestId("bulk-result")).toHaveText("Retried 1.");
  await expect
    .poll(async () => (await receiver.arrivals("/fail")).filter((a) => a.id === prompt && a.status === 200).length)
    .toBe(1);

  await page.goto("/audit");
  await waitForHydration(page);
  const audited = page.getByTestId("audit-row").filter({ hasText: "source=approvals" });
  await expect(audited.first().getByTestId("audit-actor")).toHaveText("operator");
  await expect(audited.first().getByTestId("audit-count")).toHaveText("1");
  await expectAccessible(page, "Audit over two databases");
});
