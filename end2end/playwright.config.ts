import { defineConfig } from "@playwright/test";

export default defineConfig({
  testDir: "./tests",
  // Bounds, not speed targets: generous enough for a loaded CI machine, and a test
  // that hangs still fails.
  timeout: 120_000,
  expect: { timeout: 15_000 },
  fullyParallel: false,
  workers: 1,
  retries: 0,
  reporter: [["list"]],
  use: {
    // baseURL comes from the port Herald picked: see tests/fixtures.ts.
    trace: "off",
    launchOptions: {
      // Debian's Chromium; Playwright never downloads a browser here.
      executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
    },
  },
  webServer: {
    // The shared receiver and Herald (a fresh temporary SQLite database, one user per
    // role), each on a port it picked itself.
    command: "bash ./serve.sh",
    // serve.sh prints this line once Herald answers /readyz; Playwright puts the named
    // groups in the tests' environment as HERALD_E2E_BASE_URL, HERALD_E2E_RECEIVER_URL
    // and HERALD_E2E_TWO_URL (the Herald with its approvals database apart), and
    // HERALD_E2E_DB (the first Herald's SQLite file, where a test arranges a fault).
    // The trailing newline makes sure a URL is never read half-written.
    wait: {
      stdout:
        /Herald e2e ready: base=(?<herald_e2e_base_url>http:\S+) receiver=(?<herald_e2e_receiver_url>http:\S+) two=(?<herald_e2e_two_url>http:\S+) db=(?<herald_e2e_db>\S+)\n/,
    },
    reuseExistingServer: false,
    timeout: 120_000,
    // SIGTERM lets serve.sh stop its children and remove its temporary directory.
    gracefulShutdown: { signal: "SIGTERM", timeout: 15_000 },
    stdout: "pipe",
    stderr: "pipe",
  },
});
