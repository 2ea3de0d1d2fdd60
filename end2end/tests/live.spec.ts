import type { APIRequestContext } from "@playwright/test";
import { test, expect } from "./fixtures";
import { signedInApi, signIn, uniqueTag } from "./helpers";
import { expectAccessible } from "./a11y";

// Pushed live updates (issue 23, item 5): an open page learns of a change from
// the server's stream and shows it within a second (faster than the two-second
// poll it replaces, which is off while the stream is up); paused, it shows
// nothing new, even past a poll's interval; resumed, it catches up. The runs are
// this spec's own (their tenant carries its tag).

test.describe.configure({ mode: "serial" });

const tenant = uniqueTag("live");
let api: APIRequestContext;

test.beforeAll(async ({ playwright, baseURL }) => {
  api = await signedInApi(playwright, baseURL!, "operator");
});

test.afterAll(async () => {
  await api?.dispose();
});

async function recordRun(): Promise<string> {
  const created = await api.post("/api/v1/runs", { data: { type: `${tenant}.job`, tenant } });
  expect(created.status()).toBe(201);
  return (await created.json()).id as string;
}

test("a run recorded through the API appears on an open page within a second, and not while paused", async ({ page }) => {
  await signIn(page, "reader", `/runs?tenant=${tenant}`);
  const live = page.getByTestId("live-state");
  await expect(live).toHaveAttribute("data-state", "streaming");
  await expect(live).toHaveText("Live");
  const rows = page.getByTestId("run-row");
  await expect(rows).toHaveCount(0);

  const first = await recordRun();
  await expect(page.locator(`[data-testid=run-row][data-run-id="${first}"]`)).toBeVisible({ timeout: 1_000 });

  // Paused: a new run stays off the page past a poll's interval (two seconds).
  await page.getByTestId("live-toggle").click();
  await expect(live).toHaveAttribute("data-state", "paused");
  await expect(page.getByTestId("live-toggle")).toHaveAttribute("aria-pressed", "true");
  const second = await recordRun();
  await page.waitForTimeout(3_000);
  await expect(page.locator(`[data-testid=run-row][data-run-id="${second}"]`)).toHaveCount(0);
  await expectAccessible(page, "the Runs page with live updates paused");

  // Resumed: it catches up at once.
  await page.getByTestId("live-toggle").click();
  await expect(live).toHaveAttribute("data-state", "streaming");
  await expect(page.locator(`[data-testid=run-row][data-run-id="${second}"]`)).toBeVisible({ timeout: 1_000 });
  await expect(rows).toHaveCount(2);
});
