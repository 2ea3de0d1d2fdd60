import type { APIRequestContext } from "@playwright/test";
import { test, expect } from "./fixtures";
import { signedInApi, signIn, uniqueTag } from "./helpers";
import { expectAccessible } from "./a11y";

// Pushed live updates (issue 23, item 5): an open page learns of a change from
// the server's stream and shows it within a second (the two-second poll it
// replaces is off while the stream is up); paused, it hears of a change and
// shows nothing new, even past a poll's interval; resumed, it catches up. The runs are
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

  // Paused: the notice of a new run arrives (the tab counts it), and the page
  // still does not show the run, past a poll's interval (two seconds) too.
  await page.getByTestId("live-toggle").click();
  await expect(live).toHaveAttribute("data-state", "paused");
  await expect(page.getByTestId("live-toggle")).toHaveAttribute("aria-pressed", "true");
  const heard = Number(await live.getAttribute("data-notices"));
  const second = await recordRun();
  await expect(live).not.toHaveAttribute("data-notices", String(heard));
  await page.waitForTimeout(3_000);
  await expect(page.locator(`[data-testid=run-row][data-run-id="${second}"]`)).toHaveCount(0);
  await expectAccessible(page, "the Runs page with live updates paused");

  // Resumed: it catches up at once.
  await page.getByTestId("live-toggle").click();
  await expect(live).toHaveAttribute("data-state", "streaming");
  await expect(page.locator(`[data-testid=run-row][data-run-id="${second}"]`)).toBeVisible({ timeout: 1_000 });
  await expect(rows).toHaveCount(2);
});
