import { test as base } from "@playwright/test";

export { expect } from "@playwright/test";

/**
 * A URL serve.sh printed once ready; playwright.config.ts's `webServer.wait` puts it
 * in the environment before any worker starts.
 */
export function serverUrl(name: "HERALD_E2E_BASE_URL" | "HERALD_E2E_RECEIVER_URL" | "HERALD_E2E_TWO_URL" | "HERALD_E2E_DB"): string {
  const url = process.env[name];
  if (!url) throw new Error(`${name} is not set: run the suite with \`npx playwright test\`, whose webServer starts serve.sh`);
  return url;
}

/** The test every spec uses: its baseURL is the shared Herald, on the port Herald picked. */
export const test = base.extend({
  baseURL: async ({}, use) => use(serverUrl("HERALD_E2E_BASE_URL")),
});
