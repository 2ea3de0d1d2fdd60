import type { APIRequestContext } from "@playwright/test";
import { test, expect } from "./fixtures";
import { signedInApi, signIn, uniqueTag, waitForHydration } from "./helpers";
import { Receiver } from "./receiver";

// A destination's circuit breaker in the console: callbacks to a receiver that
// answers 503 open it (serve.sh sets HERALD_BREAKER_FAILURES=20; 12 runs
// with HERALD_MAX_ATTEMPTS=2 make 24 attempts); the Deliveries
// page shows it and an operator closes it. The receiver is this spec's own, in this
// process on a port the OS picks, so no other spec's destination is affected.

const receiver = new Receiver();
const tenant = uniqueTag("breaker");
let api: APIRequestContext;

test.beforeAll(async ({ playwright, baseURL }) => {
  await receiver.start();
  receiver.defaults["/hook"] = 503;
  api = await signedInApi(playwright, baseURL!, "operator");
});

test.afterAll(async () => {
  await api?.dispose();
  await receiver.stop();
});

test("an open breaker shows on the Deliveries page and an operator closes it", async ({ page }) => {
  const destination = `http://127.0.0.1:${receiver.port}`;
  for (let i = 0; i < 12; i++) {
    const created = await api.post("/api/v1/runs", {
      data: { type: "breaker.e2e", tenant, callback_url: receiver.url("/hook") },
    });
    expect(created.status()).toBe(201);
    const run = await created.json();
    const done = await api.post(`/api/v1/runs/${run.id}/transitions`, { data: { to: "succeeded" } });
    expect(done.status()).toBe(200);
  }
  await expect
    .poll(
      async () => {
        const resp = await api.get("/admin/api/destination-breakers");
        const rows = (await resp.json()) as { destination: string; state: string }[];
        return rows.find((b) => b.destination === destination)?.state;
      },
      // A bound for a loaded machine: 24 attempts with backoffs of at most 200 ms.
      { timeout: 60_000 },
    )
    .toBe("open");

  await signIn(page, "operator");
  await page.goto("/deliveries");
  await waitForHydration(page);
  const breaker = page.getByTestId("breaker").filter({ hasText: destination });
  await expect(breaker).toBeVisible();
  await expect(breaker).toHaveAttribute("data-route", "callback");
  await expect(breaker.getByTestId("breaker-state")).toHaveText("open");

  receiver.defaults["/hook"] = 200;
  await breaker.getByTestId("breaker-close").click();
  await expect(breaker).toHaveCount(0);
  const resp = await api.get("/admin/api/destination-breakers");
  const rows = (await resp.json()) as { destination: string; state: string }[];
  expect(rows.find((b) => b.destination === destination)?.state).toBe("closed");
  await page.goto("/audit");
  await waitForHydration(page);
  const audit = page.getByTestId("audit-row").filter({ hasText: "close_breaker" }).filter({ hasText: destination });
  await expect(audit.getByTestId("audit-actor")).toHaveText("operator");
});
