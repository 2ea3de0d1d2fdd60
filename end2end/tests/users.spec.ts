import type { Browser, Page } from "@playwright/test";
import { test, expect } from "./fixtures";
import { escapeRegExp, screenshotPath, signedInApi, signIn, uniqueTag, waitForHydration } from "./helpers";
import { expectAccessible } from "./a11y";

// Users and tokens (issue 23, item 6): an admin manages them on /users; every
// change is audited; a disabled user's sign-in fails exactly like a wrong
// password; a token works until it is revoked; operators and readers are not
// offered the page and are refused it, a forged call too. The users and tokens
// are this spec's own (their names carry its tag): the shared admin, operator
// and reader are never changed.

test.describe.configure({ mode: "serial" });

const tag = uniqueTag("users");

/** Signs `username` in through the form in a browser of its own; the page where it lands. */
async function signInAs(browser: Browser, username: string, secret: string): Promise<Page> {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto("/login");
  await waitForHydration(page);
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill(secret);
  await page.getByRole("button", { name: "Sign in" }).click();
  // Signed in, the landing page; refused, the sign-in page with its error.
  await page.waitForURL(/\/(overview$|login\?)/);
  return page;
}

const row = (page: Page, username: string) =>
  page.locator(`[data-testid=user-row][data-username="${username}"]`);

async function confirm(page: Page, question: RegExp) {
  const dialog = page.getByRole("alertdialog");
  await expect(dialog).toContainText(question);
  await dialog.getByTestId("confirm-yes").click();
}

test("an admin adds a user, changes its role, disables, enables and resets it; all audited", async ({ page, browser }) => {
  const name = `${tag}-ada`;
  await signIn(page, "admin", "/runs");
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Users" }).click();
  await expect(page).toHaveURL(/\/users$/);
  await expect(page).toHaveTitle("Users and tokens · Herald");
  await waitForHydration(page);
  await expect(row(page, "admin")).toContainText("(you)");
  await expect(row(page, "admin").getByTestId("user-disable")).toHaveCount(0);
  await expect(row(page, "admin").getByTestId("user-reset")).toHaveCount(0);

  // Added without a password: Herald makes one and shows it once.
  await page.getByTestId("add-username").fill(name);
  await page.getByTestId("add-role").selectOption("operator");
  await page.getByTestId("add-user").click();
  await expect(page.getByTestId("account-message")).toHaveText(`Added ${name} as operator.`);
  const made = (await page.getByTestId("account-secret").textContent())!.trim();
  expect(made.length).toBeGreaterThanOrEqual(12);
  await expect(row(page, name).getByTestId("user-role")).toHaveText("operator");
  await expect(page.getByTestId("add-username")).toHaveValue("");
  await expectAccessible(page, "the Users page with a secret shown");
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.screenshot({ path: screenshotPath("users-page.png"), fullPage: true });

  const ada = await signInAs(browser, name, made);
  await expect(ada).toHaveURL(/\/overview$/);
  await expect(ada.locator(".who")).toContainText(name);

  // A role change is live in the user's session.
  await row(page, name).getByTestId("user-role-select").selectOption("reader");
  await row(page, name).getByTestId("user-role-apply").click();
  await expect(page.getByTestId("account-message")).toHaveText(`${name} is now reader.`);
  await expect(row(page, name).getByTestId("user-role")).toHaveText("reader");
  await ada.reload();
  await expect(ada.locator(".who")).toContainText("reader");

  // Disabled (after a second click): signed out, and refused like a wrong password.
  await row(page, name).getByTestId("user-disable").click();
  // The second click is where the keyboard is.
  await expect(page.getByTestId("confirm-yes")).toBeFocused();
  await confirm(page, new RegExp(`Disable ${escapeRegExp(name)}\\?`));
  await expect(row(page, name).getByTestId("user-status")).toHaveText("disabled");
  await ada.goto("/runs");
  await expect(ada).toHaveURL(/\/login\?next=/);
  const disabled = await signInAs(browser, name, made);
  await expect(disabled).toHaveURL(/\/login\?error=invalid/);
  const wrong = await signInAs(browser, name, "not-the-password");
  await expect(wrong).toHaveURL(/\/login\?error=invalid/);
  await expect(disabled.getByTestId("login-error")).toHaveText((await wrong.getByTestId("login-error").textContent())!);

  // Enabled again, then a password reset: a new one shown once; the old one fails.
  await row(page, name).getByTestId("user-enable").click();
  await expect(row(page, name).getByTestId("user-status")).toHaveText("active");
  await row(page, name).getByTestId("user-reset").click();
  await confirm(page, new RegExp(`Reset ${escapeRegExp(name)}'s password\\?`));
  await expect(page.getByTestId("account-message")).toContainText("password is reset");
  const reset = (await page.getByTestId("account-secret").textContent())!.trim();
  expect(reset).not.toBe(made);
  await expect(await signInAs(browser, name, made)).toHaveURL(/\/login\?error=invalid/);
  await expect(await signInAs(browser, name, reset)).toHaveURL(/\/overview$/);

  // The trail names each change, by whom.
  await page.goto("/audit");
  await waitForHydration(page);
  const rows = page.getByTestId("audit-row").filter({ hasText: name });
  for (const action of ["add_user", "change_role", "disable_user", "enable_user", "reset_password"]) {
    await expect(rows.filter({ hasText: action }).getByTestId("audit-actor")).toHaveText("admin");
  }
  await expect(page.getByTestId("audit-table")).not.toContainText(reset);
});

