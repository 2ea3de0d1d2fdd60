import { test, expect, type APIRequestContext } from "@playwright/test";
import http from "node:http";
import { password, waitForHydration } from "./helpers";

test.describe.configure({ mode: "serial" });

/** A real receiver on loopback: /ok answers 200, /fail 503 with `Retry-After: 60`
 * (a floor under any configured backoff); records event ids. */
const arrivals: { path: string; id: string }[] = [];
let receiver: http.Server;

test.beforeAll(async () => {
  receiver = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      arrivals.push({ path: req.url ?? "", id: String(req.headers["webhook-id"] ?? "") });
      if (req.url === "/fail") {
        res.statusCode = 503;
        res.setHeader("retry-after", "60");
      } else {
        res.statusCode = 200;
      }
      res.end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(3918, "127.0.0.1", resolve));
});

test.afterAll(async () => {
  receiver.closeAllConnections(); // Herald keeps idle keep-alive connections open
  await new Promise((resolve) => receiver.close(resolve));
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

async function signInAdmin(page: import("@playwright/test").Page, next: string) {
  await page.goto(next);
  await expect(page).toHaveURL(/\/login\?next=/);
  await page.getByLabel("Username").fill("admin");
  await page.getByLabel("Password").fill(password("admin"));
  await page.getByRole("button", { name: "Sign in" }).click();
  await waitForHydration(page);
}

test("submit prompts a real receiver; Recall from the console replays the field update", async ({ page, playwright, baseURL }) => {
  const request = await playwright.request.newContext({ baseURL });
  const post = await adminApi(request, baseURL!);
  await definition(post, "e2e-deal", "e2e-approvers");
  const account = await post("/api/v1/records/Account", { fields: { Status: "Customer" } });
  const deal = await post("/api/v1/records/Opportunity", { fields: { AccountId: account.id } });
  const approval = await post("/api/v1/approvals", { definition_id: "e2e-deal", record_id: deal.id });
  await expect.poll(() => arrivals.map((a) => a.id)).toContain(`approval_${approval.id}`);

  await signInAdmin(page, `/approvals?id=${approval.id}`);
  await expect(page).toHaveURL(new RegExp(`/approvals\\?id=${approval.id}$`));
  const detail = page.getByTestId("approval-detail");
  await expect(detail).toContainText("pending");
  await expect(page.locator('[data-testid=approval-event][data-kind=approval_prompt]')).toHaveAttribute("data-status", "completed");
  await page.getByTestId("recall-button").click();
  await expect(detail.getByTestId("status").first()).toHaveText("removed");
  await expect(page.getByTestId("recall-button")).toHaveCount(0);
  await expect
    .poll(async () => {
      await page.reload();
      await waitForHydration(page);
      return page.locator("[data-testid=approval-event][data-kind=field_update]").getAttribute("data-status");
    })
    .toBe("completed");
  const record = await (await request.get(`/api/v1/records/Account/${account.id}`)).json();
  expect(record.fields.Status).toBe("Prospect");
  await expect(page.getByTestId("replay-counts")).toContainText("completed: 1");
  await expect(page.getByTestId("approval-row").first()).toBeVisible();
  await request.dispose();
});

test("an approval decided before its prompt is delivered never sends it", async ({ page, playwright, baseURL }) => {
  const request = await playwright.request.newContext({ baseURL });
  const post = await adminApi(request, baseURL!);
  await definition(post, "e2e-flaky-deal", "e2e-flaky");
  const deal = await post("/api/v1/records/Opportunity", { fields: { Name: "flaky" } });
  const approval = await post("/api/v1/approvals", { definition_id: "e2e-flaky-deal", record_id: deal.id });
  const prompt = `approval_${approval.id}`;
  // The first attempt fails (503, Retry-After 60 s); the prompt waits, undelivered.
  await expect.poll(() => arrivals.filter((a) => a.id === prompt).length).toBe(1);

  await signInAdmin(page, `/approvals?id=${approval.id}`);
  await page.getByTestId("approve-button").click();
  await expect(page.getByTestId("approval-detail").getByTestId("status").first()).toHaveText("approved");
  await page.reload();
  await waitForHydration(page);
  await expect(page.locator("[data-testid=approval-event][data-kind=approval_prompt]")).toHaveAttribute("data-status", "skipped");
  await page.waitForTimeout(3_000); // a skipped prompt is never claimed again
  expect(arrivals.filter((a) => a.id === prompt).length).toBe(1);
  await request.dispose();
});

test("a reader sees approvals but no buttons", async ({ page }) => {
  await page.goto("/approvals");
  await page.getByLabel("Username").fill("reader");
  await page.getByLabel("Password").fill(password("reader"));
  await page.getByRole("button", { name: "Sign in" }).click();
  await waitForHydration(page);
  await expect(page.getByTestId("approval-row").first()).toBeVisible();
  await page.getByTestId("approval-row").first().locator("a").click();
  await expect(page.getByTestId("approval-detail")).toBeVisible();
  await expect(page.locator("[data-testid$=-button]")).toHaveCount(0);
  await page.screenshot({ path: "../docs/approvals-page.png", fullPage: true });
});
