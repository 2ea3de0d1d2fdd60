import type { APIRequestContext } from "@playwright/test";
import { test, expect } from "./fixtures";
import { screenshotPath, signedInApi, signIn, uniqueTag, waitForHydration } from "./helpers";
import { expectAccessible } from "./a11y";
import { SharedReceiver } from "./receiver";

// Find by id (issue 23, item 2): the header's search box on every page, `/` to
// reach it, a pasted id opening its page, a delivery's id opening its run, several
// matches listed, none said so, and text too short to search refused with why.
// Runs are this spec's own (their type carries its tag).

test.describe.configure({ mode: "serial" });

const tag = uniqueTag("search");
const receiver = new SharedReceiver();
let api: APIRequestContext;

test.beforeAll(async ({ playwright, baseURL }) => {
  api = await signedInApi(playwright, baseURL!, "operator");
});

test.afterAll(async () => {
  await api?.dispose();
});

/** Records a run with a route that has no receiver to wait for; returns its id. */
async function recordedRun(): Promise<string> {
  const created = await api.post("/api/v1/runs", { data: { type: `${tag}.job`, tenant: tag } });
  expect(created.status()).toBe(201);
  return (await created.json()).id as string;
}

test("a pasted run id opens its run, reached with / from any page", async ({ page }) => {
  const id = await recordedRun();
  await signIn(page, "reader", "/deliveries");
  await page.keyboard.press("/");
  const box = page.getByRole("searchbox", { name: "Find by id" });
  await expect(box).toBeFocused();
  await box.fill(id);
  await box.press("Enter");
  await expect(page).toHaveURL(new RegExp(`/runs/${id}$`));
  await expect(page.getByRole("heading", { level: 1 })).toBeVisible();
  // Typing / in a field types it: the shortcut leaves fields alone.
  await box.fill("a/b");
  await expect(box).toHaveValue("a/b");
});

test("the end of an id, as the console shows it, finds the run", async ({ page }) => {
  const id = await recordedRun();
  await signIn(page, "reader", "/runs");
  await page.goto(`/search?q=${id.slice(-12)}`);
  await expect(page).toHaveURL(new RegExp(`/runs/${id}$`));
});

test("a delivery's id opens the run that owes it", async ({ page }) => {
  await receiver.steer("/hook", { status: 200 });
  const created = await api.post("/api/v1/runs", {
    data: { type: `${tag}.job`, tenant: tag, callback_url: receiver.url("/hook") },
  });
  expect(created.status()).toBe(201);
  const run = (await created.json()).id as string;
  const done = await api.post(`/api/v1/runs/${run}/transitions`, { data: { to: "succeeded" } });
  expect(done.status()).toBe(200);
  const listed = await api.get(`/api/v1/runs/${run}/deliveries`);
  const events = (await listed.json()) as { event_id: string }[];
  expect(events.length).toBe(1);
  await signIn(page, "reader", "/runs");
  await page.goto(`/search?q=${events[0].event_id}`);
  await expect(page).toHaveURL(new RegExp(`/runs/${run}$`));
});

test("several matches are listed, each with a way to open it", async ({ page }) => {
  // Eleven runs made together share the first characters of their time-ordered ids
  // (unless a 65-second boundary falls between them: then another eleven), so more
  // match than the ten listed, whatever other specs made that minute. Each listed
  // row is checked by what it is, not by whose it is.
  const makeEleven = async () => {
    const runs: string[] = [];
    for (let i = 0; i < 11; i++) runs.push(await recordedRun());
    return runs;
  };
  let runs = await makeEleven();
  for (let tries = 0; tries < 3 && !runs.every((r) => r.startsWith(runs[0].slice(0, 8))); tries++) {
    runs = await makeEleven();
  }
  const prefix = runs[0].slice(0, 8);
  expect(runs.every((r) => r.startsWith(prefix))).toBe(true);
  await signIn(page, "reader", "/runs");
  await page.goto(`/search?q=${prefix}`);
  await waitForHydration(page);
  const rows = page.getByTestId("search-row");
  await expect(rows.first()).toBeVisible();
  const listed = await rows.evaluateAll((trs) =>
    trs.map((tr) => ({ id: tr.getAttribute("data-id") ?? "", kind: tr.getAttribute("data-kind") })),
  );
  for (const { id } of listed) expect(id.startsWith(prefix)).toBe(true);
  // Other kinds' ids of that minute (approvals) may be listed too, ten at most each.
  const ids = listed.filter((row) => row.kind === "Run").map((row) => row.id);
  expect(ids.length).toBe(10);
  // Past ten, the page says more match.
  await expect(page.getByTestId("search-more")).toBeVisible();
  await expectAccessible(page, "the search's matches");
  await page.screenshot({ path: screenshotPath("search-page.png") });
  await page.locator(`[data-testid=search-row][data-id="${ids[1]}"]`).getByRole("link", { name: "Open" }).click();
  await expect(page).toHaveURL(new RegExp(`/runs/${ids[1]}$`));
});

test("nothing found says so; text too short is refused with the reason", async ({ page }) => {
  await signIn(page, "reader", "/runs");
  await page.goto(`/search?q=${tag}-nothing-has-this`);
  await expect(page.getByTestId("search-empty")).toContainText("Nothing has the id");
  await expectAccessible(page, "the search with no match");
  const short = await page.goto("/search?q=0193");
  expect(short?.status()).toBe(400);
  await expect(page.getByTestId("search-refused")).toContainText("at least 8 characters");
  await expectAccessible(page, "the refused search");
  await page.goto("/search");
  await expect(page.getByTestId("search-prompt")).toBeVisible();
});

test("signed out, the search asks to sign in first", async ({ page }) => {
  await page.goto("/search?q=0193abcdef");
  await expect(page).toHaveURL(/\/login\?next=/);
});
