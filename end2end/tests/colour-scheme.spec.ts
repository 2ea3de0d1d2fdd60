import type { Page } from "@playwright/test";
import { test, expect } from "./fixtures";
import { screenshotPath, signIn, signedInApi, uniqueTag, waitForHydration } from "./helpers";
import { expectAccessible } from "./a11y";

// The console follows the browser's light or dark preference (issue 23, item 8),
// and every page, state and role stays accessible in both: axe (contrast
// included) on each page a role opens, its refusals and its designed states.

const tag = uniqueTag("scheme");
const LIGHT_BG = "rgb(245, 246, 248)";
const DARK_BG = "rgb(15, 19, 32)";
let runId = "";

test.beforeAll(async ({ playwright, baseURL }) => {
  const api = await signedInApi(playwright, baseURL!, "operator");
  const created = await api.post("/api/v1/runs", {
    data: { type: "invoice.sync", tenant: tag, callback_url: "https://hooks.example.com/notify" },
  });
  expect(created.status()).toBe(201);
  runId = (await created.json()).id;
  await api.dispose();
});

async function background(page: Page) {
  return page.evaluate(() => getComputedStyle(document.documentElement).backgroundColor);
}

/** Each page a role may open, and the refusals and designed states it meets. */
function pagesOf(role: string) {
  const pages = [
    "/overview",
    "/overview?window=day&kind=callback",
    "/runs",
    `/runs?tenant=${tag}-none`,
    `/runs/${runId}`,
    "/runs/00000000-0000-7000-8000-000000000000",
    "/deliveries",
    `/deliveries?status=all&kind=${tag}`,
    "/approvals",
    "/audit",
    "/users",
    "/records",
    "/records?object=Opportunity&id=no-such-record",
    `/search?q=${tag}-nothing`,
    "/search?q=0193",
    "/no-such-page",
  ];
  return pages.map((path) => ({ path, what: `${path} as ${role}` }));
}

for (const scheme of ["dark", "light"] as const) {
  for (const role of ["reader", "operator", "admin"]) {
    test(`every page is accessible in the ${scheme} scheme as ${role}`, async ({ page }) => {
      await page.emulateMedia({ colorScheme: scheme });
      await signIn(page, role, "/runs");
      expect(await background(page)).toBe(scheme === "dark" ? DARK_BG : LIGHT_BG);
      for (const { path, what } of pagesOf(role)) {
        await page.goto(path);
        await waitForHydration(page);
        await expectAccessible(page, `${what} (${scheme})`);
      }
      if (scheme === "dark" && role === "operator") {
        await page.goto("/deliveries");
        await page.setViewportSize({ width: 1280, height: 800 });
        await page.screenshot({ path: screenshotPath("dark-scheme.png") });
      }
    });
  }
}

test("the sign-in page is accessible in both schemes", async ({ page }) => {
  for (const scheme of ["dark", "light"] as const) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.goto("/login");
    await waitForHydration(page);
    expect(await background(page)).toBe(scheme === "dark" ? DARK_BG : LIGHT_BG);
    await expectAccessible(page, `the sign-in page (${scheme})`);
  }
});
