import path from "node:path";
import { randomUUID } from "node:crypto";
import type { Page, APIRequestContext } from "@playwright/test";
import { execFileSync } from "node:child_process";
import { expect, serverUrl } from "./fixtures";

export const password = (role: string) => `${role}-password-e2e`;

/**
 * A name no other spec, and no earlier run against the same server, uses: specs put
 * it in their tenants, types and ids so they count only what they made themselves.
 */
export const uniqueTag = (prefix: string) => `${prefix}-${randomUUID().slice(0, 8)}`;

/**
 * Where a test writes a screenshot: HERALD_E2E_SCREENSHOTS_DIR if set (a maintainer
 * refreshes the README's images with HERALD_E2E_SCREENSHOTS_DIR=../docs), else the
 * untracked test-results/screenshots.
 */
export function screenshotPath(name: string) {
  const dir = process.env.HERALD_E2E_SCREENSHOTS_DIR || path.join(__dirname, "..", "test-results", "screenshots");
  return path.resolve(dir, name);
}

export const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** Opens `next`, signs in through the login form it leads to, and waits for the hydrated `next`. */
export async function signIn(page: Page, role: string, next = "/runs") {
  await page.goto(next);
  await expect(page).toHaveURL(/\/login\?next=/);
  // On the hydrated page, as a user would (a form sent before hydration keeps its
  // `next` too: the field is in the server's HTML, tested in roles_and_sessions.rs).
  await waitForHydration(page);
  await page.getByLabel("Username").fill(role);
  await page.getByLabel("Password").fill(password(role));
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(new RegExp(`${escapeRegExp(next)}$`));
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

/** An API context signed in as `role` through the login form (a same-origin session). */
export async function signedInApi(
  playwright: { request: { newContext: (o: object) => Promise<APIRequestContext> } },
  baseURL: string,
  role: string,
): Promise<APIRequestContext> {
  const api = await playwright.request.newContext({ baseURL, extraHTTPHeaders: { origin: baseURL } });
  const login = await api.post("/auth/login", {
    form: { username: role, password: password(role), next: "/runs" },
    maxRedirects: 0,
  });
  expect(login.status()).toBe(303);
  return api;
}

/**
 * Runs `sql` (one or more statements) on the shared Herald's SQLite file, beside
 * the running server (WAL; it waits up to 10 s for Herald's writer): how a test
 * arranges a fault no API can make, such as a record that refuses to be written.
 */
export function sqliteExec(sql: string) {
  const script = "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1], timeout=10)\nc.executescript(sys.argv[2])\nc.close()";
  execFileSync("python3", ["-c", script, serverUrl("HERALD_E2E_DB"), sql]);
}
