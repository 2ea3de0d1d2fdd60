import { expect, type Page, type APIRequestContext } from "@playwright/test";

export const password = (role: string) => `${role}-password-e2e`;

/** Signs in through the login form and waits for the hydrated Runs page. */
export async function signIn(page: Page, role: string) {
  await page.goto("/runs");
  await expect(page).toHaveURL(/\/login\?next=/);
  await page.getByLabel("Username").fill(role);
  await page.getByLabel("Password").fill(password(role));
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(/\/runs$/);
  await waitForHydration(page);
}

export async function waitForHydration(page: Page) {
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
}

/** Records runs through the JSON API as the admin (a same-origin session request). */
export async function seedRuns(request: APIRequestContext, baseURL: string, runs: { type: string; tenant: string }[]) {
  const login = await request.post("/auth/login", {
    form: { username: "admin", password: password("admin"), next: "/runs" },
    headers: { origin: baseURL },
    maxRedirects: 0,
  });
  expect(login.status()).toBe(303);
  for (const run of runs) {
    const resp = await request.post("/api/v1/runs", {
      data: { ...run, callback_url: "https://hooks.example.com/notify" },
      headers: { origin: baseURL },
    });
    expect(resp.status()).toBe(201);
  }
}
