import { test, expect } from "./fixtures";
import { escapeRegExp, signIn, seedRuns, screenshotPath, uniqueTag, waitForHydration } from "./helpers";
import { expectAccessible } from "./a11y";

test.describe.configure({ mode: "serial" });

// This spec's runs: one tenant and two types of its own, so the counts below are of
// these runs alone, whatever other specs record in the shared server.
const tenant = uniqueTag("console");
const nightly = `${tenant}.etl-nightly`;
const report = `${tenant}.report`;
const mine = `/runs?tenant=${tenant}`;
const ETL_RUNS = 60;
const PAGE_SIZE = 50;

test.beforeAll(async ({ playwright, baseURL }) => {
  const request = await playwright.request.newContext({ baseURL });
  const runs = [];
  for (let i = 0; i < ETL_RUNS; i++) runs.push({ type: nightly, tenant });
  runs.push({ type: report, tenant }, { type: report, tenant });
  await seedRuns(request, baseURL!, runs);
  await request.dispose();
});

for (const role of ["reader", "operator", "admin"]) {
  test(`${role} signs in and sees runs`, async ({ page }) => {
    await signIn(page, role);
    await expect(page.getByTestId("viewer-role")).toHaveText(role);
    await expect(page.getByTestId("run-row").first()).toBeVisible();
    await page.goto(mine);
    await waitForHydration(page);
    await expect(page.getByTestId("run-row")).toHaveCount(PAGE_SIZE);
  });
}

test("the first Tab skips to the page, and the bar offers only the pages the role opens", async ({ page }) => {
  await signIn(page, "reader");
  await page.goto(mine);
  await waitForHydration(page);
  const nav = page.getByRole("navigation", { name: "Main" });
  // The precondition: the viewer is known (the same answer decides the Audit link).
  await expect(page.getByTestId("viewer-role")).toHaveText("reader");
  await expect(nav.getByRole("link", { name: "Deliveries" })).toBeVisible();
  await expect(nav.getByRole("link", { name: "Audit" })).toHaveCount(0);

  await page.keyboard.press("Tab");
  await expect(page.getByTestId("skip-link")).toBeFocused();
  await expect(page.getByTestId("skip-link")).toBeInViewport();
  await page.keyboard.press("Enter");
  await expect(page.locator("main#main")).toBeFocused();
  await page.keyboard.press("Tab");
  const focusedInBar = await page.evaluate(() => !!document.activeElement?.closest("header, .skip-link"));
  expect(focusedInBar).toBe(false);
  await expectAccessible(page, "Runs, skip link used");

  await page.getByTestId("logout").click();
  await signIn(page, "operator");
  await expect(page.getByTestId("viewer-role")).toHaveText("operator");
  await nav.getByRole("link", { name: "Audit" }).click();
  await expect(page).toHaveURL(/\/audit$/);
  await expect(page).toHaveTitle("Audit · Herald");
});

test("filters and paging update the list and the URL without a reload", async ({ page }) => {
  await signIn(page, "reader");
  await page.goto(mine);
  await waitForHydration(page);
  // A value on window survives client-side navigation but not a full page load.
  await page.evaluate(() => ((window as any).__noReload = true));

  await page.getByTestId("type-filter").selectOption(report);
  await expect(page).toHaveURL(new RegExp(`/runs\\?type=${escapeRegExp(report)}&tenant=${tenant}$`));
  await expect(page.getByTestId("run-row")).toHaveCount(2);
  await expect(page.getByTestId("run-type")).toHaveText([report, report]);

  await page.getByTestId("status-failed").click();
  await expect(page).toHaveURL(new RegExp(`type=${escapeRegExp(report)}&status=failed&tenant=${tenant}$`));
  await expect(page.getByTestId("empty-state")).toContainText("No runs match these filters");

  await page.getByTestId("status-all").click();
  // The type filter navigates from the filters it was rendered with: wait for the
  // view of the new URL before using it.
  await expect(page.getByTestId("status-all")).toHaveAttribute("aria-current", "true");
  await page.getByTestId("type-filter").selectOption("");
  await expect(page).toHaveURL(new RegExp(`/runs\\?tenant=${tenant}$`));
  await expect(page.getByTestId("run-row")).toHaveCount(PAGE_SIZE);
  await page.getByTestId("next-page").click();
  await expect(page).toHaveURL(/after=/);
  // Page two holds the rest of this spec's runs, and no next page follows.
  await expect(page.getByTestId("run-row")).toHaveCount(ETL_RUNS + 2 - PAGE_SIZE);
  await expect(page.getByTestId("next-page")).toHaveCount(0);
  await page.getByTestId("first-page").click();
  await expect(page).toHaveURL(new RegExp(`/runs\\?tenant=${tenant}$`));
  await expect(page.getByTestId("run-row")).toHaveCount(PAGE_SIZE);

  expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
});

test("a deep link renders its filters on the server", async ({ page }) => {
  await signIn(page, "reader");
  await page.goto(`/runs?type=${report}&status=queued`);
  await waitForHydration(page);
  await expect(page.getByTestId("run-row")).toHaveCount(2);
  await expect(page.getByTestId("status-queued")).toHaveAttribute("aria-current", "true");
  // The shared server's callback secret is readable: no configuration notice.
  await expect(page.getByTestId("config-notices")).toHaveCount(0);
  await expect(page.getByTestId("config-notices-error")).toHaveCount(0);
  // Status chips carry their counts over all runs (capped, so "10,000+" past ten
  // thousand): at least this spec's runs, which all stay queued.
  const queued = page.getByTestId("status-queued").getByTestId("status-count");
  await expect(queued).toHaveText(/^[1-9][\d,]*\+?$/);
  expect(Number((await queued.textContent())!.replace(/[,+]/g, ""))).toBeGreaterThanOrEqual(ETL_RUNS + 2);
  await expect(page.getByTestId("status-all").getByTestId("status-count")).toHaveCount(0);
});

test("a wrong password is refused without saying whether the user exists", async ({ page }) => {
  await page.goto("/login");
  await page.getByLabel("Username").fill("reader");
  await page.getByLabel("Password").fill("definitely-wrong");
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(/\/login\?error=invalid/);
  await expect(page.getByTestId("login-error")).toHaveText("Invalid username or password.");
  await page.goto("/runs");
  await expect(page).toHaveURL(/\/login/);
});

test("sign out ends the session", async ({ page }) => {
  await signIn(page, "operator");
  await page.getByTestId("logout").click();
  await expect(page).toHaveURL(/\/login$/);
  await page.goto("/runs");
  await expect(page).toHaveURL(/\/login\?next=/);
  const api = await page.request.get("/api/v1/runs");
  expect(api.status()).toBe(401);
});

test("screenshot of the Runs page for the README", async ({ page }) => {
  await page.setViewportSize({ width: 1280, height: 760 });
  await signIn(page, "admin");
  await expect(page.getByTestId("run-row").first()).toBeVisible();
  await page.screenshot({ path: screenshotPath("runs-page.png") });
});

test("a filter that matches nothing offers a way back", async ({ page }) => {
  // A type no run has shows the filtered empty state, with a way back.
  await signIn(page, "admin");
  await page.goto(`/runs?type=${tenant}.nothing-like-this`);
  await waitForHydration(page);
  await expect(page.getByTestId("empty-state")).toBeVisible();
  await page.getByRole("link", { name: "Clear filters" }).click();
  await expect(page.getByTestId("run-row").first()).toBeVisible();
});