test("a token is shown once, works, and is refused once revoked", async ({ page, playwright, baseURL }) => {
  const name = `${tag}-bot`;
  await signIn(page, "admin", "/users");
  await page.getByTestId("token-name").fill(name);
  await page.getByTestId("token-role").selectOption("reader");
  await page.getByTestId("create-token").click();
  await expect(page.getByTestId("account-message")).toContainText(`Created the reader token ${name}`);
  const secret = (await page.getByTestId("account-secret").textContent())!.trim();
  expect(secret).toMatch(/^hrl_/);
  const token = page.locator(`[data-testid=token-row][data-name="${name}"]`);
  await expect(token.getByTestId("token-status")).toHaveText("active");
  await expect(token.getByTestId("token-by")).toHaveText("admin");

  const api = await playwright.request.newContext({ baseURL, extraHTTPHeaders: { authorization: `Bearer ${secret}` } });
  expect((await api.get("/api/v1/runs")).status()).toBe(200);

  await token.getByTestId("token-revoke").click();
  await confirm(page, new RegExp(`Revoke the token ${escapeRegExp(name)}\\?`));
  await expect(token.getByTestId("token-status")).toContainText("revoked");
  await expect(token.getByTestId("token-revoke")).toHaveCount(0);
  expect((await api.get("/api/v1/runs")).status()).toBe(401);
  await api.dispose();
  // A reload shows no secret again: it was shown once.
  await page.reload();
  await waitForHydration(page);
  await expect(page.getByTestId("account-secret")).toHaveCount(0);
  await expect(page.locator("main")).not.toContainText(secret);
  await expectAccessible(page, "the Users page with a revoked token");
});

test("an admin cannot disable a user without confirming, and a refusal says why", async ({ page }) => {
  const name = `${tag}-cy`;
  await signIn(page, "admin", "/users");
  await page.getByTestId("add-username").fill(name);
  await page.getByTestId("add-password").fill("short");
  await page.getByTestId("add-user").click();
  await expect(page.getByTestId("account-error")).toContainText("password: must be at least 12 characters");
  await expect(row(page, name)).toHaveCount(0);
  await expect(page.getByTestId("add-username")).toHaveValue(name);
  await page.getByTestId("add-password").fill("a-long-enough-password");
  await page.getByTestId("add-user").click();
  await expect(row(page, name)).toBeVisible();
  await row(page, name).getByTestId("user-disable").click();
  await page.getByRole("alertdialog").getByTestId("confirm-cancel").click();
  await expect(page.getByRole("alertdialog")).toHaveCount(0);
  await expect(row(page, name).getByTestId("user-status")).toHaveText("active");
  await page.getByTestId("add-username").fill(name);
  await page.getByTestId("add-user").click();
  await expect(page.getByTestId("account-error")).toContainText("already exists");
});

for (const role of ["operator", "reader"]) {
  test(`${role}s are not offered Users and are refused it, a forged call too`, async ({ page, playwright, baseURL }) => {
    await signIn(page, role, "/runs");
    const nav = page.getByRole("navigation", { name: "Main" });
    await expect(nav.getByRole("link", { name: "Approvals" })).toBeVisible();
    await expect(nav.getByRole("link", { name: "Users" })).toHaveCount(0);
    await page.goto("/users");
    await waitForHydration(page);
    await expect(page.getByTestId("error-state")).toHaveAttribute("data-status", "403");
    await expect(page.getByTestId("users")).toHaveCount(0);
    await expect(page.getByTestId("add-user-form")).toHaveCount(0);
    await expect(page.getByTestId("create-token-form")).toHaveCount(0);
    await expectAccessible(page, `/users refused to a ${role}`);

    const api = await signedInApi(playwright, baseURL!, role);
    for (const [endpoint, form] of [
      ["accounts", {}],
      ["user-add", { username: `${tag}-forged-${role}`, role: "admin", password: "" }],
      ["token-create", { name: `${tag}-forged-${role}`, role: "admin" }],
    ] as const) {
      const forged = await api.post(`/console-api/${endpoint}`, { form });
      expect(forged.status(), endpoint).toBe(403);
    }
    await api.dispose();
  });
}
